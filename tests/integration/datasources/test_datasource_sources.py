"""Materialising datasets from real sources: local files, a local HTTP server, fsspec memory://, scripts."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from phalanx.adapters.datasources import SourceError, SourceRequest, content_version, materialize

pytestmark = pytest.mark.integration


def _only_dest_left(parent: Path, dest: Path) -> None:
    """No temp directory is left beside ``dest``."""
    leftovers = [p.name for p in parent.iterdir() if p.name.startswith(f".{dest.name}.partial-")]
    assert leftovers == []


@pytest.fixture
def source_dir(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    (root / "sub").mkdir(parents=True)
    (root / "train.csv").write_text("x,y\n1,2\n")
    (root / "sub" / "test.csv").write_text("x,y\n3,4\n")
    (root / "README").write_text("toy data\n")
    return root


def test_directory_copied_with_hashes_and_lineage(tmp_path: Path, source_dir: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("do not copy")
    (source_dir / "escape").symlink_to(outside)
    (source_dir / "alias.csv").symlink_to("train.csv")
    seen: list[tuple[int, int | None]] = []
    dest = tmp_path / "cache" / "ds"
    result = materialize(
        SourceRequest("path", path="src"), dest, base_dir=tmp_path, progress=lambda d, t: seen.append((d, t))
    )
    assert [f.path for f in result.files] == ["README", "alias.csv", "sub/test.csv", "train.csv"]
    assert (dest / "sub" / "test.csv").read_text() == "x,y\n3,4\n"
    assert not (dest / "escape").exists()
    assert not (dest / "alias.csv").is_symlink()
    assert result.lineage == f"path: {source_dir} (4 files, 1 symlink skipped)"
    assert result.bytes == sum(f.bytes for f in result.files) == seen[-1][0]
    assert seen[-1] == (result.bytes, result.bytes)
    assert (result.files, result.version) == content_version(dest)
    _only_dest_left(dest.parent, dest)


def test_single_file(tmp_path: Path, source_dir: Path) -> None:
    result = materialize(SourceRequest("path", path=str(source_dir / "train.csv")), tmp_path / "one")
    assert [(f.path, f.bytes) for f in result.files] == [("train.csv", 8)]
    assert result.lineage == f"path: {source_dir / 'train.csv'} (1 file)"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("missing", "does not exist; check the path"),
        ("src/../src", "has a '..' component"),
    ],
)
def test_bad_paths(tmp_path: Path, source_dir: Path, path: str, expected: str) -> None:
    dest = tmp_path / "ds"
    with pytest.raises(SourceError) as err:
        materialize(SourceRequest("path", path=path, field="spec.source"), dest, base_dir=tmp_path)
    assert err.value.field == "spec.source.path"
    assert expected in err.value.message
    assert not dest.exists()
    _only_dest_left(tmp_path, dest)


def test_existing_dest_is_refused_and_untouched(tmp_path: Path, source_dir: Path) -> None:
    dest = tmp_path / "ds"
    dest.mkdir()
    (dest / "keep").write_text("mine")
    with pytest.raises(SourceError, match="exists already"):
        materialize(SourceRequest("path", path=str(source_dir)), dest)
    assert [p.name for p in dest.iterdir()] == ["keep"]


def test_http_download_streams_with_progress(tmp_path: Path, http_root: tuple[str, Path]) -> None:
    base, www = http_root
    payload = bytes(range(256)) * 12_000  # about 3 MB: several chunks
    (www / "train.csv").write_bytes(payload)
    seen: list[tuple[int, int | None]] = []
    dest = tmp_path / "ds"
    result = materialize(SourceRequest("url", url=f"{base}/train.csv"), dest, progress=lambda d, t: seen.append((d, t)))
    assert (dest / "train.csv").read_bytes() == payload
    assert [f.path for f in result.files] == ["train.csv"]
    assert result.lineage == f'url: {base}/train.csv (etag "v1-test")'
    assert seen[0] == (0, len(payload))
    assert seen[-1] == (len(payload), len(payload))
    assert len(seen) > 2
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_http_name_falls_back_to_data(tmp_path: Path, http_root: tuple[str, Path]) -> None:
    base, www = http_root
    (www / "index.html").write_text("<p>hi</p>")
    result = materialize(SourceRequest("url", url=f"{base}/"), tmp_path / "ds")
    assert [f.path for f in result.files] == ["data"]


def test_http_404_names_the_field(tmp_path: Path, http_root: tuple[str, Path]) -> None:
    base, _ = http_root
    dest = tmp_path / "ds"
    with pytest.raises(SourceError) as err:
        materialize(SourceRequest("url", url=f"{base}/missing.csv", field="spec.source"), dest)
    assert err.value.field == "spec.source.url"
    assert "answered 404" in err.value.message
    assert "check the URL" in err.value.message
    assert not dest.exists()
    _only_dest_left(tmp_path, dest)


def test_closed_port_names_the_field(tmp_path: Path) -> None:
    from support.postgres import free_port

    dest = tmp_path / "ds"
    with pytest.raises(SourceError) as err:
        materialize(SourceRequest("url", url=f"http://user:pw@127.0.0.1:{free_port()}/x.csv"), dest, timeout_s=5)
    assert err.value.field == "spec.source.url"
    assert "cannot connect to 127.0.0.1" in err.value.message
    assert "pw" not in err.value.message
    assert not dest.exists()
    _only_dest_left(tmp_path, dest)


def test_fsspec_memory_object_and_prefix(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    bucket = f"bucket-{uuid.uuid4().hex}"
    fs.pipe(f"/{bucket}/set/a.bin", b"A" * 10)
    fs.pipe(f"/{bucket}/set/deep/b.bin", b"B" * 20)
    try:
        one = materialize(SourceRequest("url", url=f"memory://{bucket}/set/a.bin"), tmp_path / "one")
        assert [(f.path, f.bytes) for f in one.files] == [("a.bin", 10)]
        assert one.lineage == f"url: memory://{bucket}/set/a.bin"
        tree = materialize(SourceRequest("url", url=f"memory://{bucket}/set"), tmp_path / "tree")
        assert [(f.path, f.bytes) for f in tree.files] == [("a.bin", 10), ("deep/b.bin", 20)]
        assert tree.lineage == f"url: memory://{bucket}/set (2 files)"
        with pytest.raises(SourceError, match="does not exist") as err:
            materialize(SourceRequest("url", url=f"memory://{bucket}/nope"), tmp_path / "none")
        assert err.value.field == "spec.source.url"
        assert not (tmp_path / "none").exists()
    finally:
        fs.rm(f"/{bucket}", recursive=True)


def test_unknown_or_uninstalled_scheme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SourceError, match=r"unknown URL scheme nosuch://"):
        materialize(SourceRequest("url", url="nosuch://x/y"), tmp_path / "a")
    # As if the s3 and gs extras were not installed, whether or not they are here.
    monkeypatch.setitem(sys.modules, "s3fs", None)
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    for url, extra in (("s3://bucket/x", "s3"), ("gs://bucket/x", "gs")):
        with pytest.raises(SourceError) as err:
            materialize(SourceRequest("url", url=url), tmp_path / extra)
        assert err.value.field == "spec.source.url"
        assert f"pip install 'phalanx[{extra}]'" in err.value.message
    assert list(tmp_path.iterdir()) == []


def test_script_writes_two_files(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "make.py").write_text(
        "import os, pathlib\n"
        "out = pathlib.Path(os.environ['PHALANX_DATASET_OUTPUT'])\n"
        "assert out == pathlib.Path.cwd(), (out, pathlib.Path.cwd())\n"
        "(out / 'train.csv').write_text('x\\n1\\n')\n"
        "(out / 'parts').mkdir()\n"
        "(out / 'parts' / 'test.csv').write_text('x\\n2\\n')\n"
    )
    dest = tmp_path / "ds"
    result = materialize(SourceRequest("script", command=(sys.executable, "make.py")), dest, base_dir=recipe)
    assert [f.path for f in result.files] == ["parts/test.csv", "train.csv"]
    assert (dest / "train.csv").read_text() == "x\n1\n"
    assert result.lineage == f"script: {sys.executable} make.py"
    _only_dest_left(tmp_path, dest)


def test_failing_script_reports_code_and_stderr(tmp_path: Path) -> None:
    code = (
        "import sys, pathlib; pathlib.Path('half.csv').write_text('x'); "
        "print('no rows for 2024', file=sys.stderr); sys.exit(4)"
    )
    dest = tmp_path / "ds"
    with pytest.raises(SourceError) as err:
        materialize(SourceRequest("script", command=(sys.executable, "-c", code)), dest)
    assert err.value.field == "spec.source.script.command"
    assert "exited with code 4" in err.value.message
    assert "no rows for 2024" in err.value.message
    assert not dest.exists()
    _only_dest_left(tmp_path, dest)


def test_script_writing_nothing_or_missing_command(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="wrote no files"):
        materialize(SourceRequest("script", command=(sys.executable, "-c", "pass")), tmp_path / "a")
    with pytest.raises(SourceError, match="not found on PATH"):
        materialize(SourceRequest("script", command=("no-such-program-xyz",)), tmp_path / "b")
    with pytest.raises(SourceError, match="ran past"):
        materialize(
            SourceRequest("script", command=(sys.executable, "-c", "import time; time.sleep(30)")),
            tmp_path / "c",
            timeout_s=0.5,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_disk_full_through_the_budget_seam(tmp_path: Path, source_dir: Path) -> None:
    (source_dir / "big.bin").write_bytes(b"x" * 100_000)
    dest = tmp_path / "cache" / "ds"
    dest.parent.mkdir()
    (dest.parent / "other").write_text("untouched")
    with pytest.raises(SourceError) as err:
        materialize(SourceRequest("path", path=str(source_dir)), dest, max_bytes=50_000)
    assert err.value.field == "spec.source"
    assert err.value.message.startswith(
        f"no space left on the device holding {dest.parent}: free space or point the cache elsewhere"
    )
    assert not dest.exists()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["other"]


def test_disk_full_on_download(tmp_path: Path, http_root: tuple[str, Path]) -> None:
    base, www = http_root
    (www / "big.bin").write_bytes(b"y" * 3_000_000)
    dest = tmp_path / "ds"
    with pytest.raises(SourceError, match="no space left on the device holding"):
        materialize(SourceRequest("url", url=f"{base}/big.bin"), dest, max_bytes=2_000_000)
    assert not dest.exists()
    _only_dest_left(tmp_path, dest)


def test_same_content_from_two_sources_same_version(tmp_path: Path, http_root: tuple[str, Path]) -> None:
    base, www = http_root
    (www / "train.csv").write_text("x,y\n1,2\n")
    from_url = materialize(SourceRequest("url", url=f"{base}/train.csv"), tmp_path / "a")
    script = "import pathlib; pathlib.Path('train.csv').write_text('x,y\\n1,2\\n')"
    from_script = materialize(SourceRequest("script", command=(sys.executable, "-c", script)), tmp_path / "b")
    local = tmp_path / "local"
    local.mkdir()
    (local / "train.csv").write_text("x,y\n1,2\n")
    from_path = materialize(SourceRequest("path", path=str(local)), tmp_path / "c")
    assert from_url.version == from_script.version == from_path.version
    assert from_url.files == from_script.files == from_path.files


def test_interrupted_materialisation_leaves_nothing(tmp_path: Path, source_dir: Path) -> None:
    def interrupt(done: int, total: int | None) -> None:
        raise KeyboardInterrupt

    dest = tmp_path / "ds"
    with pytest.raises(KeyboardInterrupt):
        materialize(SourceRequest("path", path=str(source_dir)), dest, progress=interrupt)
    assert not dest.exists()
    _only_dest_left(tmp_path, dest)
