"""core.auth.authorize: every role x verb x {own namespace, other namespace, '*', cluster-scoped}, and its sentences."""

from __future__ import annotations

import itertools

import pytest

from phalanx.core.auth import Decision, Grant, Role, Verb, authorize, authorize_across

# The table of the brief, written out rather than derived from the code under test.
MAY = {
    Role.VIEWER: {"get", "list", "watch", "logs", "events", "explain"},
    Role.EDITOR: {"get", "list", "watch", "logs", "events", "explain", "create", "update", "delete", "halt", "resume"},
    Role.ADMIN: {"get", "list", "watch", "logs", "events", "explain", "create", "update", "delete", "halt", "resume"},
}
READS = {"get", "list", "watch", "logs", "events", "explain"}
NAMESPACED = ["TrainingJob", "Dataset", "Sweep", "Pipeline", "PipelineRun"]
CLUSTER_SCOPED = ["JobType", "Queue", "Node"]

CASES = list(itertools.product(Role, Verb))


def team(role: Role) -> Grant:
    return Grant(role, frozenset({"ml", "research"}), name="team")


def everywhere(role: Role) -> Grant:
    return Grant(role, frozenset({"*"}), name="ops")


@pytest.mark.parametrize(("role", "verb"), CASES, ids=[f"{r.value}-{v.value}" for r, v in CASES])
@pytest.mark.parametrize("kind", NAMESPACED)
class TestNamespacedKinds:
    def test_own_namespace(self, role: Role, verb: Verb, kind: str) -> None:
        for namespace in ("ml", "research"):
            assert authorize(team(role), verb, kind, namespace).allowed is (verb.value in MAY[role])

    def test_other_namespace_is_refused_to_every_role(self, role: Role, verb: Verb, kind: str) -> None:
        decision = authorize(team(role), verb, kind, "prod")
        assert not decision.allowed
        assert decision.authenticated
        assert "it reaches namespaces ml, research only" in decision.sentence

    def test_all_namespaces_needs_a_star_grant(self, role: Role, verb: Verb, kind: str) -> None:
        assert not authorize(team(role), verb, kind, "*").allowed
        assert authorize(everywhere(role), verb, kind, "*").allowed is (verb.value in MAY[role])

    def test_a_star_grant_reaches_any_namespace(self, role: Role, verb: Verb, kind: str) -> None:
        assert authorize(everywhere(role), verb, kind, "prod").allowed is (verb.value in MAY[role])


@pytest.mark.parametrize(("role", "verb"), CASES, ids=[f"{r.value}-{v.value}" for r, v in CASES])
@pytest.mark.parametrize("kind", CLUSTER_SCOPED)
class TestClusterScopedKinds:
    def test_every_role_reads_only_a_star_admin_writes(self, role: Role, verb: Verb, kind: str) -> None:
        expected = verb.value in READS or role is Role.ADMIN
        assert authorize(everywhere(role), verb, kind, None).allowed is expected

    def test_namespaces_play_no_part_in_reading_and_a_team_admin_cannot_write(
        self, role: Role, verb: Verb, kind: str
    ) -> None:
        # The namespace a request carries is ignored: a Queue is not in "ml" because the URL said so.
        for namespace in (None, "ml", "prod", "*"):
            assert authorize(team(role), verb, kind, namespace).allowed is (verb.value in READS)


@pytest.mark.parametrize(("role", "verb"), CASES, ids=[f"{r.value}-{v.value}" for r, v in CASES])
def test_tokens_are_for_a_star_admin_only(role: Role, verb: Verb) -> None:
    assert authorize(everywhere(role), verb, "Token", None).allowed is (role is Role.ADMIN)
    assert not authorize(team(role), verb, "Token", None).allowed


@pytest.mark.parametrize("verb", list(Verb), ids=[v.value for v in Verb])
@pytest.mark.parametrize("kind", [*NAMESPACED, *CLUSTER_SCOPED, "Token"])
def test_no_token_is_not_authenticated(verb: Verb, kind: str) -> None:
    decision = authorize(None, verb, kind, "ml")
    assert decision == Decision(allowed=False, sentence=decision.sentence, authenticated=False)
    assert decision.sentence.startswith("not authenticated: send a token")


def test_the_sentence_of_a_missing_role_names_the_role_needed() -> None:
    grant = Grant(Role.VIEWER, frozenset({"ml"}))
    decision = authorize(grant, Verb.DELETE, "TrainingJob", "ml")
    assert decision.sentence == "a viewer token for namespaces ml cannot delete trainingjobs in ml: needs editor"


def test_the_sentence_of_another_namespace_names_the_namespaces_held() -> None:
    decision = authorize(team(Role.EDITOR), Verb.LIST, "Dataset", "*")
    assert decision.sentence == (
        "the editor token team for namespaces ml, research cannot list datasets in all namespaces: "
        "it reaches namespaces ml, research only"
    )


def test_the_sentence_of_a_cluster_scoped_write_says_what_is_needed() -> None:
    decision = authorize(team(Role.ADMIN), Verb.CREATE, "Queue", None)
    assert decision.sentence == (
        "the admin token team for namespaces ml, research cannot create queues: queues are cluster-scoped, "
        "which needs an admin token for all namespaces (--role admin --namespace '*')"
    )


def test_an_allowed_decision_says_who_may_do_what() -> None:
    decision = authorize(everywhere(Role.EDITOR), Verb.HALT, "TrainingJob", "ml")
    assert decision == Decision(True, "the editor token ops for all namespaces may halt trainingjobs in ml")


def test_an_unknown_kind_is_refused_even_to_a_star_admin() -> None:
    decision = authorize(everywhere(Role.ADMIN), Verb.GET, "Secret", "ml")
    assert not decision.allowed
    assert "no such kind" in decision.sentence


@pytest.mark.parametrize("namespace", [None, ""])
def test_a_namespaced_kind_without_a_namespace_is_refused(namespace: str | None) -> None:
    decision = authorize(everywhere(Role.ADMIN), Verb.LIST, "TrainingJob", namespace)
    assert not decision.allowed
    assert "without a namespace" in decision.sentence


def test_the_roles_table_of_docs_server_md_is_what_authorize_decides() -> None:
    import re
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[3] / "docs" / "server.md").read_text().splitlines()
    start = lines.index("| role | may |")
    rows: dict[Role, str] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        role, may = (cell.strip() for cell in line.strip("|").split("|"))
        rows[Role(role)] = may

    def verbs_of(role: Role) -> set[str]:
        # A row names its own verbs and may start with "the <role>'s verbs", the row above it.
        may = rows[role]
        named = {verb.value for verb in Verb if re.search(rf"\b{verb.value}\b", may)}
        if inherited := re.match(r"the (\w+)'s verbs", may):
            named |= verbs_of(Role(inherited.group(1)))
        return named

    assert list(rows) == list(Role)
    for role in Role:
        allowed = {verb.value for verb in Verb if authorize(team(role), verb, "TrainingJob", "ml").allowed}
        assert verbs_of(role) == allowed, role
    assert "write JobTypes, Queues and Nodes, manage tokens" in rows[Role.ADMIN]
    for kind in ("JobType", "Queue", "Node", "Token"):
        assert authorize(everywhere(Role.ADMIN), Verb.CREATE, kind, None).allowed
        assert not authorize(everywhere(Role.EDITOR), Verb.CREATE, kind, None).allowed


# -- reading every namespace at once ---------------------------------------------------------------------------


def test_a_read_across_namespaces_by_a_grant_for_a_few_is_narrowed_to_them() -> None:
    grant = Grant(Role.VIEWER, frozenset({"nlp", "ml"}), "team")
    decision = authorize_across(grant, Verb.LIST, "TrainingJob")
    assert decision.allowed and decision.namespaces == frozenset({"ml", "nlp"})
    assert decision.sentence == (
        "the viewer token team for namespaces ml, nlp may list trainingjobs of the namespaces it reaches (ml, nlp)"
    )


def test_a_read_across_namespaces_by_a_grant_for_all_is_not_narrowed() -> None:
    decision = authorize_across(Grant(Role.VIEWER, frozenset({"*"})), Verb.LIST, "Dataset")
    assert decision.allowed and decision.namespaces is None


@pytest.mark.parametrize(
    ("grant", "verb", "kind", "words"),
    [
        (None, Verb.LIST, "TrainingJob", "not authenticated"),
        (Grant(Role.EDITOR, frozenset({"ml"})), Verb.DELETE, "TrainingJob", "in all namespaces"),
        (Grant(Role.EDITOR, frozenset({"ml"})), Verb.LIST, "Token", "needs an admin token"),
    ],
    ids=["no-grant", "a-write", "tokens"],
)
def test_what_is_not_a_read_of_namespaced_objects_is_decided_as_across_all(
    grant: Grant | None, verb: Verb, kind: str, words: str
) -> None:
    decision = authorize_across(grant, verb, kind)
    assert not decision.allowed and decision.namespaces is None
    assert words in decision.sentence
