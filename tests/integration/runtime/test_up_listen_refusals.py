"""`phalanx up --listen` refusals, each a sentence and nothing left running: a host that is not loopback,
--no-auth alone, a port already taken (the control plane says so in its log and exits), and --listen given to a
control plane that already runs (a warning: it keeps what it started with)."""

from __future__ import annotations

import socket

from conftest import REPO, Runtime

INVENTORY = REPO / "examples" / "inventories" / "two-nodes-4gpu.yaml"


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_public_host_and_no_auth_alone_are_refused_before_anything_starts(runtime: Runtime) -> None:
    public = runtime.cli("up", "--listen", "0.0.0.0:8080")
    assert public.returncode == 2, public.stdout + public.stderr
    said = flat(public.stderr)
    assert "0.0.0.0 is not a loopback address" in said and "Traceback" not in said, said
    alone = runtime.cli("up", "--no-auth")
    assert alone.returncode == 2, alone.stdout + alone.stderr
    assert "--no-auth only applies to --listen" in flat(alone.stderr)
    assert "control plane: not running" in runtime.cli("status", check=True).stdout


def test_a_port_already_taken_stops_the_control_plane_with_the_reason(runtime: Runtime) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = runtime.cli("up", "--listen", f"127.0.0.1:{port}", "--inventory", str(INVENTORY))
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "the control plane exited with code 1" in flat(refused.stderr), refused.stderr
    log = (runtime.state_dir / "controlplane.log").read_text()
    assert f"cannot serve the REST API on 127.0.0.1:{port} (is the port in use?)" in log, log[-2000:]
    assert "control plane: not running" in runtime.cli("status", check=True).stdout


def test_listen_given_to_a_running_control_plane_is_named_in_a_warning(runtime: Runtime) -> None:
    try:
        runtime.cli("up", "--inventory", str(INVENTORY), check=True)
        again = runtime.cli("up", "--listen", "127.0.0.1:8080", check=True)
        assert "already running" in again.stdout
        assert flat(again.stderr).startswith("warning: --listen was not applied"), again.stderr
    finally:
        runtime.cli("down")
