"""Path and URL checks shared by the sources: no ``..`` components, safe file names, passwords masked."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from phalanx.adapters.datasources._types import SourceError
from phalanx.model.masking import mask_url as mask_url  # the sources' name for it


def has_parent_reference(path: str) -> bool:
    """Whether ``path`` has a ``..`` component (with either separator)."""
    return any(part == ".." for part in re.split(r"[\\/]", path))


def reject_parent_reference(path: str, field: str, what: str = "path") -> None:
    """Raise a ``SourceError`` naming ``field`` when ``path`` has a ``..`` component."""
    if has_parent_reference(path):
        raise SourceError(
            field,
            f"{what} {path!r} has a '..' component; write the path without '..' "
            "(absolute, or relative to the dataset's directory)",
        )


def resolve_local(path: str, base_dir: Path | None, field: str) -> Path:
    """The absolute path of a local source: ``path`` itself when absolute, else relative to ``base_dir`` (or cwd)."""
    if not path or not path.strip():
        raise SourceError(field, "the path is empty; give a local file or directory")
    reject_parent_reference(path, field)
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        candidate = (base_dir if base_dir is not None else Path.cwd()) / candidate
    return candidate.absolute()


def url_file_name(url: str, field: str) -> str:
    """The file name a downloaded URL is stored under: the last segment of its path, or ``data``."""
    path = unquote(urlsplit(url).path)
    reject_parent_reference(path, field, "the URL path")
    name = PurePosixPath(path).name if path else ""
    if not name or name in {".", ".."} or name.startswith("."):
        return "data"
    return name


def safe_relative(name: str, field: str) -> str:
    """``name`` (a posix path relative to a dataset root) after checking it stays inside the root."""
    rel = PurePosixPath(name)
    if rel.is_absolute() or any(part == ".." for part in rel.parts) or not rel.parts:
        raise SourceError(field, f"the source lists a file {name!r} outside its root; remove it from the source")
    return rel.as_posix()
