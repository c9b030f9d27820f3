"""Where a runtime's nodes come from: a simulated inventory file, or discovery of this machine.

Owns two entry points that both yield :class:`~phalanx.model.nodes.Node` objects:

- :func:`load_inventory` reads a multi-document YAML file of Node objects, for demos, tests and the simulator,
  so that an 8-GPU, 2-socket scheduling problem can be exercised on a laptop. Every node it returns says
  ``status.source: simulated``, whatever the file claims, so nothing downstream mistakes it for hardware.
- :func:`discover_local_node` combines the sysfs, meminfo/cgroup and NVML readers into the one node the
  embedded runtime runs replicas on.
"""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from phalanx.adapters.devices.nvml import discover_gpus
from phalanx.adapters.devices.sysfs import discover_cpus, discover_memory
from phalanx.model.errors import FieldError, SpecError, from_validation_error
from phalanx.model.loading import read_documents
from phalanx.model.meta import MAX_NAME_LENGTH, ObjectMeta
from phalanx.model.nodes import Node, NodeStatus
from phalanx.model.validation import allowed_fields

_log = logging.getLogger(__name__)

GPU_MODEL_LABEL = "phalanx.dev/gpu-model"
GPU_DISCOVERY_ANNOTATION = "phalanx.dev/gpu-discovery"


def load_inventory(path: Path) -> list[Node]:
    """Read simulated nodes from a (multi-document) YAML file.

    Raises:
        SpecError: the file is missing or not YAML, a document is not a Node, a field is wrong (the error
            names the file, the document number and the field path, e.g. ``status.gpus[3].memory``), or
            two documents share a node name.

    """
    documents = read_documents(path)
    nodes: list[Node] = []
    seen: dict[str, int] = {}
    for number, document in enumerate(documents, start=1):
        where = f"{path} (document {number} of {len(documents)})"
        node = _parse_node(document, source=where)
        name = node.metadata.name
        if name in seen:
            raise SpecError(
                [FieldError("metadata.name", f"node {name!r} is already defined in document {seen[name]}")],
                source=where,
            )
        seen[name] = number
        nodes.append(node)
    return nodes


def _parse_node(document: dict[str, Any], *, source: str) -> Node:
    kind = document.get("kind", "Node")
    if kind != "Node":
        raise SpecError([FieldError("kind", f"an inventory holds only Node objects, got {kind!r}")], source=source)
    try:
        node = Node.model_validate(document)
    except ValidationError as err:
        raise SpecError(
            from_validation_error(err, fields_at=lambda loc: allowed_fields(Node, loc)), source=source
        ) from None
    # Simulated hardware must never pass for real hardware, whatever the file says.
    node.status.source = "simulated"
    return node


def node_name_from_hostname(hostname: str) -> str:
    """Make a DNS-1123 label of a host name: ``GPU-Box_01.lab.example`` → ``gpu-box-01-lab-example``."""
    label = re.sub(r"[^a-z0-9-]+", "-", hostname.lower()).strip("-")
    label = label[:MAX_NAME_LENGTH].rstrip("-")
    return label or "localhost"


def discover_local_node(name: str | None = None) -> Node:
    """Describe the node this process runs on: its usable CPUs with topology, its memory and its GPUs.

    Args:
        name: the node name; defaults to the host name, lowercased and made a valid DNS label.

    Returns:
        A Node with ``status.source`` ``"nvml"`` when NVML found GPUs, else ``"sysfs"``. When NVML is
        unavailable, the reason is kept in the ``phalanx.dev/gpu-discovery`` annotation for ``describe``.

    """
    gpus, reason = discover_gpus()
    if reason is not None:
        _log.info("no GPUs discovered: %s", reason)
    metadata = ObjectMeta(name=name or node_name_from_hostname(socket.gethostname()))
    models = {gpu.model for gpu in gpus}
    if len(models) == 1:
        metadata.labels[GPU_MODEL_LABEL] = label_value(models.pop())
    if reason is not None:
        metadata.annotations[GPU_DISCOVERY_ANNOTATION] = reason
    return Node(
        metadata=metadata,
        status=NodeStatus(
            cpus=discover_cpus(),
            memory=discover_memory(),
            gpus=gpus,
            source="nvml" if gpus else "sysfs",
        ),
    )


def label_value(value: str) -> str:
    """A valid label value: ≤ 63 of ``[A-Za-z0-9._-]``, alphanumeric at both ends (``A100 SXM4`` → ``A100-SXM4``)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", value)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)
