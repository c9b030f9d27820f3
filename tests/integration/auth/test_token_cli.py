"""`phalanx token create|list|revoke` through the real command, checked against the token store it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from phalanx.adapters.auth.token_store import TokenStore
from phalanx.core.auth import Grant, Role

pytestmark = pytest.mark.integration


class Phalanx:
    """The `phalanx` command with its own state directory (``PHALANX_HOME``)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.store = TokenStore(state_dir / "tokens.db")

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PHALANX_HOME": str(self.state_dir), "COLUMNS": "200"}
        return subprocess.run(
            [sys.executable, "-m", "phalanx.entrypoints.cli", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )


@pytest.fixture
def phalanx(tmp_path: Path) -> Phalanx:
    return Phalanx(tmp_path / "state")


def test_create_prints_the_token_once_and_it_authenticates(phalanx: Phalanx) -> None:
    done = phalanx("token", "create", "ci", "--role", "editor", "--namespace", "ml", "--namespace", "research")
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert done.stdout == token + "\n"  # the token alone on stdout, for TOKEN=$(phalanx token create ...)
    assert "is shown this once" in done.stderr
    assert phalanx.store.authenticate(token) == Grant(Role.EDITOR, frozenset({"ml", "research"}), name="ci")


def test_list_as_a_table_and_as_json_never_shows_the_token(phalanx: Phalanx) -> None:
    token = phalanx("token", "create", "ci", "--role", "viewer", "-n", "ml", "--expires", "30d").stdout.strip()
    phalanx("token", "create", "ops", "--role", "admin", "--namespace", "*")
    before = datetime.now(UTC)
    assert phalanx.store.authenticate(token) is not None

    table = phalanx("token", "list")
    assert table.returncode == 0, table.stderr
    header, ci, ops = table.stdout.splitlines()
    assert header.split() == ["NAME", "ROLE", "NAMESPACES", "CREATED", "EXPIRES", "LAST", "USED"]
    assert ci.split()[:3] == ["ci", "viewer", "ml"]
    assert ops.split()[:3] == ["ops", "admin", "*"]
    assert ops.split()[-2:] == ["never", "never"]  # no expiry, never used

    listed = phalanx("token", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    documents = json.loads(listed.stdout)
    assert [(d["name"], d["role"], d["namespaces"]) for d in documents] == [
        ("ci", "viewer", ["ml"]),
        ("ops", "admin", ["*"]),
    ]
    assert set(documents[0]) == {"name", "role", "namespaces", "created", "expires", "lastUsed"}
    expires = datetime.fromisoformat(documents[0]["expires"])
    assert timedelta(days=29, hours=23) < expires - before < timedelta(days=30, minutes=1)
    assert documents[0]["lastUsed"] is not None
    assert documents[1]["expires"] is None
    for output in (table.stdout, listed.stdout):
        assert token not in output
        assert token[4:] not in output


def test_revoke_is_seen_by_the_next_authentication(phalanx: Phalanx) -> None:
    token = phalanx("token", "create", "ci", "--role", "viewer", "-n", "ml").stdout.strip()
    assert phalanx.store.authenticate(token) is not None
    done = phalanx("token", "revoke", "ci")
    assert done.returncode == 0, done.stderr
    assert "token ci revoked" in done.stdout
    assert phalanx.store.authenticate(token) is None
    assert json.loads(phalanx("token", "list", "-o", "json").stdout) == []


def test_an_empty_list_says_how_to_make_a_token(phalanx: Phalanx) -> None:
    done = phalanx("token", "list")
    assert done.returncode == 0, done.stderr
    assert "No tokens: make one with `phalanx token create" in done.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["create", "CI", "--role", "viewer", "-n", "ml"], 2, "token name 'CI' is not a DNS-1123 label"),
        (["create", "ci", "--role", "owner", "-n", "ml"], 2, "role 'owner' is not one of viewer, editor, admin"),
        (["create", "ci", "--role", "viewer"], 2, "a token needs at least one namespace"),
        (["create", "ci", "--role", "viewer", "-n", "ML"], 2, "namespace 'ML' is not a DNS-1123 label"),
        (["create", "ci", "--role", "viewer", "-n", "ml", "--expires", "1.5d"], 2, "write a whole number and a unit"),
        (["revoke", "nope"], 1, "no token named 'nope'; `phalanx token list` shows the tokens"),
    ],
    ids=["name", "role", "no-namespace", "namespace", "expires", "revoke-unknown"],
)
def test_bad_input_is_one_sentence_with_no_traceback_and_nothing_stored(
    phalanx: Phalanx, args: list[str], code: int, message: str
) -> None:
    done = phalanx("token", *args)
    assert done.returncode == code, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("error: ")
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert phalanx.store.list() == []


def test_a_duplicate_name_is_refused_and_the_first_token_stays(phalanx: Phalanx) -> None:
    token = phalanx("token", "create", "ci", "--role", "viewer", "-n", "ml").stdout.strip()
    done = phalanx("token", "create", "ci", "--role", "admin", "-n", "*")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "error: a token named 'ci' exists already; revoke it first" in done.stderr
    assert phalanx.store.authenticate(token) == Grant(Role.VIEWER, frozenset({"ml"}), name="ci")


def test_an_expired_token_is_listed_as_expired(phalanx: Phalanx) -> None:
    clock_past = TokenStore(phalanx.state_dir / "tokens.db", now=lambda: datetime(2020, 1, 1, tzinfo=UTC))
    clock_past.create("old", "viewer", ["ml"], expires=timedelta(days=1))
    done = phalanx("token", "list")
    assert done.returncode == 0, done.stderr
    assert "expired 2020-01-02 00:00 UTC" in done.stdout
