"""The node cache ledger: policies, pinning, counters; no-replacement keeps the hit ratio at the cache's share."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.core.data import Admission, CacheLedger, CachePolicy


def epochs(ledger: CacheLedger, items: int, count: int, seed: int = 7) -> list[float]:
    """Per-epoch hit ratio of reading every item once per epoch in a fresh random order (admit on miss)."""
    rng = random.Random(seed)
    order = list(range(items))
    ratios = []
    for _ in range(count):
        rng.shuffle(order)
        hits = 0
        for item in order:
            key = f"sample-{item}"
            if ledger.lookup(key, "ds", 1):
                hits += 1
            else:
                ledger.admit(key, 1, "ds")
        ratios.append(hits / items)
    return ratios


@pytest.mark.parametrize("share", [0.25, 0.5, 0.8])
def test_no_replacement_holds_exactly_its_share_and_lru_thrashes_below_it(share: float) -> None:
    items = 2000
    no_replacement = epochs(CacheLedger(int(items * share), CachePolicy.NO_REPLACEMENT), items, 5)
    lru = epochs(CacheLedger(int(items * share), CachePolicy.LRU), items, 5)
    assert no_replacement[0] == 0.0 == lru[0]  # a cold first epoch misses everything
    assert all(abs(ratio - share) < 1e-9 for ratio in no_replacement[1:])
    assert all(ratio < share - 0.05 for ratio in lru[1:]), lru


def test_lru_evicts_the_least_recently_used_and_counts_it() -> None:
    ledger = CacheLedger(30, CachePolicy.LRU)
    for key in ("a", "b", "c"):
        assert ledger.admit(key, 10, "ds").outcome == Admission.ADMITTED
    assert ledger.lookup("a", "ds", 10)  # a is now the most recent
    result = ledger.admit("d", 10, "ds")
    assert result.evicted == ("b",) and ledger.lru_order() == ["c", "a", "d"]
    assert ledger.counters("ds").evictions == 1
    assert ledger.counters("ds").hits == 1 and ledger.counters("ds").bytes_from_cache == 10


def test_no_replacement_refuses_when_full_but_a_pinned_insert_still_lands() -> None:
    ledger = CacheLedger(20, CachePolicy.NO_REPLACEMENT)
    ledger.admit("a", 10, "old")
    ledger.admit("b", 10, "old")
    assert ledger.admit("c", 10, "new").outcome == Admission.FULL and "c" not in ledger
    landed = ledger.admit("job-data", 10, "new", pin=True)
    assert landed.outcome == Admission.ADMITTED and landed.evicted == ("a",)
    assert ledger.pinned("job-data")


def test_pinned_entries_are_never_evicted_and_block_what_needs_their_room() -> None:
    ledger = CacheLedger(30, CachePolicy.LRU)
    ledger.admit("in-use", 20, "train", pin=True)
    ledger.admit("idle", 10, "other")
    assert ledger.admit("big", 25, "new").outcome == Admission.BLOCKED_BY_PINNED
    assert ledger.lru_order() == ["in-use", "idle"], "nothing is evicted by a refused insert"
    assert ledger.admit("huge", 31, "new").outcome == Admission.TOO_LARGE
    assert not ledger.evict("in-use") and ledger.evict("idle")
    ledger.unpin("in-use")
    assert ledger.admit("big", 25, "new").evicted == ("in-use",)


@given(
    items=st.integers(20, 400),
    share=st.floats(0.05, 0.95),
    seed=st.integers(0, 2**16),
)
def test_no_replacement_hits_exactly_its_share_from_the_second_epoch_on_any_shuffled_trace(
    items: int, share: float, seed: int
) -> None:
    held = int(items * share)
    ratios = epochs(CacheLedger(held, CachePolicy.NO_REPLACEMENT), items, 4, seed=seed)
    assert ratios[0] == 0.0
    assert ratios[1:] == [held / items] * 3


def test_counters_are_kept_per_dataset_and_the_ledger_cannot_be_built_inconsistent() -> None:
    ledger = CacheLedger(100, "lru")  # type: ignore[arg-type]  # a policy's wire name is accepted too
    assert ledger.policy == CachePolicy.LRU
    ledger.admit("a", 60, "train")
    assert not ledger.lookup("b", "eval", 30) and ledger.lookup("a", "train", 60)
    assert (ledger.counters("train").hits, ledger.counters("train").bytes_from_cache) == (1, 60)
    assert (ledger.counters("eval").misses, ledger.counters("eval").bytes_fetched) == (1, 30)
    assert ledger.counters("train").hit_ratio == 1.0 and ledger.counters("never-read").hit_ratio == 0.0
    with pytest.raises(TypeError):
        CacheLedger(100, used=50)  # type: ignore[call-arg]  # what is held comes from admits only
    with pytest.raises(ValueError, match="capacity must be at least 0"):
        CacheLedger(-1)
    with pytest.raises(ValueError, match="size must be at least 0"):
        ledger.admit("c", -5, "train")


OPS = st.lists(
    st.tuples(
        st.sampled_from(["admit", "pin-admit", "lookup", "unpin", "evict"]), st.integers(0, 15), st.integers(1, 40)
    ),
    max_size=120,
)


@given(OPS, st.sampled_from(list(CachePolicy)))
def test_pinned_entries_survive_any_sequence_and_the_cache_never_overflows(
    ops: list[tuple[str, int, int]], policy: CachePolicy
) -> None:
    ledger = CacheLedger(100, policy)
    pins: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for op, item, size in ops:
        key = f"k{item}"
        size = sizes.setdefault(key, size)
        if op in ("admit", "pin-admit"):
            result = ledger.admit(key, size, "ds", pin=op == "pin-admit")
            if op == "pin-admit" and result.cached:
                pins[key] = pins.get(key, 0) + 1
            assert not set(result.evicted) & {k for k, n in pins.items() if n > 0}
        elif op == "lookup":
            ledger.lookup(key, "ds", size)
        elif op == "unpin":
            ledger.unpin(key)
            if pins.get(key):
                pins[key] -= 1
        else:
            was_cached, was_pinned = key in ledger, ledger.pinned(key)
            assert ledger.evict(key) == (was_cached and not was_pinned)
        for pinned, count in pins.items():
            if count > 0:
                assert pinned in ledger, f"pinned {pinned} was evicted"
        assert 0 <= ledger.used <= ledger.capacity
        assert ledger.used == sum(sizes[k] for k in ledger.lru_order())
