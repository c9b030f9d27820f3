"""The operator's work queue (services/kubernetes/workqueue.py): which jobs a pass takes, and when the next is due."""

from __future__ import annotations

from phalanx.services.kubernetes.workqueue import WorkQueue

Key = tuple[str, str]
A: Key = ("ns", "a")
B: Key = ("ns", "b")


def cached(*keys: Key) -> set[Key]:
    return set(keys)


def test_the_first_pass_takes_every_cached_job_then_only_the_marked_ones() -> None:
    queue: WorkQueue[Key] = WorkQueue(resync_s=30)
    assert queue.take(0.0, lambda: cached(A, B)) == {A, B}
    for key in (A, B):
        queue.start(key)
        queue.finish(key)
        queue.requeue(key, 30.0)
    queue.mark({B})
    assert queue.take(1.0, lambda: cached(A, B)) == {B}
    assert queue.take(2.0, lambda: cached(A, B)) == set()


def test_a_job_waiting_for_a_worker_is_not_queued_twice() -> None:
    queue: WorkQueue[Key] = WorkQueue(resync_s=30)
    queue.take(0.0, lambda: cached())
    queue.mark({A})
    assert queue.take(1.0, lambda: cached(A)) == {A}
    queue.mark({A})
    assert queue.take(1.5, lambda: cached(A)) == set()  # still queued: it reads the caches when it starts


def test_a_job_changed_while_being_reconciled_is_reconciled_once_more() -> None:
    queue: WorkQueue[Key] = WorkQueue(resync_s=30)
    queue.take(0.0, lambda: cached())
    queue.mark({A})
    queue.take(1.0, lambda: cached(A))
    queue.start(A)
    queue.mark({A})
    assert queue.take(1.5, lambda: cached(A)) == set()  # one worker per job: not while it runs
    assert queue.finish(A) is True
    assert queue.next_due(1.6) == 1.6  # a change is pending: the next pass is due at once
    assert queue.take(2.0, lambda: cached(A)) == {A}


def test_timers_and_the_resync_decide_when_the_next_pass_is_due() -> None:
    queue: WorkQueue[Key] = WorkQueue(resync_s=30)
    queue.take(0.0, lambda: cached(A))
    queue.start(A)
    assert queue.finish(A) is False
    queue.requeue(A, 5.0)
    assert queue.next_due(1.0) == 5.0
    assert queue.take(4.0, lambda: cached(A)) == set()
    assert queue.take(5.0, lambda: cached(A)) == {A}
    queue.start(A)
    queue.finish(A)
    queue.cancel(A)
    assert queue.next_due(6.0) == 30.0  # no timer left: the resync


def test_the_resync_takes_a_cached_job_that_has_no_timer() -> None:
    queue: WorkQueue[Key] = WorkQueue(resync_s=30)
    queue.take(0.0, lambda: cached())
    assert queue.take(10.0, lambda: cached(B)) == set()  # B appeared without an event (none was seen)
    assert queue.take(30.0, lambda: cached(B)) == {B}


def test_mark_all_takes_every_cached_job_again() -> None:
    queue: WorkQueue[Key] = WorkQueue(resync_s=30)
    queue.take(0.0, lambda: cached())
    queue.mark_all()
    assert queue.take(1.0, lambda: cached(A, B)) == {A, B}
