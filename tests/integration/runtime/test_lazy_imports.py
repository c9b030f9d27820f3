"""The heavy optional libraries load one thread at a time (``adapters.lazy_imports``), in a fresh interpreter.

A control plane's threads import SQLAlchemy on first use: the job history (with Alembic), a SQL Dataset's
materialisation (with pyarrow) and the sweeps' Optuna storage. Run at once without the lock, two of them failed
with "partially initialized module" or ``_DeadlockError`` in most fresh interpreters (a gate's SQL Dataset failed
so). Each run here starts the three openings together from a barrier in a new Python process, which has imported
none of those libraries, and every one must succeed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")
pytest.importorskip("optuna")
pytest.importorskip("pyarrow")

PROGRAM = r"""
import json, sqlite3, sys, threading
from pathlib import Path

work = Path(sys.argv[1])
source = work / "orders.db"
with sqlite3.connect(source) as db:
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, amount REAL)")
    db.executemany("INSERT INTO orders VALUES (?, ?)", [(i, i * 1.5) for i in range(100)])

from phalanx.adapters.datasources import SourceRequest, materialize
from phalanx.services.history import open_history_store
from phalanx.services.sweeps.study import UnavailableStudies, optuna_studies

heavy = ("sqlalchemy", "alembic", "optuna", "pyarrow")
assert not [name for name in heavy if name in sys.modules], "a heavy library was imported before the threads"

start = threading.Barrier(3)
outcomes = {}

def attempt(name, opening):
    start.wait()
    try:
        outcomes[name] = opening()
    except BaseException as error:
        outcomes[name] = f"failed: {error!r}"

def history():
    sink = open_history_store(f"sqlite:///{work / 'history.db'}", without_extra="no history extra")
    return "ok" if sink is not None else "history is off"

def dataset():
    request = SourceRequest(kind="sql", sql_url=f"sqlite:///{source}", query="SELECT id, amount FROM orders")
    return "ok" if materialize(request, work / "dataset").lineage.endswith("(100 rows)") else "wrong rows"

def sweeps():
    studies = optuna_studies(f"sqlite:///{work / 'sweeps.db'}", "the test")
    return f"unavailable: {studies.why}" if isinstance(studies, UnavailableStudies) else "ok"

openings = {"history": history, "dataset": dataset, "sweeps": sweeps}
threads = [threading.Thread(target=attempt, args=item) for item in openings.items()]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(outcomes, sort_keys=True))
"""


@pytest.mark.parametrize("run", range(6))
def test_the_history_a_sql_dataset_and_the_sweep_storage_open_together_in_a_fresh_process(
    run: int, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    outcomes = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcomes == {"dataset": "ok", "history": "ok", "sweeps": "ok"}, result.stderr
