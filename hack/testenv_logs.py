"""Container logs for kwok's fake Pods, served through the API server as a kubelet's would be.

kwok runs no container, but its kubelet-like server answers ``GET /containerLogs/NS/POD/CONTAINER`` from a local
file named by a ``Logs`` object (``kwok.x-k8s.io/v1alpha1``, one per Pod, in the Pod's namespace, named like it).
kube-apiserver reaches that server for ``pods/log`` (what ``kubectl logs`` and ``phalanx logs`` call) through the
node's ``InternalIP`` (127.0.0.1 here) and ``status.daemonEndpoints.kubeletEndpoint.Port`` (kwok's port, which the
node stage writes), over HTTPS it does not verify (the control plane is started without a kubelet CA).

kwok reads the files in the CRI log format, one line per record: ``<RFC 3339 time> stdout F <text>``; a
first line in any other format is refused. Write them append-only: kwok follows an open file by its offset.

This module declares the ``Logs`` kind (our own minimal CustomResourceDefinition: kwok installs none itself),
and writes log files and ``Logs`` objects for tests.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

LOGS_GROUP = "kwok.x-k8s.io"
LOGS_CRD_NAME = f"logs.{LOGS_GROUP}"


class _Requester(Protocol):
    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]: ...


def logs_crd() -> dict[str, Any]:
    """The ``Logs`` kind kwok reads with ``--enable-crds=Logs``: namespaced, its spec kept as written."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": LOGS_CRD_NAME},
        "spec": {
            "group": LOGS_GROUP,
            "scope": "Namespaced",
            "names": {"kind": "Logs", "listKind": "LogsList", "plural": "logs", "singular": "logs"},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }


def cri_line(text: str, *, stream: str = "stdout", when: dt.datetime | None = None) -> str:
    """One record of a CRI log file: ``2026-11-27T10:00:00.123456789Z stdout F text``, newline included."""
    moment = (when or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}000Z"
    return f"{stamp} {stream} F {text}\n"


def write_log(path: Path, lines: list[str]) -> Path:
    """Append ``lines`` (text without newlines) to a CRI log file; the file, for ``set_pod_logs``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        log.writelines(cri_line(line) for line in lines)
    return path


def set_pod_logs(env: _Requester, namespace: str, pod: str, files: Mapping[str, Path]) -> None:
    """Serve each container's log (container name -> CRI log file) for ``pod``, creating its ``Logs`` object."""
    body = {
        "apiVersion": f"{LOGS_GROUP}/v1alpha1",
        "kind": "Logs",
        "metadata": {"name": pod, "namespace": namespace},
        "spec": {"logs": [{"containers": [name], "logsFile": str(path.resolve())} for name, path in files.items()]},
    }
    code, answer = env.request("POST", f"/apis/{LOGS_GROUP}/v1alpha1/namespaces/{namespace}/logs", body)
    if code not in (200, 201):
        raise RuntimeError(f"creating the Logs of pod {namespace}/{pod} failed: HTTP {code}: {answer}")
