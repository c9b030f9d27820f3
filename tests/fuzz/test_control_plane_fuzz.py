"""Property B of the fuzz tier: accepted documents, run by a real control plane, settle while it stays healthy.

A few hundred TrainingJobs that the door accepts (generated, and generated with a dangerous value of issue 13
at the place it hurt) are submitted through the SDK to a real control plane, in batches. Each must settle within
a bound, in a terminal phase or waiting with a reason (``status.reason`` and ``status.message`` set), while the
control plane process stays alive, keeps its lease and answers; then it is deleted. Anything else (a job stuck
in Downloading, a control plane that died on a huge quantity) is reported with the document that did it.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.profiles import FUZZ, SCALE
from fuzz.strategies import boundary_jobs, model_documents, mutated
from integration.runtime.conftest import ControlPlaneProcess, Runtime
from phalanx.entrypoints.client import Client
from phalanx.model.errors import SpecError
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.services.embedded.daemon import current_leader
from phalanx.services.embedded.operations import SqliteBackend
from phalanx.services.operations import OperationError, validate_documents
from support.waiting import wait_until

ACCEPTED_JOBS = 200 * SCALE
BATCH = 25
#: Seconds a batch has to settle: a job that runs ``true`` takes well under one.
SETTLE_SECONDS = 90.0
LEASE_GRACE_SECONDS = 15.0
TERMINAL = {Phase.SUCCEEDED, Phase.FAILED, Phase.HALTED}
WAITING = {Phase.PENDING, Phase.QUEUED}

jobs = st.one_of(boundary_jobs(), mutated(model_documents("TrainingJob"), max_mutations=1), boundary_jobs())


def accepted_documents(count: int) -> list[dict[str, Any]]:
    """``count`` generated TrainingJobs the door accepts, with unique names and cheap commands."""
    jobtypes = builtin_jobtypes()
    found: list[dict[str, Any]] = []

    # About one generated document in nine passes the door (role names must match the JobType, values their bounds).
    @settings(FUZZ, max_examples=count * 10)
    @given(document=jobs)
    def collect(document: dict[str, Any]) -> None:
        if len(found) >= count:
            return
        try:
            # With the embedded backend's own rules, as its submit applies them (pod fields, schedulerName).
            validate_documents(
                [document],
                jobtypes,
                pod_field_refusals=SqliteBackend.pod_field_refusals,
                cluster_scheduling=SqliteBackend.cluster_scheduling,
                own_scheduler=SqliteBackend.own_scheduler,
            )
        except (SpecError, ArithmeticError, ValueError):
            return  # refused, or the door's own breach: property A reports those
        document = json.loads(json.dumps(document))  # a plain copy, free of shared objects
        document["metadata"]["name"] = f"b-{len(found)}"
        for role in document["spec"]["replicas"].values():
            template = role.setdefault("template", {})
            if template.get("command", [""])[0] == "python":
                template["command"] = ["true"]  # an interpreter per replica would cost the tier its budget
        found.append(document)

    collect()
    return found


def settled(job: TrainingJob) -> bool:
    phase = Phase(job.status.phase)
    return phase in TERMINAL or (phase in WAITING and bool(job.status.reason) and bool(job.status.message))


def describe(job: TrainingJob) -> str:
    return f"{job.status.phase} reason={job.status.reason!r} message={job.status.message!r}"


def assert_healthy(plane: ControlPlaneProcess, client: Client, context: str) -> None:
    """Alive, leading (a renewal late by a busy machine gets a grace), and answering: the store still parses."""
    exited = plane.process.poll()
    assert exited is None, f"the control plane exited ({exited}) {context}\n{plane.log()[-3000:]}"
    wait_until(
        lambda: (leader := current_leader(client.store)) is not None and leader.pid == plane.process.pid,
        timeout=LEASE_GRACE_SECONDS,
        message=f"the control plane to lead {context}",
    )
    client.ops.list_jobs(None)


def test_accepted_jobs_settle_while_the_control_plane_stays_healthy(
    fuzz_runtime: Runtime, control_plane: ControlPlaneProcess
) -> None:
    documents = accepted_documents(ACCEPTED_JOBS)
    assert len(documents) >= ACCEPTED_JOBS // 2, f"only {len(documents)} accepted documents were generated"
    with fuzz_runtime.client() as client:
        for start in range(0, len(documents), BATCH):
            batch = documents[start : start + BATCH]
            submitted: dict[tuple[str, str], dict[str, Any]] = {}
            for document in batch:
                for item in client.ops.submit([document], submit_dir=fuzz_runtime.work_dir):
                    submitted[(item.namespace, item.name)] = document
            deadline = time.monotonic() + SETTLE_SECONDS
            pending = dict(submitted)
            while pending and time.monotonic() < deadline:
                assert_healthy(control_plane, client, f"with batch {start // BATCH} submitted")
                seq = client.store.latest_seq()
                for key in list(pending):
                    try:
                        job = client.ops.get_job(*key)
                    except OperationError:
                        del pending[key]  # deleted by its ttlSecondsAfterFinished: finished
                        continue
                    if settled(job):
                        del pending[key]
                client.store.wait_for_change(seq, 1.0)
            stuck = {f"{key[0]}/{key[1]}": describe(client.ops.get_job(*key)) for key in pending}
            first = json.dumps(next(iter(pending.values())), default=str) if pending else ""
            assert not stuck, f"jobs did not settle in {SETTLE_SECONDS:.0f}s: {stuck}\nthe first: {first}"
            for key in submitted:
                with contextlib.suppress(OperationError):  # already gone
                    client.ops.delete_job(*key)
            assert_healthy(control_plane, client, f"after batch {start // BATCH}")
