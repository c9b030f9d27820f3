from __future__ import annotations

import os
from pathlib import Path

import pytest

from phalanx.adapters.datasources import (
    DataFile,
    SourceError,
    SourceRequest,
    content_version,
    mask_url,
    version_of,
)
from phalanx.adapters.datasources._types import field_of
from phalanx.adapters.datasources.paths import has_parent_reference, resolve_local, safe_relative, url_file_name
from phalanx.adapters.datasources.sql import one_line


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def test_content_version_ignores_order_mtime_and_location(tmp_path: Path) -> None:
    files = {"b/2.txt": b"two", "a.txt": b"one", "c/d/e.bin": bytes(range(256))}
    first = _tree(tmp_path / "first", files)
    second = _tree(tmp_path / "second", dict(reversed(list(files.items()))))
    os.utime(second / "a.txt", (1, 1))
    listed, version = content_version(first)
    assert [f.path for f in listed] == ["a.txt", "b/2.txt", "c/d/e.bin"]
    assert listed[0] == DataFile("a.txt", 3, "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed")
    assert content_version(second) == (listed, version)
    assert version.startswith("sha256:") and len(version) == len("sha256:") + 64
    assert version_of(list(reversed(listed))) == version


def test_content_version_changes_with_content_or_name(tmp_path: Path) -> None:
    base = content_version(_tree(tmp_path / "a", {"x": b"1"}))[1]
    assert content_version(_tree(tmp_path / "b", {"x": b"2"}))[1] != base
    assert content_version(_tree(tmp_path / "c", {"y": b"1"}))[1] != base
    assert content_version(_tree(tmp_path / "d", {"x": b"1", "z": b""}))[1] != base


def test_content_version_symlinks_inside_count_outside_do_not(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    root = _tree(tmp_path / "root", {"real.txt": b"data"})
    (root / "inside").symlink_to("real.txt")
    (root / "escape").symlink_to(outside)
    (root / "dangling").symlink_to(tmp_path / "missing")
    listed, _ = content_version(root)
    assert [f.path for f in listed] == ["inside", "real.txt"]


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://u:pw@127.0.0.1:5433/db", "postgresql://u:***@127.0.0.1:5433/db"),
        (
            "postgresql+psycopg://user:p%40ss@host/db?sslmode=require",
            "postgresql+psycopg://user:***@host/db?sslmode=require",
        ),
        ("https://alice:tok@example.org/x.csv", "https://alice:***@example.org/x.csv"),
        ("mysql://u@h/db?password=hunter2&x=1", "mysql://u@h/db?password=***&x=1"),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
        ("https://example.org/a:b@c", "https://example.org/a:b@c"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


@pytest.mark.parametrize("path", ["..", "../x", "a/../b", "a/..", "a\\..\\b", "/abs/../etc"])
def test_parent_references_are_found(path: str) -> None:
    assert has_parent_reference(path)


@pytest.mark.parametrize("path", ["a", "a/b", "..a", "a..", "a/...", "/abs/x", "./x"])
def test_plain_paths_pass(path: str) -> None:
    assert not has_parent_reference(path)


def test_resolve_local_relative_to_base_and_rejects_parent(tmp_path: Path) -> None:
    assert resolve_local("data/x.csv", tmp_path, "f") == tmp_path / "data" / "x.csv"
    assert resolve_local(str(tmp_path / "y"), Path("/elsewhere"), "f") == tmp_path / "y"
    with pytest.raises(SourceError) as err:
        resolve_local("data/../../etc", tmp_path, "spec.source.uri")
    assert err.value.field == "spec.source.uri"
    assert str(err.value).startswith("spec.source.uri: path 'data/../../etc' has a '..' component")
    with pytest.raises(SourceError):
        resolve_local("  ", tmp_path, "f")


def test_url_file_name_and_safe_relative() -> None:
    assert url_file_name("https://h/a/b/train.csv?x=1", "f") == "train.csv"
    assert url_file_name("https://h/", "f") == "data"
    assert url_file_name("https://h", "f") == "data"
    assert url_file_name("https://h/a/%2e%2ehidden", "f") == "data"
    with pytest.raises(SourceError):
        url_file_name("https://h/a/../b", "f")
    assert safe_relative("a/b.txt", "f") == "a/b.txt"
    for bad in ("../x", "/etc/passwd", ""):
        with pytest.raises(SourceError):
            safe_relative(bad, "f")


def test_field_of_names_the_leaf_whatever_the_caller_passed() -> None:
    assert field_of(SourceRequest("sql")) == "spec.source"
    assert field_of(SourceRequest("sql"), "query") == "spec.source.sql.query"
    assert field_of(SourceRequest("sql", field="spec.source.sql.query"), "sql_url") == "spec.source.sql.url"
    assert field_of(SourceRequest("path", field="datasets[0].source"), "path") == "datasets[0].source.path"
    assert field_of(SourceRequest("url", field="spec.source.url"), "url") == "spec.source.url"
    assert field_of(SourceRequest("script", field="spec.source.script.command"), "command") == (
        "spec.source.script.command"
    )


def test_source_error_str() -> None:
    err = SourceError("spec.source.uri", "gone; fix it")
    assert (err.field, err.message, str(err)) == ("spec.source.uri", "gone; fix it", "spec.source.uri: gone; fix it")


def test_one_line_query() -> None:
    assert one_line("SELECT a,\n   b\n\tFROM t  ") == "SELECT a, b FROM t"
    assert len(one_line("SELECT " + "x, " * 200)) == 200


def test_import_needs_no_extras(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for m in ('sqlalchemy', 'pyarrow', 'fsspec', 'psycopg', 'httpx'): sys.modules[m] = None\n"
        "import phalanx.adapters.datasources as d\n"
        "from pathlib import Path\n"
        "try:\n"
        "    d.materialize(d.SourceRequest('sql', sql_url='sqlite://', query='select 1'), Path(sys.argv[1]))\n"
        "except d.SourceError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "never")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "spec.source.sql.url: SQL sources need SQLAlchemy" in out
    assert "pip install 'phalanx[data]'" in out
    assert list(tmp_path.iterdir()) == []
