"""Resource quantities and vectors.

Quantities are parsed from the Kubernetes notation (``500m``, ``2``, ``1.5`` for CPU; ``4Gi``, ``512M``, plain
bytes for memory) and held as integers: CPU in millicores, memory in bytes. Integers keep arithmetic exact in
the scheduler, where a rounding error could admit a gang that does not fit. Only finite amounts parse (``.inf``
and ``.nan`` are refused here), and ``cpu_at_most``/``memory_at_most`` bound them (``model.bounds``) before they
can meet an int64 array.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

_MEMORY_SUFFIXES: dict[str, int] = {
    "": 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")

# The strings parse_cpu and parse_memory accept, as regular expressions that JSON schema (and so a Kubernetes
# CRD, whose API server checks them with Go's RE2) can carry. They check the notation only: parse_cpu also
# rejects amounts finer than a millicore.
CPU_QUANTITY_PATTERN = r"^\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*m?\s*$"
MEMORY_QUANTITY_PATTERN = r"^\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*([KMGTP]i|[kKMGTP])?\s*$"


class QuantityError(ValueError):
    """A quantity string that cannot be parsed; the message says what a valid one looks like."""


def parse_cpu(value: object) -> int:
    """Return CPU in millicores from ``2``, ``1.5``, ``"500m"`` or ``"2"``.

    Raises:
        QuantityError: the value is not a CPU quantity.
    """
    if isinstance(value, bool):
        raise QuantityError(f"invalid CPU quantity {value!r}; use e.g. 2, 1.5 or '500m'")
    if isinstance(value, int):
        number, suffix = Decimal(value), ""
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"CPU quantity must be a finite number, got {value!r}; use e.g. 2, 1.5 or '500m'")
        number, suffix = Decimal(str(value)), ""
    elif isinstance(value, str) and (match := _QUANTITY.match(value)):
        number, suffix = Decimal(match.group(1)), match.group(2)
    else:
        raise QuantityError(f"invalid CPU quantity {_brief(value)}; use e.g. 2, 1.5 or '500m'")
    if suffix == "m":
        milli = number
    elif suffix == "":
        milli = number * 1000
    else:
        raise QuantityError(
            f"invalid CPU unit {suffix!r} in {_brief(value)}; use cores (2, 1.5) or millicores ('500m')"
        )
    if milli != milli.to_integral_value():
        raise QuantityError(f"CPU quantity {_brief(value)} is finer than one millicore; round it, e.g. '1500m'")
    return int(milli)


def parse_memory(value: object) -> int:
    """Return memory in bytes from ``"4Gi"``, ``"512M"``, ``1073741824`` or ``"1.5Gi"``.

    Raises:
        QuantityError: the value is not a memory quantity.
    """
    if isinstance(value, bool):
        raise QuantityError(f"invalid memory quantity {value!r}; use e.g. '4Gi', '512Mi' or a number of bytes")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"memory quantity must be a finite number, got {value!r}; use e.g. '4Gi' or '512Mi'")
        return int(value)
    if isinstance(value, str) and (match := _QUANTITY.match(value)):
        suffix = match.group(2)
        if suffix not in _MEMORY_SUFFIXES:
            raise QuantityError(
                f"invalid memory unit {suffix!r} in {_brief(value)}; use one of Ki, Mi, Gi, Ti or k, M, G, T"
            )
        try:
            return int(Decimal(match.group(1)) * _MEMORY_SUFFIXES[suffix])
        except InvalidOperation as err:  # pragma: no cover - the regex admits only decimals
            raise QuantityError(f"invalid memory quantity {value!r}") from err
    raise QuantityError(f"invalid memory quantity {_brief(value)}; use e.g. '4Gi', '512Mi' or a number of bytes")


def _brief(value: object) -> str:
    return _cut(str(value) if isinstance(value, int) else repr(value))


def _cut(text: str) -> str:
    # A quantity may be a 4 MiB string of digits: never echo all of it.
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


def cpu_at_most(limit: int, per: str) -> Callable[[int], int]:
    """A validator refusing more than ``limit`` millicores, naming the bound in cores (``per``: "per replica")."""

    def check(millicores: int) -> int:
        if millicores > limit:
            raise QuantityError(
                f"at most {format_cpu(limit)} cores {per}, got {_cut(format_cpu(millicores))}; "
                "ask for what the program uses, e.g. 8 or '500m'"
            )
        return millicores

    return check


def memory_at_most(limit: int, per: str) -> Callable[[int], int]:
    """A validator refusing more than ``limit`` bytes, naming the bound with its binary suffix."""

    def check(num_bytes: int) -> int:
        if num_bytes > limit:
            raise QuantityError(
                f"at most {format_memory(limit)} {per}, got {_cut(format_memory(num_bytes))}; "
                "ask for what the program uses, e.g. '4Gi'"
            )
        return num_bytes

    return check


def format_cpu(millicores: int) -> str:
    """Render millicores the way Kubernetes does: whole cores as ``"2"``, else ``"1500m"``."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def format_memory(num_bytes: int) -> str:
    """Render bytes with the largest binary suffix that divides them exactly."""
    for suffix in ("Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _MEMORY_SUFFIXES[suffix]
        if num_bytes and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)


def human_memory(num_bytes: int) -> str:
    """Render bytes for people, rounded to one decimal (``15.6Gi``)."""
    value = float(num_bytes)
    for suffix in ("", "Ki", "Mi", "Gi", "Ti"):
        if value < 1024 or suffix == "Ti":
            return f"{value:.1f}{suffix}" if suffix else f"{int(value)}"
        value /= 1024
    return str(num_bytes)  # pragma: no cover


@dataclass(frozen=True, slots=True)
class ResourceVector:
    """What one replica asks for, or what a node has: exact integers, cheap to add and compare.

    Attributes:
        cpu_milli: CPU in millicores.
        memory: memory in bytes.
        gpu: whole GPUs.
        gpu_milli: a fraction of one GPU in thousandths (GPU sharing); 0 when whole GPUs are asked for.
    """

    cpu_milli: int = 0
    memory: int = 0
    gpu: int = 0
    gpu_milli: int = 0

    def __add__(self, other: ResourceVector) -> ResourceVector:
        return ResourceVector(
            self.cpu_milli + other.cpu_milli,
            self.memory + other.memory,
            self.gpu + other.gpu,
            self.gpu_milli + other.gpu_milli,
        )

    def __sub__(self, other: ResourceVector) -> ResourceVector:
        return ResourceVector(
            self.cpu_milli - other.cpu_milli,
            self.memory - other.memory,
            self.gpu - other.gpu,
            self.gpu_milli - other.gpu_milli,
        )

    def scaled(self, factor: int) -> ResourceVector:
        """Return this vector multiplied by an integer (e.g. a role's replica count)."""
        return ResourceVector(self.cpu_milli * factor, self.memory * factor, self.gpu * factor, self.gpu_milli * factor)

    def fits_in(self, free: ResourceVector) -> bool:
        """Whether every component is at most the corresponding free amount."""
        return (
            self.cpu_milli <= free.cpu_milli
            and self.memory <= free.memory
            and self.gpu <= free.gpu
            and self.gpu_milli <= free.gpu_milli
        )

    def describe(self) -> str:
        """A short human form: ``cpu=2 memory=4Gi gpu=1``."""
        parts = [f"cpu={format_cpu(self.cpu_milli)}", f"memory={format_memory(self.memory)}"]
        if self.gpu:
            parts.append(f"gpu={self.gpu}")
        if self.gpu_milli:
            parts.append(f"gpuMilli={self.gpu_milli}")
        return " ".join(parts)
