"""Rendering API objects for people: tables, phase colours, ages, describe sections."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from phalanx.core.lifecycle.quarantine import quarantine_condition, shown_phase
from phalanx.entrypoints.cli.styles import styled_phase
from phalanx.model.events import Event
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.masking import mask_url, mask_urls_in
from phalanx.model.nodes import Node
from phalanx.model.replicas import Replica
from phalanx.model.resources import format_cpu, format_memory, human_memory
from phalanx.services.operations import JobDescription
from phalanx.services.queue_views import QueueDescription, QueueView, job_usage


def age(when: datetime | None, now: datetime | None = None) -> str:
    """kubectl-style age: 12s, 5m, 3h, 2d."""
    if when is None:
        return "-"
    seconds = int(((now or datetime.now(UTC)) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def jobs_table(jobs: list[TrainingJob], *, wide: bool = False) -> Table:
    """NAME TYPE PHASE REPLICAS RESTARTS AGE REASON."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAMESPACE", "NAME", "TYPE", "PHASE", "REPLICAS", "RESTARTS", "AGE", "MESSAGE"):
        if column == "NAMESPACE" and not wide:
            continue
        table.add_column(column, overflow="fold" if column == "MESSAGE" else "ellipsis")
    for job in jobs:
        total = job.spec.total_replicas()
        active = sum(s.active for s in job.status.replica_statuses.values())
        quarantine = quarantine_condition(job.status)
        message = quarantine.message if quarantine is not None else job.status.message or job.status.reason
        row = [
            job.metadata.name,
            job.spec.type,
            styled_phase(shown_phase(job.status)),
            f"{active}/{total}",
            str(job.status.restarts),
            age(job.metadata.creation_timestamp),
            message if wide else (message[:80] + "…" if len(message) > 80 else message),
        ]
        table.add_row(*([job.metadata.namespace, *row] if wide else row))
    return table


def nodes_table(nodes: list[Node], usage: dict[str, dict[str, int]]) -> Table:
    """NAME CPUS MEMORY GPUS (model) SOURCE and what is allocated."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    columns = ("NAME", "CPUS", "NUMA", "MEMORY", "GPUS", "GPU MODEL", "CPU ALLOC", "GPU ALLOC", "UNHEALTHY", "SOURCE")
    for column in columns:
        table.add_column(column)
    for node in nodes:
        status = node.status
        used = usage.get(node.metadata.name, {})
        models = sorted({g.model for g in status.gpus})
        sick = sorted(g.index for g in status.gpus if not g.healthy)
        table.add_row(
            node.metadata.name,
            str(len(status.cpus)),
            str(len({c.numa for c in status.cpus})),
            human_memory(status.memory),
            str(len(status.gpus)),
            ", ".join(models) or "-",
            f"{format_cpu(used.get('cpu_milli', 0))}/{len(status.cpus)}",
            f"{used.get('gpu', 0)}/{len(status.gpus)}",
            f"[red]GPU {','.join(map(str, sick))}[/]" if sick else "-",
            status.source,
        )
    return table


def print_node_description(console: Console, node: Node, events: list[Event] | None) -> None:
    """`phalanx describe node NAME`: the node, its GPUs with their health (and why one is unhealthy), events.

    ``events`` None: the backend keeps none here (a cluster's are `kubectl describe node`'s), so no Events table.
    """
    status = node.status
    console.print(f"[bold]Name:[/]        {node.metadata.name}")
    console.print(f"[bold]Source:[/]      {status.source}")
    console.print(f"[bold]CPUs:[/]        {len(status.cpus)} on {len({c.numa for c in status.cpus}) or 1} NUMA node(s)")
    console.print(f"[bold]Memory:[/]      {human_memory(status.memory)}")
    console.print(f"[bold]CPU pinning:[/] {escape(cpu_pinning(node))}", highlight=False)
    if node.spec.unschedulable:
        console.print("[bold]Schedulable:[/] no")
    for key, value in sorted(node.metadata.annotations.items()):
        if key == "phalanx.dev/gpu-discovery":
            console.print(f"[bold]GPU discovery:[/] {value}")
    healthy = sum(g.healthy for g in status.gpus)
    console.print(f"[bold]GPUs:[/]        {len(status.gpus)}, {healthy} healthy")
    if status.gpus:
        gpus = Table(title="GPUs", box=None, title_justify="left", header_style="bold")
        for column in ("INDEX", "MODEL", "MEMORY", "NUMA", "NVLINK PEERS", "HEALTH"):
            gpus.add_column(column, overflow="fold")
        for gpu in sorted(status.gpus, key=lambda g: g.index):
            peers = ",".join(str(peer) for peer, links in sorted(gpu.nvlinks.items()) if links > 0)
            health = "healthy" if gpu.healthy else f"[red]unhealthy[/]: {gpu.problem or 'unhealthy'}"
            gpus.add_row(str(gpu.index), gpu.model, human_memory(gpu.memory), str(gpu.numa), peers or "-", health)
        console.print(gpus)
    if events is not None:
        console.print(events_table(events, None))


def cpu_pinning(node: Node) -> str:
    """Whether exclusive, NUMA-aligned cores are enforced on the node, and by what (docs/kubernetes.md)."""
    policy = node.status.cpu_policy
    if policy.enforced and not policy.cpu_manager:
        return "enforced (Phalanx pins each replica's cores itself)"
    if policy.enforced:
        return (
            f"NUMA alignment enforced (kubelet cpuManagerPolicy {policy.cpu_manager}, topologyManagerPolicy "
            f"{policy.topology_manager}); the kubelet picks the cores"
        )
    return f"not enforced: {policy.reason}; jobs with topology: required that ask for whole CPUs are not placed here"


def jobtypes_table(jobtypes: list[JobType]) -> Table:
    """NAME ROLES DESCRIPTION."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("NAME")
    table.add_column("ROLES")
    table.add_column("SUCCEEDS WHEN")
    table.add_column("DESCRIPTION", overflow="fold")
    for jobtype in jobtypes:
        spec = jobtype.spec
        succeeds = f"first of {', '.join(spec.success_roles)} succeeds" if spec.success_roles else "all succeed"
        first_sentence = spec.description.split(". ")[0].rstrip(".")
        table.add_row(jobtype.metadata.name, ", ".join(spec.roles), succeeds, first_sentence)
    return table


#: What `describe job` says under a placement on Kubernetes, where the node's own agents pick the devices.
DEVICES_ADVISORY = (
    "On Kubernetes the node, the gang and the counts are enforced; which GPUs and cores is advisory: the device "
    "plugin and the kubelet pick them (exclusive, NUMA-aligned cores only where the kubelet enforces them: "
    "docs/kubernetes.md#what-is-enforced-on-the-node)."
)


#: ... and where every GPU replica claims its GPUs through Dynamic Resource Allocation (``--gpu-allocation dra``).
DEVICES_CLAIMED = (
    "On Kubernetes with DRA the node, the gang, the counts and which GPUs are enforced: each replica's "
    "ResourceClaim is allocated exactly these GPUs, which the node's DRA driver prepares; cores are "
    "exclusive and NUMA-aligned only where the kubelet enforces them "
    "(docs/kubernetes.md#what-is-enforced-on-the-node)."
)


def devices_sentence(replicas: list[Replica]) -> str:
    """What is enforced of a cluster job's placement: by DRA claims (allocated or not yet), or advisory."""
    claiming = [r for r in replicas if r.status.gpu_claim]
    if not claiming:
        return DEVICES_ADVISORY
    waiting = [r.metadata.name for r in claiming if not r.status.gpu_claim_allocated]
    if not waiting:
        return DEVICES_CLAIMED
    return (
        f"On Kubernetes with DRA the GPUs are enforced once each replica's ResourceClaim is allocated; "
        f"{len(waiting)} of {len(claiming)} are not yet ({', '.join(sorted(waiting))}): the job's "
        "GPUClaimsNotAllocated Event says why."
    )


def print_description(console: Console, described: JobDescription, *, pods: bool = False) -> None:
    """`phalanx describe job NAME`.

    Args:
        console: where to print.
        described: the job, its replicas and its events.
        pods: the replicas are a cluster's Pods (the kubernetes backend): show each one's node instead of a pid.
    """
    job = described.job
    meta, spec, status = job.metadata, job.spec, job.status
    console.print(f"[bold]Name:[/]        {meta.name}")
    console.print(f"[bold]Namespace:[/]   {meta.namespace}")
    console.print(f"[bold]UID:[/]         {meta.uid}")
    console.print(f"[bold]Type:[/]        {spec.type}")
    reason = f"  ({status.reason})" if status.reason and status.reason != status.phase else ""
    console.print(f"[bold]Phase:[/]       {styled_phase(status.phase)}{reason}")
    if status.message:
        console.print(f"[bold]Message:[/]     {status.message}")
    console.print(f"[bold]Created:[/]     {meta.creation_timestamp} ({age(meta.creation_timestamp)} ago)")
    policy = spec.run_policy
    own = ", ".join(f"{role}: {r.restart_policy}" for role, r in spec.replicas.items() if r.restart_policy)
    console.print(
        f"[bold]Run policy:[/]  restart={policy.restart_policy}{f' ({own})' if own else ''} "
        f"backoffLimit={policy.backoff_limit} gangRestart={str(policy.gang_restart).lower()} "
        f"suspend={str(policy.suspend).lower()}"
        + (f" cleanPodPolicy={policy.clean_pod_policy}" if policy.clean_pod_policy != "Running" else "")
    )
    console.print(f"[bold]Restarts:[/]    {status.restarts}")
    if status.metrics:
        console.print("[bold]Metrics:[/]     " + ", ".join(f"{k}={v:.4g}" for k, v in status.metrics.items()))
    if status.artifacts:
        console.print(f"[bold]Artifacts:[/]   {status.artifacts}")
    roles = Table(title="Roles", box=None, title_justify="left", header_style="bold")
    for column in ("ROLE", "COUNT", "CPU", "MEMORY", "GPU", "COMMAND"):
        roles.add_column(column)
    for role, replica in spec.replicas.items():
        res = replica.template.resources
        gpu = str(res.gpu or 0) if not res.gpu_milli else f"{res.gpu_milli}m"
        reserved, ceiling = res.vector(), res.ceiling()
        cpu, memory = format_cpu(reserved.cpu_milli), format_memory(reserved.memory)
        # What is reserved, and the enforced ceiling where resources.limits lifts it.
        if ceiling.cpu_milli > reserved.cpu_milli:
            cpu += f" (limit {format_cpu(ceiling.cpu_milli)})"
        if ceiling.memory > reserved.memory:
            memory += f" (limit {format_memory(ceiling.memory)})"
        roles.add_row(
            role,
            str(replica.count),
            cpu,
            memory,
            gpu,
            " ".join([*replica.template.command, *replica.template.args]),
        )
    console.print(roles)
    if status.placements:
        placed = Table(title="Placement", box=None, title_justify="left", header_style="bold")
        for column in ("REPLICA", "NODE", "EXCLUSIVE CPUS", "GPUS"):
            placed.add_column(column)
        for name, placement in sorted(status.placements.items()):
            placed.add_row(
                name,
                placement.node or "-",  # none yet: the cluster's scheduler picks it (spec.scheduling.schedulerName)
                ",".join(map(str, placement.cpus)) or "shared",
                ",".join(map(str, placement.gpus)) or ("-" if not placement.gpu_milli else f"{placement.gpu_milli}m"),
            )
        console.print(placed)
        if pods:
            console.print(devices_sentence(described.replicas), highlight=False)
    if described.replicas:
        replica_table = Table(title="Replicas", box=None, title_justify="left", header_style="bold")
        for column in ("NAME", "PHASE", "ATTEMPT", "NODE" if pods else "PID", "EXIT", "STARTED"):
            replica_table.add_column(column)
        for observed in described.replicas:
            rs = observed.status
            deleting = " (stopping)" if observed.metadata.deletion_timestamp else ""
            replica_table.add_row(
                observed.metadata.name,
                f"{rs.phase}{deleting}",
                str(observed.spec.attempt),
                _replica_node(observed) if pods else str(rs.pid or "-"),
                "-" if rs.exit_code is None else str(rs.exit_code),
                age(rs.start_time) + " ago" if rs.start_time else "-",
            )
        console.print(replica_table)
    if status.conditions:
        conditions = Table(title="Conditions", box=None, title_justify="left", header_style="bold")
        for column in ("TYPE", "STATUS", "REASON", "AGE", "MESSAGE"):
            conditions.add_column(column, overflow="fold")
        for condition in status.conditions:
            conditions.add_row(
                condition.type,
                condition.status,
                condition.reason,
                age(condition.last_transition_time),
                condition.message,
            )
        console.print(conditions)
    console.print(events_table(described.events, meta.creation_timestamp))


def _replica_node(replica: Replica) -> str:
    """The node a Pod runs on; one the scheduler has not bound yet shows the node its job's placement plans."""
    node = replica.spec.placement.node or "-"
    return node if replica.status.bound or node == "-" else f"{node} (planned)"


def events_table(events: list[Event], created: datetime | None) -> Table:
    """The last 30 events since ``created``: those of an earlier object of the same name are not this one's."""
    table = Table(title="Events", box=None, title_justify="left", header_style="bold")
    for column in ("TYPE", "REASON", "AGE", "MESSAGE"):
        table.add_column(column, overflow="fold")
    mine = [e for e in events if created is None or e.time >= created]
    for event in mine[-30:]:
        kind = f"[red]{event.type}[/]" if event.type == "Warning" else event.type
        table.add_row(kind, event.reason, age(event.time), mask_url(event.message))
    return table


def _gpus(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli / 1000:g}"


_FORMAT = {"gpu": _gpus, "cpu": format_cpu, "memory": format_memory}


def usage_of_quota(view: QueueView, resource: str, *, plain: bool = False) -> str:
    """``usage/quota`` of one resource (``-`` when the queue has no quota for it); above quota, what is borrowed.

    GPUs are counted in thousandths inside (a GPU share is a fraction of a GPU): ``1.5/4``. ``plain``: no colour.
    """
    show = _FORMAT[resource]
    used = view.usage.amount(resource)
    quota = view.queue.spec.quota.named().get(resource)
    if quota is None:
        return f"{show(used)}/-"
    limit = quota * 1000 if resource == "gpu" else quota
    text = f"{show(used)}/{show(limit)}"
    if used > limit:
        text += f" (+{show(used - limit)})"
        return text if plain else f"[yellow]{text}[/]"
    return text


def queues_table(views: list[QueueView]) -> Table:
    """NAME COHORT WEIGHT GPU CPU MEMORY ADMITTED PENDING; resources as usage/quota, borrowing in yellow."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAME", "COHORT", "WEIGHT", "GPU", "CPU", "MEMORY", "ADMITTED", "PENDING"):
        table.add_column(column)
    for view in views:
        spec = view.queue.spec
        table.add_row(
            view.name,
            spec.cohort or "-",
            f"{spec.weight:g}",
            *(usage_of_quota(view, resource) for resource in ("gpu", "cpu", "memory")),
            str(view.admitted_count),
            str(view.pending_count),
        )
    return table


def print_queue_description(console: Console, described: QueueDescription) -> None:
    """`phalanx describe queue NAME`: spec, usage per resource, admitted and pending jobs, the cohort."""
    view = described.view
    queue, spec = view.queue, view.queue.spec
    console.print(f"[bold]Name:[/]              {queue.metadata.name}")
    console.print(f"[bold]Cohort:[/]            {spec.cohort or '- (borrows and lends nothing)'}")
    console.print(f"[bold]Weight:[/]            {spec.weight:g}")
    console.print(f"[bold]Priority classes:[/]  {', '.join(spec.priority_classes) or 'all'}")
    console.print(f"[bold]Namespaces:[/]        {', '.join(spec.namespaces) or 'all'}")
    if queue.metadata.creation_timestamp:
        created = queue.metadata.creation_timestamp
        console.print(f"[bold]Created:[/]           {created} ({age(created)} ago)")
    if view.from_status:
        console.print("[yellow]note:[/] the jobs cannot be listed; counts and usage are the scheduler's last status")
    quota = spec.quota.named()
    limits = spec.borrowing_limit.named() if spec.borrowing_limit is not None else {}
    resources = Table(title="Resources", box=None, title_justify="left", header_style="bold")
    for column in ("RESOURCE", "USAGE/QUOTA", "BORROWING LIMIT"):
        resources.add_column(column)
    for resource in ("gpu", "cpu", "memory"):
        if resource not in quota:
            limit = "-"
        elif resource in limits:
            limit = _FORMAT[resource](limits[resource] * 1000 if resource == "gpu" else limits[resource])
        else:
            limit = "unlimited" if spec.cohort else "-"
        resources.add_row(resource.upper(), usage_of_quota(view, resource), limit)
    console.print(resources)
    if not quota:
        console.print("No quota: the queue's jobs are not limited by it.")
    if not view.from_status:
        admitted = Table(title="Admitted jobs", box=None, title_justify="left", header_style="bold")
        for column in ("JOB", "PHASE", "GPU", "CPU", "MEMORY", "AGE"):
            admitted.add_column(column)
        for job in view.admitted:
            used = job_usage(job)
            admitted.add_row(
                job.key,
                styled_phase(job.status.phase),
                _gpus(used.gpu_milli),
                format_cpu(used.cpu_milli),
                format_memory(used.memory),
                age(job.metadata.creation_timestamp),
            )
        console.print(admitted if view.admitted else "Admitted jobs: none")
        pending = Table(title="Pending jobs", box=None, title_justify="left", header_style="bold")
        for column in ("JOB", "PHASE", "PRIORITY", "AGE", "WAITING FOR"):
            pending.add_column(column, overflow="fold" if column == "WAITING FOR" else "ellipsis")
        for job in view.pending:
            pending.add_row(
                job.key,
                styled_phase(job.status.phase),
                job.spec.scheduling.priority_class or "-",
                age(job.metadata.creation_timestamp),
                job.status.message or job.status.reason or "-",
            )
        console.print(pending if view.pending else "Pending jobs: none")
    if spec.cohort:
        if described.cohort:
            cohort = queues_table(described.cohort)
            cohort.title = f"Other queues of cohort {spec.cohort}"
            cohort.title_justify = "left"
            console.print(cohort)
        else:
            console.print(f"Other queues of cohort {spec.cohort}: none (nothing to borrow from)")


def as_wire(objects: list[Any]) -> list[dict[str, Any]] | dict[str, Any]:
    """Wire form for -o yaml/json: one object alone, several as a List."""
    # A Dataset's source URL may hold a password: masked wherever it is shown (docs/datasets.md).
    dicts: list[dict[str, Any]] = [
        mask_urls_in(obj.to_dict()) if getattr(obj, "kind", None) == "Dataset" else obj.to_dict() for obj in objects
    ]
    if len(dicts) == 1:
        return dicts[0]
    return {"apiVersion": "v1", "kind": "List", "items": dicts}
