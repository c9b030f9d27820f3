# examples/frameworks/xgboost/make_data.py
"""Write the synthetic classification data set of the XGBoost example: six CSV files of 200 rows each.

Phalanx runs this once, as the Dataset's script source, in the directory it materialises ($PHALANX_DATASET_OUTPUT,
also the working directory). The data is the same on every run (a fixed seed), so the Dataset's content
version is too. Features are rounded to one decimal: each takes fewer distinct values than XGBoost's 256
histogram bins, so the split candidates are the values themselves whether one process or several build them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

FILES = 6
ROWS_PER_FILE = 200
FEATURES = 5


def main() -> None:
    rng = np.random.default_rng(2026)
    for part in range(FILES):
        x = np.round(rng.normal(size=(ROWS_PER_FILE, FEATURES)), 1)
        noise = rng.normal(scale=0.5, size=ROWS_PER_FILE)
        label = (x[:, 0] + x[:, 1] * x[:, 2] - 0.5 * x[:, 3] + noise > 0).astype(int)
        rows = np.column_stack([label, x])
        header = "label," + ",".join(f"f{i}" for i in range(FEATURES))
        np.savetxt(
            Path(f"part-{part}.csv"), rows, fmt=["%d"] + ["%.1f"] * FEATURES, delimiter=",", header=header, comments=""
        )


if __name__ == "__main__":
    main()
