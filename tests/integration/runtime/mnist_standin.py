"""A stand-in for the image of upstream's PyTorch mnist example (``phalanx run --stand-in IMAGE=PROGRAM``).

The image's entrypoint trains MNIST with torch.distributed; the job's containers give it only ``--backend gloo``.
This program is handed that argv (the container's command and args, here the args alone) and plays the image:
it records the argv it was given in ENV_DIR/<RANK>.argv.json, checks that the backend is gloo, then does the
rendezvous of ddp_standin.py (rank 0 listens on MASTER_ADDR:MASTER_PORT and hears every other rank).

python mnist_standin.py ENV_DIR [the container's argv...]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import ddp_standin  # beside this file


def main() -> int:
    out, argv = Path(sys.argv[1]), sys.argv[2:]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{os.environ['RANK']}.argv.json").write_text(json.dumps(argv))
    if argv[argv.index("--backend") + 1 : argv.index("--backend") + 2] != ["gloo"]:
        print(f"expected --backend gloo, got {argv}", flush=True)
        return 3
    sys.argv = [sys.argv[0], str(out)]
    return ddp_standin.main()


if __name__ == "__main__":
    sys.exit(main())
