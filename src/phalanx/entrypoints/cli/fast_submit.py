"""`phalanx submit FILE` on the launcher's fast path: the file's text to the running control plane, which checks it.

The typer command imports the models, the validation and YAML before it sends a byte (about half a second on a
busy 2-core machine); when a control plane runs, it validates every submission again anyway. So, as `phalanx run`
does (``running.run_job``), the launcher sends the file's text to the control plane's local API, which parses,
validates and creates with the same code (``EmbeddedOperations.submit``, the file's directory and name as the
typer command gives them), and prints what it answered in the same words. Without a running control plane, or a
file it cannot read here, it declines, and the typer command does what it always did (it stores the objects and
says that no control plane runs).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from phalanx.entrypoints.cli.local_api import ApiError, LocalApi
from phalanx.entrypoints.cli.output import STORE_UNAVAILABLE_EXIT, escape, fail, spec_errors, writer
from phalanx.services.embedded.layout import StateLayout, default_state_dir


def submitted_verb(item: dict[str, object]) -> str:
    """What became of one submitted object, as the local API answers it: kubectl's word."""
    if item.get("replaced"):
        return "replaced"
    if item.get("unchanged"):
        return "unchanged"
    return "configured" if item.get("configured") else "created"


def submit_through(
    api: LocalApi,
    documents: list[dict[str, Any]] | str,
    *,
    namespace: str | None,
    replace_finished: bool,
    source: str,
    stand_ins: dict[str, list[str]] | None = None,
) -> list[dict[str, Any]]:
    """The local API's submit from the current directory; a refusal is printed as the typer command prints it.

    A spec's errors at their paths (exit 2); any other refusal in one sentence (exit 1, or the store's code when
    it cannot be written); a control plane that did not answer, one sentence.
    """
    try:
        return api.submit(
            documents,
            submit_dir=Path(os.getcwd()),
            namespace=None if namespace in (None, "default") else namespace,
            replace_finished=replace_finished,
            source=source,
            stand_ins=stand_ins,
        )
    except ApiError as err:
        if err.status == 422:
            spec_errors(err.body.get("source"), [(e["path"], e["message"]) for e in err.body["errors"]])
        fail(str(err), STORE_UNAVAILABLE_EXIT if err.body.get("reason") == "StoreUnavailable" else 1)
    except OSError as err:  # the control plane stopped, or a socket timeout: one sentence, no traceback
        fail(f"the control plane's local API did not answer ({err or type(err).__name__}); see `phalanx status`")


def submit_file(file: Path, *, state_dir: Path | None, namespace: str | None) -> int | None:
    """Submit ``file`` through the running control plane; the exit code, or None to leave it to the typer command."""
    from phalanx.entrypoints.cli.running import refuse_bad_namespace
    from phalanx.model.textfiles import FileTextError, read_spec_text

    refuse_bad_namespace(namespace)
    layout = StateLayout(state_dir or default_state_dir())
    try:
        text = read_spec_text(file)
    except (OSError, FileTextError):
        return None  # the typer command says what is wrong with the file, as it always has
    api = LocalApi(layout.api_socket)
    try:
        if not text or not api.available():
            return None
        created = submit_through(api, text, namespace=namespace, replace_finished=False, source=str(file))
    finally:
        api.close()
    console = writer()
    for item in created:
        console.print(f"{escape(str(item['kind']).lower())}/{escape(str(item['name']))} {submitted_verb(item)}")
    return 0
