"""Spec files in every encoding YAML allows (UTF-8 with or without a BOM, UTF-16 and UTF-32 with a BOM) load;
anything else is refused with one sentence that names the file, the first bad byte and the fix."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.loading import read_documents

pytestmark = pytest.mark.timeout(30)

TEXT = "kind: Queue\nmetadata:\n  name: café-ü\n  labels: {team: 'ñ'}\n"
PARSED = {"kind": "Queue", "metadata": {"name": "café-ü", "labels": {"team": "ñ"}}}


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(TEXT.encode("utf-8"), id="utf-8"),
        pytest.param(codecs.BOM_UTF8 + TEXT.encode("utf-8"), id="utf-8-bom"),
        pytest.param(codecs.BOM_UTF16_LE + TEXT.encode("utf-16-le"), id="utf-16-le-bom"),
        pytest.param(codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"), id="utf-16-be-bom"),
        pytest.param(codecs.BOM_UTF32_LE + TEXT.encode("utf-32-le"), id="utf-32-le-bom"),
        pytest.param(codecs.BOM_UTF32_BE + TEXT.encode("utf-32-be"), id="utf-32-be-bom"),
    ],
)
def test_encodings_that_yaml_allows_load(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "queue.yaml"
    path.write_bytes(data)
    assert read_documents(path) == [PARSED]


@pytest.mark.parametrize(
    ("data", "byte", "offset"),
    [
        pytest.param(TEXT.encode("latin-1"), 0xE9, 33, id="latin-1"),
        pytest.param(TEXT.encode("cp1252"), 0xE9, 33, id="windows-1252"),
        pytest.param(TEXT.encode("utf-16-le"), 0x00, 1, id="utf-16-le-without-bom"),
        pytest.param(TEXT.encode("utf-16-be"), 0x00, 0, id="utf-16-be-without-bom"),
        pytest.param(b"kind: Queue\n\xff\xfe\n", 0xFF, 12, id="stray-bytes"),
        pytest.param(
            codecs.BOM_UTF16_LE + "kind: Queue\n".encode("utf-16-le") + b"\x00\xd8a\x00", 0x00, 26, id="bad-utf-16"
        ),
    ],
)
def test_other_bytes_are_refused_naming_the_first_bad_byte(tmp_path: Path, data: bytes, byte: int, offset: int) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    assert data[offset] == byte

    with pytest.raises(SpecError) as caught:
        read_documents(path)

    encoding = "UTF-16" if data.startswith(codecs.BOM_UTF16_LE) else "UTF-8"
    assert [e.message for e in caught.value.errors] == [
        f"{path} is not {encoding} text (byte 0x{byte:02x} at offset {offset}); save it as UTF-8"
    ]
