"""Katib Experiments (``kubeflow.org/v1beta1``, kind Experiment) turned into Sweep documents.

A pure function of the document and the JobTypes its trial may use: ``convert_experiment`` returns the Sweep
document, a map from every Sweep path back to the Experiment path (so that a problem the Sweep's validation
finds, ``core.sweeps.katib.validate_experiment``, is reported where the user wrote it), and how parameter names
were renamed. It lives beside ``model.kubeflow`` rather than in it: that package turns job kinds into
TrainingJobs, while an Experiment becomes a Sweep (its trial goes through ``model.kubeflow``'s converters).

Every field has a meaning here or is refused with its path and why; nothing is dropped:

- ``parameters``: parameterType as the Sweep's type; ``feasibleSpace`` min, max, step (strings upstream, numbers
  here; numbers are taken too), list (numbers for discrete, strings for categorical), distribution uniform
  (log false) or logUniform (log true); normal and logNormal are refused (Optuna samples uniformly, on a
  linear or a log scale). Names are stricter in a Sweep (``[a-z][a-z0-9_]*``, used as ``${params.NAME}``):
  they are renamed deterministically (``num-layers`` → ``num_layers``, ``learningRate`` → ``learning_rate``, a
  clash gets ``_2``...) and the mapping is kept in the ``phalanx.dev/katib-parameter-names`` annotation.
- ``objective``: type, goal, objectiveMetricName. additionalMetricNames is refused (a Sweep tracks one metric),
  and so is a metricStrategies entry other than upstream's default (min when minimizing, max when maximizing).
- ``algorithm``: random, grid, tpe, multivariate-tpe (tpe with ``multivariate: true``), cmaes,
  bayesianoptimization (gp); each algorithmSettings entry maps to the setting of Optuna's sampler the Katib
  Optuna service passes it to (``random_state`` is the seed), anything else is refused by path. hyperband is
  refused: Katib's hyperband sets a resource parameter (``resource_name``) of each trial and reruns trials with
  more of it, where a Sweep's hyperband stops running trials at intermediate steps; converting one into the
  other would change what each trial runs.
- ``earlyStopping``: medianstop with min_trials_required (minTrials) and start_step (startStep).
- ``parallelTrialCount`` (written explicitly: upstream's default is 3, a Sweep's 1), ``maxTrialCount`` (required
  here: a Sweep has a trial budget), ``maxFailedTrialCount``, ``resumePolicy`` Never and LongRunning (they decide
  whether Katib keeps its suggestion service; a Sweep's state lives in the store either way).
- ``trialTemplate``: trialParameters (``${trialParameters.X}`` in the trialSpec becomes ``${params.Y}``, or
  ``${trial.name}``/``${trial.namespace}`` for a reference to ``${trialSpec.Name}``/``${trialSpec.Namespace}``);
  a trialSpec of kind TrainingJob (taken as it is), batch/v1 Job (a one-replica ``generic`` job: its pod template
  through ``model.kubeflow.pods``, backoffLimit, activeDeadlineSeconds and ttlSecondsAfterFinished as the
  runPolicy's, the pod's restartPolicy as the job's, parallelism and completions 1 only) or a Kubeflow job kind
  (``model.kubeflow``'s converter); the trialSpec's labels and annotations go on every trial's job, its name and
  namespace are refused (a trial is ``<sweep>-<number>``); primaryContainerName when it names the trial's
  container; primaryPodLabels is refused (metrics are read from the job);
  successCondition and failureCondition when they are upstream's defaults for the kind (what Phalanx's job
  phases mean); retain: true keeps the finished trial's pods (``cleanPodPolicy: None``).
- ``metricsCollectorSpec``: StdOut (upstream's default, also when the field is absent), with its optional
  ``source.filter.metricsFormat``; the ``phalanx.dev/metrics-format`` annotation says the trials print Katib's
  ``name=value`` lines, for the collector to read them as well as ``phalanx-metric`` lines. Other collectors
  are refused.
- nasConfig, configMap templates and resumePolicy FromVolume are refused.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.jobtypes import JobType
from phalanx.model.kubeflow.convert import CONVERTED_FROM, Conversion, convert, lift_scheduler_name, record_pod_paths
from phalanx.model.kubeflow.kinds import KINDS
from phalanx.model.kubeflow.pods import replica_template, resource_paths
from phalanx.model.names import MAX_NAME_LENGTH

API_VERSION = "kubeflow.org/v1beta1"
KIND = "Experiment"
#: The Sweep annotation holding ``{katib name: sweep name}`` for every parameter whose name changed.
PARAMETER_NAMES_ANNOTATION = "phalanx.dev/katib-parameter-names"
#: The Sweep annotation naming the line format trials print their metrics in, besides ``phalanx-metric``.
METRICS_FORMAT_ANNOTATION = "phalanx.dev/metrics-format"
#: Katib's StdOut format: ``name=value`` pairs anywhere on a line, each report one more step of the metric.
KATIB_STDOUT = "katib-stdout"
#: The Sweep annotation holding the StdOut collector's own regular expressions (a JSON list), when given.
METRICS_FILTER_ANNOTATION = "phalanx.dev/metrics-filter"

_EXPERIMENT_SPEC_FIELDS = (
    "parameters",
    "objective",
    "algorithm",
    "earlyStopping",
    "trialTemplate",
    "parallelTrialCount",
    "maxTrialCount",
    "maxFailedTrialCount",
    "metricsCollectorSpec",
    "nasConfig",
    "resumePolicy",
)
_PARAMETER_TYPES = ("double", "int", "discrete", "categorical")
_ALGORITHMS = {
    "random": "random",
    "grid": "grid",
    "tpe": "tpe",
    "multivariate-tpe": "tpe",
    "cmaes": "cmaes",
    "bayesianoptimization": "gp",
}
#: Per algorithm: Katib setting → (the Sweep's setting, or "seed"; how its string value is read).
_SETTINGS: dict[str, dict[str, tuple[str, Callable[[str], Any]]]] = {
    "random": {"random_state": ("seed", int)},
    "grid": {},
    # The Katib Optuna service's names, and hyperopt's (which served tpe before it) for the same Optuna options.
    "tpe": {
        "random_state": ("seed", int),
        "startup_trials": ("n_startup_trials", int),
        "n_startup_jobs": ("n_startup_trials", int),
        "ei_candidates": ("n_ei_candidates", int),
        "n_EI_candidates": ("n_ei_candidates", int),
        "prior_weight": ("prior_weight", float),
    },
    "cmaes": {"random_state": ("seed", int), "sigma": ("sigma0", float), "restart_strategy": ("restart_strategy", str)},
    "bayesianoptimization": {"random_state": ("seed", int), "n_initial_points": ("n_startup_trials", int)},
}
_SETTINGS["multivariate-tpe"] = _SETTINGS["tpe"]
_RESTART_STRATEGIES = ("ipop", "bipop")
#: Katib's defaults per trial kind: ``status.conditions`` of type Complete (a Job) or Succeeded (a Kubeflow job).
_JOB_CONDITIONS = (
    'status.conditions.#(type=="Complete")#|#(status=="True")#',
    'status.conditions.#(type=="Failed")#|#(status=="True")#',
)
_KUBEFLOW_CONDITIONS = (
    'status.conditions.#(type=="Succeeded")#|#(status=="True")#',
    'status.conditions.#(type=="Failed")#|#(status=="True")#',
)
_TRIAL_PARAMETER = re.compile(r"\$\{trialParameters\.([^}]*)\}")
_TRIAL_METADATA = {"${trialSpec.Name}": "${trial.name}", "${trialSpec.Namespace}": "${trial.namespace}"}


@dataclass(frozen=True)
class ExperimentConversion:
    """What an Experiment becomes, before the Sweep's validation."""

    sweep: dict[str, Any]
    #: (Sweep path prefix, Experiment path), longest prefix first
    paths: tuple[tuple[str, str], ...]
    #: Katib parameter name → the Sweep's, for every parameter (renamed or not)
    parameter_names: Mapping[str, str]
    #: JobType documents the trial needs besides the built-in ones (an MPIJob trial with several slots)
    jobtypes: tuple[dict[str, Any], ...] = ()
    #: the conversion of a Kubeflow job trialSpec, whose paths decide below ``spec.trial.spec``
    trial: Conversion | None = None

    def upstream_path(self, path: str) -> str:
        """The path in the Experiment of a Sweep path (the longest known prefix is replaced)."""
        if self.trial is not None and _under(path, "spec.trial.spec"):
            job_path = path[len("spec.trial.") :]
            return f"{_TRIAL_SPEC}.{self.trial.upstream_path(job_path)}"
        for prefix, upstream in self.paths:
            if _under(path, prefix):
                return upstream + path[len(prefix) :]
        return path


_TRIAL_SPEC = "spec.trialTemplate.trialSpec"


def _under(path: str, prefix: str) -> bool:
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] in ".[")


def sweep_parameter_name(name: str) -> str:
    """The Sweep name a Katib parameter name becomes before clashes are resolved: ``num-layers`` → ``num_layers``.

    camelCase becomes snake_case, every character outside ``[a-z0-9_]`` an underscore, and a name not starting
    with a letter gets ``p_`` in front; at most 63 characters.
    """
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    cleaned = re.sub(r"[^a-z0-9_]", "_", snake)
    if not cleaned or not cleaned[0].isalpha() or not cleaned[0].isascii():
        cleaned = f"p_{cleaned}"
    return cleaned[:MAX_NAME_LENGTH]


def sweep_parameter_names(names: list[str]) -> dict[str, str]:
    """Each Katib name's Sweep name, unique: in list order, a name already taken gets ``_2``, ``_3``..."""
    taken: set[str] = set()
    result: dict[str, str] = {}
    for name in names:
        if name in result:
            continue  # a duplicate name is refused by the Sweep's validation, at its path
        base = sweep_parameter_name(name)
        candidate, number = base, 1
        while candidate in taken:
            number += 1
            suffix = f"_{number}"
            candidate = base[: MAX_NAME_LENGTH - len(suffix)] + suffix
        taken.add(candidate)
        result[name] = candidate
    return result


def is_experiment(document: Mapping[str, Any]) -> bool:
    """Whether a document is a Katib Experiment (of any API version: a wrong one is refused by the conversion)."""
    return document.get("kind") == KIND and str(document.get("apiVersion", "")).startswith("kubeflow.org/")


def convert_experiment(document: Mapping[str, Any], jobtypes: Mapping[str, JobType]) -> ExperimentConversion:
    """The Sweep document a Katib Experiment becomes.

    Args:
        document: the upstream document, as read.
        jobtypes: the JobTypes known (an MPIJob trial starts from ``mpi``).

    Raises:
        SpecError: every field that cannot be honoured, each with its Experiment path and why.
    """
    return _Converter().run(document, jobtypes)


def _number(value: Any, path: str, errors: list[FieldError], *, whole: bool) -> int | float | None:
    """A feasibleSpace number: upstream writes strings (``"0.01"``); a YAML number is taken as well."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            if not whole:
                try:
                    parsed = float(text)
                except ValueError:
                    pass
                else:
                    if math.isfinite(parsed):
                        return parsed
    kind = "a whole number" if whole else "a number"
    errors.append(
        FieldError(path, f'must be {kind} written as a string, e.g. "{1 if whole else 0.01}"; got {short(value)}')
    )
    return None


@dataclass
class _Converter:
    errors: list[FieldError] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    #: Every trial parameter listed, its reference usable or not: one refused at its reference is not refused
    #: again where the trialSpec uses it (that second error said "list it", though it was listed).
    listed_trial_parameters: set[str] = field(default_factory=set)

    def refuse(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def run(self, document: Mapping[str, Any], jobtypes: Mapping[str, JobType]) -> ExperimentConversion:
        if document.get("apiVersion") != API_VERSION:
            self.refuse(
                "apiVersion",
                f"an Experiment is accepted as {API_VERSION}, got {short(document.get('apiVersion'))}; "
                f"write apiVersion: {API_VERSION}",
            )
        if document.get("kind") != KIND:
            self.refuse("kind", f"must be {KIND}, got {short(document.get('kind'))}")
        for key in document:
            if key not in ("apiVersion", "kind", "metadata", "spec", "status"):
                self.refuse(key, "unknown field of an Experiment; it has apiVersion, kind, metadata and spec")
        spec = document.get("spec")
        if not isinstance(spec, Mapping):
            self.refuse("spec", "required: an Experiment spec with parameters, objective, algorithm and trialTemplate")
            raise SpecError(self.errors)
        for key in spec:
            if key == "nasConfig":
                self.refuse("spec.nasConfig", "neural architecture search is not supported; write the architecture's "
                            "choices as parameters of a hyperparameter search")  # fmt: skip
            elif key not in _EXPERIMENT_SPEC_FIELDS:
                self.refuse(f"spec.{key}", "unknown field of an Experiment spec; remove it")
        sweep_spec: dict[str, Any] = {"parameters": self.parameters(spec.get("parameters"))}
        sweep_spec["algorithm"] = self.algorithm(spec.get("algorithm"))
        sweep_spec["objective"] = self.objective(spec.get("objective"))
        self.budgets(spec, sweep_spec)
        if spec.get("earlyStopping") is not None:
            sweep_spec["earlyStopping"] = self.early_stopping(spec["earlyStopping"])
        self.resume_policy(spec.get("resumePolicy"))
        annotations = {
            CONVERTED_FROM: f"{KIND}.{API_VERSION}",
            **self.metrics_collector(spec.get("metricsCollectorSpec")),
        }
        trial, conversion = self.trial_template(spec.get("trialTemplate"), jobtypes)
        sweep_spec["trial"] = trial
        renamed = {katib: ours for katib, ours in self.names.items() if katib != ours}
        if renamed:
            annotations[PARAMETER_NAMES_ANNOTATION] = json.dumps(renamed, separators=(",", ":"))
        if self.errors:
            raise SpecError(self.errors)
        sweep = {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Sweep",
            "metadata": _annotated(document.get("metadata"), annotations),
            "spec": sweep_spec,
        }
        self.paths.update({"spec.trial": "spec.trialTemplate", "spec.algorithm.name": "spec.algorithm.algorithmName"})
        ordered = sorted(self.paths.items(), key=lambda item: len(item[0]), reverse=True)
        return ExperimentConversion(
            sweep=sweep,
            paths=tuple(ordered),
            parameter_names=dict(self.names),
            jobtypes=conversion.jobtypes if conversion else (),
            trial=conversion,
        )

    # -- the search space ------------------------------------------------------------------------------------

    def parameters(self, parameters: Any) -> list[dict[str, Any]]:
        if not isinstance(parameters, list) or not parameters:
            self.refuse("spec.parameters", "required: a list of parameters, e.g. [{name: lr, parameterType: double, "
                        'feasibleSpace: {min: "0.01", max: "0.1"}}]')  # fmt: skip
            return []
        raw_names = [
            str(p.get("name")) for p in parameters if isinstance(p, Mapping) and isinstance(p.get("name"), str)
        ]
        self.names = sweep_parameter_names(raw_names)
        return [self.parameter(p, f"spec.parameters[{i}]") for i, p in enumerate(parameters)]

    def parameter(self, parameter: Any, path: str) -> dict[str, Any]:
        if not isinstance(parameter, Mapping):
            self.refuse(path, f"must be a parameter with name, parameterType and feasibleSpace, got {short(parameter)}")
            return {}
        for key in parameter:
            if key not in ("name", "parameterType", "feasibleSpace"):
                self.refuse(
                    f"{path}.{key}", "unknown field of a parameter; it has name, parameterType and feasibleSpace"
                )
        name = parameter.get("name")
        kind = parameter.get("parameterType")
        self.paths.update({f"{path}.name": f"{path}.name", f"{path}.type": f"{path}.parameterType", path: path})
        if not isinstance(name, str) or not name:
            self.refuse(f"{path}.name", f"required: the parameter's name, got {short(name)}")
            return {}
        if kind not in _PARAMETER_TYPES:
            self.refuse(f"{path}.parameterType", f"must be one of {', '.join(_PARAMETER_TYPES)}, got {short(kind)}")
            return {}
        result: dict[str, Any] = {"name": self.names[name], "type": kind}
        space = parameter.get("feasibleSpace")
        where = f"{path}.feasibleSpace"
        if not isinstance(space, Mapping):
            self.refuse(where, "required: the values to search, min and max or list")
            return result
        for key in space:
            if key not in ("min", "max", "step", "list", "distribution"):
                self.refuse(
                    f"{where}.{key}", "unknown field of a feasibleSpace; it has min, max, step, list, distribution"
                )
        for ours, theirs in (
            ("min", "min"),
            ("max", "max"),
            ("step", "step"),
            ("values", "list"),
            ("log", "distribution"),
        ):
            self.paths[f"{path}.{ours}"] = f"{where}.{theirs}"
        if kind in ("double", "int"):
            for key in ("min", "max", "step"):
                if space.get(key) not in (None, ""):
                    value = _number(space[key], f"{where}.{key}", self.errors, whole=kind == "int")
                    if value is not None:
                        result[key] = float(value) if kind == "double" else value
            if "list" in space:
                self.refuse(
                    f"{where}.list", f"a {kind} parameter takes min and max; use parameterType discrete for a list"
                )
            distribution = space.get("distribution")
            if distribution in ("logUniform",):
                result["log"] = True
            elif distribution not in (None, "", "uniform"):
                self.refuse(
                    f"{where}.distribution",
                    f"{short(distribution)} is not supported: a Sweep samples uniformly on a linear scale (uniform) "
                    "or a log scale (logUniform); use one of those",
                )
        else:
            for key in ("min", "max", "step", "distribution"):
                if space.get(key) not in (None, ""):
                    self.refuse(f"{where}.{key}", f"a {kind} parameter takes list only; remove {key}")
            values = space.get("list")
            if not isinstance(values, list):
                self.refuse(f"{where}.list", f'required for a {kind} parameter: a list of values, e.g. ["32", "64"]')
                return result
            if kind == "categorical":
                result["values"] = [v if isinstance(v, str) else str(v) for v in values]
            else:
                numbers = [_number(v, f"{where}.list[{i}]", self.errors, whole=False) for i, v in enumerate(values)]
                result["values"] = [n for n in numbers if n is not None]
        return result

    # -- algorithm, objective, budgets -----------------------------------------------------------------------

    def algorithm(self, algorithm: Any) -> dict[str, Any]:
        path = "spec.algorithm"
        if not isinstance(algorithm, Mapping):
            self.refuse(path, "required: the search algorithm, e.g. {algorithmName: random}")
            return {}
        for key in algorithm:
            if key not in ("algorithmName", "algorithmSettings"):
                self.refuse(
                    f"{path}.{key}", "unknown field of an algorithm; it has algorithmName and algorithmSettings"
                )
        name = algorithm.get("algorithmName")
        if name == "hyperband":
            self.refuse(
                f"{path}.algorithmName",
                "Katib's hyperband sets each trial's resource parameter and reruns trials with more of it; a Sweep "
                "stops trials at intermediate steps instead. Write a Sweep with algorithm random and earlyStopping "
                "rule hyperband, or use random or tpe here",
            )
            return {}
        if not isinstance(name, str) or name not in _ALGORITHMS:
            listed = ", ".join(_ALGORITHMS)
            self.refuse(f"{path}.algorithmName", f"{short(name)} is not supported; use one of {listed}")
            return {}
        result: dict[str, Any] = {"name": _ALGORITHMS[name]}
        settings: dict[str, Any] = {"multivariate": True} if name == "multivariate-tpe" else {}
        table = _SETTINGS[name]
        for index, (key, value, where) in enumerate(self.settings(algorithm.get("algorithmSettings"), path)):
            del index
            if name == "bayesianoptimization" and key == "base_estimator":
                if value != "GP":
                    self.refuse(where, f"Optuna's Bayesian optimization models with a Gaussian process; {short(value)} "
                                "is not supported: use GP or remove the setting")  # fmt: skip
                continue
            if name == "cmaes" and key == "restart_strategy" and value in ("", "none"):
                continue
            if key not in table:
                known = ", ".join(table) or "none"
                self.refuse(where, f"{short(key)} is not a setting of {name} here; its settings are {known}")
                continue
            ours, read = table[key]
            try:
                typed = read(value)
            except ValueError:
                self.refuse(f"{where}.value", f"{key} must be a {read.__name__}, got {short(value)}")
                continue
            if isinstance(typed, float) and not (math.isfinite(typed) and typed > 0):
                self.refuse(f"{where}.value", f"{key} must be a finite number > 0, got {short(value)}")
                continue
            if ours == "restart_strategy" and typed not in _RESTART_STRATEGIES:
                self.refuse(f"{where}.value", f"restart_strategy must be ipop, bipop or none, got {short(value)}")
                continue
            if ours == "seed":
                result["seed"] = typed
                self.paths["spec.algorithm.seed"] = f"{where}.value"
            else:
                settings[ours] = typed
                self.paths[f"spec.algorithm.settings.{ours}"] = f"{where}.value"
        if settings:
            result["settings"] = settings
        return result

    def settings(self, settings: Any, path: str) -> list[tuple[str, str, str]]:
        """``(name, value, path)`` of each ``algorithmSettings`` entry; values are strings upstream."""
        if settings is None:
            return []
        where = f"{path}.algorithmSettings"
        if not isinstance(settings, list):
            self.refuse(where, f"must be a list of {{name, value}}, got {short(settings)}")
            return []
        found = []
        for index, entry in enumerate(settings):
            item = f"{where}[{index}]"
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                self.refuse(item, f"must be a setting {{name, value}}, got {short(entry)}")
                continue
            for key in entry:
                if key not in ("name", "value"):
                    self.refuse(f"{item}.{key}", "unknown field of a setting; it has name and value")
            value = entry.get("value", "")
            found.append((entry["name"], value if isinstance(value, str) else str(value), item))
        return found

    def objective(self, objective: Any) -> dict[str, Any]:
        path = "spec.objective"
        if not isinstance(objective, Mapping):
            self.refuse(path, "required: the objective, e.g. {type: maximize, objectiveMetricName: accuracy}")
            return {}
        result: dict[str, Any] = {}
        direction = objective.get("type")
        if direction not in ("minimize", "maximize"):
            self.refuse(f"{path}.type", f"must be minimize or maximize, got {short(direction)}")
        else:
            result["direction"] = direction
        metric = objective.get("objectiveMetricName")
        if metric is not None:
            result["metric"] = metric
        if objective.get("goal") is not None:
            goal = _number(objective["goal"], f"{path}.goal", self.errors, whole=False)
            if goal is not None:
                result["goal"] = goal
        if objective.get("additionalMetricNames"):
            self.refuse(
                f"{path}.additionalMetricNames",
                "a Sweep records its objective metric only; remove it (each trial's metrics.json still holds "
                "every metric the trial writes)",
            )
        default = {"minimize": "min", "maximize": "max"}.get(str(direction))
        strategies = objective.get("metricStrategies") or []
        for index, strategy in enumerate(strategies if isinstance(strategies, list) else [strategies]):
            where = f"{path}.metricStrategies[{index}]"
            if not isinstance(strategy, Mapping) or strategy.get("name") != metric or strategy.get("value") != default:
                self.refuse(
                    where,
                    f"a Sweep takes its objective as upstream's default strategy ({default or 'min or max'} of "
                    f"{short(metric)}); remove this entry",
                )
        for key in objective:
            if key not in ("type", "goal", "objectiveMetricName", "additionalMetricNames", "metricStrategies"):
                self.refuse(f"{path}.{key}", "unknown field of an objective; remove it")
        self.paths.update(
            {
                "spec.objective": path,
                "spec.objective.metric": f"{path}.objectiveMetricName",
                "spec.objective.direction": f"{path}.type",
            }
        )
        return result

    def budgets(self, spec: Mapping[str, Any], sweep_spec: dict[str, Any]) -> None:
        # Katib's default parallelism is 3, a Sweep's 1: written out so the converted sweep runs as upstream's.
        sweep_spec["parallelTrials"] = spec.get("parallelTrialCount", 3)
        if spec.get("maxTrialCount") is None:
            self.refuse("spec.maxTrialCount", "required: a Sweep has a trial budget; set the most trials to run")
        else:
            sweep_spec["maxTrials"] = spec["maxTrialCount"]
        if spec.get("maxFailedTrialCount") is not None:
            sweep_spec["maxFailedTrials"] = spec["maxFailedTrialCount"]
        self.paths.update(
            {
                "spec.parallelTrials": "spec.parallelTrialCount",
                "spec.maxTrials": "spec.maxTrialCount",
                "spec.maxFailedTrials": "spec.maxFailedTrialCount",
            }
        )

    def early_stopping(self, early: Any) -> dict[str, Any]:
        path = "spec.earlyStopping"
        if not isinstance(early, Mapping):
            self.refuse(path, f"must be {{algorithmName: medianstop, algorithmSettings: [...]}}, got {short(early)}")
            return {}
        for key in early:
            if key not in ("algorithmName", "algorithmSettings"):
                self.refuse(
                    f"{path}.{key}", "unknown field of earlyStopping; it has algorithmName and algorithmSettings"
                )
        if early.get("algorithmName") != "medianstop":
            self.refuse(f"{path}.algorithmName", f"must be medianstop, got {short(early.get('algorithmName'))}")
            return {}
        result: dict[str, Any] = {"rule": "median"}
        fields = {"min_trials_required": "minTrials", "start_step": "startStep"}
        for key, value, where in self.settings(early.get("algorithmSettings"), path):
            if key not in fields:
                self.refuse(where, f"{short(key)} is not a medianstop setting; use min_trials_required or start_step")
                continue
            number = _number(value, f"{where}.value", self.errors, whole=True)
            if number is not None:
                result[fields[key]] = number
                self.paths[f"{path}.{fields[key]}"] = f"{where}.value"
        self.paths["spec.earlyStopping.rule"] = f"{path}.algorithmName"
        return result

    def resume_policy(self, policy: Any) -> None:
        if policy in (None, "", "Never", "LongRunning"):
            return
        if policy == "FromVolume":
            self.refuse("spec.resumePolicy", "FromVolume keeps Katib's suggestion state on a volume; a Sweep keeps its "
                        "state in Phalanx's store: remove it, or use Never or LongRunning")  # fmt: skip
        else:
            self.refuse("spec.resumePolicy", f"must be Never, LongRunning or FromVolume, got {short(policy)}")

    def metrics_collector(self, collector_spec: Any) -> dict[str, str]:
        annotations = {METRICS_FORMAT_ANNOTATION: KATIB_STDOUT}
        if collector_spec is None:
            return annotations
        path = "spec.metricsCollectorSpec"
        if not isinstance(collector_spec, Mapping):
            self.refuse(path, f"must be a mapping with collector, got {short(collector_spec)}")
            return annotations
        for key in collector_spec:
            if key not in ("collector", "source"):
                self.refuse(f"{path}.{key}", "unknown field of metricsCollectorSpec; it has collector and source")
        collector = collector_spec.get("collector") or {}
        kind = collector.get("kind", "StdOut") if isinstance(collector, Mapping) else collector
        if kind != "StdOut" or (isinstance(collector, Mapping) and set(collector) - {"kind"}):
            self.refuse(
                f"{path}.collector",
                f"only the StdOut collector is supported (trials print name=value lines), got {short(collector)}",
            )
        source = collector_spec.get("source")
        if source is None:
            return annotations
        found = source.get("filter") if isinstance(source, Mapping) else None
        formats = found.get("metricsFormat") if isinstance(found, Mapping) else None
        if not isinstance(source, Mapping) or set(source) != {"filter"} or not isinstance(found, Mapping) \
                or set(found) != {"metricsFormat"} or not isinstance(formats, list):  # fmt: skip
            self.refuse(f"{path}.source", "StdOut reads the trial's output: only filter.metricsFormat (a list of "
                        "regular expressions) is taken here")  # fmt: skip
            return annotations
        for index, pattern in enumerate(formats):
            where = f"{path}.source.filter.metricsFormat[{index}]"
            try:
                groups = re.compile(pattern).groups if isinstance(pattern, str) else -1
            except re.error as error:
                self.refuse(where, f"is not a regular expression: {error}")
                continue
            if groups != 2:
                self.refuse(where, "must be a regular expression with two groups, the metric's name and its value")
        annotations[METRICS_FILTER_ANNOTATION] = json.dumps(formats, separators=(",", ":"))
        return annotations

    # -- the trial template ----------------------------------------------------------------------------------

    def trial_template(
        self, template: Any, jobtypes: Mapping[str, JobType]
    ) -> tuple[dict[str, Any], Conversion | None]:
        path = "spec.trialTemplate"
        if not isinstance(template, Mapping):
            self.refuse(path, "required: the trial template, with trialSpec and trialParameters")
            return {}, None
        allowed = ("trialSpec", "trialParameters", "primaryContainerName", "successCondition", "failureCondition",
                   "retain", "configMap", "primaryPodLabels")  # fmt: skip
        for key in template:
            if key not in allowed:
                self.refuse(f"{path}.{key}", "unknown field of a trialTemplate; remove it")
        if "configMap" in template:
            self.refuse(f"{path}.configMap", "a template in a ConfigMap is not read; write the trial's job under "
                        "trialSpec")  # fmt: skip
        if template.get("primaryPodLabels"):
            self.refuse(f"{path}.primaryPodLabels", "a Sweep reads a trial's metrics from its job, not from the pods "
                        "these labels pick; remove it")  # fmt: skip
        references = self.trial_parameters(template.get("trialParameters"), path)
        raw = template.get("trialSpec")
        if not isinstance(raw, Mapping):
            self.refuse(
                f"{path}.trialSpec", "required: the trial's job (a batch/v1 Job, a Kubeflow job or a TrainingJob)"
            )
            return {}, None
        spec = self.substituted(raw, references, f"{path}.trialSpec")
        if not isinstance(spec, Mapping):
            return {}, None
        kind, api = spec.get("kind"), spec.get("apiVersion")
        conversion: Conversion | None = None
        if kind == "TrainingJob" and api == "phalanx.dev/v1alpha1":
            job_spec = spec.get("spec")
            self.paths["spec.trial.spec"] = f"{_TRIAL_SPEC}.spec"
            conditions: tuple[str, str] | None = None
        elif kind == "Job" and api == "batch/v1":
            job_spec = self.batch_job(spec.get("spec"))
            conditions = _JOB_CONDITIONS
        elif isinstance(kind, str) and kind in KINDS:
            try:
                conversion = convert(spec, KINDS[kind], jobtypes)
            except SpecError as error:
                self.errors += [FieldError(f"{_TRIAL_SPEC}.{e.path}", e.message) for e in error.errors]
                return {}, None
            job_spec = conversion.job["spec"]
            spec = {**spec, "metadata": conversion.job.get("metadata")}
            conditions = _KUBEFLOW_CONDITIONS
        else:
            kinds = ", ".join(["Job (batch/v1)", "TrainingJob (phalanx.dev/v1alpha1)", *KINDS])
            self.refuse(f"{_TRIAL_SPEC}.kind", f"a trial runs one of {kinds}; {short(kind)} ({short(api)}) is not one")
            return {}, None
        self.conditions(template, conditions, path)
        if (
            template.get("retain") is True
            and isinstance(job_spec, dict)
            and isinstance(job_spec.get("runPolicy", {}), dict)
        ):
            # Katib keeps a retained trial's job and pods; Phalanx keeps the job's record, and its pods with this.
            job_spec.setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")
            self.paths.setdefault("spec.trial.spec.runPolicy.cleanPodPolicy", f"{path}.retain")
        elif template.get("retain") not in (None, False, True):
            self.refuse(f"{path}.retain", f"must be true or false, got {short(template.get('retain'))}")
        self.primary_container(template.get("primaryContainerName"), spec, path)
        trial: dict[str, Any] = {"spec": job_spec}
        metadata = self.trial_metadata(spec.get("metadata"))
        if kind == "Job" and isinstance(metadata.get("annotations", {}), Mapping):
            # As a converted Kubeflow job says what it was written as, so does each trial of a Job.
            metadata["annotations"] = {**metadata.get("annotations", {}), CONVERTED_FROM: "Job.batch/v1"}
        if metadata:
            trial["metadata"] = metadata
        return trial, conversion

    def trial_parameters(self, parameters: Any, path: str) -> dict[str, str]:
        """``{trial parameter name: what ${trialParameters.NAME} becomes}``."""
        where = f"{path}.trialParameters"
        if parameters is None:
            return {}
        if not isinstance(parameters, list):
            self.refuse(where, f"must be a list of {{name, reference}}, got {short(parameters)}")
            return {}
        found: dict[str, str] = {}
        for index, entry in enumerate(parameters):
            item = f"{where}[{index}]"
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                self.refuse(item, f"must be a trial parameter {{name, reference}}, got {short(entry)}")
                continue
            for key in entry:
                if key not in ("name", "description", "reference"):
                    self.refuse(
                        f"{item}.{key}", "unknown field of a trial parameter; it has name, description, reference"
                    )
            name, reference = entry["name"], entry.get("reference")
            self.listed_trial_parameters.add(name)
            if name in found:
                self.refuse(f"{item}.name", f"{name!r} is listed twice; names must be unique")
            elif not isinstance(reference, str):
                self.refuse(f"{item}.reference", f"must be a parameter's name, got {short(reference)}")
            elif reference in self.names:
                found[name] = f"${{params.{self.names[reference]}}}"
            elif reference in _TRIAL_METADATA:
                found[name] = _TRIAL_METADATA[str(reference)]
            else:
                listed = ", ".join([*self.names, *_TRIAL_METADATA])
                self.refuse(f"{item}.reference", f"{short(reference)} names no parameter; use one of {listed}")
        return found

    def substituted(self, tree: Any, references: Mapping[str, str], path: str) -> Any:
        """``tree`` with ``${trialParameters.X}`` replaced in every string; an unknown X is refused at its path."""
        if isinstance(tree, str):
            for match in _TRIAL_PARAMETER.finditer(tree):
                if match.group(1) not in references and match.group(1) not in self.listed_trial_parameters:
                    listed = ", ".join(sorted(self.listed_trial_parameters)) or "none are listed"
                    self.refuse(path, f"${{trialParameters.{match.group(1)}}} is not a trial parameter ({listed}); "
                                "list it under trialTemplate.trialParameters")  # fmt: skip
            return _TRIAL_PARAMETER.sub(lambda m: references.get(m.group(1), m.group(0)), tree)
        if isinstance(tree, Mapping):
            for key in tree:
                if isinstance(key, str) and _TRIAL_PARAMETER.search(key):
                    self.refuse(f"{path}.{key}", "a trial parameter in a field's name is not substituted: a name "
                                "made per trial could clash with another; put it in a value")  # fmt: skip
            return {key: self.substituted(value, references, f"{path}.{key}") for key, value in tree.items()}
        if isinstance(tree, list):
            return [self.substituted(value, references, f"{path}[{i}]") for i, value in enumerate(tree)]
        return tree

    def batch_job(self, spec: Any) -> dict[str, Any]:
        """A batch/v1 Job spec as a one-replica ``generic`` TrainingJob spec."""
        path = f"{_TRIAL_SPEC}.spec"
        if not isinstance(spec, Mapping):
            self.refuse(path, "required: a Job spec with template")
            return {}
        run: dict[str, Any] = {}
        for key, value in spec.items():
            where = f"{path}.{key}"
            if key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
                run[key] = value
                self.paths[f"spec.trial.spec.runPolicy.{key}"] = where
            elif key in ("parallelism", "completions"):
                if value != 1:
                    self.refuse(where, f"a trial runs one pod once; {key} must be 1 (or left out), got {short(value)}")
            elif key != "template":
                self.refuse(where, "has no meaning for a trial's Job here; remove it")
        template = spec.get("template")
        pod = template.get("spec") if isinstance(template, Mapping) else None
        restart = pod.get("restartPolicy") if isinstance(pod, Mapping) else None
        if restart not in ("Never", "OnFailure"):
            self.refuse(
                f"{path}.template.spec.restartPolicy", f"a Job's pods need Never or OnFailure, got {short(restart)}"
            )
            restart = "Never"
        run["restartPolicy"] = restart
        self.paths["spec.trial.spec.runPolicy.restartPolicy"] = f"{path}.template.spec.restartPolicy"
        replica, problems = replica_template(template, f"{path}.template", restart_policy=restart)
        self.errors += problems
        scheduling: dict[str, Any] = {}
        scheduler = lift_scheduler_name({"worker": (replica, f"{path}.template.spec")}, self.errors)
        if scheduler is not None:
            scheduling["schedulerName"] = scheduler[0]
            self.paths["spec.trial.spec.scheduling.schedulerName"] = scheduler[1]
        ours = "spec.trial.spec.replicas.worker"
        self.paths.update(
            {
                "spec.trial.spec": path,
                "spec.trial.spec.type": f"{_TRIAL_SPEC}.kind",
                "spec.trial.spec.runPolicy": path,
                ours: path,
                f"{ours}.count": path,
                f"{ours}.template": f"{path}.template.spec.containers[0]",
                f"{ours}.template.metadata": f"{path}.template.metadata",
            }
        )
        record_pod_paths(self.paths, f"{ours}.template", f"{path}.template.spec", template)
        self.container_paths(f"{ours}.template", f"{path}.template.spec.containers[0]", template)
        result: dict[str, Any] = {"type": "generic", "replicas": {"worker": {"count": 1, "template": replica}}}
        result["runPolicy"] = run
        if scheduling:
            result["scheduling"] = scheduling
        return result

    def container_paths(self, ours: str, upstream: str, template: Any) -> None:
        """An env variable's problem at its entry of the env list, an amount's at the requests or limits."""
        try:
            raw = template["spec"]["containers"][0]
        except (KeyError, IndexError, TypeError):
            return
        if not isinstance(raw, Mapping):
            return
        entries = raw.get("env")
        for position, entry in enumerate(entries if isinstance(entries, list) else ()):
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                self.paths[f"{ours}.env.{entry['name']}"] = f"{upstream}.env[{position}]"
        resource_paths(self.paths, f"{ours}.resources", f"{upstream}.resources", raw.get("resources"))

    def conditions(self, template: Mapping[str, Any], defaults: tuple[str, str] | None, path: str) -> None:
        for key, default in zip(("successCondition", "failureCondition"), defaults or (None, None), strict=True):
            value = template.get(key)
            if value in (None, "", default):
                continue
            self.refuse(
                f"{path}.{key}",
                f"a trial succeeds or fails as its job does (its phase); a custom {key} is not supported: remove it",
            )

    def primary_container(self, name: Any, trial_spec: Mapping[str, Any], path: str) -> None:
        """Check that primaryContainerName names the trial's container (whose output holds the metrics).

        A replica runs one container (``model.kubeflow.pods`` refuses a second), so the name must be that of the
        first container of every pod template; a TrainingJob's containers have no name, and any is taken.
        """
        if name is None:
            return
        if not isinstance(name, str):
            self.refuse(f"{path}.primaryContainerName", f"must be a container's name, got {short(name)}")
            return
        containers = set(_first_container_names(trial_spec))
        if containers and containers != {name}:
            self.refuse(
                f"{path}.primaryContainerName",
                f"{short(name)} is not the trial's container ({', '.join(sorted(containers))}); a replica runs one "
                "container, whose output holds the metrics: name it",
            )

    def trial_metadata(self, metadata: Any) -> dict[str, Any]:
        path = f"{_TRIAL_SPEC}.metadata"
        if metadata is None:
            return {}
        if not isinstance(metadata, Mapping):
            self.refuse(path, f"must be a mapping of labels and annotations, got {short(metadata)}")
            return {}
        for key in metadata:
            if key not in ("labels", "annotations"):
                self.refuse(f"{path}.{key}", "Phalanx names each trial <sweep>-<number> in the sweep's namespace; "
                            "only labels and annotations are taken: remove it")  # fmt: skip
        self.paths["spec.trial.metadata"] = path
        return {key: metadata[key] for key in ("labels", "annotations") if metadata.get(key)}


def _first_container_names(tree: Any) -> list[str]:
    """The name of the first container of every pod spec (a ``containers`` list) in ``tree``."""
    if isinstance(tree, list):
        return [name for item in tree for name in _first_container_names(item)]
    if not isinstance(tree, Mapping):
        return []
    names = []
    for key, value in tree.items():
        if key == "containers" and isinstance(value, list) and value and isinstance(value[0], Mapping):
            names.append(str(value[0].get("name")))
        else:
            names.extend(_first_container_names(value))
    return names


def _annotated(metadata: Any, annotations: Mapping[str, str]) -> Any:
    if not isinstance(metadata, Mapping):
        return metadata  # the Sweep's validation names what is wrong with it
    existing = metadata.get("annotations")
    if existing is not None and not isinstance(existing, Mapping):
        return metadata
    return {**metadata, "annotations": {**(existing or {}), **annotations}}
