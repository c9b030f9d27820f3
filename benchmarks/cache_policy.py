"""Sample-cache policies under shuffled epochs, and what a warm cache saves against a slow source.

1. Hit ratio per epoch: N samples read once per epoch in a fresh seeded random order through a real
   ``phalanx.data.SampleCache`` (files and its SQLite index in a temporary directory), with the cache holding
   0.25, 0.5 and 0.8 of the dataset, under ``noReplacement`` and ``lru``; the steady ratio is the mean of
   epochs 2 and later (epoch 1 is cold for both).
2. Epoch time from a source throttled to ``--rate-mb`` MB/s: the samples are files on disk, read in 64 KiB
   chunks, each chunk taking its bytes from a token bucket (``--rate-mb`` MB/s, a burst of one chunk), so the
   source cannot run faster than the rate whatever the page cache holds; the rate it actually delivered is
   measured and printed. A cold epoch (empty cache) against a warm one (the cache holds the whole dataset):
   ``warm_speedup = cold / warm``. Then, with the cache holding half the dataset, a steady epoch's time under
   each policy: the misses are what the slow source has to serve.

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
POLICIES = (("noReplacement", "nr"), ("lru", "lru"))
CHUNK = 64 * 1024
BIG_SAMPLE = 256 * 1024


class TokenBucket:
    """Bytes at ``rate`` per second on average, at most ``burst`` at once after a quiet spell."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.stamp = time.monotonic()

    def take(self, count: int) -> None:
        """Wait until ``count`` bytes (at most ``burst``) may pass, and spend them."""
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= count
        if self.tokens < 0:
            # In debt: sleep it off. The next take refills from ``stamp``, so time overslept is credited
            # (up to the burst) and the long-run rate is ``rate`` however coarse the sleeps are.
            time.sleep(-self.tokens / self.rate)


class ThrottledFiles:
    """A slow source: ``loader(key)`` reads ``root/key`` chunk by chunk through a token bucket, and measures it."""

    def __init__(self, root: Path, rate: float) -> None:
        self.root = root
        self.bucket = TokenBucket(rate, CHUNK)
        self.reads = 0
        self.bytes = 0
        self.first: float | None = None
        self.last = 0.0

    def __call__(self, key: str) -> bytes:
        if self.first is None:
            self.first = time.perf_counter()
        parts = []
        with open(self.root / key, "rb") as source:
            while chunk := source.read(CHUNK):
                self.bucket.take(len(chunk))
                parts.append(chunk)
        data = b"".join(parts)
        self.reads += 1
        self.bytes += len(data)
        self.last = time.perf_counter()
        return data

    @property
    def delivered_mb_per_s(self) -> float:
        """Bytes delivered over the span from the first read's start to the last one's end, in MB/s."""
        span = self.last - self.first if self.first is not None else 0.0
        return self.bytes / span / 1e6 if span > 0 else 0.0


def hit_ratios(samples: int, size: int, epochs: int, share: float, policy: str, root: Path) -> list[float]:
    """Per-epoch hit ratio of reading ``samples`` samples once per epoch in a fresh order."""
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
    """Wall time of one shuffled epoch."""
    started = time.perf_counter()
    for _ in dataset.shuffled(seed=seed):
        pass
    return time.perf_counter() - started


def write_source(root: Path, count: int) -> list[str]:
    """``count`` sample files of ``BIG_SAMPLE`` bytes under ``root``; their keys."""
    root.mkdir()
    keys = [f"big-{i:05d}" for i in range(count)]
    for key in keys:
        (root / key).write_bytes(key.encode().ljust(BIG_SAMPLE, b"y"))
    return keys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--sample-kb", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5, help="at least 2: epoch 1 is cold")
    parser.add_argument("--rate-mb", type=float, default=50.0, help="the slow source's rate, MB/s")
    parser.add_argument("--big-mb", type=int, default=25, help="dataset size for the epoch-time measurement, MiB")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the steady ratio is over epochs 2 and later")
    results: dict[str, float] = {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="phalanx-cache-policy-") as tmp:
        root = Path(tmp)
        for share in SHARES:
            row = [f"{share:.2f}"]
            for policy, short in POLICIES:
                ratios = hit_ratios(args.samples, args.sample_kb * 1024, args.epochs, share, policy, root)
                steady = sum(ratios[1:]) / len(ratios[1:])
                results[f"{short}_hit_{int(share * 100):03d}"] = steady
                row.append(f"{steady:.4f} ({', '.join(f'{r:.3f}' for r in ratios)})")
            rows.append(row)

        count = max(1, args.big_mb * 2**20 // BIG_SAMPLE)
        total_mib = count * BIG_SAMPLE / 2**20
        keys = write_source(root / "source", count)
        source = ThrottledFiles(root / "source", args.rate_mb * 1e6)
        with SampleCache(root / "whole", count * BIG_SAMPLE, "noReplacement") as cache:
            dataset = CachedDataset(keys, source, cache)
            cold = epoch_seconds(dataset, 0)
            reads_cold, delivered = source.reads, source.delivered_mb_per_s
            warm = epoch_seconds(dataset, 1)
            reads_warm = source.reads - reads_cold
        half: dict[str, tuple[float, int]] = {}
        for policy, _ in POLICIES:
            with SampleCache(root / f"half-{policy}", count * BIG_SAMPLE // 2, policy) as cache:
                dataset = CachedDataset(keys, source, cache)
                epoch_seconds(dataset, 0)  # fill
                before = source.reads
                half[policy] = (epoch_seconds(dataset, 1), source.reads - before)
    results["warm_speedup"] = cold / warm

    print(f"{args.samples} samples of {args.sample_kb} KiB, {args.epochs} epochs, a fresh shuffle each epoch")
    print()
    print(f"{'cache/dataset':<14} {'noReplacement: steady (per epoch)':<52} lru: steady (per epoch)")
    for row in rows:
        print(f"{row[0]:<14} {row[1]:<52} {row[2]}")
    print()
    print(
        f"one epoch of {count} samples x {BIG_SAMPLE // 1024} KiB ({total_mib:.0f} MiB) from files read through a "
        f"{args.rate_mb:g} MB/s token bucket (it delivered {delivered:.1f} MB/s over the cold epoch)"
    )
    print(f"{'cache':<42} {'seconds':>8} {'source reads':>13}")
    print(f"{'cold (empty)':<42} {cold:>8.3f} {reads_cold:>13}")
    print(f"{'warm (holds it all)':<42} {warm:>8.3f} {reads_warm:>13}")
    for policy, (seconds, reads) in half.items():
        print(f"{f'half the dataset, {policy}, epoch 2':<42} {seconds:>8.3f} {reads:>13}")
    print(f"warm speedup: {cold / warm:.1f}x")
    print(
        "RESULT "
        + " ".join(f"{key}={value:.4f}" if "hit" in key else f"{key}={value:.1f}" for key, value in results.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
