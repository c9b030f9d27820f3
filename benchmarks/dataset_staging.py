"""What datasets cost a job on the embedded runtime: materialising, staging into a node cache, a cache hit.

A real control plane on a temporary state directory; each round makes a fresh dataset of ``--mb`` MB in
``--files`` files (distinct bytes every round, so nothing is cached from an earlier one) and measures:

1. ``copytree``: ``shutil.copytree`` of the dataset directory, the baseline a hand-made copy would cost;
2. materialise: Dataset submitted (a ``path`` source) until ``Ready``: a copy plus a SHA-256 of every file;
3. start latency, submit until the replica's process runs, of a one-replica job: reading no dataset (the
   baseline), reading the dataset cold (staged: copied into the node's cache first), and a second job reading
   it warm (a cache hit). Staging's copy rate is the dataset's size over (cold - baseline).

Every timed step starts after ``sync(2)``: otherwise the dirty pages of the step before throttle the next one's
writes, and which step pays depends on the kernel's writeback timing.

Run: python benchmarks/dataset_staging.py [--mb 256] [--files 64] [--rounds 3]
Ends with: RESULT copytree_mb_s=… materialize_mb_s=… stage_mb_s=… stage_vs_copytree=… warm_overhead_ms=…
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from local_start import job as one_replica_job
from phalanx.entrypoints.client import Client
from phalanx.model.datasets import Dataset, DatasetPhase
from phalanx.model.jobs import Phase
from phalanx.model.replicas import Replica, ReplicaPhase
from phalanx.services.embedded.daemon import start_control_plane, stop_control_plane

MB = 1_000_000


def make_dataset(root: Path, megabytes: int, files: int, seed: int) -> int:
    root.mkdir(parents=True)
    size = megabytes * MB // files
    block = os.urandom(1 << 20)
    for index in range(files):
        with open(root / f"part-{index:04d}.bin", "wb") as out:
            out.write(seed.to_bytes(8, "little") + index.to_bytes(8, "little"))
            written = 16
            while written < size:
                chunk = block[: size - written]
                out.write(chunk)
                written += len(chunk)
    return size * files


def job(name: str, mounts: list[dict[str, str]]) -> dict[str, Any]:
    document = one_replica_job(name, ["python", "-c", "pass"], cpu="1")
    document["spec"]["datasets"] = mounts  # type: ignore[index]
    return document


def wait_for(client: Client, check: Any, timeout: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seq = client.store.latest_seq()
        found = check()
        if found:
            return found
        client.store.wait_for_change(seq, 0.2)
    raise TimeoutError("the control plane did not get there in time")


def start_latency(client: Client, name: str, mounts: list[dict[str, str]]) -> float:
    """Seconds from submitting a job to its replica's process running."""
    submitted = time.time()
    client.submit(job(name, mounts))

    def started() -> float | None:
        replica = client.store.try_get(Replica, "default", f"{name}-worker-0")
        if replica is None or replica.status.phase == ReplicaPhase.PENDING or replica.status.start_time is None:
            return None
        return replica.status.start_time.timestamp()

    running_at = wait_for(client, started)
    final = client.wait(name, timeout=300)
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    return float(running_at - submitted)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    copy_rates, materialize_rates, baselines, colds, warms = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-") as tmp:
        state, work = Path(tmp) / "state", Path(tmp) / "work"
        work.mkdir()
        client = Client(state_dir=state)
        start_control_plane(client.layout, cache_size=f"{4 * args.mb * args.rounds}M")
        try:
            start_latency(client, "warm-up", [])
            for round_ in range(args.rounds):
                source = work / f"data-{round_}"
                size = make_dataset(source, args.mb, args.files, round_)
                os.sync()  # every timed copy starts with no dirty pages waiting: writeback throttles whoever is next
                began = time.monotonic()
                shutil.copytree(source, work / f"copy-{round_}")
                copy_rates.append(size / MB / (time.monotonic() - began))
                shutil.rmtree(work / f"copy-{round_}")
                os.sync()
                name = f"data-{round_}"
                began = time.monotonic()
                client.submit(
                    {
                        "apiVersion": "phalanx.dev/v1alpha1",
                        "kind": "Dataset",
                        "metadata": {"name": name},
                        "spec": {"source": {"path": str(source)}},
                    }
                )
                wait_for(
                    client,
                    lambda name=name: (
                        (d := client.store.try_get(Dataset, "default", name)) is not None
                        and d.status.phase in (DatasetPhase.READY, DatasetPhase.FAILED)
                    ),
                )
                materialize_rates.append(size / MB / (time.monotonic() - began))
                os.sync()
                baselines.append(start_latency(client, f"plain-{round_}", []))
                os.sync()
                colds.append(start_latency(client, f"cold-{round_}", [{"name": name}]))
                warms.append(start_latency(client, f"warm-{round_}", [{"name": name}]))
                print(
                    f"round {round_ + 1}: copytree {copy_rates[-1]:.0f} MB/s, materialise {materialize_rates[-1]:.0f} "
                    f"MB/s, start: plain {baselines[-1] * 1000:.0f} ms, cold {colds[-1] * 1000:.0f} ms, "
                    f"warm {warms[-1] * 1000:.0f} ms",
                    file=sys.stderr,
                )
        finally:
            stop_control_plane(client.layout)
            client.close()
    baseline, cold, warm = (statistics.median(v) for v in (baselines, colds, warms))
    copy_rate, materialize_rate = statistics.median(copy_rates), statistics.median(materialize_rates)
    stage_rate = args.mb / max(cold - baseline, 1e-3)
    print(f"\n{args.mb} MB in {args.files} files, median of {args.rounds} rounds (fresh data each round)\n")
    print(f"{'what':<44}{'value':>12}")
    print(f"{'copytree of the dataset (baseline)':<44}{copy_rate:>9.0f} MB/s")
    print(f"{'materialise (copy + sha256 of every file)':<44}{materialize_rate:>9.0f} MB/s")
    print(f"{'job start, no dataset (baseline)':<44}{baseline * 1000:>9.0f} ms")
    print(f"{'job start, dataset staged cold':<44}{cold * 1000:>9.0f} ms")
    print(f"{'job start, dataset cached (hit)':<44}{warm * 1000:>9.0f} ms")
    print(f"{'staging copy rate (size / (cold - base))':<44}{stage_rate:>9.0f} MB/s")
    print(f"{'staging rate / copytree rate':<44}{stage_rate / copy_rate:>12.2f}")
    print(
        f"RESULT copytree_mb_s={copy_rate:.0f} materialize_mb_s={materialize_rate:.0f} stage_mb_s={stage_rate:.0f} "
        f"stage_vs_copytree={stage_rate / copy_rate:.2f} warm_overhead_ms={(warm - baseline) * 1000:.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
