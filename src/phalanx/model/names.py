"""Names: the DNS-1123 label rule every object name, namespace and role name follows.

Pure standard library, so that ``phalanx run``'s fast path can check ``-n`` without loading pydantic.

A name becomes a path component (run directories), part of a process and Pod name (``<job>-<role>-<index>``)
and a Kubernetes object name, so it must be a label: 1 to 63 of ``[a-z0-9-]``, starting and ending with a
letter or digit. The whole value must match: ``re.fullmatch`` (``$`` would let a trailing newline through,
and a name ending in a newline once reached the store and wedged its job).
"""

from __future__ import annotations

import re

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_NAME_LENGTH = 63
MAX_SUBDOMAIN_LENGTH = 253


def check_dns_label(value: str, what: str = "name") -> str:
    """Validate a DNS-1123 label (what Kubernetes accepts as a Service name), returning it unchanged.

    Args:
        value: the name to check.
        what: what the name is, as the message should call it (``namespace``, ``role name``...).

    Raises:
        ValueError: with the rule that was broken and an example of a valid value.
    """
    if not value:
        raise ValueError(f"{what} must not be empty; use lowercase letters, digits and '-', e.g. 'mnist-ddp'")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} is {len(value)} characters; at most {MAX_NAME_LENGTH} are allowed")
    if not _DNS_LABEL.fullmatch(value):
        suggestion = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-") or "my-job"
        raise ValueError(
            f"{what} {value!r} is not a DNS-1123 label: use lowercase letters, digits and '-', starting and "
            f"ending with a letter or digit, e.g. {suggestion!r}"
        )
    return value


def check_dns_subdomain(value: str, what: str = "name") -> str:
    """Validate a DNS-1123 subdomain (labels joined by '.', at most 253 characters), returning it unchanged.

    What Kubernetes asks of a Pod's ``schedulerName``.

    Raises:
        ValueError: with the rule that was broken and an example of a valid value.
    """
    if not value:
        raise ValueError(f"{what} must not be empty; e.g. 'default-scheduler'")
    if len(value) > MAX_SUBDOMAIN_LENGTH:
        raise ValueError(f"{what} is {len(value)} characters; at most {MAX_SUBDOMAIN_LENGTH} are allowed")
    if not _DNS_SUBDOMAIN.fullmatch(value):
        suggestion = re.sub(r"[^a-z0-9.-]+", "-", value.lower()).strip("-.") or "default-scheduler"
        raise ValueError(
            f"{what} {value!r} is not a DNS-1123 subdomain: use lowercase letters, digits, '-' and '.', each "
            f"part starting and ending with a letter or digit, e.g. {suggestion!r}"
        )
    return value
