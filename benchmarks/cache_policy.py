"""Sample-cache policies under shuffled epochs, and what a warm cache saves against a slow source.

1. Hit ratio per epoch: N samples read once per epoch in a fresh seeded random order through a real
   ``phalanx.data.SampleCache`` (files and its SQLite index in a temporary directory), with the cache holding
   0.25, 0.5 and 0.8 of the dataset, under ``noReplacement`` and ``lru``; the steady ratio is the mean of
   epochs 2 and later (epoch 1 is cold for both).
2. Epoch time from a source throttled to ``--rate-mb`` MB/s (a token bucket on the bytes read: the reader
   sleeps until the bytes so far are due at that rate): a cold epoch (empty cache) against a warm one (the
   cache holds the whole dataset). ``warm_speedup = cold / warm``.

Run: python benchmarks/cache_policy.py [--samples 2000] [--sample-kb 4] [--epochs 5] [--rate-mb 50] [--big-mb 25]
Ends with: RESULT nr_hit_025=… lru_hit_025=… nr_hit_050=… lru_hit_050=… nr_hit_080=… lru_hit_080=… warm_speedup=…
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from phalanx.data import CachedDataset, SampleCache

SHARES = (0.25, 0.5, 0.8)


class ThrottledSource:
    """Samples from memory, handed out no faster than ``rate`` bytes per second (a token bucket)."""

    def __init__(self, samples: dict[str, bytes], rate: float) -> None:
        self.samples = samples
        self.rate = rate
        self.start: float | None = None
        self.sent = 0
        self.reads = 0

    def __call__(self, key: str) -> bytes:
        data = self.samples[key]
        if self.start is None:
            self.start = time.monotonic()
        self.sent += len(data)
        self.reads += 1
        due = self.start + self.sent / self.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return data


def hit_ratios(samples: int, size: int, epochs: int, share: float, policy: str, root: Path) -> list[float]:
    keys = [f"sample-{i:06d}" for i in range(samples)]
    payload = {key: key.encode().ljust(size, b"x") for key in keys}
    ratios = []
    with SampleCache(root / f"{policy}-{share}", int(samples * size * share), policy) as cache:
        dataset = CachedDataset(keys, payload.__getitem__, cache)
        for epoch in range(epochs):
            hits, misses = cache.hits, cache.misses
            for _ in dataset.shuffled(seed=epoch):
                pass
            ratios.append((cache.hits - hits) / ((cache.hits - hits) + (cache.misses - misses)))
    return ratios


def epoch_seconds(dataset: CachedDataset, seed: int) -> float:
    started = time.perf_counter()
    for _ in dataset.shuffled(seed=seed):
        pass
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--sample-kb", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--rate-mb", type=float, default=50.0, help="the slow source's rate, MB/s")
    parser.add_argument("--big-mb", type=int, default=25, help="dataset size for the epoch-time measurement")
    args = parser.parse_args()
    results: dict[str, float] = {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="phalanx-cache-policy-") as tmp:
        root = Path(tmp)
        for share in SHARES:
            row = [f"{share:.2f}"]
            for policy, short in (("noReplacement", "nr"), ("lru", "lru")):
                ratios = hit_ratios(args.samples, args.sample_kb * 1024, args.epochs, share, policy, root)
                steady = sum(ratios[1:]) / len(ratios[1:])
                results[f"{short}_hit_{int(share * 100):03d}"] = steady
                row.append(f"{steady:.4f} ({', '.join(f'{r:.3f}' for r in ratios)})")
            rows.append(row)

        sample_size = 256 * 1024
        count = args.big_mb * 2**20 // sample_size
        keys = [f"big-{i:05d}" for i in range(count)]
        source = ThrottledSource({key: key.encode().ljust(sample_size, b"y") for key in keys}, args.rate_mb * 1e6)
        with SampleCache(root / "big", count * sample_size, "noReplacement") as cache:
            dataset = CachedDataset(keys, source, cache)
            cold = epoch_seconds(dataset, 0)
            reads_cold = source.reads
            warm = epoch_seconds(dataset, 1)
            reads_warm = source.reads - reads_cold
    results["warm_speedup"] = cold / warm

    print(f"{args.samples} samples of {args.sample_kb} KiB, {args.epochs} epochs, fresh shuffle each epoch")
    print(f"{'cache/dataset':<14} {'noReplacement: steady (per epoch)':<52} lru: steady (per epoch)")
    for row in rows:
        print(f"{row[0]:<14} {row[1]:<52} {row[2]}")
    print()
    print(
        f"epoch of {count} samples x 256 KiB ({count * sample_size / 2**20:.0f} MiB) "
        f"from a {args.rate_mb:.0f} MB/s source"
    )
    print(f"  cold cache: {cold:7.3f} s  ({reads_cold} reads from the source)")
    print(f"  warm cache: {warm:7.3f} s  ({reads_warm} reads from the source)")
    print(f"  speedup:    {cold / warm:7.1f}x")
    print(
        "RESULT "
        + " ".join(f"{key}={value:.4f}" if "hit" in key else f"{key}={value:.1f}" for key, value in results.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
