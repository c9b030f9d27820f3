"""Hostile input at the token doors: whatever a request or a `token create` carries, one sentence or no grant.

``authenticate`` answers a grant for its own tokens and None for any other text; ``create`` stores a token or
raises one ``ValueError`` and stores nothing; ``authorize`` never allows a kind it does not know.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.profiles import FUZZ
from phalanx.adapters.auth.token_store import TokenStore
from phalanx.core.auth import CLUSTER_SCOPED_KINDS, NAMESPACED_KINDS, Grant, Role, Verb, authorize

texts = st.one_of(
    st.text(max_size=80),
    st.text(alphabet="phx_-ABCabc0129", max_size=60).map(lambda tail: "phx_" + tail),
    st.binary(max_size=60).map(lambda raw: raw.decode("latin-1")),
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> TokenStore:
    return TokenStore(tmp_path_factory.mktemp("tokens") / "tokens.db")


@settings(FUZZ, max_examples=300)
@given(text=texts)
def test_no_text_but_a_token_authenticates(store: TokenStore, text: str) -> None:
    assert store.authenticate(text) is None


@settings(FUZZ, max_examples=200)
@given(name=texts, role=st.one_of(texts, st.sampled_from(["viewer", "editor", "admin"])), namespaces=st.lists(texts))
def test_create_stores_a_valid_token_or_says_why_not(
    tmp_path: Path, name: str, role: str, namespaces: list[str]
) -> None:
    store = TokenStore(tmp_path / "tokens.db")
    before = {info.name for info in store.list()}
    try:
        token = store.create(name, role, namespaces)
    except ValueError as err:
        assert str(err) and "\n" not in str(err)  # one line: the values it names are shown escaped
        assert {info.name for info in store.list()} == before
    else:
        store.revoke(name)  # the next example starts from the same store
        assert store.authenticate(token) is None


@settings(FUZZ, max_examples=300)
@given(kind=texts, namespace=st.one_of(st.none(), texts), verb=st.sampled_from(list(Verb)))
def test_authorize_never_allows_an_unknown_kind(kind: str, namespace: str | None, verb: Verb) -> None:
    decision = authorize(Grant(Role.ADMIN, frozenset({"*"})), verb, kind, namespace)
    assert decision.sentence
    if kind not in NAMESPACED_KINDS | CLUSTER_SCOPED_KINDS:
        assert not decision.allowed
