"""adapters.auth.token_store on a real SQLite file, shared by real processes: create, list, revoke, authenticate."""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from phalanx.adapters.auth.token_store import (
    TokenExistsError,
    TokenNotFoundError,
    TokenStore,
    TokenStoreError,
    digest_of,
)
from phalanx.core.auth import Grant, Role

pytestmark = pytest.mark.integration


class FakeClock:
    """A clock the test moves by hand, so expiry and last-used are checked without waiting."""

    def __init__(self) -> None:
        self.moment = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.moment


def in_another_process(db: Path, code: str) -> str:
    """Run ``code`` with ``store`` (a TokenStore of ``db``) in a fresh interpreter; its stdout."""
    script = "from pathlib import Path\nfrom phalanx.adapters.auth.token_store import TokenStore\n"
    script += f"store = TokenStore(Path({str(db)!r}))\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "tokens.db"


def test_a_token_made_by_one_process_authenticates_in_another(db: Path) -> None:
    token = in_another_process(db, "print(store.create('ci', 'editor', ['ml', 'research']))").strip()
    assert token.startswith("phx_")
    assert TokenStore(db).authenticate(token) == Grant(Role.EDITOR, frozenset({"ml", "research"}), name="ci")


def test_a_revoke_in_another_process_is_seen_at_once(db: Path) -> None:
    store = TokenStore(db)
    token = store.create("ci", "viewer", ["ml"])
    assert store.authenticate(token) is not None  # the store is open and has answered before the revoke
    in_another_process(db, "store.revoke('ci')")
    assert store.authenticate(token) is None
    assert store.list() == []


def test_the_file_is_private_and_holds_no_secret(db: Path) -> None:
    store = TokenStore(db)
    token = store.create("ci", "admin", ["*"])
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    secret = token.encode()
    for path in db.parent.iterdir():  # the database and its WAL side files
        assert secret not in path.read_bytes(), path.name
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT digest FROM tokens").fetchall() == [(digest_of(token),)]


def test_list_shows_everything_but_the_secret(db: Path) -> None:
    clock = FakeClock()
    store = TokenStore(db, now=clock)
    token = store.create("b-bot", "editor", ["ml"], expires=timedelta(days=30))
    store.create("a-bot", "viewer", ["*"])
    first, second = store.list()
    assert (first.name, first.role, first.namespaces, first.expires) == ("a-bot", Role.VIEWER, {"*"}, None)
    assert (second.name, second.role, second.namespaces) == ("b-bot", Role.EDITOR, {"ml"})
    assert second.created == clock.moment
    assert second.expires == clock.moment + timedelta(days=30)
    assert second.last_used is None
    shown = repr(store.list())
    assert token not in shown
    assert digest_of(token) not in shown


def test_last_used_is_recorded_to_the_minute(db: Path) -> None:
    clock = FakeClock()
    store = TokenStore(db, now=clock)
    token = store.create("ci", "viewer", ["ml"])
    start = clock.moment
    assert store.authenticate(token) is not None
    assert store.list()[0].last_used == start
    clock.moment = start + timedelta(seconds=59)
    store.authenticate(token)
    assert store.list()[0].last_used == start
    clock.moment = start + timedelta(seconds=61)
    store.authenticate(token)
    assert store.list()[0].last_used == start + timedelta(seconds=61)


def test_an_expired_token_authenticates_no_more(db: Path) -> None:
    clock = FakeClock()
    store = TokenStore(db, now=clock)
    token = store.create("ci", "viewer", ["ml"], expires=timedelta(hours=1))
    clock.moment += timedelta(minutes=59)
    assert store.authenticate(token) is not None
    clock.moment += timedelta(minutes=1)
    assert store.authenticate(token) is None


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),
        lambda t: t[:-1],
        lambda t: t + "A",
        lambda t: "phx-" + t[4:],
        lambda t: t.upper(),
        lambda t: "",
        lambda t: t[:-1] + "\n",
    ],
    ids=["last-char-changed", "short", "long", "wrong-prefix", "upper-case", "empty", "newline"],
)
def test_anything_but_the_token_itself_is_refused(db: Path, change: object) -> None:
    store = TokenStore(db)
    token = store.create("ci", "admin", ["*"])
    assert callable(change)
    other = change(token)
    assert other != token
    assert store.authenticate(other) is None
    assert store.authenticate(token) is not None


def test_a_duplicate_name_is_refused_and_the_first_token_stays(db: Path) -> None:
    store = TokenStore(db)
    token = store.create("ci", "viewer", ["ml"])
    with pytest.raises(TokenExistsError, match=r"a token named 'ci' exists already; revoke it first"):
        store.create("ci", "admin", ["*"])
    assert store.authenticate(token) == Grant(Role.VIEWER, frozenset({"ml"}), name="ci")
    assert [info.name for info in store.list()] == ["ci"]


@pytest.mark.parametrize(
    ("name", "role", "namespaces", "expires", "message"),
    [
        ("CI", "viewer", ["ml"], None, "token name 'CI' is not a DNS-1123 label"),
        ("ci", "owner", ["ml"], None, "role 'owner' is not one of viewer, editor, admin"),
        ("ci", "viewer", [], None, "at least one namespace"),
        ("ci", "viewer", ["ml/x"], None, "namespace 'ml/x' is not a DNS-1123 label"),
        ("ci", "viewer", ["*", "ml"], None, "already covers every namespace"),
        ("ci", "viewer", ["ml"], timedelta(0), "expires must be a lifetime of more than nothing"),
        ("ci", "viewer", ["ml"], timedelta(days=10**6), "at most 3650d"),
    ],
    ids=["name", "role", "no-namespace", "bad-namespace", "star-and-names", "no-lifetime", "too-long"],
)
def test_bad_input_is_one_sentence_and_nothing_is_stored(
    db: Path, name: str, role: str, namespaces: list[str], expires: timedelta | None, message: str
) -> None:
    store = TokenStore(db)
    with pytest.raises(ValueError, match=message):
        store.create(name, role, namespaces, expires=expires)
    assert store.list() == []


def test_revoking_an_unknown_token_says_where_to_look(db: Path) -> None:
    with pytest.raises(TokenNotFoundError, match=r"no token named 'nope'; `phalanx token list` shows the tokens"):
        TokenStore(db).revoke("nope")


def test_two_processes_creating_at_once_both_succeed(db: Path) -> None:
    # Two interpreters make the file and its table at the same moment; each token lands and authenticates.
    script = "import sys\nprint(store.create(sys.argv[1], 'viewer', ['ml']))"
    code = "from pathlib import Path\nfrom phalanx.adapters.auth.token_store import TokenStore\n"
    code += f"store = TokenStore(Path({str(db)!r}))\n{script}"
    processes = [
        subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("one", "two")
    ]
    outputs = [process.communicate(timeout=60) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], [err for _, err in outputs]
    store = TokenStore(db)
    grants = [store.authenticate(out.strip()) for out, _ in outputs]
    assert [grant.name if grant else None for grant in grants] == ["one", "two"]
    assert json.dumps(sorted(info.name for info in store.list())) == '["one", "two"]'


def test_threads_share_one_store_each_on_its_own_connection(db: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    store = TokenStore(db)
    tokens = [store.create(f"t{i}", "viewer", [f"ns{i}"]) for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        grants = list(pool.map(store.authenticate, tokens * 25))
    assert [grant.name if grant else None for grant in grants] == [f"t{i}" for i in range(8)] * 25
    store.revoke("t3")
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(store.authenticate, [tokens[3]] * 8)) == [None] * 8


def test_a_forked_child_uses_a_connection_of_its_own(db: Path) -> None:
    import os

    store = TokenStore(db)
    token = store.create("ci", "viewer", ["ml"])
    assert store.authenticate(token) is not None  # the parent's connection is open when the child is forked
    pid = os.fork()
    if pid == 0:  # the child: authenticate, then revoke, through the store object it inherited
        try:
            ok = store.authenticate(token) is not None
            store.revoke("ci")
            os._exit(0 if ok else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.authenticate(token) is None  # the parent's connection still works, and sees the child's revoke


class _FailingOnce:
    """A connection whose first statement fails as SQLite does on an I/O error, then works as the real one."""

    def __init__(self, real: sqlite3.Connection, name: str) -> None:
        self.real, self.name, self.failed = real, name, False

    def execute(self, *args: object) -> object:
        if not self.failed:
            self.failed = True
            error = sqlite3.OperationalError("disk I/O error")
            error.sqlite_errorname = self.name  # type: ignore[attr-defined]
            raise error
        return self.real.execute(*args)  # type: ignore[arg-type]

    def close(self) -> None:
        self.real.close()


def test_a_read_that_meets_an_io_error_is_tried_once_more_on_a_fresh_connection(db: Path) -> None:
    """api_load saw one 503 'disk I/O error' in eight runs; authenticating changes nothing, so it retries once."""
    store = TokenStore(db)
    token = store.create("ci", "viewer", ["ml"])
    assert store.authenticate(token) is not None  # this thread's connection is open now
    store._local.conn = _FailingOnce(store._local.conn, "SQLITE_IOERR_SHORT_READ")
    assert store.authenticate(token) == Grant(Role.VIEWER, frozenset({"ml"}), name="ci")
    # Another kind of failure is not retried, and says SQLite's own name for it.
    store._local.conn = _FailingOnce(store._local.conn, "SQLITE_BUSY")
    with pytest.raises(TokenStoreError, match=r"disk I/O error, SQLITE_BUSY\); try again"):
        store.authenticate(token)
