"""The bytes of a spec file as text: its size bounded, its encoding one that YAML allows, or one sentence why not.

YAML allows UTF-8 (with or without a byte-order mark) and UTF-16 or UTF-32, which a reader can tell apart only by
their mark; so those two are accepted with a BOM, and anything else must be UTF-8. A file in Latin-1, or UTF-16
saved without its mark, is refused naming the first byte that cannot be UTF-8 text: a NUL counts, since YAML
forbids it and UTF-16 without a BOM is mostly NULs that would otherwise decode as valid UTF-8.

This module imports nothing heavy: ``phalanx run`` reads a file with it before handing the text to a running
control plane.
"""

from __future__ import annotations

import codecs
from pathlib import Path

MAX_FILE_BYTES = 4 * 2**20
"""The most a spec file may hold: far more than any spec needs, little enough to parse in a second or two."""

# The marks, longest first: UTF-32 LE's mark begins with UTF-16 LE's.
_MARKS = (
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32"),
    (codecs.BOM_UTF8, "utf-8", "UTF-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16"),
)


class FileTextError(ValueError):
    """A file that cannot be read as spec text; the message is one sentence naming the file and the fix."""


def too_large(source: str) -> str:
    """The sentence for a file or text past ``MAX_FILE_BYTES``."""
    return (
        f"{source} is larger than 4 MiB ({MAX_FILE_BYTES:,} bytes), the most a spec file may hold; "
        "split it into several files"
    )


def read_spec_text(path: Path) -> str:
    """The text of a spec file, read no further than the size limit.

    Raises:
        FileNotFoundError, OSError: the file cannot be read.
        FileTextError: it is too large, or not text in an encoding YAML allows.
    """
    with path.open("rb") as stream:
        # One byte past the limit tells a file at the limit from a larger one, without reading a huge file.
        data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise FileTextError(too_large(str(path)))
    return decode_spec_bytes(data, source=str(path))


def decode_spec_bytes(data: bytes, *, source: str) -> str:
    """Decode a spec file's bytes by their byte-order mark, else as UTF-8.

    Raises:
        FileTextError: naming the first byte that is not text in that encoding.
    """
    for mark, codec, name in _MARKS:
        if data.startswith(mark):
            return _decode(data, len(mark), codec, name, source)
    return _decode(data, 0, "utf-8", "UTF-8", source)


def _decode(data: bytes, start: int, codec: str, name: str, source: str) -> str:
    bad: int | None = None
    try:
        text = data[start:].decode(codec)
    except UnicodeDecodeError as err:
        bad = start + err.start
    if codec == "utf-8":
        # A NUL before the first undecodable byte is the first sign of a wrong encoding (UTF-16 without a BOM).
        nul = data.find(b"\x00", start, bad)
        if nul >= 0:
            bad = nul
    if bad is not None:
        raise FileTextError(f"{source} is not {name} text (byte 0x{data[bad]:02x} at offset {bad}); save it as UTF-8")
    return text
