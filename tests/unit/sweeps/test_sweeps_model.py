"""The Sweep model: the search space, algorithms, objective, budgets and early stopping, refused by path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.model.errors import SpecError
from phalanx.model.sweeps import Parameter, Sweep, parse_sweep


def errors_of(document: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_sweep(document)
    return [str(error) for error in caught.value.errors]


def drop_momentum(doc: dict[str, Any]) -> None:
    """Remove the conditional parameter and its reference in the template."""
    del doc["spec"]["parameters"][4]
    del doc["spec"]["trial"]["spec"]["replicas"]["worker"]["template"]["env"]["MOMENTUM"]


def test_the_designs_example_is_accepted_with_defaults_applied(doc: dict[str, Any]) -> None:
    sweep = parse_sweep(doc)
    assert isinstance(sweep, Sweep)
    assert [p.name for p in sweep.spec.parameters] == ["lr", "layers", "batch", "optimizer", "momentum"]
    stopping = sweep.spec.early_stopping
    assert stopping is not None and (stopping.minimum_trials, stopping.first_step) == (3, 4)
    del doc["spec"]["maxFailedTrials"]
    assert parse_sweep(doc).spec.failures_allowed == 20  # defaults to maxTrials
    assert parse_sweep(doc).spec.algorithm.seed == 7


def test_max_trials_is_required(doc: dict[str, Any]) -> None:
    del doc["spec"]["maxTrials"]
    assert errors_of(doc) == ["spec.maxTrials: required field is missing"]


def test_a_misspelt_field_is_named_with_a_suggestion(doc: dict[str, Any]) -> None:
    doc["spec"]["parallelTrial"] = 2
    assert errors_of(doc) == ["spec.parallelTrial: unknown field; did you mean 'parallelTrials'?"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"min": 0.1, "max": 0.1}, "spec.parameters[0].max: must be greater than min (0.1), got 0.1"),
        ({"min": 0.0}, "spec.parameters[0].min: a log-scale parameter needs min > 0, got 0.0"),
        ({"step": 0.01}, "spec.parameters[0].step: a log-scale double takes no step"),
        ({"max": float("inf")}, "spec.parameters[0].max: must be a finite number, got inf"),
        ({"values": [1, 2]}, "spec.parameters[0].values: a double parameter takes min and max, not values"),
        ({"name": "Learning-Rate"}, "spec.parameters[0].name: 'Learning-Rate' is not a parameter name"),
    ],
)
def test_a_bad_double_is_refused_at_its_field(doc: dict[str, Any], change: dict[str, Any], expected: str) -> None:
    doc["spec"]["parameters"][0].update(change)
    (error,) = errors_of(doc)
    assert error.startswith(expected)


def test_int_bounds_must_be_whole_numbers_a_float_holds(doc: dict[str, Any]) -> None:
    doc["spec"]["parameters"][1]["max"] = 6.5
    assert errors_of(doc) == ["spec.parameters[1].max: an int parameter needs whole numbers, got 6.5"]
    doc["spec"]["parameters"][1]["max"] = 10**400
    (error,) = errors_of(doc)
    assert error.startswith("spec.parameters[1].max: must be between -2**53 and 2**53 (what a float holds exactly)")


def test_a_discrete_parameter_takes_numbers_and_a_categorical_strings(doc: dict[str, Any]) -> None:
    doc["spec"]["parameters"][2]["values"] = [32, "big"]
    doc["spec"]["parameters"][3]["values"] = ["adam", 3]
    errors = errors_of(doc)
    assert errors[0].startswith("spec.parameters[2].values[1]: a discrete parameter takes numbers")
    assert errors[1].startswith("spec.parameters[3].values[1]: a categorical parameter takes strings")


def test_values_are_listed_once_and_not_empty(doc: dict[str, Any]) -> None:
    doc["spec"]["parameters"][2]["values"] = [32, 32]
    doc["spec"]["parameters"][3]["values"] = []
    assert errors_of(doc) == [
        "spec.parameters[2].values: each value must be listed once",
        "spec.parameters[3].values: required for a categorical parameter: a non-empty list, e.g. [32, 64]",
    ]


def test_parameter_names_are_unique(doc: dict[str, Any]) -> None:
    doc["spec"]["parameters"][1]["name"] = "lr"
    assert "spec.parameters[1].name: 'lr' is listed twice; names must be unique" in errors_of(doc)


def test_a_condition_names_an_earlier_parameter_with_values(doc: dict[str, Any]) -> None:
    params = doc["spec"]["parameters"]
    params[4]["when"] = {"optimizer": "rmsprop", "lr": 0.1, "later": "x"}
    params.append({"name": "later", "type": "categorical", "values": ["x"]})
    assert errors_of(doc) == [
        "spec.parameters[4].when.optimizer: 'rmsprop' is not a value of 'optimizer'; its values are ['adam', 'sgd']",
        "spec.parameters[4].when.lr: 'lr' is a double parameter; a condition names a categorical or discrete",
        "spec.parameters[4].when.later: no earlier parameter is called 'later'; a condition names one listed above it",
    ]


def test_a_condition_may_accept_several_values(doc: dict[str, Any]) -> None:
    doc["spec"]["parameters"][4]["when"] = {"optimizer": ["adam", "sgd"], "batch": 64}
    assert parse_sweep(doc).spec.parameters[4].conditions() == {"optimizer": ["adam", "sgd"], "batch": [64]}


def test_grid_refuses_a_continuous_double_naming_it(doc: dict[str, Any]) -> None:
    doc["spec"]["algorithm"]["name"] = "grid"
    drop_momentum(doc)
    errors = errors_of(doc)
    assert errors == [
        "spec.algorithm.name: grid needs every parameter finite; 'lr' is a continuous double: give it a step, "
        "or use random or tpe"
    ]


def test_grid_accepts_doubles_with_a_step_and_enumerates_them(doc: dict[str, Any]) -> None:
    doc["spec"]["algorithm"]["name"] = "grid"
    doc["spec"]["parameters"] = [
        {"name": "lr", "type": "double", "min": 0.1, "max": 0.5, "step": 0.1},
        {"name": "layers", "type": "int", "min": 1, "max": 7, "step": 3},
    ]
    doc["spec"]["trial"]["spec"]["replicas"]["worker"]["template"]["env"] = {}
    lr, layers = parse_sweep(doc).spec.parameters
    assert lr.finite_values() == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert layers.finite_values() == [1, 4, 7]


def test_grid_refuses_conditions_and_a_grid_too_large(doc: dict[str, Any]) -> None:
    doc["spec"]["algorithm"]["name"] = "grid"
    doc["spec"]["parameters"][0] = {"name": "lr", "type": "int", "min": 1, "max": 10**6}
    doc["spec"]["parameters"][1]["max"] = 100
    doc["spec"]["parameters"][4]["step"] = 0.1
    errors = errors_of(doc)
    assert errors[0].startswith("spec.algorithm.name: the grid has 3000000000 points (at most 10000000)")
    assert errors[1].startswith("spec.algorithm.name: grid does not model conditional parameters; 'momentum'")
    drop_momentum(doc)
    doc["spec"]["parameters"][0]["max"] = 2**53  # counted, never listed
    assert errors_of(doc) == [
        "spec.algorithm.name: the grid has more than 10**15 points (at most 10000000); coarsen steps"
    ]
    doc["spec"]["parameters"][0] = {"name": "lr", "type": "double", "min": -1e300, "max": 1e300, "step": 1e-300}
    assert errors_of(doc)[0].startswith("spec.algorithm.name: the grid has more than 10**15 points")


def test_cmaes_refuses_discrete_and_categorical_parameters(doc: dict[str, Any]) -> None:
    doc["spec"]["algorithm"]["name"] = "cmaes"
    errors = errors_of(doc)
    assert [e.split(";")[1].strip() for e in errors[:2]] == [
        "'batch' is discrete: Optuna would pick it at random outside the CMA-ES model. Use tpe or gp",
        "'optimizer' is categorical: Optuna would pick it at random outside the CMA-ES model. Use tpe or gp",
    ]
    assert all(e.startswith("spec.algorithm.name: ") for e in errors)


def test_gp_takes_categoricals_but_not_conditions(doc: dict[str, Any]) -> None:
    doc["spec"]["algorithm"]["name"] = "gp"
    assert errors_of(doc) == [
        "spec.algorithm.name: gp does not model conditional parameters; 'momentum' has 'when'. Use random or tpe"
    ]
    drop_momentum(doc)
    assert parse_sweep(doc).spec.algorithm.name == "gp"


def test_an_unknown_algorithm_lists_the_known_ones(doc: dict[str, Any]) -> None:
    doc["spec"]["algorithm"]["name"] = "bayes"
    (error,) = errors_of(doc)
    assert error.startswith("spec.algorithm.name: must be one of 'grid', 'random', 'tpe', 'cmaes' or 'gp'")


def test_the_objective_metric_and_goal_are_checked(doc: dict[str, Any]) -> None:
    doc["spec"]["objective"] = {"metric": "val loss", "direction": "down", "goal": 0.1}
    errors = errors_of(doc)
    assert errors[0].startswith("spec.objective.direction: must be one of 'minimize' or 'maximize'")
    doc["spec"]["objective"]["direction"] = "maximize"
    (error,) = errors_of(doc)
    assert error.startswith("spec.objective.metric: 'val loss' is not a metric name")


def test_early_stopping_refuses_fields_its_rule_does_not_use(doc: dict[str, Any]) -> None:
    doc["spec"]["earlyStopping"] = {"rule": "median", "reductionFactor": 2}
    assert errors_of(doc) == [
        "spec.earlyStopping.reductionFactor: the median rule does not use reductionFactor; remove it"
    ]
    doc["spec"]["earlyStopping"] = {"rule": "successiveHalving", "startStep": 2}
    assert errors_of(doc) == [
        "spec.earlyStopping.startStep: the successiveHalving rule does not use startStep; remove it"
    ]
    doc["spec"]["earlyStopping"] = {"rule": "hyperband", "maxResource": 9, "medianOf": "values"}
    assert errors_of(doc) == ["spec.earlyStopping.medianOf: the hyperband rule does not use medianOf; remove it"]


def test_the_median_rule_takes_the_median_of_running_averages_or_of_values(doc: dict[str, Any]) -> None:
    doc["spec"]["earlyStopping"] = {"rule": "median", "medianOf": "value"}
    (error,) = errors_of(doc)
    assert error.startswith("spec.earlyStopping.medianOf: must be one of 'runningAverages' or 'values'")
    doc["spec"]["earlyStopping"]["medianOf"] = "values"
    stopping = parse_sweep(doc).spec.early_stopping
    assert stopping is not None
    assert stopping.median_basis == "values"
    del doc["spec"]["earlyStopping"]["medianOf"]
    stopping = parse_sweep(doc).spec.early_stopping
    assert stopping is not None
    assert stopping.median_basis == "runningAverages"


def test_hyperband_needs_a_max_resource_above_the_min(doc: dict[str, Any]) -> None:
    doc["spec"]["earlyStopping"] = {"rule": "hyperband", "minResource": 3}
    (error,) = errors_of(doc)
    assert error.startswith("spec.earlyStopping.maxResource: required for hyperband")
    doc["spec"]["earlyStopping"]["maxResource"] = 3
    assert errors_of(doc) == ["spec.earlyStopping.maxResource: must be greater than minResource (3)"]
    doc["spec"]["earlyStopping"]["maxResource"] = 81
    stopping = parse_sweep(doc).spec.early_stopping
    assert stopping is not None and (stopping.resource_floor, stopping.factor, stopping.max_resource) == (3, 3, 81)


def test_a_sweep_name_too_long_for_its_trial_names_is_refused(doc: dict[str, Any]) -> None:
    doc["metadata"]["name"] = "s" * 61  # s...s-19 would be 64 characters
    (error,) = errors_of(doc)
    assert error.startswith("metadata.name: trials are named <sweep>-<number>, and 'sss")
    assert error.endswith("would be 64 characters (at most 63); shorten the name to 60")
    doc["metadata"]["name"] = "s" * 60
    assert parse_sweep(doc).metadata.name == "s" * 60


@pytest.mark.parametrize("reference", ["${params.lrr}", "${trial.id}", "${sweep.namespace}"])
def test_an_unknown_reference_is_refused_at_its_path(doc: dict[str, Any], reference: str) -> None:
    doc["spec"]["trial"]["spec"]["replicas"]["worker"]["template"]["args"] = ["--x", f"a{reference}b"]
    (error,) = errors_of(doc)
    assert error.startswith(f"spec.trial.spec.replicas.worker.template.args[1]: {reference} names nothing; use one of")


def test_other_dollar_braces_are_left_to_the_shell(doc: dict[str, Any]) -> None:
    doc["spec"]["trial"]["spec"]["replicas"]["worker"]["template"]["args"] = ["${HOME}", "${params}", "$params.lr"]
    assert parse_sweep(doc).spec.trial.spec["replicas"]


def test_budgets_are_bounded(doc: dict[str, Any]) -> None:
    doc["spec"]["parallelTrials"] = 0
    doc["spec"]["maxTrials"] = 10**9
    assert errors_of(doc) == [
        "spec.parallelTrials: must be >= 1, got 0",
        "spec.maxTrials: must be <= 100000, got 1000000000",
    ]


def test_the_wrong_kind_is_named(doc: dict[str, Any]) -> None:
    doc["kind"] = "Experiment"
    assert errors_of(doc) == ["kind: must be Sweep, got 'Experiment'"]
    assert errors_of([1]) == ["a Sweep must be a mapping with metadata and spec"]


def test_sample_values_are_the_first_value_or_the_minimum() -> None:
    assert Parameter(name="a", type="int", min=2, max=5).sample_value() == 2
    assert isinstance(Parameter(name="a", type="double", min=2, max=5).sample_value(), float)
    assert Parameter(name="a", type="categorical", values=["x", "y"]).sample_value() == "x"


def test_a_condition_lists_at_least_one_value(doc: dict[str, Any]) -> None:
    doc["spec"]["parameters"][4]["when"] = {"optimizer": []}
    assert errors_of(doc) == [
        "spec.parameters[4].when.optimizer: list at least one value of 'optimizer', or remove the condition"
    ]


NUMBERS = st.one_of(
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(),
    st.sampled_from([0, 1, -1, 2**53, 2**53 + 1, 1e308, 1e-308, True]),
)
WILD_PARAMETER = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["a", "b", "Bad", ""]),
        "type": st.sampled_from(["double", "int", "discrete", "categorical", "x"]),
    },
    optional={
        "min": NUMBERS,
        "max": NUMBERS,
        "step": NUMBERS,
        "log": st.booleans(),
        "values": st.lists(st.one_of(NUMBERS, st.text(max_size=3)), max_size=4),
        "when": st.dictionaries(st.sampled_from(["a", "b", "z"]), st.one_of(NUMBERS, st.text(max_size=2)), max_size=2),
    },
)


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    parameters=st.lists(WILD_PARAMETER, min_size=1, max_size=3),
    algorithm=st.sampled_from(["grid", "random", "tpe", "cmaes", "gp"]),
    goal=NUMBERS,
)
def test_any_search_space_is_accepted_or_refused_with_spec_errors_only(
    doc: dict[str, Any], parameters: list[dict[str, Any]], algorithm: str, goal: Any
) -> None:
    doc["spec"].update(parameters=parameters, algorithm={"name": algorithm}, objective={"metric": "m", "goal": goal})
    doc["spec"]["trial"]["spec"]["replicas"]["worker"]["template"]["env"] = {}
    doc["spec"]["trial"]["spec"]["replicas"]["worker"]["template"]["command"] = ["x"]
    try:
        sweep = parse_sweep(doc)
    except SpecError as error:
        assert error.errors and all(e.path and e.message for e in error.errors)
        return
    for parameter in sweep.spec.parameters:
        size = parameter.grid_size()
        assert size is None or size >= 1
        if algorithm == "grid" and size is not None and size < 1000:
            assert len(parameter.finite_values() or []) == size
