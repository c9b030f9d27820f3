"""``core.auth.views``: a cluster-wide view names only objects of namespaces the caller reads."""

from __future__ import annotations

import pytest

from phalanx.core.auth import Grant, Role
from phalanx.core.auth.views import HIDDEN, IN_USE, may_name, shown_name, shown_names

VIEWER_ML = Grant(Role.VIEWER, frozenset({"ml"}), "viewer-ml")
EDITOR_ML_CV = Grant(Role.EDITOR, frozenset({"ml", "cv"}), "editor-ml-cv")
ADMIN_ALL = Grant(Role.ADMIN, frozenset({"*"}), "admin-all")


@pytest.mark.parametrize(
    ("grant", "namespace", "named"),
    [
        (VIEWER_ML, "ml", True),
        (VIEWER_ML, "cv", False),
        (VIEWER_ML, "*", False),
        (EDITOR_ML_CV, "cv", True),
        (EDITOR_ML_CV, "*", False),
        (ADMIN_ALL, "anything", True),
        (ADMIN_ALL, "*", True),
        (None, "ml", False),
    ],
    ids=["viewer own", "viewer other", "viewer all", "editor second", "editor all", "admin", "admin all", "nobody"],
)
def test_a_view_names_objects_of_the_namespaces_the_grant_reads(
    grant: Grant | None, namespace: str, named: bool
) -> None:
    assert may_name(grant, namespace) is named


def test_a_name_of_another_namespace_is_in_use_or_hidden_and_an_unqualified_one_needs_every_namespace() -> None:
    def readable(namespace: str) -> bool:
        return may_name(VIEWER_ML, namespace)

    assert shown_name("ml/train", readable) == "ml/train"
    assert shown_name("cv/train", readable) == IN_USE
    assert shown_name("cv/images", readable, hidden=HIDDEN) == HIDDEN
    assert shown_name("images", readable) == IN_USE  # no namespace: which one it belongs to is unknown
    assert shown_name("images", lambda namespace: may_name(ADMIN_ALL, namespace)) == "images"


def test_names_of_other_namespaces_are_counted_not_named() -> None:
    shown, others = shown_names(["ml/a", "cv/b", "ml/c", "nlp/d"], lambda namespace: namespace == "ml")
    assert (shown, others) == (["ml/a", "ml/c"], 2)
