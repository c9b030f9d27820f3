"""The options every cluster component takes: the health port follows PHALANX_HEALTH_PORT, which the install sets."""

from __future__ import annotations

import argparse
import socket

import pytest

from phalanx.adapters.kubernetes.manifests import HEALTH_PORT, HEALTH_PORT_ENV, InstallParameters, install_manifests
from phalanx.entrypoints.kubernetes.common import StartError, add_common_options, serve_health


def _parser(component: str = "operator") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"phalanx-{component}")
    add_common_options(parser, component)
    return parser


def test_the_three_components_default_to_distinct_health_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    # Run as processes on one host (development, a cluster without the image), they must not collide.
    monkeypatch.delenv(HEALTH_PORT_ENV, raising=False)
    ports = [_parser(c).parse_args([]).health_port for c in ("operator", "scheduler", "node-agent")]
    assert ports == [HEALTH_PORT, HEALTH_PORT + 1, HEALTH_PORT + 2]
    monkeypatch.setenv(HEALTH_PORT_ENV, str(HEALTH_PORT))  # what the install sets in every Pod
    assert {_parser(c).parse_args([]).health_port for c in ("operator", "scheduler", "node-agent")} == {HEALTH_PORT}


def test_a_taken_health_port_is_one_sentence_naming_the_fix() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(StartError) as refused:
            serve_health(port, lambda: True, "operator")
    assert str(refused.value) == (
        f"cannot serve /healthz on port {port}: another process listens there (another Phalanx component?); "
        "pass --health-port with a free port, or --health-port 0 for none"
    )


def test_the_health_port_comes_from_the_environment_then_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HEALTH_PORT_ENV, raising=False)
    assert _parser().parse_args([]).health_port == HEALTH_PORT
    monkeypatch.setenv(HEALTH_PORT_ENV, "9090")
    assert _parser().parse_args([]).health_port == 9090
    assert _parser().parse_args(["--health-port", "0"]).health_port == 0  # a flag wins


def test_a_bad_health_port_in_the_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(HEALTH_PORT_ENV, "eighty")
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args([])
    assert exit_info.value.code == 2
    assert "--health-port: invalid int value: 'eighty'" in capsys.readouterr().err


def test_every_component_is_told_the_port_its_probes_and_container_port_use() -> None:
    for obj in install_manifests(InstallParameters(image="phalanx:test")):
        if obj["kind"] in ("Deployment", "DaemonSet"):
            [container] = obj["spec"]["template"]["spec"]["containers"]
            env = {item["name"]: item.get("value") for item in container["env"]}
            assert env[HEALTH_PORT_ENV] == str(HEALTH_PORT)
            assert container["ports"] == [{"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"}]
