"""The embedded scheduler's admission writes go through the port: one lost write stops the cycle's later ones."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from test_poison_pills import store_with_queued_jobs

from phalanx.model.jobs import Phase, TrainingJob
from phalanx.services.embedded.scheduler import SchedulerService
from phalanx.services.port import Written


def test_a_lost_admission_write_stops_the_later_admissions_of_its_cycle(tmp_path: Path) -> None:
    with store_with_queued_jobs(tmp_path / "phalanx.db", ["a", "b", "c"]) as store:
        scheduler = SchedulerService(store)
        write_status, admissions = scheduler.port.write_status, []

        def edited_first(job: TrainingJob, changes: Mapping[str, Any]) -> Written:
            if changes.get("phase") == Phase.ADMITTED:
                admissions.append(job.metadata.name)
                if len(admissions) == 1:  # the user edits the first job between the snapshot and its admission
                    stored = store.get(TrainingJob, "default", job.metadata.name)
                    store.update_status(
                        stored.model_copy(update={"status": stored.status.model_copy(update={"message": "edited"})})
                    )
            return write_status(job, changes)

        scheduler.port.write_status = edited_first  # type: ignore[method-assign]
        assert scheduler.sync()
        assert len(admissions) == 1, "the later admissions counted on the lost one's devices: not written"
        assert {job.status.phase for job in store.list(TrainingJob)} == {Phase.QUEUED}

        assert scheduler.sync()  # the next cycle decides again, on what is stored now
        assert {job.status.phase for job in store.list(TrainingJob)} == {Phase.ADMITTED}
