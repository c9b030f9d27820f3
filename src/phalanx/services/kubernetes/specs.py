"""What phalanx-operator knows of specs: JobTypes parsed once per version, jobs validated once per generation.

A reconcile needs the job validated and defaulted against the cluster's JobTypes (``objects.job_from_object``)
and known to render (``kube_apply.check_renderable``), exactly as ``phalanx submit`` checks it. That costs far
more than planning, and a job's spec changes only with its generation (a status write moves its
resourceVersion, not its generation), so the result is kept per job uid until its generation or its JobType's
resourceVersion moves. A JobType the cache has not seen yet is looked up in the API before a job that names it
is called invalid: ``kubectl apply`` of a JobType and a job using it creates both at once, and the two caches
are filled by separate watches.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from phalanx.adapters.kubernetes.api import JOBTYPES, KubeApi, NotFoundError
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.adapters.kubernetes.objects import job_from_object, job_status, jobtype_from_object
from phalanx.adapters.kubernetes.parsed import ParsedObjects
from phalanx.adapters.kubernetes.rendering import RenderError
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TERMINAL_PHASES, Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.services.kubernetes.apply import PodSettings, check_renderable, invalid_spec_message

log = logging.getLogger(__name__)


@dataclass
class ParsedJob:
    """A job's spec as validated last time, reused while its generation and JobType stay the same.

    Attributes:
        generation: the job's generation it was validated at.
        jobtype_version: the resourceVersion of its JobType then.
        job: the validated, defaulted job; None when it is invalid.
        error: why it is invalid (field paths), for the job's status.

    """

    generation: int
    jobtype_version: str
    job: TrainingJob | None
    error: str = ""


class SpecCache:
    """Parsed JobTypes (by name and resourceVersion) and validated jobs (by uid and generation)."""

    def __init__(self, api: KubeApi, jobtypes: Informer, pods: PodSettings) -> None:
        self.api = api
        self.jobtypes = jobtypes
        self.pods = pods
        self._jobs: dict[str, ParsedJob] = {}  # job uid -> its last validation
        self._jobtypes = ParsedObjects("JobType", jobtype_from_object)

    def __len__(self) -> int:
        return len(self._jobs)

    def jobtype(self, obj: dict[str, Any]) -> JobType | None:
        """The JobType object parsed (None, logged, when it is invalid)."""
        return self._jobtypes.get(obj)

    def current_jobtypes(self) -> dict[str, JobType]:
        """Every valid JobType in the cache, by name."""
        found = {}
        for obj in self.jobtypes.items():
            jobtype = self.jobtype(obj)
            if jobtype is not None:
                found[jobtype.metadata.name] = jobtype
        return found

    def parse(self, obj: dict[str, Any], jobtypes: dict[str, JobType]) -> ParsedJob:
        """The job validated and defaulted against the cluster's JobTypes, or why it cannot be.

        Args:
            obj: the job as cached.
            jobtypes: the JobTypes by name (``current_jobtypes``); one read from the API here is added to it.

        """
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        generation = int(meta.get("generation") or 0)
        type_name = str((obj.get("spec") or {}).get("type") or "generic")
        if type_name not in jobtypes and Phase(job_status(obj).phase) not in TERMINAL_PHASES:
            self._read_jobtype(type_name, jobtypes)
        version = self._jobtype_version(type_name)
        cached = self._jobs.get(uid)
        if cached is not None and cached.generation == generation and cached.jobtype_version == version:
            return cached
        try:
            job = job_from_object(obj, jobtypes)
            check_renderable(job, jobtypes[job.spec.type], self.pods)
            parsed = ParsedJob(generation, version, job)
        except SpecError as error:
            parsed = ParsedJob(generation, version, None, invalid_spec_message(error))
        except RenderError as error:
            parsed = ParsedJob(generation, version, None, str(error))
        except ValueError as error:  # what validation did not word as a field error (pydantic's, in metadata)
            parsed = ParsedJob(generation, version, None, f"invalid TrainingJob: {error}")
        self._jobs[uid] = parsed
        return parsed

    def forget(self, live_uids: Collection[str]) -> None:
        """Drop the validations of jobs that no longer exist."""
        self._jobs = {uid: parsed for uid, parsed in self._jobs.items() if uid in live_uids}

    def _jobtype_version(self, name: str) -> str:
        obj = self.jobtypes.get(None, name)
        return str((obj or {}).get("metadata", {}).get("resourceVersion") or "")

    def _read_jobtype(self, name: str, jobtypes: dict[str, JobType]) -> None:
        """Look a JobType up in the API before calling a job invalid: its watch event may still be on the way."""
        try:
            obj = self.api.get(JOBTYPES, name)
        except NotFoundError:
            return
        self.jobtypes.observe(obj)
        jobtype = self.jobtype(obj)
        if jobtype is not None:
            jobtypes[name] = jobtype
