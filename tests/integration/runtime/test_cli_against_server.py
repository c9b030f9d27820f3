"""The CLI against a real `phalanx server` (``phalanx --server URL VERB``), as a new user on another machine would.

The server and the control plane are real processes over one state directory; the user's CLI runs in processes of
its own with a state directory and a config home of its own, so everything it sees came over HTTP. Tokens are made
with the real `phalanx token create`. A viewer's submission is refused with one sentence and nothing is stored; a
wrong URL and a revoked token are one sentence each, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from test_rest_server_e2e import make_token, start_server

from conftest import Runtime, generic_job, wait_until
from phalanx.entrypoints.client import Client
from phalanx.model.jobs import TrainingJob


class User:
    """A user's machine: its own state directory and config home; every command is `phalanx --server URL ...`."""

    def __init__(self, home: Path, server: str, token: str) -> None:
        self.home = home
        self.server = server
        home.mkdir(parents=True, exist_ok=True)
        self.token_file = home / "token"
        self.token_file.write_text(token + "\n")
        self.token_file.chmod(0o600)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
        return {**env, "PHALANX_HOME": str(self.home / "state"), "XDG_CONFIG_HOME": str(self.home / "config"),
                "COLUMNS": "200", **extra}  # fmt: skip

    def command(self, server: str | None = None) -> list[str]:
        return [sys.executable, "-m", "phalanx.entrypoints.cli", "--server", server or self.server,
                "--token-file", str(self.token_file)]  # fmt: skip

    def cli(self, *args: str, server: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        command = [*self.command(server), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=self.env(**env), cwd=self.home)

    def configure(self) -> None:
        """Write the config file (server and token, mode 0600): commands then need no flags."""
        path = self.home / "config" / "phalanx" / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"server": self.server, "token": self.token_file.read_text().strip()}))
        path.chmod(0o600)

    def plain(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`phalanx ARGS` with no server flag: the config file names the server."""
        command = [sys.executable, "-m", "phalanx.entrypoints.cli", *args]  # the launcher, as the command
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=self.env(), cwd=self.home)


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr


def test_a_new_user_runs_follows_halts_resumes_and_deletes_a_job_through_the_server(
    runtime: Runtime, tmp_path: Path
) -> None:
    runtime.start_control_plane()
    base = start_server(runtime, tmp_path / "server.log")
    user = User(tmp_path / "user", base, make_token(runtime, "alice", "editor", "ml"))
    spec = tmp_path / "user" / "job.yaml"
    spec.write_text(yaml.safe_dump(generic_job("remote")))

    # `phalanx run FILE` with the server and token in the config file only: the launcher's fast path (the local
    # control plane's socket) must leave it to the command that reads the config.
    user.configure()
    ran = user.plain("run", str(spec), "-n", "ml")
    no_traceback(ran)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "trainingjob/remote created" in ran.stdout
    assert "Succeeded" in ran.stdout
    assert "worker-0 done" in ran.stdout  # the replica's log, followed through the server
    with runtime.client() as local:  # stored on the server's side, in the namespace the token reaches
        job = local.store.try_get(TrainingJob, "ml", "remote")
        assert job is not None and job.status.phase == "Succeeded"

    with Client(server=base, token=user.token_file.read_text().strip(), namespace="ml") as sdk:
        assert sdk.get("remote").status.phase == "Succeeded"
        assert "worker-0 done" in sdk.logs("remote")["worker-0"]
    got = user.cli("get", "jobs", "-n", "ml", "-o", "json")
    assert got.returncode == 0, got.stderr
    listed = json.loads(got.stdout)
    assert [item["metadata"]["name"] for item in listed.get("items", [listed])] == ["remote"]
    described = user.cli("describe", "job", "remote", "-n", "ml")
    assert described.returncode == 0, described.stderr
    assert "Succeeded" in described.stdout and "worker-0" in described.stdout
    logs = user.cli("logs", "remote", "-n", "ml")
    assert logs.returncode == 0, logs.stderr
    assert "worker-0 done" in logs.stdout

    long_spec = tmp_path / "user" / "long.yaml"
    long_spec.write_text(yaml.safe_dump(generic_job("long", args=["--sleep", "600"])))
    submitted = user.cli("submit", str(long_spec), "-n", "ml")
    assert submitted.returncode == 0, submitted.stderr
    assert "trainingjob/long created" in submitted.stdout
    with runtime.client() as local:

        def running() -> bool:
            job = local.store.try_get(TrainingJob, "ml", "long")
            return job is not None and job.status.phase == "Running"

        wait_until(running, timeout=90, message="the long job to run")
    # `logs -f -r` streams the server's log?follow=true: the replica's lines as written, ending once it is halted.
    followed_out = tmp_path / "followed.txt"
    with open(followed_out, "w") as sink:
        follower = subprocess.Popen(
            [*user.command(), "logs", "-f", "-r", "worker-0", "long", "-n", "ml"],
            stdout=sink, stderr=subprocess.STDOUT, env=user.env(), cwd=user.home,
        )  # fmt: skip
    try:
        wait_until(lambda: "worker-0 started" in followed_out.read_text(), timeout=60, message="the followed line")
        assert follower.poll() is None  # still following: the job runs
        halted = user.cli("halt", "long", "-n", "ml")
        assert follower.wait(timeout=60) == 0, followed_out.read_text()
    finally:
        if follower.poll() is None:
            follower.kill()
    assert "Traceback" not in followed_out.read_text()
    assert halted.returncode == 0, halted.stderr
    assert "trainingjob/long Halted" in halted.stdout
    resumed = user.cli("resume", "long", "-n", "ml")
    assert resumed.returncode == 0, resumed.stderr
    assert "trainingjob/long resumed" in resumed.stdout
    with runtime.client() as local:
        stored = local.store.try_get(TrainingJob, "ml", "long")
        assert stored is not None and stored.spec.run_policy.suspend is False
    deleted = user.cli("delete", "job", "long", "-n", "ml")
    assert deleted.returncode == 0, deleted.stderr
    assert "trainingjob/long deleted" in deleted.stdout
    with runtime.client() as local:
        wait_until(lambda: local.store.try_get(TrainingJob, "ml", "long") is None, timeout=60, message="long removed")


def test_a_viewer_wrong_url_and_revoked_token_each_get_one_sentence_and_nothing_is_stored(
    runtime: Runtime, tmp_path: Path
) -> None:
    base = start_server(runtime, tmp_path / "server.log")
    viewer = User(tmp_path / "viewer", base, make_token(runtime, "watcher", "viewer", "ml"))
    spec = tmp_path / "viewer" / "job.yaml"
    spec.write_text(yaml.safe_dump(generic_job("sneaky")))

    refused = viewer.cli("submit", str(spec), "-n", "ml")
    no_traceback(refused)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"error: the server at {base} refused the token of {viewer.token_file} (forbidden): the viewer token "
        "watcher for namespaces ml cannot create trainingjobs in ml: needs editor"
    ]
    with runtime.client() as local:
        assert local.store.list(TrainingJob) == []

    nowhere = viewer.cli("get", "jobs", "-n", "ml", server="http://127.0.0.1:9")
    no_traceback(nowhere)
    assert nowhere.returncode == 1
    assert "cannot reach the server at http://127.0.0.1:9" in nowhere.stderr
    assert "check --server" in nowhere.stderr

    runtime.cli("token", "revoke", "watcher", check=True)
    revoked = viewer.cli("get", "jobs", "-n", "ml")
    no_traceback(revoked)
    assert revoked.returncode == 1
    assert f"does not accept the token of {viewer.token_file}: it is unknown, expired or revoked" in revoked.stderr

    viewer.token_file.chmod(0o644)
    shared = viewer.cli("get", "jobs", "-n", "ml")
    no_traceback(shared)
    assert shared.returncode == 2
    assert f"chmod 600 {viewer.token_file}" in shared.stderr

    viewer.token_file.chmod(0o600)
    up = viewer.cli("up")
    no_traceback(up)
    assert up.returncode == 2
    assert "`phalanx up` is for this machine's local control plane" in up.stderr


def test_run_through_the_server_follows_a_pipeline_run_to_its_end(runtime: Runtime, tmp_path: Path) -> None:
    # `phalanx --server URL run` of a file with a PipelineRun printed "created" and exited 0 at once, while the
    # local and cluster `run` follow it: the same follower now serves the three.
    runtime.start_control_plane()
    base = start_server(runtime, tmp_path / "server.log")
    user = User(tmp_path / "user", base, make_token(runtime, "alice", "editor", "ml"))
    template = {"command": [sys.executable, "-c", "print('step done')"], "resources": {"cpu": 1, "memory": "64Mi"}}
    step = {
        "name": "only",
        "trainingJob": {"spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}}},
    }
    pipeline = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Pipeline", "metadata": {"name": "one"},
                "spec": {"steps": [step]}}  # fmt: skip
    run = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "PipelineRun", "metadata": {"name": "one-1"},
           "spec": {"pipelineRef": {"name": "one"}}}  # fmt: skip
    spec = tmp_path / "user" / "flow.yaml"
    spec.write_text(yaml.safe_dump_all([pipeline, run]))
    ran = user.cli("run", str(spec), "-n", "ml")
    no_traceback(ran)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "pipelinerun/one-1 created" in ran.stdout and "pipelinerun one-1 Succeeded" in ran.stdout, ran.stdout
    assert any("only" in line and "Succeeded" in line for line in ran.stdout.splitlines()), ran.stdout
