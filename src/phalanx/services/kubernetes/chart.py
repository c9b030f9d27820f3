"""The Helm chart ``charts/phalanx``: generated from the same functions as ``phalanx install --print``.

Why generated, not written by hand: the install is already written once, as data (``adapters/kubernetes/
manifests.py``: objects, RBAC, probes, security contexts). A hand-written chart would say all of it a second time
in Go templates, and the two would drift. So the chart's templates are those objects, rendered with *tokens* where
a value belongs (the namespace, the image, each component's resources...), and the tokens are then replaced by
template expressions. An option that changes the shape of the objects (the dataset store, the artifact store's
claim) is rendered every way, and the renders merge into one template of flat ``if`` blocks (``_merge_all``). The
defaults in ``values.yaml`` are the install's defaults, so
``helm template`` with no values renders exactly ``phalanx install --print`` (tests/e2e/test_helm_chart.py checks
that with the real helm, and the chart's install, upgrade and uninstall on a real control plane).

``scripts/generate-deploy`` writes the chart next to ``deploy/``; a unit test fails while the committed chart
differs from what this module generates.
"""

from __future__ import annotations

import difflib
import itertools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from phalanx.adapters.kubernetes.crds import KINDS
from phalanx.adapters.kubernetes.kubeflow_crds import KUBEFLOW_CRDS, kubeflow_custom_resource_definitions
from phalanx.adapters.kubernetes.manifests import (
    DEFAULT_CACHE_DIR,
    GPU_ALLOCATION_ENV,
    GPU_ALLOCATIONS,
    HEALTH_PORT,
    HEALTH_PORT_ENV,
    KUBEFLOW_KINDS_ENV,
    METRICS_ACCESS_ENV,
    NODE_AGENT,
    OPERATOR,
    OPERATOR_STORAGE_SECRET,
    RESOURCE_SLICES_ENV,
    SCHEDULER,
    SCHEDULER_CONFIG_FILE,
    SCHEDULER_CONFIG_HASH,
    SCRAPE_PORT_ANNOTATION,
    InstallParameters,
    artifact_claim,
    install_manifests,
    kubeflow_rbac,
    render_yaml,
    scheduler_config_text,
)
from phalanx.adapters.kubernetes.server_manifests import server_deployment, server_rbac
from phalanx.model.base import API_GROUP
from phalanx.services.kubernetes.install import GENERATED_NOTE, deploy_files, phalanx_version, write_files

CHART_NAME = "phalanx"
IMAGE_REPOSITORY = "phalanx"  # with the tag defaulting to the chart's appVersion: install's phalanx:<version>
CHART_NOTE = "Generated from the Phalanx models by scripts/generate-deploy (services/kubernetes/chart.py); do not edit."

#: The values that change the shape of the install's objects (``_merge_all``).
DATASETS_CLAIM = ".Values.datasets.storeClaim"
ARTIFACTS_CLAIM = ".Values.artifacts.persistentVolumeClaim"
KUBELET_CONFIG = ".Values.nodeAgent.kubeletConfig"

#: The values key of each component's workload, by its name in the manifests.
COMPONENT_VALUES = {OPERATOR.account: "operator", SCHEDULER.account: "scheduler", NODE_AGENT.account: "nodeAgent"}


@dataclass(frozen=True, slots=True)
class _Replacement:
    """What a token becomes in a template.

    kind: ``scalar`` (the token is replaced by ``text``), ``block`` (``key: TOKEN`` becomes ``key:`` and the YAML
    of the value ``text`` names, indented under it), ``optional`` (the same, left out when the value is empty), or
    ``file`` (``key: TOKEN`` becomes a literal block holding the string value ``text`` names).
    """

    kind: str
    text: str


class _Tokens:
    """Unique plain-scalar placeholders, and what each becomes once the objects are YAML."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self.replacements: dict[str, _Replacement] = {}

    def _new(self, kind: str, text: str) -> str:
        token = f"PHALANX_CHART_TOKEN_{next(self._counter):03d}"
        self.replacements[token] = _Replacement(kind, text)
        return token

    def scalar(self, text: str) -> str:
        return self._new("scalar", text)

    def block(self, path: str) -> str:
        return self._new("block", path)

    def optional(self, path: str) -> str:
        return self._new("optional", path)

    def file(self, path: str) -> str:
        return self._new("file", path)

    def substitute(self, text: str) -> str:
        """Replace every token in rendered YAML by its template text."""
        for token, replacement in self.replacements.items():
            if replacement.kind == "scalar":
                text = text.replace(token, replacement.text)
                continue
            pattern = re.compile(rf"^( *)([A-Za-z0-9_.-]+): {token}$", re.MULTILINE)
            text = pattern.sub(_block_substitution(replacement), text)
        leftover = re.search(r"PHALANX_CHART_TOKEN_\d+", text)
        if leftover:
            raise AssertionError(f"token {leftover.group()} is not where a template can replace it")
        return text


def _block_substitution(replacement: _Replacement) -> Callable[[re.Match[str]], str]:
    def substitute(match: re.Match[str]) -> str:
        indent, key = match.group(1), match.group(2)
        inner = len(indent) + 2
        if replacement.kind == "file":
            return f'{indent}{key}: |\n{indent}  {{{{- {replacement.text} | trimSuffix "\\n" | nindent {inner} }}}}'
        if replacement.kind == "block":
            return f"{indent}{key}:\n{indent}  {{{{- toYaml {replacement.text} | nindent {inner} }}}}"
        return (
            f"{indent}{{{{- with {replacement.text} }}}}\n{indent}{key}:\n"
            f"{indent}  {{{{- toYaml . | nindent {inner} }}}}\n{indent}{{{{- end }}}}"
        )

    return substitute


def _templated(tokens: _Tokens, *, datasets: bool, artifacts: bool, kubelet: bool) -> list[dict[str, Any]]:
    """The install's objects (no CRDs: the chart's ``crds/`` holds them), with tokens where values go."""
    parameters = InstallParameters(
        image=tokens.scalar('"{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"'),
        namespace=tokens.scalar("{{ .Release.Namespace }}"),
        dataset_store_claim=tokens.scalar("{{ .Values.datasets.storeClaim | quote }}") if datasets else None,
        cache_dir=tokens.scalar("{{ .Values.datasets.cacheDir | quote }}"),
        default_job_scheduler=tokens.scalar("{{ .Values.defaultJobScheduler | quote }}"),
        storage_secret=tokens.scalar("{{ .Values.storage.secret | quote }}"),
        artifact_claim=tokens.scalar(f"{{{{ {ARTIFACTS_CLAIM} | quote }}}}") if artifacts else None,
        kubelet_config=tokens.scalar(f"{{{{ {KUBELET_CONFIG} | quote }}}}") if kubelet else None,
    )
    objects = [obj for obj in install_manifests(parameters) if obj["kind"] != "CustomResourceDefinition"]
    for obj in objects:
        if obj["kind"] in ("Deployment", "DaemonSet"):
            _template_workload(obj, COMPONENT_VALUES[obj["metadata"]["name"]], tokens)
        elif obj["kind"] == "ConfigMap" and SCHEDULER_CONFIG_FILE in obj.get("data", {}):
            obj["data"][SCHEDULER_CONFIG_FILE] = tokens.file(".Values.scheduler.config")
    return objects


def _template_workload(workload: dict[str, Any], key: str, tokens: _Tokens) -> None:
    spec = workload["spec"]["template"]["spec"]
    container = spec["containers"][0]
    container["imagePullPolicy"] = tokens.scalar("{{ .Values.image.pullPolicy }}")
    container["resources"] = tokens.block(f".Values.{key}.resources")
    for port in container.get("ports", []):
        if port["containerPort"] == HEALTH_PORT:
            port["containerPort"] = tokens.scalar("{{ .Values.healthPort }}")
    for variable in container["env"]:
        if variable["name"] == HEALTH_PORT_ENV:
            variable["value"] = tokens.scalar('"{{ .Values.healthPort }}"')
        if variable["name"] == METRICS_ACCESS_ENV:
            variable["value"] = tokens.scalar("{{ .Values.metrics.access | quote }}")
        if variable["name"] == KUBEFLOW_KINDS_ENV:
            variable["value"] = tokens.scalar("{{ .Values.kubeflowKinds.enabled | quote }}")
        if variable["name"] == GPU_ALLOCATION_ENV:
            variable["value"] = tokens.scalar("{{ .Values.gpuAllocation.mode | quote }}")
        if variable["name"] == RESOURCE_SLICES_ENV:
            variable["value"] = tokens.scalar("{{ .Values.gpuAllocation.resourceSlices | quote }}")
    annotations = workload["spec"]["template"]["metadata"].get("annotations", {})
    if SCRAPE_PORT_ANNOTATION in annotations:
        annotations[SCRAPE_PORT_ANNOTATION] = tokens.scalar('"{{ .Values.healthPort }}"')
    if SCHEDULER_CONFIG_HASH in annotations:
        annotations[SCHEDULER_CONFIG_HASH] = tokens.scalar("{{ .Values.scheduler.config | sha256sum | quote }}")
    for field in ("imagePullSecrets", "nodeSelector", "affinity", "tolerations"):
        path = ".Values.imagePullSecrets" if field == "imagePullSecrets" else f".Values.{key}.{field}"
        spec[field] = tokens.optional(path)


def _template_files() -> dict[str, str]:
    """``templates/*.yaml`` by file name."""
    groups: dict[str, Callable[[dict[str, Any]], bool]] = {
        "namespace.yaml": lambda obj: obj["kind"] == "Namespace",
        "serviceaccounts.yaml": lambda obj: obj["kind"] == "ServiceAccount",
        "rbac.yaml": lambda obj: obj["apiVersion"].startswith("rbac."),
        "admission-policies.yaml": lambda obj: obj["apiVersion"].startswith("admissionregistration."),
        "scheduler-config.yaml": lambda obj: obj["kind"] == "ConfigMap",
        "operator.yaml": lambda obj: obj["metadata"]["name"] == OPERATOR.account and obj["kind"] == "Deployment",
        "scheduler.yaml": lambda obj: obj["metadata"]["name"] == SCHEDULER.account and obj["kind"] == "Deployment",
        "node-agent.yaml": lambda obj: obj["kind"] == "DaemonSet",
    }
    tokens = _Tokens()
    renders = {
        (datasets, artifacts, kubelet): _templated(tokens, datasets=datasets, artifacts=artifacts, kubelet=kubelet)
        for datasets in (True, False)
        for artifacts in (True, False)
        for kubelet in (True, False)
    }
    plain = renders[False, False, False]
    assert all(len(objects) == len(plain) for objects in renders.values()), "an option adds or removes no object"
    placed = [name for obj in plain for name, belongs in groups.items() if belongs(obj)]
    assert len(placed) == len(plain), "every object of the install has exactly one template file"
    files = {}
    for name, belongs in groups.items():
        text: dict[tuple[bool, ...], str] = {
            key: tokens.substitute(render_yaml([obj for obj in objects if belongs(obj)]))
            for key, objects in renders.items()
        }
        body = _merge_all((DATASETS_CLAIM, ARTIFACTS_CLAIM, KUBELET_CONFIG), text)
        if name == "namespace.yaml":
            body = f"{{{{- if .Values.namespace.create }}}}\n{body}{{{{- end }}}}\n"
        files[f"templates/{name}"] = f"# {CHART_NOTE}\n{body}"
    files["templates/kubeflow.yaml"] = _kubeflow_template()
    files["templates/server.yaml"] = _server_template()
    files["templates/artifacts-claim.yaml"] = _artifacts_claim_template()
    files["templates/metrics.yaml"] = _metrics_template()
    return files


#: The label the metrics Services carry, which the ServiceMonitor selects them by.
METRICS_LABEL = "phalanx.dev/metrics"


def _metrics_template() -> str:
    """``templates/metrics.yaml``: the components' metrics Services and a ServiceMonitor, when asked.

    With ``metrics.serviceMonitor.enabled``: a headless Service per component on its health port (named
    ``health``) and one ServiceMonitor (the Prometheus Operator's) that scrapes them.

    Off by default: without the Prometheus Operator's CRD the ServiceMonitor cannot be applied, and a Prometheus
    with the common ``kubernetes-pods`` job already finds the Pods by their ``prometheus.io/*`` annotations.
    """
    services = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": f"{component.account}-metrics",
                "namespace": "{{ .Release.Namespace }}",
                "labels": {**component.labels, METRICS_LABEL: "true"},
            },
            "spec": {
                "clusterIP": "None",
                "selector": component.selector,
                "ports": [{"name": "health", "port": "{{ .Values.healthPort }}", "targetPort": "health"}],
            },
        }
        for component in (OPERATOR, SCHEDULER, NODE_AGENT)
    ]
    body = render_yaml(services)
    for quoted in ("{{ .Values.healthPort }}", "{{ .Release.Namespace }}"):  # an integer, and as the others write it
        body = body.replace(f"'{quoted}'", quoted)
    monitor = (
        "---\n"
        "apiVersion: monitoring.coreos.com/v1\n"
        "kind: ServiceMonitor\n"
        "metadata:\n"
        "  name: phalanx\n"
        "  namespace: {{ .Release.Namespace }}\n"
        "  labels:\n"
        "    app.kubernetes.io/name: phalanx\n"
        "    app.kubernetes.io/part-of: phalanx\n"
        "    {{- with .Values.metrics.serviceMonitor.labels }}\n"
        "    {{- toYaml . | nindent 4 }}\n"
        "    {{- end }}\n"
        "spec:\n"
        "  selector:\n"
        "    matchLabels:\n"
        "      app.kubernetes.io/part-of: phalanx\n"
        f"      {METRICS_LABEL}: 'true'\n"
        "  namespaceSelector:\n"
        "    matchNames:\n"
        "    - {{ .Release.Namespace }}\n"
        "  endpoints:\n"
        "  - port: health\n"
        "    path: /metrics\n"
        "    interval: {{ .Values.metrics.serviceMonitor.interval | quote }}\n"
        # With access rbac, Prometheus sends its ServiceAccount's token, which must be bound to the reader role.
        '    {{- if eq .Values.metrics.access "rbac" }}\n'
        "    bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n"
        "    {{- end }}\n"
    )
    return f"# {CHART_NOTE}\n{{{{- if .Values.metrics.serviceMonitor.enabled }}}}\n{body}{monitor}{{{{- end }}}}\n"


def _artifacts_claim_template() -> str:
    """``templates/artifacts-claim.yaml``: the artifact store's claim, when the chart is to create it.

    Kept by helm on uninstall: it holds every pipeline's artifacts and the step cache.
    """
    tokens = _Tokens()
    claim = artifact_claim(
        tokens.scalar(f"{{{{ {ARTIFACTS_CLAIM} | quote }}}}"),
        tokens.scalar("{{ .Release.Namespace }}"),
        size=tokens.scalar("{{ .Values.artifacts.size | quote }}"),
        access_modes=tokens.block(".Values.artifacts.accessModes"),
        storage_class=tokens.optional(".Values.artifacts.storageClass"),
    )
    claim["metadata"]["annotations"] = dict(KEEP)
    body = tokens.substitute(render_yaml([claim]))
    return f"# {CHART_NOTE}\n{{{{- if and {ARTIFACTS_CLAIM} .Values.artifacts.create }}}}\n{body}{{{{- end }}}}\n"


def _server_template() -> str:
    """``templates/server.yaml``: the REST server over the cluster, with ``server.enabled`` (off by default).

    Its ServiceAccount, ClusterRole and binding, and its Deployment (``adapters.kubernetes.server_manifests``).
    """
    tokens = _Tokens()
    namespace = tokens.scalar("{{ .Release.Namespace }}")
    image = tokens.scalar('"{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"')
    deployment = server_deployment(image, namespace, tokens.scalar("{{ .Values.storage.secret | quote }}"))
    _template_workload(deployment, "server", tokens)
    body = tokens.substitute(render_yaml([*server_rbac(namespace), deployment]))
    return f"# {CHART_NOTE}\n{{{{- if .Values.server.enabled }}}}\n{body}{{{{- end }}}}\n"


#: Kept by helm on uninstall and when the value is turned off, like the chart's own CRDs: deleting a CRD deletes
#: every object of its kind, and with them their TrainingJobs and Pods.
KEEP = {"helm.sh/resource-policy": "keep"}


def _kubeflow_template() -> str:
    """``templates/kubeflow.yaml``: the Kubeflow kinds' CRDs and RBAC, with ``kubeflowKinds.enabled``.

    The CRDs of the Kubeflow kinds and the operator's rights on them (``manifests.kubeflow_rbac``); the install is
    refused (helm's ``lookup``, on a real cluster) when a CRD of those names belongs to another installation.
    """
    tokens = _Tokens()
    crds = kubeflow_custom_resource_definitions()
    for crd in crds:
        crd["metadata"]["annotations"] = dict(KEEP)
    body = tokens.substitute(render_yaml([*crds, *kubeflow_rbac(tokens.scalar("{{ .Release.Namespace }}"))]))
    names = " ".join(f'"{crd.name}"' for crd in KUBEFLOW_CRDS)
    guard = (
        f"{{{{- range $name := list {names} }}}}\n"
        '{{- $crd := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $name }}\n'
        '{{- if and $crd (ne (dig "metadata" "labels" "app.kubernetes.io/part-of" "" $crd) "phalanx") }}\n'
        '{{- fail (printf "kubeflowKinds.enabled: the CRD %s belongs to another installation (a Kubeflow '
        "operator serves it): leave kubeflowKinds off on this cluster, and run those files with phalanx submit "
        '(docs/kubeflow.md)" $name) }}\n'
        "{{- end }}\n"
        "{{- end }}\n"
    )
    return f"# {CHART_NOTE}\n{{{{- if .Values.kubeflowKinds.enabled }}}}\n{guard}{body}{{{{- end }}}}\n"


def _merge(condition: str, then: str, otherwise: str) -> str:
    """One template that renders ``then`` when ``condition`` holds and ``otherwise`` when not."""
    return _merge_all((condition,), {(True,): then, (False,): otherwise})


def _merge_all(conditions: tuple[str, ...], renders: Mapping[tuple[bool, ...], str]) -> str:
    """One template that renders ``renders[values]`` for each combination of the values of ``conditions``.

    The renders are aligned line by line (each against what the earlier ones give: ``difflib``), so every line
    knows the combinations it belongs to; the lines all share appear once, and each run of lines of the same
    combinations is one flat ``if`` (a run for one condition followed by the run for its negation: an
    ``if``/``else``). Never nested, so each block closes where it opens. ``{{-`` eats the newline before it, so
    each combination renders exactly its own lines.
    """
    combos = list(renders)
    lines: list[tuple[str, set[tuple[bool, ...]]]] = [(line, {combos[0]}) for line in renders[combos[0]].splitlines()]
    for combo in combos[1:]:
        theirs = renders[combo].splitlines()
        ours = [line for line, _ in lines]
        merged: list[tuple[str, set[tuple[bool, ...]]]] = []
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=ours, b=theirs, autojunk=False).get_opcodes():
            if tag == "equal":
                merged += [(line, {*held, combo}) for line, held in lines[i1:i2]]
                continue
            merged += lines[i1:i2]
            merged += [(line, {combo}) for line in theirs[j1:j2]]
        lines = merged
    runs: list[tuple[frozenset[tuple[bool, ...]], list[str]]] = []
    for line, found in lines:
        if runs and runs[-1][0] == found:
            runs[-1][1].append(line)
        else:
            runs.append((frozenset(found), [line]))
    everywhere = frozenset(combos)
    out: list[str] = []
    position = 0
    while position < len(runs):
        held, run = runs[position]
        position += 1
        if held == everywhere:
            out += run
            continue
        test = _condition(conditions, held, everywhere)
        out.append(f"{{{{- if {test} }}}}")
        out += run
        if position < len(runs) and runs[position][0] == everywhere - held:
            out.append("{{- else }}")
            out += runs[position][1]
            position += 1
        out.append("{{- end }}")
    return "".join(f"{line}\n" for line in out)


def _condition(
    conditions: tuple[str, ...], held: frozenset[tuple[bool, ...]], combos: frozenset[tuple[bool, ...]]
) -> str:
    """The template test that holds for exactly the combinations ``held`` of ``conditions``' values.

    Conditions ``held`` does not depend on (flipping one never leaves ``held``) are left out, so a line that
    only one value decides is tested on that value alone.
    """

    def flipped(combo: tuple[bool, ...], index: int) -> tuple[bool, ...]:
        return (*combo[:index], not combo[index], *combo[index + 1 :])

    relevant = [
        index
        for index in range(len(conditions))
        if any(flipped(combo, index) in combos and flipped(combo, index) not in held for combo in held)
    ]
    names = [conditions[index] for index in relevant]
    projected = sorted({tuple(combo[index] for index in relevant) for combo in held}, reverse=True)

    def conjunction(values: tuple[bool, ...]) -> str:
        terms = [name if value else f"(not {name})" for name, value in zip(names, values, strict=True)]
        if len(terms) == 1:
            return names[0] if values[0] else f"not {names[0]}"
        return f"and {' '.join(terms)}"

    alternatives = [conjunction(values) for values in projected]
    if len(alternatives) == 1:
        return alternatives[0]
    return "or " + " ".join(f"({alternative})" for alternative in alternatives)


# --------------------------------------------------------------------------------------------------------------
# values.yaml, Chart.yaml, NOTES.txt
# --------------------------------------------------------------------------------------------------------------


def _dump(value: Any, indent: int) -> str:
    text = yaml.safe_dump(value, sort_keys=False, default_flow_style=False, width=120)
    return "".join(f"{' ' * indent}{line}\n" for line in text.splitlines())


def default_values() -> dict[str, Any]:
    """The chart's values whose defaults render the install of ``phalanx install --print``."""
    workloads = {obj["metadata"]["name"]: obj for obj in install_manifests(InstallParameters(image="unused"))}
    values: dict[str, Any] = {
        "image": {"repository": IMAGE_REPOSITORY, "tag": "", "pullPolicy": "IfNotPresent"},
        "imagePullSecrets": [],
        "namespace": {"create": True},
        "healthPort": HEALTH_PORT,
    }
    for name, key in COMPONENT_VALUES.items():
        spec = workloads[name]["spec"]["template"]["spec"]
        values[key] = {
            "resources": spec["containers"][0]["resources"],
            "nodeSelector": spec.get("nodeSelector", {}),
            "tolerations": spec.get("tolerations", []),
            "affinity": spec.get("affinity", {}),
        }
    values["scheduler"]["config"] = scheduler_config_text()
    values["nodeAgent"]["kubeletConfig"] = ""
    values["datasets"] = {"storeClaim": "", "cacheDir": DEFAULT_CACHE_DIR}
    values["defaultJobScheduler"] = ""
    values["kubeflowKinds"] = {"enabled": False}
    values["gpuAllocation"] = {"mode": "device-plugin", "resourceSlices": False}
    values["storage"] = {"secret": OPERATOR_STORAGE_SECRET}
    server = server_deployment("unused", "unused")["spec"]["template"]["spec"]
    values["server"] = {
        "enabled": False,
        "resources": server["containers"][0]["resources"],
        "nodeSelector": {},
        "tolerations": [],
        "affinity": {},
    }
    values["artifacts"] = {
        "persistentVolumeClaim": "",
        "create": False,
        "size": "10Gi",
        "storageClass": "",
        "accessModes": ["ReadWriteMany"],
    }
    values["metrics"] = {"access": "rbac", "serviceMonitor": {"enabled": False, "interval": "30s", "labels": {}}}
    return values


_COMMENTS = {
    "image": "The image every component runs: repository:tag, the tag defaulting to the chart's appVersion.\n"
    "Build and push it from the repository's Dockerfile (docs/install.md#the-image).",
    "imagePullSecrets": "Secrets in the release namespace to pull the image with, e.g. [{name: my-registry}].",
    "namespace": "Create the release namespace (labelled for the Pod Security Standards, as `phalanx install` does).\n"
    "Install with --create-namespace too, so helm can store the release there; false: the namespace exists.",
    "healthPort": "The port each component serves /healthz and /readyz (the kubelet's probes) and /metrics\n"
    "(Prometheus, found by the prometheus.io/* annotations of its Pods) on.",
    "operator": "phalanx-operator: TrainingJobs into Pods, Services and ConfigMaps.",
    "scheduler": "phalanx-scheduler: binds whole gangs. `config` is its SchedulerConfiguration (docs/scheduling.md),\n"
    "read at start: e.g. --set-file scheduler.config=my-config.yaml.",
    "nodeAgent": "phalanx-node-agent, a DaemonSet: GPUs, health and topology of each node. nodeSelector picks its\n"
    "nodes; by default it runs on every node, tainted ones included. kubeletConfig: the kubelet's configuration\n"
    "file on every node (e.g. /var/lib/kubelet/config.yaml), mounted read-only (a hostPath: the namespace then\n"
    "enforces privileged) so the agent reports whether NUMA alignment is enforced there; empty: not reported.",
    "datasets": "Dataset staging (docs/datasets.md): a ReadWriteMany PersistentVolumeClaim in the release namespace\n"
    "as the dataset store, and the hostPath each node caches datasets in. Empty storeClaim: no staging.",
    "defaultJobScheduler": "The cluster's scheduler for jobs naming none in spec.scheduling.schedulerName, e.g.\n"
    "default-scheduler for kube-scheduler's alpha gang scheduling (docs/kubernetes.md). Empty: phalanx-scheduler.",
    "kubeflowKinds": "Serve the Kubeflow kinds (PyTorchJob, TFJob, XGBoostJob, JAXJob, PaddleJob, MPIJob, TrainJob\n"
    "and its runtimes) and let the operator run them, so `kubectl apply -f` of one works (docs/kubeflow.md).\n"
    "Not on a cluster where Kubeflow's own operators serve those kinds: the install is then refused.",
    "gpuAllocation": "How replicas get their GPUs (docs/kubernetes.md#gpus-through-dynamic-resource-allocation):\n"
    "mode dra gives each GPU replica a ResourceClaim that phalanx-scheduler allocates exactly the GPUs it chose,\n"
    "which the node's DRA driver (NVIDIA's) prepares; device-plugin asks for nvidia.com/gpu and the node picks.\n"
    "resourceSlices: the node agents publish their GPUs as ResourceSlices, where no DRA driver does.",
    "storage": "Where the operator keeps the sweeps' studies, the pipelines' artifacts and the job history: the\n"
    "Secret (in the release namespace, optional) whose keys sweep-storage (an Optuna storage URL, e.g. PostgreSQL),\n"
    "artifact-store (a directory or s3:// / gs:// URL) and history-url (the job history's PostgreSQL URL) name\n"
    "them. Without it the first two live in the operator's emptyDir (docs/sweeps.md) and no history is kept.",
    "server": "phalanx server over this cluster (docs/server.md#on-kubernetes-rbac-as-the-source-of-truth): the REST\n"
    "API, each request decided by Kubernetes RBAC (TokenReview, SubjectAccessReview), with its ServiceAccount and\n"
    "ClusterRole. It listens on its Pod's loopback (no TLS yet): kubectl port-forward deployment/phalanx-server 8080.",
    "artifacts": "The pipelines' artifact store on a PersistentVolumeClaim in the release namespace\n"
    "(docs/pipelines.md#on-kubernetes): the operator keeps the store on it and every pipeline step job mounts it\n"
    "at the same path, so steps read their inputs and write their outputs there (the storage Secret's\n"
    "artifact-store key is then not read). Empty persistentVolumeClaim: steps with file inputs or outputs fail.\n"
    "create: the chart creates the claim (size, storageClass: empty for the cluster's default, accessModes:\n"
    "ReadWriteMany, as steps run on any node) and keeps it on uninstall; false: it exists already.",
    "metrics": "access: who may read the components' /metrics. rbac: a Kubernetes token whose account RBAC lets\n"
    "get /metrics: bind the ClusterRole phalanx-metrics-reader to your Prometheus's ServiceAccount and have it send\n"
    "its token (the metrics name every namespace and queue with jobs); open: anyone who reaches the Pods.\n"
    "serviceMonitor.enabled: a headless Service per component on its health port and a ServiceMonitor\n"
    "(the Prometheus Operator's CRD must exist) scraping their /metrics every interval, with Prometheus's token\n"
    "when access is rbac; labels: added to the ServiceMonitor, for a Prometheus that selects monitors by label\n"
    "(docs/install.md#metrics).",
}


def values_yaml() -> str:
    """``values.yaml``: the defaults, each top-level key with a comment saying what it changes."""
    parts = [
        f"# Values of the Phalanx chart; the defaults render exactly `phalanx install --print`.\n# {CHART_NOTE}\n"
        "# Every value: docs/install.md#values.\n"
    ]
    for key, value in default_values().items():
        comment = "".join(f"# {line}\n" for line in _COMMENTS[key].splitlines())
        if key == "scheduler":
            rest = {k: v for k, v in value.items() if k != "config"}
            config = "".join(f"    {line}\n" for line in value["config"].splitlines())
            parts.append(f"\n{comment}{key}:\n{_dump(rest, 2)}  config: |\n{config}")
        elif isinstance(value, dict):
            parts.append(f"\n{comment}{key}:\n{_dump(value, 2)}")
        else:
            parts.append(f"\n{comment}{_dump({key: value}, 0)}")
    return "".join(parts)


def values_schema() -> dict[str, Any]:
    """``values.schema.json``: helm checks values against it, so a misspelt key or a wrong type is refused by name.

    Kubernetes' own fields (resources, nodeSelector, tolerations, affinity, pull secrets) are left to the API
    server; everything the chart itself reads is closed.
    """

    def closed(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False, "properties": properties}

    text: dict[str, Any] = {"type": "string"}
    placement = {
        "resources": {"type": "object"},
        "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
        "tolerations": {"type": "array", "items": {"type": "object"}},
        "affinity": {"type": "object"},
    }
    return closed(
        {
            "image": closed(
                {
                    "repository": {"type": "string", "minLength": 1, "pattern": "^\\S+$"},
                    "tag": {"type": "string", "pattern": "^\\S*$"},
                    "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                }
            ),
            "imagePullSecrets": {"type": "array", "items": {"type": "object", "required": ["name"]}},
            "namespace": closed({"create": {"type": "boolean"}}),
            "healthPort": {"type": "integer", "minimum": 1, "maximum": 65535},
            "operator": closed(placement),
            "scheduler": closed({**placement, "config": text}),
            # Empty, or the kubelet's configuration file on every node: an absolute path.
            "nodeAgent": closed({**placement, "kubeletConfig": {"type": "string", "pattern": "^(/.*)?$"}}),
            "datasets": closed({"storeClaim": text, "cacheDir": {"type": "string", "pattern": "^/"}}),
            # Empty, or a DNS-1123 subdomain (what a Pod's schedulerName must be).
            "defaultJobScheduler": {
                "type": "string",
                "maxLength": 253,
                "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$",
            },
            "kubeflowKinds": closed({"enabled": {"type": "boolean"}}),
            "gpuAllocation": closed(
                {"mode": {"type": "string", "enum": list(GPU_ALLOCATIONS)}, "resourceSlices": {"type": "boolean"}}
            ),
            "server": closed({"enabled": {"type": "boolean"}, **placement}),
            "artifacts": closed(
                {
                    # Empty, or a claim's name: a DNS-1123 subdomain.
                    "persistentVolumeClaim": {
                        "type": "string",
                        "maxLength": 253,
                        "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$",
                    },
                    "create": {"type": "boolean"},
                    "size": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?([KMGTPE]i?|[kmEP])?$"},
                    "storageClass": text,
                    "accessModes": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"enum": ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]},
                    },
                }
            ),
            "metrics": closed(
                {
                    "access": {"enum": ["rbac", "open"]},
                    "serviceMonitor": closed(
                        {
                            "enabled": {"type": "boolean"},
                            "interval": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        }
                    ),
                }
            ),
            # A Secret's name: a DNS-1123 subdomain.
            "storage": closed(
                {
                    "secret": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 253,
                        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                    }
                }
            ),
        }
    )


def chart_yaml(version: str | None = None) -> str:
    """``Chart.yaml``: the chart's version is Phalanx's, like the image it runs by default."""
    version = version or phalanx_version()
    return (
        f"# {CHART_NOTE}\n"
        "apiVersion: v2\n"
        f"name: {CHART_NAME}\n"
        "description: Phalanx on Kubernetes - gang-scheduled ML training jobs (CRDs, operator, scheduler, node agent)\n"
        "type: application\n"
        f"version: {version}\n"
        f'appVersion: "{version}"\n'
        "keywords: [machine-learning, training, gang-scheduling, gpu]\n"
    )


def _notes() -> str:
    return (
        "Phalanx {{ .Chart.AppVersion }} is installed in the namespace {{ .Release.Namespace }}:\n"
        "phalanx-operator, phalanx-scheduler and the phalanx-node-agent DaemonSet, with the CRDs\n"
        f"({', '.join(kind.kind for kind in KINDS)}; group {API_GROUP}).\n\n"
        "Run a job on it:  phalanx run job.yaml --backend kubernetes -n <namespace>\n"
        "Helm keeps the CRDs on uninstall (deleting them deletes every job): docs/install.md#uninstalling\n"
    )


def chart_files(version: str | None = None) -> dict[str, str]:
    """The chart's files by path relative to ``charts/phalanx``."""
    crds = {
        path: text.replace(GENERATED_NOTE, CHART_NOTE)
        for path, text in deploy_files().items()
        if path.startswith("crds/")
    }
    return {
        "Chart.yaml": chart_yaml(version),
        "values.yaml": values_yaml(),
        "values.schema.json": json.dumps(values_schema(), indent=2) + "\n",
        **crds,
        **_template_files(),
        "templates/NOTES.txt": _notes(),
    }


def write_chart(directory: Path) -> list[Path]:
    """Write ``chart_files()`` under ``directory`` (``charts/phalanx``), removing generated files that are gone."""
    files = chart_files()
    for stale in _generated(directory):
        if stale.relative_to(directory).as_posix() not in files:
            stale.unlink()
    return write_files(directory, files)


def _generated(directory: Path) -> Iterator[Path]:
    for sub in ("crds", "templates"):
        if (directory / sub).is_dir():
            yield from (path for path in (directory / sub).iterdir() if path.is_file())
