"""nodeSelector, required node affinity and tolerations against node labels and taints (core.scheduling.node_fit).

Kubernetes' rules, so the Phalanx scheduler, the simulator and kube-scheduler agree on where a replica may go;
before issue 16 the Phalanx scheduler read none of them and placed replicas where their Pod's kubelet refuses.
"""

from __future__ import annotations

import pytest
from scheduling_builders import admission, make_job, make_node, run, snapshot, waiting_reason

from phalanx.core.scheduling.node_fit import NodeConstraint, Requirement, Taint, Toleration, constraint_of
from phalanx.model.jobs import ReplicaTemplate


def placed_on(decisions: object, name: str = "job") -> set[str]:
    return {assignment.node for assignment in admission(decisions, name).assignments}  # type: ignore[arg-type]


def test_a_node_selector_places_only_on_matching_nodes() -> None:
    nodes = [make_node("a").cpus(cores=4).obj(), make_node("b").cpus(cores=4).labels(pool="gpu").obj()]
    selector = NodeConstraint(selector=(("pool", "gpu"),))
    decisions = run(snapshot(nodes), make_job("job").replicas(2, node_constraint=selector))
    assert placed_on(decisions) == {"b"}


def test_no_matching_node_says_so() -> None:
    nodes = [make_node("a").cpus(cores=4).obj()]
    selector = NodeConstraint(selector=(("pool", "gpu"),))
    reason = waiting_reason(run(snapshot(nodes), make_job("job").replicas(1, node_constraint=selector)), "job")
    assert "nodeSelector pool=gpu" in reason, reason


def test_a_tainted_node_takes_only_replicas_that_tolerate_it() -> None:
    nodes = [make_node("a").cpus(cores=4).taint("nvidia.com/gpu").obj()]
    assert "taint" in waiting_reason(run(snapshot(nodes), make_job("job").replicas(1)), "job")
    tolerant = NodeConstraint(tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists"),))
    assert placed_on(run(snapshot(nodes), make_job("job").replicas(1, node_constraint=tolerant))) == {"a"}


def test_prefer_no_schedule_does_not_keep_replicas_off() -> None:
    nodes = [make_node("a").cpus(cores=4).taint("spot", effect="PreferNoSchedule").obj()]
    assert placed_on(run(snapshot(nodes), make_job("job").replicas(1))) == {"a"}


@pytest.mark.parametrize(
    ("requirement", "labels", "holds"),
    [
        pytest.param(Requirement("zone", "In", ("a", "b")), {"zone": "b"}, True, id="in"),
        pytest.param(Requirement("zone", "In", ("a",)), {}, False, id="in-absent"),
        pytest.param(Requirement("zone", "NotIn", ("a",)), {}, True, id="notin-absent"),
        pytest.param(Requirement("zone", "NotIn", ("a",)), {"zone": "a"}, False, id="notin"),
        pytest.param(Requirement("zone", "Exists"), {"zone": ""}, True, id="exists"),
        pytest.param(Requirement("zone", "DoesNotExist"), {"zone": ""}, False, id="does-not-exist"),
        pytest.param(Requirement("gen", "Gt", ("7",)), {"gen": "8"}, True, id="gt"),
        pytest.param(Requirement("gen", "Lt", ("7",)), {"gen": "8"}, False, id="lt"),
        pytest.param(Requirement("gen", "Gt", ("7",)), {"gen": "x"}, False, id="gt-not-a-number"),
        pytest.param(Requirement("metadata.name", "In", ("n",), field=True), {}, True, id="match-fields-name"),
    ],
)
def test_requirements_follow_kubernetes(requirement: Requirement, labels: dict[str, str], holds: bool) -> None:
    assert requirement.holds("n", labels) is holds


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        pytest.param(Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "v", "NoSchedule"), True, id="equal"),
        pytest.param(Toleration("k", "Equal", "w"), Taint("k", "v"), False, id="other-value"),
        pytest.param(Toleration("k", "Exists"), Taint("k", "v", "NoExecute"), True, id="exists-any-effect"),
        pytest.param(Toleration("k", "Exists", effect="NoExecute"), Taint("k", "v"), False, id="other-effect"),
        pytest.param(Toleration("", "Exists"), Taint("anything", "v"), True, id="tolerate-all"),
    ],
)
def test_tolerations_follow_kubernetes(toleration: Toleration, taint: Taint, tolerated: bool) -> None:
    assert toleration.tolerates(taint) is tolerated


def test_a_template_becomes_a_constraint() -> None:
    zone_a = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    template = ReplicaTemplate.model_validate(
        {
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [zone_a]}}
            },
        }
    )
    constraint = constraint_of(template)
    assert constraint is not None
    assert constraint.admits("n", {"pool": "gpu", "zone": "a"}, [Taint("nvidia.com/gpu")])
    assert not constraint.admits("n", {"pool": "gpu", "zone": "b"}, [])
    assert constraint_of(ReplicaTemplate()) is None
