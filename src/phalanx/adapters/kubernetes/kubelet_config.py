"""Reading the CPU and topology manager policies from a kubelet's configuration file, for its node agent.

The kubelet's ``KubeletConfiguration`` (``kubelet.config.k8s.io/v1beta1``, by default ``/var/lib/kubelet/
config.yaml``) holds ``cpuManagerPolicy`` and ``topologyManagerPolicy``; absent keys are the kubelet's defaults
(``none``). The node agent reads the file (a read-only hostPath) every cycle and reports what it found on its
Node as the ``phalanx.dev/cpu-policy`` annotation: ``{"cpuManagerPolicy": ..., "topologyManagerPolicy": ...}``, or
``{"error": "..."}`` when the file cannot be read. What the policies mean is ``core.cpu_policy``'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

#: The annotation a node agent writes; ``objects.node_from_object`` reads it.
CPU_POLICY_ANNOTATION = "phalanx.dev/cpu-policy"
#: Where kubeadm and most distributions keep the kubelet's configuration.
DEFAULT_KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
_DEFAULT_POLICY = "none"


def read_kubelet_policy(path: Path) -> dict[str, str]:
    """The kubelet's CPU and topology manager policies from its configuration file, or why they cannot be read."""
    try:
        document: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        return {"error": f"cannot read the kubelet configuration {path}: {error}"}
    if not isinstance(document, dict) or document.get("kind", "KubeletConfiguration") != "KubeletConfiguration":
        return {"error": f"{path} is not a KubeletConfiguration"}
    return {
        "cpuManagerPolicy": str(document.get("cpuManagerPolicy") or _DEFAULT_POLICY),
        "topologyManagerPolicy": str(document.get("topologyManagerPolicy") or _DEFAULT_POLICY),
    }


def cpu_policy_annotation(policy: Mapping[str, str]) -> str:
    """The annotation's value for what ``read_kubelet_policy`` returned."""
    return json.dumps(dict(sorted(policy.items())), separators=(",", ":"))


def parse_cpu_policy_annotation(value: str | None) -> tuple[str | None, str | None, str]:
    """``(cpuManagerPolicy, topologyManagerPolicy, why unknown)`` from a Node's annotation (Nones: not reported)."""
    if not value:
        return None, None, ""
    try:
        data = json.loads(value)
    except ValueError:
        return None, None, f"its {CPU_POLICY_ANNOTATION} annotation is not JSON"
    if not isinstance(data, dict):
        return None, None, f"its {CPU_POLICY_ANNOTATION} annotation is not a mapping"
    if data.get("error"):
        return None, None, f"its node agent cannot read the kubelet's policy: {str(data['error'])[:300]}"
    cpu, topology = data.get("cpuManagerPolicy"), data.get("topologyManagerPolicy")
    return (str(cpu) if cpu else None), (str(topology) if topology else None), ""
