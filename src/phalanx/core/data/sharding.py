"""Disjoint shards of a dataset's files, balanced by bytes, and the environment a replica sees.

Shard ``i`` goes to the replica of rank ``i``. Files are dealt largest first onto the lightest shard (ties:
the lower shard index), which keeps the heaviest shard within one file of the mean; the order is fixed by
size then name, so every replica computes the same split without talking to the others.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def shard_files(files: Sequence[tuple[str, int]], count: int) -> list[list[str]]:
    """Split ``(path, bytes)`` pairs into ``count`` disjoint shards covering them all; each shard sorted by path.

    Raises:
        ValueError: ``count`` is below 1, a path is listed twice, or a size is negative.
    """
    if count < 1:
        raise ValueError(f"shard count must be at least 1, not {count}")
    paths = [path for path, _ in files]
    if len(set(paths)) != len(paths):
        raise ValueError("a file is listed twice; shards must be disjoint")
    negative = next((path for path, size in files if size < 0), None)
    if negative is not None:
        raise ValueError(f"file {negative!r} has a negative size; sizes are bytes, 0 or more")
    loads = [0] * count
    shards: list[list[str]] = [[] for _ in range(count)]
    for path, size in sorted(files, key=lambda item: (-item[1], item[0])):
        lightest = min(range(count), key=lambda index: (loads[index], index))
        shards[lightest].append(path)
        loads[lightest] += size
    return [sorted(shard) for shard in shards]


def env_name(name: str) -> str:
    """``PHALANX_DATASET_<NAME>``: the name upper-cased, anything but letters and digits as ``_``."""
    return "PHALANX_DATASET_" + _NOT_ALNUM.sub("_", name).upper()


def dataset_env(name: str, path: str, shard_index: int | None = None, shard_count: int | None = None) -> dict[str, str]:
    """What a replica sees of a dataset: its path, and for a shard its index and the number of shards.

    Raises:
        ValueError: only one of ``shard_index`` and ``shard_count`` is given, or the index is not in
            ``0 .. shard_count - 1``.
    """
    prefix = env_name(name)
    env = {f"{prefix}_PATH": path}
    if (shard_index is None) != (shard_count is None):
        raise ValueError("give both shard_index and shard_count for a shard, or neither for a replicated dataset")
    if shard_index is not None and shard_count is not None:
        if not 0 <= shard_index < shard_count:
            raise ValueError(
                f"shard_index must be in 0..{shard_count - 1} (shard_count {shard_count}), not {shard_index}"
            )
        env[f"{prefix}_SHARD_INDEX"] = str(shard_index)
        env[f"{prefix}_SHARD_COUNT"] = str(shard_count)
    return env
