"""Passwords in URLs, masked: the one function every output uses before a datasource URL leaves Phalanx.

A Dataset's ``source.url`` or ``source.sql.url`` may carry a password (``postgresql://reader:secret@db/x``,
``...?password=secret``). It is stored as given, because materialising needs it, and masked (``***``) wherever
it is shown: ``get -o yaml|json``, ``describe``, events, status messages and lineage, error sentences, and the
control plane's log. Pure text functions, so every layer can use them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

# The password runs to the *last* "@" of the authority, so an unescaped "@" in it is masked too.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:/@?#\s]*):(?P<password>[^/?#\s]*)@")
_PASSWORD_PARAM = re.compile(r"(?P<key>[?&](?:password|passwd|pwd|secret|token)=)(?P<value>[^&#\s'\"]*)", re.IGNORECASE)


def mask_url(text: str) -> str:
    """``text`` with every URL password (``user:secret@host`` or ``?password=secret``) replaced by ``***``.

    ``text`` may be a URL or a sentence holding URLs (an error message, a log line).
    """
    if "://" not in text and "=" not in text:
        return text  # the common case, without running the expressions
    masked = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _PASSWORD_PARAM.sub(lambda m: f"{m['key']}{MASK}", masked)


def mask_urls_in(value: Any) -> Any:
    """A copy of a wire-form value (mappings, lists, strings) with ``mask_url`` applied to every string in it."""
    if isinstance(value, str):
        return mask_url(value)
    if isinstance(value, Mapping):
        return {key: mask_urls_in(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mask_urls_in(item) for item in value]
    return value
