"""The status of a Kubeflow object that Phalanx runs, in upstream's shape, from the TrainingJob it became.

On a cluster installed with ``--kubeflow-kinds`` the operator turns a PyTorchJob (or any kind of ``kinds.KINDS``,
or a TrainJob) into a TrainingJob and writes the upstream object's status from the TrainingJob's, so that
``kubectl get pytorchjob`` shows its progress as it would under Kubeflow:

- ``conditions``: ``Created`` once the TrainingJob exists, then ``Running``, ``Restarting``, ``Suspended``,
  ``Succeeded`` or ``Failed`` (reasons ``<Kind>Created``, ``<Kind>Running``...), the current one last, so that the
  ``State`` column (the last condition's type) reads as upstream's; a condition that stops holding turns
  ``False`` where it is. A TrainJob has Trainer v2's ``Suspended``, ``Complete`` and ``Failed`` only.
- ``replicaStatuses`` (a TrainJob: ``jobsStatus``): active, succeeded and failed replicas per upstream replica type.
- ``startTime`` and ``completionTime``.

A document the converter refuses gets ``Failed`` with reason ``<Kind>Refused`` and the refusal (field paths) as
its message; nothing else is created. Pure: the same inputs give the same status, and a condition keeps its
transition time while it holds, so writing the status again changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.model.kubeflow.trainjobs import TRAINJOB

#: The TrainingJob phase -> the upstream condition that holds (None: only Created).
_CONDITION_OF_PHASE = {
    "Pending": None,
    "Queued": None,
    "Admitted": None,
    "Downloading": None,
    "Running": "Running",
    "Storing": "Running",
    "Restarting": "Restarting",
    "Preempted": "Restarting",  # it waits to be placed again, as a restarted upstream job does
    "Halting": "Suspended",
    "Halted": "Suspended",
    "Succeeded": "Succeeded",
    "Failed": "Failed",
}
_PROGRESS = ("Running", "Restarting", "Suspended")
REFUSED = "Refused"


def refused_reason(kind: str) -> str:
    """The reason of the Failed condition of a document that cannot be run as written."""
    return f"{kind}{REFUSED}"


def is_finished(kind: str, status: Mapping[str, Any]) -> bool:
    """Whether an upstream status says the job ran and ended (refused documents excluded: they may be fixed)."""
    done = {"Failed", "Complete" if kind == TRAINJOB else "Succeeded"}
    return any(
        condition.get("type") in done
        and condition.get("status") == "True"
        and condition.get("reason") != refused_reason(kind)
        for condition in _conditions(status)
    )


def refused_status(kind: str, current: Mapping[str, Any], message: str, now: str) -> dict[str, Any]:
    """The status of a document the converter refuses: Failed, with why (every field path) as its message."""
    conditions = _Conditions(_conditions(current), now)
    conditions.set("Failed", "True", refused_reason(kind), message)
    status = {key: value for key, value in current.items() if key != "conditions"}
    status["conditions"] = conditions.items
    return status


def upstream_status(
    kind: str,
    name: str,
    job_status: Mapping[str, Any],
    replica_types: Mapping[str, str],
    current: Mapping[str, Any],
    now: str,
) -> dict[str, Any]:
    """The upstream object's status once its TrainingJob exists.

    Args:
        kind: the upstream kind (``PyTorchJob``...).
        name: the object's name, for the messages.
        job_status: the TrainingJob's status as stored (``phase``, ``message``, ``replicaStatuses``...).
        replica_types: TrainingJob role -> the upstream replica type it came from (``master`` -> ``Master``).
        current: the upstream object's status now (its conditions keep their transition times).
        now: the time of a condition that changes, RFC 3339.
    """
    # A refusal that was fixed (the object applied again) no longer holds: it is dropped, as the object runs.
    kept = [item for item in _conditions(current) if item.get("reason") != refused_reason(kind)]
    conditions = _Conditions(kept, now)
    phase = str(job_status.get("phase") or "Pending")
    holding = _CONDITION_OF_PHASE.get(phase)
    message = str(job_status.get("message") or "")
    trainjob = kind == TRAINJOB
    if not trainjob:
        conditions.set("Created", "True", f"{kind}Created", f"{kind} {name} is created.")
    for other in _PROGRESS:
        if other != holding and conditions.holds(other):
            conditions.set(other, "False", f"{kind}{other}", f"{kind} {name} is no longer {other.lower()}.")
    if holding == "Succeeded" and trainjob:
        conditions.set("Complete", "True", "JobsCompleted", message or f"{kind} {name} completed.")
    elif holding is not None and not (trainjob and holding in ("Running", "Restarting")):
        # The job's message says why it failed; while it runs it changes often, and a condition holds one text.
        text = message if holding == "Failed" and message else f"{kind} {name} is {holding.lower()}."
        conditions.set(holding, "True", f"{kind}{holding}", text)
    status: dict[str, Any] = {"conditions": conditions.items}
    counts = job_status.get("replicaStatuses")
    counts = counts if isinstance(counts, Mapping) else {}
    replicas = {
        upstream: {
            key: int(value)
            for key in ("active", "succeeded", "failed")
            if isinstance((value := (counts.get(role) or {}).get(key, 0)), int)
        }
        for role, upstream in replica_types.items()
    }
    if trainjob:
        status["jobsStatus"] = [{"name": upstream, **replicas[upstream]} for upstream in replica_types.values()]
    else:
        status["replicaStatuses"] = replicas
    for key in ("startTime", "completionTime"):
        if job_status.get(key):
            status[key] = job_status[key]
    return status


def _conditions(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = status.get("conditions") if isinstance(status, Mapping) else None
    return [dict(item) for item in found if isinstance(item, Mapping)] if isinstance(found, list) else []


class _Conditions:
    """Upstream's condition list: one per type; a changed one moves last, an unchanged one keeps its times."""

    def __init__(self, items: list[dict[str, Any]], now: str) -> None:
        self.items = items
        self.now = now

    def holds(self, kind: str) -> bool:
        return any(item.get("type") == kind and item.get("status") == "True" for item in self.items)

    def set(self, kind: str, status: str, reason: str, message: str) -> None:
        for position, item in enumerate(self.items):
            if item.get("type") != kind:
                continue
            if (item.get("status"), item.get("reason"), item.get("message")) == (status, reason, message):
                return
            if status == "False":  # stops holding: turned False where it is, so the current one stays last
                self.items[position] = self._condition(kind, status, reason, message)
                return
            del self.items[position]
            break
        self.items.append(self._condition(kind, status, reason, message))

    def _condition(self, kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastUpdateTime": self.now,
            "lastTransitionTime": self.now,
        }
