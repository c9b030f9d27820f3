"""`phalanx run` following a Sweep or PipelineRun: the elapsed times count from the submission, and a file that
makes a Pipeline but no run says what would run it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from phalanx.entrypoints.cli.follow_flows import follow_flow, nothing_to_follow
from phalanx.entrypoints.cli.output import PlainConsole
from phalanx.model.pipelines import PipelineRun


class FinishedRun:
    """Operations whose PipelineRun has already succeeded: the follower prints once and ends."""

    def get_pipelinerun(self, namespace: str, name: str) -> PipelineRun:
        document: dict[str, Any] = {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"pipelineRef": {"name": "p"}},
            "status": {"phase": "Succeeded", "message": "all 1 steps done"},
        }
        return PipelineRun.model_validate(document)


def test_the_elapsed_times_count_from_the_submission_not_from_when_following_began(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A new user saw every line of a short run at 0.00s: the follower's clock started after its session opened
    # (about a second after the submission), by which time the run had already ended.
    ops: Any = FinishedRun()
    code = follow_flow(ops, "PipelineRun", "default", "r", PlainConsole(), started=time.monotonic() - 5)
    assert code == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert float(first.split("s", 1)[0]) >= 5.0, first


def test_a_pipeline_without_a_run_gets_the_sentence_that_runs_it() -> None:
    hint = nothing_to_follow([("Pipeline", "train-eval")])
    assert hint is not None and "no PipelineRun" in hint and "spec.pipelineRef.name: train-eval" in hint
    assert nothing_to_follow([("Queue", "team-a")]) is None
