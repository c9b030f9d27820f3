"""core.auth grants and lifetimes: the checks a token's role, namespaces and lifetime pass before it is stored."""

from __future__ import annotations

from datetime import timedelta

import pytest

from phalanx.core.auth import Role, check_namespaces, check_role, parse_lifetime


@pytest.mark.parametrize("value", ["viewer", "editor", "admin"])
def test_roles_by_name(value: str) -> None:
    assert check_role(value) is Role(value)


def test_an_unknown_role_names_the_roles() -> None:
    with pytest.raises(ValueError, match=r"role 'owner' is not one of viewer, editor, admin"):
        check_role("owner")


def test_namespaces_are_kept_as_a_set() -> None:
    assert check_namespaces(["ml", "research", "ml"]) == frozenset({"ml", "research"})
    assert check_namespaces(["*"]) == frozenset({"*"})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], "at least one namespace"),
        (["*", "ml"], "'\\*' already covers every namespace"),
        (["ML"], "namespace 'ML' is not a DNS-1123 label"),
        (["ml\n"], "is not a DNS-1123 label"),
        (["a" * 64], "at most 63"),
        ([""], "must not be empty"),
    ],
    ids=["none", "star-and-names", "upper-case", "newline", "too-long", "empty"],
)
def test_bad_namespaces_get_one_sentence(values: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_namespaces(values)


@pytest.mark.parametrize(
    ("text", "lifetime"),
    [("90m", timedelta(minutes=90)), ("12h", timedelta(hours=12)), ("30d", timedelta(days=30)), ("2w", timedelta(14))],
)
def test_lifetimes(text: str, lifetime: timedelta) -> None:
    assert parse_lifetime(text) == lifetime


@pytest.mark.parametrize("text", ["30", "d", "1.5d", "1d12h", "-1d", "30y", "30 days", ""])
def test_a_malformed_lifetime_says_how_to_write_one(text: str) -> None:
    with pytest.raises(ValueError, match="write a whole number and a unit m, h, d or w"):
        parse_lifetime(text)


@pytest.mark.parametrize("text", ["0d", "3651d", "999999w"])
def test_a_lifetime_out_of_bounds_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="at most 3650d"):
        parse_lifetime(text)
