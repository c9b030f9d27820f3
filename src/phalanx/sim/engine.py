"""The discrete-event engine: arrivals and completions on a virtual clock, decided by the scheduler core.

One ``SchedulingSession`` (``phalanx.core.scheduling``, the code the embedded runtime and the Kubernetes
scheduler run) holds the simulated cluster. The clock jumps from event to event; at each event time, every
event due then is handled as one batch:

1. completions: finished jobs give their devices back (``session.release``);
2. arrivals: new jobs join the pending set;
3. one scheduling pass over every pending job (``core.scheduling.passes.run_pass`` on the session: the pass
   the runtimes run); each admitted job starts now and its completion is scheduled ``duration`` seconds later;
4. a sample of the cluster (GPUs allocated, GPUs running jobs, jobs pending and running) is recorded; it holds
   until the next event time.

**Gang on** (default): a job is one ``PendingJob`` with all its replicas; the core admits it whole or not at
all, so no GPU is ever held by a job that is not running. **Gang off** is the pod-by-pod baseline of the
default kube-scheduler: each replica is its own one-replica ``PendingJob`` (key ``<job>#000``…, created when
the job is, so a job's replicas are tried one after another); a placed replica holds its devices; the job
starts when its last replica is placed. Until then its placed replicas hold GPUs that do no work: their
*partial-gang idle GPU-seconds* are summed. If that leaves the cluster stuck — nothing running, no completion
to come, GPUs held by partial gangs and nothing placed in the last cycle — the free room can never grow again
(nothing running will finish, and a job that arrives later and runs gives back exactly what it took), so the
run stops and reports the deadlock; jobs that would have arrived later are left out (status ``not-submitted``).

Time is virtual seconds: ``now`` given to the core is ``EPOCH`` plus those seconds. The engine reads no clock
and draws no random number, so a run is a function of its inputs (the seed goes to the core's ``random``
placement baseline through ``SchedulerConfig``). Shortest-first gets each job's true run time as its estimate
(an oracle, as in the Helios and PAI simulators' SJF).

With ``preemption`` on, the core may stop running jobs for higher-priority ones (``PassPlan.preempted``);
with ``time_slicing`` (least-attained-service only, gang only), also jobs of the same priority whose attained
GPU-seconds put them in a lower band than a waiting job's (Tiresias' discretised LAS, in the core:
``SchedulerConfig.las_preempt``). A victim adds its served GPU-seconds to ``attained``, subtracts its served time
from ``remaining`` (work is checkpointed: it resumes where it stopped, as Tiresias assumes) and adds
``restart_penalty`` seconds to it (time to restore the checkpoint and warm up again, 0 by default), drops its
session keys (the session already gave its devices to the preemptor; pod by pod, its other replicas are
released) and goes back to ``WAITING``, re-queued with its attained service. The completion scheduled for the
stopped run is then skipped: completions carry the run number they belong to, and ``_start`` bumps it. Under
time slicing a running job changes band between events too: the session says when
(``next_band_change``) and the engine adds that time as an event with nothing but a cycle, so demotions (and
starvation promotions) take effect when they happen.

A preemptor starts only once its victims have stopped, as in the runtimes (the pass's rule): the pass that
preempts defers the preemptor and every admission decided after it (the engine releases them from the
session), and nominates the preemptor. A victim's stop takes effect at the next pass, which the engine runs at
the same virtual time (no stop delay is modelled); the pass tries nominated jobs first, so the room their
victims freed is theirs.

Waiting reasons: the core explains every waiting job only with ``explain`` (off by default; about half of a
cycle's time). The report needs a reason only for the jobs that never started, so when a run ends with jobs
waiting, one more cycle with explaining on gives their sentences; the run has ended with nothing running and
a last cycle that admitted nothing (gang admission, or a pod-by-pod deadlock stop), so that cycle decides
exactly as the last one did and its sentences are the ones an explained run writes. (Pod by pod, a run can
also end on a cycle that placed a last replica of a gang that can never complete; the sentences then describe
the cluster after that placement.)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from phalanx.core.scheduling import (
    Admission,
    ClusterSnapshot,
    PendingJob,
    QueueQuota,
    ReplicaRequest,
    SchedulerConfig,
    SchedulingSession,
    TaskShape,
)
from phalanx.core.scheduling.config import DEFAULT_LAS_THRESHOLDS, cycle_config
from phalanx.core.scheduling.passes import run_pass
from phalanx.model.resources import ResourceVector
from phalanx.sim.clusters import gpu_capacity
from phalanx.sim.workloads import MILLI, SimJob

EPOCH = datetime(2021, 1, 1, tzinfo=UTC)

FINISHED = "finished"
WAITING = "waiting"  # submitted, never started (or, pod-by-pod, started placing but never complete)
RUNNING = "running"  # started, not finished yet (a run in progress; no finished run leaves a job in it)
NOT_SUBMITTED = "not-submitted"  # its submission time came after a deadlock stop

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class SimOptions:
    """How one simulated run schedules.

    Attributes:
        queue_order: ``fifo``, ``shortest-first`` or ``least-attained-service`` (``SchedulerConfig``).
        placement: the placement policy every job carries (``PendingJob.placement``), passed to the core
            as is, so whatever policies the core knows are available.
        topology: ``none``, ``preferred`` or ``required`` (``PendingJob.topology``).
        gang: True admits whole gangs; False is the pod-by-pod baseline.
        seed: seed of the core's random placement baseline.
        workload: typical task shapes for fragmentation-aware placement (empty: the core learns them).
        queueing_strategy: ``best-effort-fifo``, ``strict-fifo`` or ``backfill`` (``SchedulerConfig``).
        preemption: let higher-priority jobs stop lower-priority ones (victims wait again, keeping the run
            time they have left and the service they attained).
        time_slicing: least-attained-service with preemption by band (``SchedulerConfig.las_preempt``); needs
            ``queue_order`` ``least-attained-service`` and gang admission.
        starve_limit: with time slicing, promote a waiting job to the top band once it has waited this many
            times as long as it ran since its last promotion (``SchedulerConfig.las_starve_limit``); 0: never.
        restart_penalty: seconds a preempted job adds to its remaining run time when it resumes.
        las_thresholds: the least-attained-service bands, in GPU-seconds (``SchedulerConfig.las_thresholds``).
        explain: let the core explain every waiting job in every cycle (slower; the decisions are the same).
        queues: the queues' quotas (jobs name theirs in ``SimJob.queue``); with any, fair share across queues is
            on, as in the runtimes (``core.scheduling.config.cycle_config``).
    """

    queue_order: str = "fifo"
    placement: str = "auto"
    topology: str = "preferred"
    gang: bool = True
    seed: int = 0
    workload: tuple[TaskShape, ...] = ()
    queueing_strategy: str = "best-effort-fifo"
    preemption: bool = False
    time_slicing: bool = False
    starve_limit: float = 0.0
    restart_penalty: float = 0.0
    las_thresholds: tuple[float, ...] = DEFAULT_LAS_THRESHOLDS
    explain: bool = False
    queues: tuple[QueueQuota, ...] = ()

    @property
    def label(self) -> str:
        """A short name of the variant, e.g. ``fifo/auto/gang`` or ``shortest-first/spread/pod-by-pod``."""
        label = f"{self.queue_order}/{self.placement}/{'gang' if self.gang else 'pod-by-pod'}"
        if self.queueing_strategy != "best-effort-fifo":
            label += f"/{self.queueing_strategy}"
        if self.time_slicing:
            label += "/time-slicing" + (f"/starve-{self.starve_limit:g}" if self.starve_limit else "")
        if self.restart_penalty:
            label += f"/restart-{self.restart_penalty:g}s"
        return label + ("/preemption" if self.preemption else "")

    def scheduler_config(self) -> SchedulerConfig:
        """The core's run-wide settings for this variant.

        Raises:
            ValueError: the queue order is unknown.
        """
        policy = SchedulerConfig(
            queue_order=self.queue_order,
            workload=self.workload,
            seed=self.seed,
            queueing_strategy=self.queueing_strategy,
            preemption=self.preemption,
            las_preempt=self.time_slicing,
            las_starve_limit=self.starve_limit,
            las_thresholds=self.las_thresholds,
            explain=self.explain,
        )
        # A simulated victim has stopped by the next pass, which runs at once: no pass starts while one stops.
        return cycle_config(policy, self.queues, stopping=False)


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What happened to one job.

    Attributes:
        job: the simulated job.
        status: ``finished``, ``waiting``, ``running`` or ``not-submitted``.
        start: when its last run started (all replicas placed), or None.
        end: when it finished, or None.
        first_placed: when its first replica got devices (pod-by-pod: may precede ``start``), or None.
        nodes: the nodes its replicas ran on (distinct, sorted).
        reason: for a job that never started, the core's last sentence on why it waited.
        first_start: when its first run started (``start`` unless it was preempted); None: ``start``.
        run_time: seconds it ran, over all its runs (restart penalties included); None: ``end - start``.
        preempted: how many times it was preempted.
        runs: (start, end) of every run, in order: a preempted run ends when it was stopped.
    """

    job: SimJob
    status: str
    start: float | None = None
    end: float | None = None
    first_placed: float | None = None
    nodes: tuple[str, ...] = ()
    reason: str = ""
    first_start: float | None = None
    run_time: float | None = None
    preempted: int = 0
    runs: tuple[tuple[float, float], ...] = ()

    @property
    def queueing_delay(self) -> float | None:
        """Time until it first ran, ``first_start - submit``, or None if it never started."""
        first = self.first_start if self.first_start is not None else self.start
        return None if first is None else first - self.job.submit

    @property
    def waiting_time(self) -> float | None:
        """Time a finished job spent not running: JCT minus its run time (the queueing delay unless preempted)."""
        if self.end is None or self.start is None:
            return None
        ran = self.run_time if self.run_time is not None else self.end - self.start
        return self.end - self.job.submit - ran

    @property
    def completion_time(self) -> float | None:
        """Job completion time, ``end - submit``, or None if it did not finish."""
        return None if self.end is None else self.end - self.job.submit


@dataclass(frozen=True, slots=True)
class Timeline:
    """The cluster after each event time, as parallel lists; each value holds until the next time.

    Attributes:
        times: event times, ascending.
        allocated_gpus: GPUs held by any replica (running or in a partial gang).
        running_gpus: GPUs held by jobs that run.
        pending_jobs: jobs submitted and not started.
        running_jobs: jobs started and not finished.
    """

    times: tuple[float, ...]
    allocated_gpus: tuple[float, ...]
    running_gpus: tuple[float, ...]
    pending_jobs: tuple[int, ...]
    running_jobs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Deadlock:
    """A pod-by-pod run that stopped because partial gangs held GPUs that nothing could ever free.

    Attributes:
        time: when the run stopped (the last event time).
        jobs: the jobs holding part of their gang.
        held_gpus: GPUs they hold.
        waiting: jobs submitted and not started at the stop (the partial ones included).
    """

    time: float
    jobs: tuple[str, ...]
    held_gpus: float
    waiting: int

    def describe(self) -> str:
        """One sentence for reports."""
        return (
            f"deadlock at t={self.time:.0f} s: {len(self.jobs)} job(s) hold {self.held_gpus:g} GPU(s) in partial "
            f"gangs that can never complete; nothing runs; {self.waiting} job(s) wait"
        )


@dataclass(frozen=True, slots=True)
class SimResult:
    """A finished (or deadlock-stopped) run.

    Attributes:
        options: the variant.
        capacity_gpus: healthy GPUs of the schedulable nodes.
        jobs: one outcome per input job, in input order.
        timeline: the cluster after each event time.
        partial_gang_idle_gpu_seconds: GPU-seconds held by placed replicas of jobs not yet started.
        deadlock: set when a pod-by-pod run stopped at a deadlock.
        cycles: scheduling cycles run.
        preemptions: running jobs stopped to make room (by priority or, with time slicing, by band).
        promotions: waiting jobs promoted to the top band by the starvation guard (time slicing).
    """

    options: SimOptions
    capacity_gpus: int
    jobs: tuple[JobOutcome, ...]
    timeline: Timeline
    partial_gang_idle_gpu_seconds: float
    deadlock: Deadlock | None = None
    cycles: int = 0
    preemptions: int = 0
    promotions: int = 0


@dataclass(slots=True)
class _JobState:
    """One job's progress during a run (mutable; frozen into a ``JobOutcome`` at the end)."""

    job: SimJob
    status: str = NOT_SUBMITTED
    start: float | None = None
    end: float | None = None
    first_placed: float | None = None
    placed: int = 0  # replicas holding devices
    nodes: set[str] = field(default_factory=set)
    keys: tuple[str, ...] = ()  # the session keys its devices are held under
    remaining: float = 0.0  # run time still to serve
    attained: float = 0.0  # GPU-seconds served so far (least-attained-service)
    run: int = 0  # bumped at each start; a completion is valid only for the run it was scheduled for
    first_start: float | None = None
    served: float = 0.0  # seconds run so far, over every run
    preempted: int = 0
    runs: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of every run that ended


def check_options(options: SimOptions) -> None:
    """Ask the core whether it knows the options' queue order, placement and topology.

    The core's own validation decides, so placement names the core adds later are accepted without a change
    here.

    Raises:
        ValueError: the core's message naming the unknown value; time slicing without gang admission (pod by
            pod, a job's replicas are separate pending jobs, each with its own service); a negative restart
            penalty.
    """
    if options.time_slicing and not options.gang:
        raise ValueError("time slicing needs gang admission: pod by pod, bands would count replicas, not jobs")
    if options.restart_penalty < 0:
        raise ValueError(f"the restart penalty cannot be negative, got {options.restart_penalty:g} s")
    probe = PendingJob(
        key="check/options",
        priority=0,
        created=EPOCH,
        queue="default",
        replicas=(),
        placement=options.placement,
        topology=options.topology,
    )
    SchedulingSession(ClusterSnapshot(nodes=()), options.scheduler_config()).cycle([probe], EPOCH)


def simulate(
    cluster: ClusterSnapshot,
    jobs: Sequence[SimJob],
    options: SimOptions | None = None,
    *,
    progress: ProgressCallback | None = None,
) -> SimResult:
    """Run ``jobs`` on ``cluster`` under ``options`` until every job finished or nothing more can happen.

    Args:
        cluster: the simulated nodes, normally empty.
        jobs: the workload; keys must be unique; any order (arrivals are sorted by submission time, then
            input order).
        options: the variant; the defaults when None.
        progress: called as ``progress(finished_jobs, total_jobs)`` after every event time.

    Raises:
        ValueError: duplicate job keys, negative times, or options the core rejects.
    """
    return _Engine(cluster, jobs, options or SimOptions(), progress).run()


class _Engine:
    """The state of one run; ``run`` drives it from the first arrival to the end."""

    def __init__(
        self,
        cluster: ClusterSnapshot,
        jobs: Sequence[SimJob],
        options: SimOptions,
        progress: ProgressCallback | None,
    ) -> None:
        _check_jobs(jobs)
        check_options(options)
        self.options = options
        self.progress = progress
        self.session = SchedulingSession(cluster, options.scheduler_config())
        self.capacity = gpu_capacity(cluster)
        self.states = [_JobState(job=job, remaining=job.duration) for job in jobs]
        self.arrivals = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit, i))
        self.completions: list[tuple[float, int, int, int]] = []  # (time, sequence, job index, run)
        self.sequence = 0
        self.pending: dict[str, PendingJob] = {}
        self.owner: dict[str, tuple[int, int]] = {}  # pending key -> (job index, first replica index)
        self.allocated_milli = 0
        self.partial_milli = 0
        self.partial_jobs: set[int] = set()
        self.waiting = 0
        self.running = 0
        self.finished = 0
        self.idle_milli_seconds = 0.0
        self.cycles = 0
        self.reasons: dict[str, str] = {}
        self.holder: dict[str, int] = {}  # session key -> index of the job whose devices it holds
        self.preemptions = 0
        self.wake: float | None = None  # time slicing: the next band change, an event with only a cycle
        # Preemptors whose victims' room is theirs (``core.scheduling.passes``): while there are any, one more
        # pass runs at the same time, once the victims have stopped.
        self.nominated: dict[str, tuple[str, ...]] = {}
        self.samples: tuple[list[float], list[float], list[float], list[int], list[int]] = ([], [], [], [], [])

    # --- the loop ---------------------------------------------------------------------------------------

    def run(self) -> SimResult:
        next_arrival = 0
        last_time: float | None = None
        deadlock: Deadlock | None = None
        while next_arrival < len(self.arrivals) or self.completions or self.nominated:
            now = self._next_time(next_arrival)
            if last_time is not None:
                # Partial gangs held their GPUs idle over the whole interval since the last event.
                self.idle_milli_seconds += self.partial_milli * (now - last_time)
            last_time = now
            self._complete_due(now)
            next_arrival = self._arrive_due(now, next_arrival)
            admitted = self._cycle(now)
            self._plan_wake(now)
            self._sample(now)
            if self.progress is not None:
                self.progress(self.finished, len(self.states))
            if self._stuck(admitted):
                break
        if self.partial_jobs and last_time is not None:
            # Stopped early, or ran out of events: either way the partial gangs can never complete.
            deadlock = self._deadlock(last_time)
        if self.pending and last_time is not None and not self.options.explain:
            # Jobs that never started: the report gives the core's sentence (see the module's docstring).
            at = EPOCH + timedelta(seconds=last_time)
            self.reasons = self.session.cycle(list(self.pending.values()), at, explain=True).waiting
        return self._result(deadlock)

    def _next_time(self, next_arrival: int) -> float:
        if self.nominated and self.samples[0]:
            return self.samples[0][-1]  # the victims of the last pass have stopped: their preemptors start now
        candidates = []
        if next_arrival < len(self.arrivals):
            candidates.append(self.states[self.arrivals[next_arrival]].job.submit)
        if self.completions:
            candidates.append(self.completions[0][0])
        if self.wake is not None:
            candidates.append(self.wake)
        return min(candidates)

    def _plan_wake(self, now: float) -> None:
        """Time slicing: the next band change becomes an event, while jobs wait that it may concern."""
        self.wake = None
        if self.options.time_slicing and self.pending:
            at = self.session.next_band_change(EPOCH + timedelta(seconds=now))
            if at is not None:
                self.wake = (at - EPOCH).total_seconds()

    def _complete_due(self, now: float) -> None:
        while self.completions and self.completions[0][0] <= now:
            _, _, index, run = heapq.heappop(self.completions)
            state = self.states[index]
            if run != state.run or state.status != RUNNING:
                continue  # a completion of a run that was stopped (preemption)
            for key in state.keys:
                self.session.release(key)
                self.holder.pop(key, None)
            milli = state.job.gpu_milli
            self.allocated_milli -= milli
            state.status = FINISHED
            state.end = now
            state.remaining = 0.0
            served = now - (state.start if state.start is not None else now)
            state.served += served
            state.attained += milli / MILLI * served
            state.runs.append((now if state.start is None else state.start, now))
            self.running -= 1
            self.finished += 1

    def _arrive_due(self, now: float, next_arrival: int) -> int:
        while next_arrival < len(self.arrivals) and self.states[self.arrivals[next_arrival]].job.submit <= now:
            index = self.arrivals[next_arrival]
            self.states[index].status = WAITING
            self.waiting += 1
            self._enqueue(index)
            next_arrival += 1
        return next_arrival

    def _cycle(self, now: float) -> bool:
        if not self.pending:
            self.nominated = {}
            return False
        plan = run_pass(
            self.session, list(self.pending.values()), now=EPOCH + timedelta(seconds=now), nominated=self.nominated
        )
        self.cycles += 1
        self.reasons = plan.waiting
        self.nominated = plan.nominated
        for admission in plan.deferred:
            self.session.release(admission.key)  # they wait for the victims to stop, as in the runtimes
        for preemption in plan.preempted:
            self._preempt(preemption.victim, now)
        for admission in plan.admitted:
            self._admit(admission, now)
        return bool(plan.admitted)

    def _preempt(self, key: str, now: float) -> None:
        """Stop the running job that holds ``key``, whole, and queue it again with the time it has left."""
        index = self.holder.pop(key)
        state = self.states[index]
        if state.status != RUNNING:
            return  # another of its keys already stopped it this cycle
        for other in state.keys:
            self.holder.pop(other, None)
            if other != key and self.session.holds(other):
                self.session.release(other)  # pod by pod: the job's other replicas stop with it
        served = now - (state.start if state.start is not None else now)
        milli = state.job.gpu_milli
        state.attained += milli / MILLI * served
        state.remaining = max(0.0, state.remaining - served) + self.options.restart_penalty
        state.served += served
        state.runs.append((now if state.start is None else state.start, now))
        state.preempted += 1
        state.status = WAITING
        state.start = None
        state.keys = ()
        state.placed = 0
        self.allocated_milli -= milli
        self.running -= 1
        self.waiting += 1
        self.preemptions += 1
        self._enqueue(index)

    def _stuck(self, admitted: bool) -> bool:
        """Partial gangs hold GPUs, nothing runs or will finish, and the last cycle placed nothing."""
        waits_for_nothing = not self.running and not self.completions and not self.nominated
        return bool(self.partial_jobs) and waits_for_nothing and not admitted

    # --- pending work -----------------------------------------------------------------------------------

    def _enqueue(self, index: int) -> None:
        state = self.states[index]
        job = state.job
        created = EPOCH + timedelta(seconds=job.submit)
        requests = [
            ReplicaRequest(
                name=f"{job.key}-worker-{i}",
                role="worker",
                resources=ResourceVector(
                    cpu_milli=replica.cpu_milli, memory=replica.memory, gpu=replica.gpus, gpu_milli=replica.gpu_milli
                ),
                gpu_model=job.gpu_model,
                pin_cpus=False,
            )
            for i, replica in enumerate(job.replicas)
        ]
        if self.options.gang:
            groups = [(job.key, 0, tuple(requests))]
        else:
            width = max(3, len(str(len(requests) - 1)))
            groups = [(f"{job.key}#{i:0{width}d}", i, (request,)) for i, request in enumerate(requests)]
        for key, first, replicas in groups:
            self.pending[key] = PendingJob(
                key=key,
                priority=job.priority,
                created=created,
                queue=job.queue,
                replicas=replicas,
                placement=self.options.placement,
                topology=self.options.topology,
                duration_estimate=state.remaining,
                attained_service=state.attained,
            )
            self.owner[key] = (index, first)

    def _admit(self, admission: Admission, now: float) -> None:
        del self.pending[admission.key]
        index, first = self.owner.pop(admission.key)
        state = self.states[index]
        job = state.job
        state.keys = (*state.keys, admission.key)
        self.holder[admission.key] = index
        state.nodes.update(assignment.node for assignment in admission.assignments)
        if state.first_placed is None:
            state.first_placed = now
        count = len(admission.assignments)
        milli = sum(replica.gpus * MILLI + replica.gpu_milli for replica in job.replicas[first : first + count])
        self.allocated_milli += milli
        state.placed += count
        if state.placed < len(job.replicas):
            self.partial_milli += milli
            self.partial_jobs.add(index)
            return
        if index in self.partial_jobs:
            self.partial_jobs.discard(index)
            self.partial_milli -= job.gpu_milli - milli
        self._start(index, now)

    def _start(self, index: int, now: float) -> None:
        state = self.states[index]
        state.status = RUNNING
        state.start = now
        if state.first_start is None:
            state.first_start = now
        self.waiting -= 1
        state.run += 1
        self.running += 1
        heapq.heappush(self.completions, (now + state.remaining, self.sequence, index, state.run))
        self.sequence += 1

    # --- results ----------------------------------------------------------------------------------------

    def _sample(self, now: float) -> None:
        times, allocated, running_gpus, waiting, running = self.samples
        times.append(now)
        allocated.append(self.allocated_milli / MILLI)
        running_gpus.append((self.allocated_milli - self.partial_milli) / MILLI)
        waiting.append(self.waiting)
        running.append(self.running)

    def _deadlock(self, now: float) -> Deadlock:
        return Deadlock(
            time=now,
            jobs=tuple(sorted(self.states[index].job.key for index in self.partial_jobs)),
            held_gpus=self.partial_milli / MILLI,
            waiting=self.waiting,
        )

    def _result(self, deadlock: Deadlock | None) -> SimResult:
        reasons: dict[int, str] = {}
        for key in self.pending:  # in insertion order: a pod-by-pod job's first waiting replica speaks for it
            reasons.setdefault(self.owner[key][0], self.reasons.get(key, ""))
        outcomes = tuple(
            JobOutcome(
                job=state.job,
                status=state.status,
                start=state.start,
                end=state.end,
                first_placed=state.first_placed,
                nodes=tuple(sorted(state.nodes)),
                reason=reasons.get(index, ""),
                first_start=state.first_start,
                run_time=state.served if state.status == FINISHED else None,
                preempted=state.preempted,
                runs=tuple(state.runs),
            )
            for index, state in enumerate(self.states)
        )
        times, allocated, running_gpus, pending, running = self.samples
        return SimResult(
            options=self.options,
            capacity_gpus=self.capacity,
            jobs=outcomes,
            timeline=Timeline(
                times=tuple(times),
                allocated_gpus=tuple(allocated),
                running_gpus=tuple(running_gpus),
                pending_jobs=tuple(pending),
                running_jobs=tuple(running),
            ),
            partial_gang_idle_gpu_seconds=self.idle_milli_seconds / MILLI,
            deadlock=deadlock,
            cycles=self.cycles,
            preemptions=self.preemptions,
            promotions=self.session.promotions,
        )


def _check_jobs(jobs: Sequence[SimJob]) -> None:
    seen: set[str] = set()
    for job in jobs:
        if job.key in seen:
            raise ValueError(f"job key {job.key!r} appears more than once; every simulated job needs its own key")
        seen.add(job.key)
        if job.submit < 0 or job.duration < 0:
            raise ValueError(f"job {job.key}: submission time and duration cannot be negative")
        if not job.replicas:
            raise ValueError(f"job {job.key} has no replica")
