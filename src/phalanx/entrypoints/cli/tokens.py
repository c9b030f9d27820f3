"""``phalanx token …`` (create, list, revoke): the API tokens of the embedded backend's state directory.

A token is printed once, by ``create``, on stdout alone (so ``TOKEN=$(phalanx token create …)`` works), with a
line on stderr saying it is not shown again; the store keeps its SHA-256 only (``adapters.auth.token_store``).
These commands need no token themselves: whoever may open the state directory (0700) owns its tokens. On
Kubernetes there are none to make: the server asks the API server (TokenReview, SubjectAccessReview), and
Kubernetes RBAC decides.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.entrypoints.cli.options import Output, OutputOption, StateDirOption
from phalanx.entrypoints.cli.output import STORE_UNAVAILABLE_EXIT, console, escape, fail, writer

if TYPE_CHECKING:
    from phalanx.adapters.auth.token_store import TokenInfo, TokenStore

token_app = typer.Typer(help="API tokens of the embedded backend: create, list, revoke.", no_args_is_help=True)


def _store(state_dir: Path | None) -> TokenStore:
    from phalanx.adapters.auth.token_store import TokenStore
    from phalanx.services.embedded.layout import StateLayout, default_state_dir

    return TokenStore(StateLayout(state_dir or default_state_dir()).tokens_database)


@token_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="The token's name (a DNS label, e.g. ci-bot).")],
    role: Annotated[str, typer.Option("--role", help="viewer, editor or admin.")],
    namespaces: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="A namespace it reaches (repeat for several; '*' for all)."),
    ] = None,
    expires: Annotated[
        str | None, typer.Option("--expires", help="Lifetime: a number and m, h, d or w (e.g. 30d); default never.")
    ] = None,
    state_dir: StateDirOption = None,
) -> None:
    """Make a token with one role for a set of namespaces; print it once."""
    from phalanx.adapters.auth.token_store import TokenExistsError, TokenStoreError
    from phalanx.core.auth import parse_lifetime

    store = _store(state_dir)
    try:
        lifetime = None if expires is None else parse_lifetime(expires)
        token = store.create(name, role, namespaces or [], expires=lifetime)
    except ValueError as err:
        fail(str(err), 2)
    except TokenExistsError as err:
        fail(str(err), 1)
    except TokenStoreError as err:
        fail(str(err), STORE_UNAVAILABLE_EXIT)
    sys.stdout.write(token + "\n")
    sys.stdout.flush()
    writer(stderr=True).print(
        f"[dim]note: token {escape(name)} is shown this once and is not stored; keep it now "
        "(send it as 'Authorization: Bearer <token>')[/]"
    )


@token_app.command("list")
def list_tokens(output: OutputOption = Output.TABLE, state_dir: StateDirOption = None) -> None:
    """Every token: name, role, namespaces, created, expires, last used (never the token itself)."""
    from phalanx.adapters.auth.token_store import TokenStoreError

    try:
        tokens = _store(state_dir).list()
    except TokenStoreError as err:
        fail(str(err), STORE_UNAVAILABLE_EXIT)
    if output is Output.JSON:
        from phalanx.model.loading import dump_json

        sys.stdout.write(dump_json([_document(info) for info in tokens]) + "\n")
    elif output is Output.YAML:
        from phalanx.model.loading import dump_yaml

        sys.stdout.write(dump_yaml([_document(info) for info in tokens]))
    elif not tokens:
        console.print("No tokens: make one with `phalanx token create NAME --role viewer --namespace NS`.")
    else:
        _print_table(tokens)


@token_app.command("revoke")
def revoke(
    name: Annotated[str, typer.Argument(help="The token's name (see `phalanx token list`).")],
    state_dir: StateDirOption = None,
) -> None:
    """Delete a token: every server of this state directory refuses it from its next request on."""
    from phalanx.adapters.auth.token_store import TokenNotFoundError, TokenStoreError

    try:
        _store(state_dir).revoke(name)
    except TokenNotFoundError as err:
        fail(str(err), 1)
    except TokenStoreError as err:
        fail(str(err), STORE_UNAVAILABLE_EXIT)
    console.print(f"token {escape(name)} revoked")


def _document(info: TokenInfo) -> dict[str, object]:
    return {
        "name": info.name,
        "role": info.role.value,
        "namespaces": sorted(info.namespaces),
        "created": info.created.isoformat(),
        "expires": info.expires.isoformat() if info.expires else None,
        "lastUsed": info.last_used.isoformat() if info.last_used else None,
    }


def _print_table(tokens: list[TokenInfo]) -> None:
    from rich.table import Table

    now = datetime.now(UTC)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NAME", "ROLE", "NAMESPACES", "CREATED", "EXPIRES", "LAST USED"):
        table.add_column(column)
    for info in tokens:
        table.add_row(
            escape(info.name),
            info.role.value,
            ",".join(sorted(info.namespaces)),
            _when(info.created),
            _expiry(info.expires, now),
            _when(info.last_used) if info.last_used else "never",
        )
    console.print(table)


def _expiry(expires: datetime | None, now: datetime) -> str:
    if expires is None:
        return "never"
    # An expired token is listed (revoke removes it) but authenticates no more: say so where it is read.
    return f"expired {_when(expires)}" if expires <= now else _when(expires)


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")
