"""The manifests that install Phalanx on a cluster: namespace, CRDs, identities with least privilege, workloads.

Three identities, each with its own ServiceAccount and only the verbs its loop needs (docs/kubernetes.md has
the table):

- the **operator** turns TrainingJobs into Pods, a headless Service and ConfigMaps, and writes job and queue
  status;
- the **scheduler** binds pending Pods whose ``schedulerName`` is ``phalanx-scheduler`` through the binding
  subresource, whole gangs at once, explains why a job waits in its status, and holds a Lease in the install
  namespace so that one replica leads; it schedules under the SchedulerConfiguration in the ConfigMap
  ``phalanx-scheduler-config`` (mounted, read at start);
- the **node agent** (a DaemonSet) discovers each node's GPUs, their health and topology and writes them to its
  Node's labels, annotations and status, records an Event on its Node when a GPU fails or recovers, and may read
  the Pods on its node; with a dataset store it reads TrainingJobs, Datasets and JobTypes to stage the data of
  the jobs placed on its node, and reports its cache on the Node.

RBAC cannot say "only the Pods of my node" or "only my Node": the agent asks for them with a field selector
(``spec.nodeName``) and its own name from the downward API, and RBAC grants the verbs on the kind.

**Datasets** (``InstallParameters.dataset_store_claim``, off by default): the operator and every node agent mount
a ReadWriteMany PersistentVolumeClaim as the dataset store (read-write for the operator, read-only for the
agents), and each agent keeps its node's cache in a hostPath directory. A hostPath volume is refused by the
``baseline`` and ``restricted`` Pod Security Standards, so with datasets the install namespace enforces
``privileged`` (and warns at ``restricted``), and the agent runs as root (the hostPath directory the kubelet
creates belongs to root), still with no capability and a read-only root filesystem.

The operator, scheduler and node agent are being built in issue 3: these manifests fix their API and
permissions now. The containers run ``phalanx-operator``, ``phalanx-scheduler`` and ``phalanx-node-agent``,
entry points of the Phalanx image (the repository's ``Dockerfile``), and serve ``/healthz`` and ``/readyz`` on
port 8081 (``PHALANX_HEALTH_PORT``). The image is a parameter (``phalanx:<version>`` unless told otherwise).
The Helm chart ``charts/phalanx`` is generated from these same functions (``services/kubernetes/chart.py``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import yaml

from phalanx.adapters.kubernetes.crds import KINDS, custom_resource_definitions
from phalanx.adapters.kubernetes.kubeflow_crds import JOB_CRDS, KUBEFLOW_CRDS, kubeflow_custom_resource_definitions
from phalanx.adapters.kubernetes.rendering import DATASET_MOUNT_PATH, SAMPLE_MOUNT_PATH
from phalanx.model.base import API_GROUP
from phalanx.model.scheduler_config import SchedulerConfiguration

DEFAULT_NAMESPACE = "phalanx-system"
DEFAULT_CACHE_DIR = DATASET_MOUNT_PATH  # the node agents' hostPath
#: How replicas get their GPUs (the operator's ``--gpu-allocation``), and whether node agents publish them as
#: ResourceSlices (``--resource-slices``): set from the install, or the chart's ``gpuAllocation`` values.
GPU_ALLOCATION_ENV = "PHALANX_GPU_ALLOCATION"
RESOURCE_SLICES_ENV = "PHALANX_RESOURCE_SLICES"
GPU_ALLOCATIONS = ("device-plugin", "dra")
#: Where a node agent sees its kubelet's configuration file (``InstallParameters.kubelet_config``).
KUBELET_CONFIG_MOUNT = "/etc/phalanx/kubelet/config.yaml"
DATASET_STORE_PATH = "/var/lib/phalanx/datasets"  # where the dataset store's claim is mounted in the containers
OPERATOR_STATE_PATH = "/var/lib/phalanx/state"  # the operator's emptyDir: default study database, artifact store
#: Where the artifact store's claim is mounted in the operator, and so in every pipeline step job (the same path).
ARTIFACT_STORE_PATH = "/var/lib/phalanx/artifacts"
ARTIFACT_CLAIM_ENV = "PHALANX_ARTIFACT_VOLUME_CLAIM"  # the operator's --artifact-volume-claim
OPERATOR_STORAGE_SECRET = "phalanx-operator-storage"  # optional: sweep-storage and artifact-store URLs  # nosec B105  # a name or message, not a secret
SCHEDULER_NAME = "phalanx-scheduler"
SCHEDULER_LEASE = "phalanx-scheduler"
SCHEDULER_CONFIG_MAP = "phalanx-scheduler-config"
SCHEDULER_CONFIG_DIR = "/etc/phalanx"
SCHEDULER_CONFIG_FILE = "scheduler-config.yaml"
# On the scheduler's Pod template: a new configuration is a new template, so applying it restarts the scheduler.
SCHEDULER_CONFIG_HASH = "phalanx.dev/scheduler-config-sha256"
HEALTH_PORT = 8081
HEALTH_PORT_ENV = "PHALANX_HEALTH_PORT"  # the port each component serves /healthz, /readyz, /metrics on (--health-port)
#: Who may read each component's /metrics (``--metrics-access``): ``rbac`` (the default: a bearer token that
#: TokenReview knows, of an account RBAC lets ``get /metrics``) or ``open`` (anyone who reaches the Pod).
METRICS_ACCESS_ENV = "PHALANX_METRICS_ACCESS"
#: The ClusterRole that lets its subjects read the components' /metrics; the install creates it, unbound.
METRICS_READER_ROLE = "phalanx-metrics-reader"
#: Pod annotations by which a Prometheus with the common kubernetes-pods scrape config finds each component's
#: /metrics (on the health port).
SCRAPE_PORT_ANNOTATION = "prometheus.io/port"


def scrape_annotations() -> dict[str, str]:
    """The Prometheus scrape annotations of a component's Pods."""
    return {"prometheus.io/scrape": "true", SCRAPE_PORT_ANNOTATION: str(HEALTH_PORT), "prometheus.io/path": "/metrics"}


NONROOT_UID = 65532
READ = ["get", "list", "watch"]


@dataclass(frozen=True, slots=True)
class InstallParameters:
    """What may change between installs.

    Attributes:
        image: the Phalanx image every component runs, e.g. ``phalanx:0.1.0``.
        namespace: where the components, their ServiceAccounts and the scheduler's Lease live.
        dataset_store_claim: a ReadWriteMany PersistentVolumeClaim in ``namespace`` to hold materialised
            Datasets; None installs without dataset staging (``spec.datasets`` is then not staged).
        cache_dir: the directory on every node that holds its dataset cache (a hostPath).
        default_job_scheduler: the cluster's scheduler for jobs naming none in ``spec.scheduling.schedulerName``
            (the operator's and the scheduler's ``$PHALANX_DEFAULT_JOB_SCHEDULER``); empty: phalanx-scheduler.
        storage_secret: the Secret (in ``namespace``, optional) whose keys ``sweep-storage`` and ``artifact-store``
            name the operator's study database and artifact store; absent, both are in its state directory.
        kubeflow_kinds: also serve the Kubeflow kinds (PyTorchJob... MPIJob, TrainJob and its runtimes) and let
            the operator run them (``kubeflow_manifests``; off by default).
        artifact_claim: a PersistentVolumeClaim in ``namespace`` holding the pipelines' artifact store: the
            operator mounts it at ``ARTIFACT_STORE_PATH`` (its store) and every pipeline step job mounts it there
            too; None keeps the store in the operator's state directory, where steps with files cannot run.
        kubelet_config: the kubelet's configuration file on every node (e.g. ``/var/lib/kubelet/config.yaml``):
            mounted read-only into the node agents (a hostPath), which report its CPU and topology manager
            policies (docs/kubernetes.md#cpu-pinning-and-numa-alignment); None: not reported.
        gpu_allocation: how replicas get GPUs (the operator's ``$PHALANX_GPU_ALLOCATION``): ``dra``, claims
            phalanx-scheduler allocates exactly; ``device-plugin``, ``nvidia.com/gpu`` (docs/kubernetes.md#gpus-
            through-dynamic-resource-allocation).
        resource_slices: the node agents publish their GPUs as ResourceSlices (``$PHALANX_RESOURCE_SLICES``),
            for ``dra`` on nodes where no DRA driver does.
    """

    image: str
    namespace: str = DEFAULT_NAMESPACE
    dataset_store_claim: str | None = None
    cache_dir: str = DEFAULT_CACHE_DIR
    default_job_scheduler: str = ""
    kubeflow_kinds: bool = False
    storage_secret: str = OPERATOR_STORAGE_SECRET
    artifact_claim: str | None = None
    kubelet_config: str | None = None
    gpu_allocation: str = "device-plugin"
    resource_slices: bool = False


@dataclass(frozen=True, slots=True)
class _Component:
    name: str  # operator | scheduler | node-agent
    command: str
    cpu: str
    memory: str
    memory_limit: str

    @property
    def account(self) -> str:
        return f"phalanx-{self.name}"

    @property
    def selector(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": "phalanx", "app.kubernetes.io/component": self.name}

    @property
    def labels(self) -> dict[str, str]:
        return {**self.selector, "app.kubernetes.io/part-of": "phalanx"}


# The operator's limit leaves room for Optuna (imported once a sweep exists) beside its caches.
OPERATOR = _Component("operator", "phalanx-operator", cpu="100m", memory="128Mi", memory_limit="1Gi")
SCHEDULER = _Component("scheduler", "phalanx-scheduler", cpu="250m", memory="256Mi", memory_limit="1Gi")
NODE_AGENT = _Component("node-agent", "phalanx-node-agent", cpu="50m", memory="64Mi", memory_limit="256Mi")
COMPONENTS = (OPERATOR, SCHEDULER, NODE_AGENT)


def install_manifests(parameters: InstallParameters) -> list[dict[str, Any]]:
    """Every object of an install, in the order ``kubectl apply`` needs them.

    The namespace and CRDs come first, then ServiceAccounts and RBAC, then the workloads.
    """
    return [
        namespace(parameters.namespace, privileged=needs_host_paths(parameters)),
        *custom_resource_definitions(),
        *(kubeflow_custom_resource_definitions() if parameters.kubeflow_kinds else []),
        *(service_account(component, parameters.namespace) for component in COMPONENTS),
        *rbac(parameters.namespace),
        *admission_policies(parameters.namespace),
        *(kubeflow_rbac(parameters.namespace) if parameters.kubeflow_kinds else []),
        scheduler_config_map(parameters),
        operator_deployment(parameters),
        scheduler_deployment(parameters),
        node_agent_daemonset(parameters),
    ]


#: The operator's switch for the Kubeflow kinds (``--kubeflow-kinds``): ``true`` or ``false``.
KUBEFLOW_KINDS_ENV = "PHALANX_KUBEFLOW_KINDS"
KUBEFLOW_ROLE = "phalanx-operator-kubeflow"


def kubeflow_rbac(namespace: str) -> list[dict[str, Any]]:
    """The operator's rights on the Kubeflow kinds (``--kubeflow-kinds``, with their CRDs).

    A ClusterRole of its own, bound to the operator's ServiceAccount, so that an install without the option
    grants nothing on those kinds. The shipped ClusterTrainingRuntimes are created by the operator at start
    (like the built-in JobTypes): in one ``kubectl apply`` a CRD is not served yet when the objects after it
    are sent.
    """
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": KUBEFLOW_ROLE, "labels": {"app.kubernetes.io/part-of": "phalanx"}},
        "rules": kubeflow_rules(),
    }
    return [role, _binding("ClusterRoleBinding", "ClusterRole", KUBEFLOW_ROLE, namespace, account=OPERATOR.account)]


def kubeflow_rules() -> list[dict[str, Any]]:
    """The operator's rules on the Kubeflow kinds: read them, write their status, own TrainingJobs by them."""
    groups = sorted({crd.group for crd in KUBEFLOW_CRDS})
    jobs = [crd.plural for crd in JOB_CRDS]
    return [
        _rule(groups, [crd.plural for crd in KUBEFLOW_CRDS], READ),
        # Conditions and replicaStatuses, as upstream's operators write them.
        _rule(groups, [f"{plural}/status" for plural in jobs], ["update", "patch"]),
        # A TrainingJob owned by one (blockOwnerDeletion) needs the right to set finalizers on its owner.
        _rule(groups, [f"{plural}/finalizers" for plural in jobs], ["update"]),
        # The shipped ClusterTrainingRuntimes (torch-distributed...), created at start when missing.
        _rule(["trainer.kubeflow.org"], ["clustertrainingruntimes"], ["create", "update"]),
        _rule([API_GROUP], ["trainingjobs"], ["create"]),
        # Whether each CRD is Phalanx's: a real Kubeflow's is left alone.
        _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], ["get"], [crd.name for crd in KUBEFLOW_CRDS]),
    ]


def render_yaml(documents: list[dict[str, Any]], *, header: str = "") -> str:
    """Multi-document YAML: ``---`` between documents, keys in the order given, an optional comment header."""
    body = "---\n".join(
        yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)
        for document in documents
    )
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    return comment + body


class _Dumper(yaml.SafeDumper):
    """Safe YAML without anchors and aliases: each manifest reads on its own, as kubectl users expect."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class _FileText(str):
    """A file held in a ConfigMap: written as a literal block, so it reads and edits as the file itself."""

    __slots__ = ()


def _file_text(dumper: yaml.SafeDumper, data: _FileText) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style="|")


_Dumper.add_representer(_FileText, _file_text)


def needs_host_paths(parameters: InstallParameters) -> bool:
    """Whether the node agents mount host directories (the dataset cache, the kubelet's configuration file)."""
    return parameters.dataset_store_claim is not None or parameters.kubelet_config is not None


def namespace(name: str, *, privileged: bool = False) -> dict[str, Any]:
    """The install namespace. Its Pods keep the ``restricted`` Pod Security Standard, and it enforces it.

    With ``privileged`` (the node agents' hostPath dataset cache) it enforces ``privileged`` and warns at
    ``restricted``.
    """
    labels = {"app.kubernetes.io/part-of": "phalanx", "pod-security.kubernetes.io/enforce": "restricted"}
    if privileged:
        labels["pod-security.kubernetes.io/enforce"] = "privileged"
        labels["pod-security.kubernetes.io/warn"] = "restricted"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def service_account(component: _Component, namespace: str) -> dict[str, Any]:
    """The identity one component runs as."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": component.account, "namespace": namespace, "labels": component.labels},
    }


#: The cluster-wide default of ``spec.scheduling.schedulerName``, read by the operator and the scheduler alike.
JOB_SCHEDULER_ENV = "PHALANX_DEFAULT_JOB_SCHEDULER"


def _rule(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}
    if names:
        rule["resourceNames"] = list(names)
    return rule


def cluster_rules() -> dict[str, list[dict[str, Any]]]:
    """The cluster-wide rules of each identity, by ServiceAccount name."""
    plurals = [kind.plural for kind in KINDS]
    with_status = [f"{kind.plural}/status" for kind in KINDS if kind.has_status]
    events = _rule([""], ["events"], ["create", "patch"])
    # Each component checks who scrapes its /metrics: the token (TokenReview), then RBAC (SubjectAccessReview).
    reviews = [
        _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        _rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
    ]
    return {
        OPERATOR.account: [
            _rule([API_GROUP], plurals, [*READ, "patch", "update"]),
            # The built-in JobTypes (pytorch, mpi...) are created at start when a cluster lacks them.
            _rule([API_GROUP], ["jobtypes"], ["create"]),
            # A finished job is deleted once its ttlSecondsAfterFinished has passed. Sweeps' trials and pipeline
            # runs' steps are TrainingJobs (a tuning step a Sweep) the operator creates, and deletes when their
            # sweep is gone.
            _rule([API_GROUP], ["trainingjobs", "sweeps"], ["create", "delete"]),
            # A trial's intermediate metrics are the phalanx-metric lines of its first replica's log.
            _rule([""], ["pods/log"], ["get"]),
            _rule([API_GROUP], with_status, ["update", "patch"]),
            _rule([""], ["pods"], ["create", "delete", *READ]),
            _rule([""], ["services", "configmaps"], ["create", "delete", *READ]),
            # The SSH key pair of a job with sshKeys (an MPIJob): created with its Pods, named with the job's uid,
            # and gone with the job (owner reference), so never read, listed or deleted.
            _rule([""], ["secrets"], ["create"]),
            # Which namespaces have the artifact store's claim (--artifact-volume-claim), whose jobs' Pods write
            # their outputs to it: read, never written.
            _rule([""], ["persistentvolumeclaims"], READ),
            # The PodGroup of a job left to the cluster's scheduler (kube-scheduler's gang scheduling): created
            # before its Pods; one of an earlier job of the same name is read and deleted.
            _rule(["scheduling.k8s.io"], ["podgroups"], ["create", "get", "delete"]),
            # --gpu-allocation dra: a ResourceClaimTemplate per role with GPUs, created with the job's Pods, named
            # with the job's uid and gone with the job (owner reference), so never read or deleted.
            _rule(["resource.k8s.io"], ["resourceclaimtemplates"], ["create"]),
            # Each node agent's dataset cache report (an annotation): when a job's data is staged there; and
            # its unhealthy GPUs, whose replicas are stopped and whose jobs are placed again.
            _rule([""], ["nodes"], READ),
            events,
            # The job history (--history-url): an ended job is recorded with its Events.
            _rule([""], ["events"], ["list"]),
            *reviews,
        ],
        SCHEDULER.account: [
            _rule([""], ["pods"], READ),
            _rule([""], ["pods/binding"], ["create"]),
            _rule([""], ["pods/status"], ["patch"]),
            _rule([""], ["nodes"], READ),
            # Quota and node fit are decided in one cycle (DESIGN §4), so the scheduler reads queues too.
            # JobTypes name the ranked roles, which decide the order replicas are placed in.
            # Datasets: the bytes a node would have to fetch, for data locality.
            _rule([API_GROUP], ["trainingjobs", "queues", "jobtypes", "datasets"], READ),
            # Admission and why-waiting are status replacements on the version they were decided on.
            _rule([API_GROUP], ["trainingjobs/status"], ["update"]),
            # Each Queue's admitted and pending jobs and usage, for `kubectl get queues`.
            _rule([API_GROUP], ["queues/status"], ["update"]),
            # DRA: a Pod's GPU claim is allocated the devices of its placement and reserved for it before the Pod
            # is bound, as kube-scheduler does: the devices from the nodes' ResourceSlices, the finalizer on the
            # claim, and its allocation and reservation, which Kubernetes 1.36 also authorizes as
            # resourceclaims/binding. Other schedulers' claims are watched: the GPUs they hold are not free.
            _rule(["resource.k8s.io"], ["resourceslices", "deviceclasses"], ["list", "watch"]),
            _rule(["resource.k8s.io"], ["resourceclaims"], [*READ, "patch"]),
            _rule(["resource.k8s.io"], ["resourceclaims/status", "resourceclaims/binding"], ["patch"]),
            events,
            *reviews,
        ],
        NODE_AGENT.account: [
            # Its Node (RBAC cannot say which: it asks with a field selector): written, and watched for
            # `phalanx cache evict` requests.
            _rule([""], ["nodes"], [*READ, "patch"]),
            _rule([""], ["nodes/status"], ["patch"]),
            # --resource-slices: its node's GPUs as a ResourceSlice, where no DRA driver publishes them.
            _rule(["resource.k8s.io"], ["resourceslices"], ["get", "create", "update", "delete"]),
            _rule([""], ["pods"], READ),
            # The dataset cache: which jobs are placed on its node, what they read, and their ranked roles.
            _rule([API_GROUP], ["trainingjobs", "datasets", "jobtypes"], READ),
            # Warning/Normal Events on its Node when a GPU turns unhealthy or recovers; Staged on a job.
            _rule([""], ["events"], ["create"]),
            *reviews,
        ],
    }


def rbac(namespace: str) -> list[dict[str, Any]]:
    """ClusterRoles and bindings for the three identities, and the scheduler's Role for its Lease."""
    documents: list[dict[str, Any]] = []
    for account, rules in cluster_rules().items():
        documents.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": account, "labels": {"app.kubernetes.io/part-of": "phalanx"}},
                "rules": rules,
            }
        )
        documents.append(_binding("ClusterRoleBinding", "ClusterRole", account, namespace))
    documents.append(metrics_reader_role())
    documents.extend(user_roles())
    lease_role = f"{SCHEDULER.account}-leader-election"
    documents.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {
                "name": lease_role,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/part-of": "phalanx"},
            },
            "rules": [
                # create cannot be limited to a name (the object does not exist yet); get and update can.
                _rule(["coordination.k8s.io"], ["leases"], ["create"]),
                _rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [SCHEDULER_LEASE]),
            ],
        }
    )
    documents.append(_binding("RoleBinding", "Role", lease_role, namespace, account=SCHEDULER.account))
    return documents


#: ValidatingAdmissionPolicies (and their bindings) that narrow what RBAC grants by resource alone.
NODE_AGENT_POLICY = "phalanx-node-agent-own-node"
OPERATOR_POLICY = "phalanx-operator-job-children"
#: The node a ServiceAccount token was issued on, in the user's extra: the API server sets it for the projected
#: token of a Pod bound to a node (a DaemonSet's), and for a token bound to a Node object.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
#: What the operator creates for a job, each controlled by that TrainingJob (``rendering.job_owner_reference``).
OPERATOR_CHILDREN = (
    ("", ("pods", "services", "configmaps", "secrets")),
    ("scheduling.k8s.io", ("podgroups",)),
    ("resource.k8s.io", ("resourceclaimtemplates",)),
)


def admission_policies(namespace: str) -> list[dict[str, Any]]:
    """What RBAC cannot say, checked by the API server itself (no webhook to run; GA in Kubernetes 1.30).

    RBAC grants by resource, never by which object: a node agent needs ``patch`` on nodes to write its own Node,
    which would let it write any; the operator needs ``create`` on pods in every namespace, which would let it
    create any Pod. Two ValidatingAdmissionPolicies narrow them:

    - a node agent may change only the Node its token was issued on (``NODE_NAME_EXTRA``) and that node's
      ResourceSlices (``--resource-slices``), and nothing when its token names no node;
    - the operator may create Pods, Services, ConfigMaps, Secrets, PodGroups and ResourceClaimTemplates only when a
      TrainingJob controls them (so they are gone with it, and a stolen operator token cannot start a bare Pod).
    """
    agent = f"system:serviceaccount:{namespace}:{NODE_AGENT.account}"
    operator = f"system:serviceaccount:{namespace}:{OPERATOR.account}"
    node_name = f"request.userInfo.extra[{NODE_NAME_EXTRA!r}]"
    # What the agent's request is about: a Node by its name; a ResourceSlice by the node it lists devices of (its
    # old object for a delete; a slice of no node is no agent's to write).
    target = (
        "request.resource.resource == 'resourceslices' ? "
        "(request.operation == 'DELETE' ? "
        "(has(oldObject.spec.nodeName) ? oldObject.spec.nodeName : '') : "
        "(has(object.spec.nodeName) ? object.spec.nodeName : '')) : object.metadata.name"
    )
    agent_policy = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["*"],
                    "operations": ["UPDATE"],
                    "resources": ["nodes", "nodes/status"],
                },
                {
                    "apiGroups": ["resource.k8s.io"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "resources": ["resourceslices"],
                },
            ]
        },
        "matchConditions": [{"name": "node-agent", "expression": f"request.userInfo.username == {agent!r}"}],
        "variables": [
            {"name": "tokenNode", "expression": f"{NODE_NAME_EXTRA!r} in request.userInfo.extra ? {node_name}[0] : ''"},
            {"name": "target", "expression": target},
        ],
        "validations": [
            {
                "expression": "variables.tokenNode != ''",
                "reason": "Forbidden",
                "message": "a phalanx node agent's token must name its node, as the projected token of the "
                "DaemonSet's Pod does (docs/security.md)",
            },
            {
                "expression": "variables.tokenNode == '' || variables.tokenNode == variables.target",
                "reason": "Forbidden",
                "messageExpression": "'a phalanx node agent may change only its own Node, ' + variables.tokenNode "
                "+ ', not ' + (request.resource.resource == 'resourceslices' ? 'a ResourceSlice of node ' : '') "
                "+ (variables.target == '' ? 'no node' : variables.target)",
            },
        ],
    }
    operator_policy = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE"], "resources": list(resources)}
                for group, resources in OPERATOR_CHILDREN
            ]
        },
        "matchConditions": [{"name": "operator", "expression": f"request.userInfo.username == {operator!r}"}],
        "validations": [
            {
                "expression": "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, "
                f"r.apiVersion.startsWith('{API_GROUP}/') && r.kind == 'TrainingJob' && "
                "has(r.controller) && r.controller)",
                "reason": "Forbidden",
                "messageExpression": "'the phalanx-operator creates only what a TrainingJob controls; this ' + "
                "request.kind.kind + ' names no TrainingJob as its controller'",
            }
        ],
    }
    documents = []
    for name, spec in ((NODE_AGENT_POLICY, agent_policy), (OPERATOR_POLICY, operator_policy)):
        labels = {"app.kubernetes.io/part-of": "phalanx"}
        documents.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
            }
        )
        documents.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name, "labels": labels},
                "spec": {"policyName": name, "validationActions": ["Deny"]},
            }
        )
    return documents


#: The ClusterRoles for people (bound to nobody by the install): see ``user_roles``.
USER_EDIT_ROLE, USER_VIEW_ROLE, USER_CLUSTER_ROLE = "phalanx-edit", "phalanx-view", "phalanx-cluster-view"
#: What users create in their namespaces; each kind's ``/status`` is the components' to write.
USER_KINDS = ("trainingjobs", "sweeps", "pipelines", "pipelineruns", "datasets")


def user_roles() -> list[dict[str, Any]]:
    """ClusterRoles for the people who use Phalanx, as Kubernetes' own roles are for its kinds.

    - ``phalanx-edit`` is aggregated into Kubernetes' ``edit`` and ``admin``, ``phalanx-view`` into ``view``:
      whoever a RoleBinding gives ``edit`` in a namespace may submit, halt and delete jobs, sweeps, pipelines and
      Datasets there (``view``: read them), with no binding of Phalanx's own;
    - ``phalanx-cluster-view`` reads what is cluster-scoped (Queues, JobTypes, Nodes), which a namespace's
      RoleBinding cannot grant: bind it cluster-wide to the users (``get queues``, the JobTypes validation reads,
      ``get nodes``).
    """
    part_of = {"app.kubernetes.io/part-of": "phalanx"}
    status = [f"{kind}/status" for kind in USER_KINDS if kind != "pipelines"]
    write = ["create", "update", "patch", "delete", "deletecollection"]

    def role(name: str, aggregate: tuple[str, ...], rules: list[dict[str, Any]]) -> dict[str, Any]:
        labels = {**part_of, **{f"rbac.authorization.k8s.io/aggregate-to-{to}": "true" for to in aggregate}}
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": rules,
        }

    return [
        role(
            USER_EDIT_ROLE,
            ("edit", "admin"),
            [_rule([API_GROUP], list(USER_KINDS), [*READ, *write]), _rule([API_GROUP], status, READ)],
        ),
        role(USER_VIEW_ROLE, ("view",), [_rule([API_GROUP], [*USER_KINDS, *status], READ)]),
        role(
            USER_CLUSTER_ROLE,
            (),
            [_rule([API_GROUP], ["queues", "queues/status", "jobtypes"], READ), _rule([""], ["nodes"], READ)],
        ),
    ]


def metrics_reader_role() -> dict[str, Any]:
    """The ClusterRole that lets its subjects ``get`` the components' ``/metrics``: bound to no one by the install.

    Bind it to the ServiceAccount of the Prometheus that scrapes the components (docs/install.md#metrics).
    """
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": METRICS_READER_ROLE, "labels": {"app.kubernetes.io/part-of": "phalanx"}},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }


def _binding(kind: str, role_kind: str, role: str, namespace: str, *, account: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": role}
    if kind == "RoleBinding":
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/part-of": "phalanx"}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account or role, "namespace": namespace}],
    }


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _pod_spec(component: _Component, image: str, extra_env: list[dict[str, Any]]) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/healthz", "port": "health"}, "periodSeconds": 10, "failureThreshold": 3}
    container = {
        "name": component.name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [component.command],
        "env": [
            _field_env("POD_NAME", "metadata.name"),
            _field_env("POD_NAMESPACE", "metadata.namespace"),
            # Set, though it is the default, so that a chart's healthPort moves the process and the probes together.
            {"name": HEALTH_PORT_ENV, "value": str(HEALTH_PORT)},
            {"name": METRICS_ACCESS_ENV, "value": "rbac"},
            *extra_env,
        ],
        "ports": [{"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"}],
        "livenessProbe": {**probe, "initialDelaySeconds": 15},
        "readinessProbe": {**probe, "httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 5},
        "resources": {
            "requests": {"cpu": component.cpu, "memory": component.memory},
            "limits": {"memory": component.memory_limit},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return {
        "serviceAccountName": component.account,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NONROOT_UID,
            "runAsGroup": NONROOT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
    }


def _deployment(
    component: _Component, parameters: InstallParameters, env: list[dict[str, Any]], *, strategy: str
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": component.account, "namespace": parameters.namespace, "labels": component.labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": component.selector},
            "strategy": {"type": strategy},
            "template": {
                "metadata": {"labels": component.labels, "annotations": scrape_annotations()},
                "spec": _pod_spec(component, parameters.image, env),
            },
        },
    }


def _store_volume(parameters: InstallParameters) -> dict[str, Any]:
    return {"name": "dataset-store", "persistentVolumeClaim": {"claimName": parameters.dataset_store_claim}}


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    """An environment variable from the operator's storage Secret, unset while the Secret or key is absent."""
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}}


def operator_deployment(parameters: InstallParameters) -> dict[str, Any]:
    """The operator: one replica, replaced (never doubled) on update, as it holds no leader lease.

    It runs the sweeps and pipeline runs too: its state directory (an ``emptyDir``, which outlives a restart of
    its container but not its Pod) holds the default study database and artifact store; the Secret
    ``storage_secret`` (``phalanx-operator-storage``), when an administrator creates it, names real ones (keys
    ``sweep-storage``: a PostgreSQL URL, password included, which is why it is a Secret; ``artifact-store``: an
    s3:// or gs:// URL; ``history-url``: the job history's database, a PostgreSQL URL, without which no history
    is kept).
    With a dataset store it mounts the claim read-write and materialises Datasets into it; local sources are
    read only from the store's ``sources/`` directory (``--allow-path-under``).
    """
    env = [
        {"name": "PHALANX_SCHEDULER_NAME", "value": SCHEDULER_NAME},
        {"name": JOB_SCHEDULER_ENV, "value": parameters.default_job_scheduler},
        {"name": KUBEFLOW_KINDS_ENV, "value": "true" if parameters.kubeflow_kinds else "false"},
        {"name": GPU_ALLOCATION_ENV, "value": parameters.gpu_allocation},
        {"name": "PHALANX_STATE_DIR", "value": OPERATOR_STATE_PATH},
        _secret_env("PHALANX_SWEEP_STORAGE", parameters.storage_secret, "sweep-storage"),
        _secret_env("PHALANX_ARTIFACT_STORE", parameters.storage_secret, "artifact-store"),
        _secret_env("PHALANX_HISTORY_URL", parameters.storage_secret, "history-url"),
    ]
    volumes: list[dict[str, Any]] = [{"name": "state", "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": "state", "mountPath": OPERATOR_STATE_PATH}]
    args: list[str] = []
    if parameters.dataset_store_claim is not None:
        env.append({"name": "PHALANX_DATASET_STORE", "value": f"{DATASET_STORE_PATH}/store"})
        volumes.insert(0, _store_volume(parameters))
        mounts.insert(0, {"name": "dataset-store", "mountPath": DATASET_STORE_PATH})
        args = ["--allow-path-under", f"{DATASET_STORE_PATH}/sources"]
    if parameters.artifact_claim is not None:
        # The store is the claim's directory, at the path every step job mounts it at: not the Secret's key.
        env[env.index(_secret_env("PHALANX_ARTIFACT_STORE", parameters.storage_secret, "artifact-store"))] = {
            "name": "PHALANX_ARTIFACT_STORE",
            "value": ARTIFACT_STORE_PATH,
        }
        env.append({"name": ARTIFACT_CLAIM_ENV, "value": parameters.artifact_claim})
        volumes.append({"name": "artifacts", "persistentVolumeClaim": {"claimName": parameters.artifact_claim}})
        mounts.append({"name": "artifacts", "mountPath": ARTIFACT_STORE_PATH})
    deployment = _deployment(OPERATOR, parameters, env, strategy="Recreate")
    spec = deployment["spec"]["template"]["spec"]
    if len(volumes) > 1:
        spec["securityContext"]["fsGroup"] = NONROOT_UID  # a claim's files belong to the operator's group
    spec["volumes"] = volumes
    container = spec["containers"][0]
    if args:
        container["args"] = args
    container["volumeMounts"] = mounts
    return deployment


def artifact_claim(
    name: str, namespace: str, *, size: str, access_modes: list[str] | str, storage_class: str | None = None
) -> dict[str, Any]:
    """The PersistentVolumeClaim of the pipelines' artifact store, for an install that creates it.

    The chart's ``artifacts.create``; every step job mounts it, on any node, hence ReadWriteMany by default.
    """
    spec: dict[str, Any] = {"accessModes": access_modes, "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": OPERATOR.labels},
        "spec": spec,
    }


def scheduler_config_text() -> str:
    """The scheduler's SchedulerConfiguration file (docs/scheduling.md), every field at its default."""
    return yaml.safe_dump(SchedulerConfiguration().to_dict(), sort_keys=False)


def scheduler_config_map(parameters: InstallParameters) -> dict[str, Any]:
    """The scheduler's SchedulerConfiguration (docs/scheduling.md), every field at its default, to edit in place."""
    text = scheduler_config_text()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": SCHEDULER_CONFIG_MAP, "namespace": parameters.namespace, "labels": SCHEDULER.labels},
        "data": {SCHEDULER_CONFIG_FILE: _FileText(text)},
    }


def scheduler_deployment(parameters: InstallParameters) -> dict[str, Any]:
    """The scheduler: the replica holding the Lease ``phalanx-scheduler`` leads; others wait.

    It reads its SchedulerConfiguration from the ConfigMap ``phalanx-scheduler-config``, mounted as a file
    (``--config``); it reads it once, at start: ``kubectl rollout restart`` after editing it. The Pod template
    carries the file's SHA-256, so an install (or chart upgrade) that changes the file restarts the scheduler.
    """
    env = [
        {"name": "PHALANX_SCHEDULER_NAME", "value": SCHEDULER_NAME},
        {"name": "PHALANX_LEASE_NAME", "value": SCHEDULER_LEASE},
        {"name": JOB_SCHEDULER_ENV, "value": parameters.default_job_scheduler},
    ]
    deployment = _deployment(SCHEDULER, parameters, env, strategy="RollingUpdate")
    digest = hashlib.sha256(scheduler_config_text().encode()).hexdigest()
    deployment["spec"]["template"]["metadata"]["annotations"][SCHEDULER_CONFIG_HASH] = digest
    spec = deployment["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": "config", "configMap": {"name": SCHEDULER_CONFIG_MAP}}]
    container = spec["containers"][0]
    container["args"] = ["--config", f"{SCHEDULER_CONFIG_DIR}/{SCHEDULER_CONFIG_FILE}"]
    container["volumeMounts"] = [{"name": "config", "mountPath": SCHEDULER_CONFIG_DIR, "readOnly": True}]
    return deployment


def node_agent_daemonset(parameters: InstallParameters) -> dict[str, Any]:
    """The node agent: one Pod per node, GPU nodes and tainted nodes included.

    It reads CPU and NUMA topology from the container's ``/sys`` (which shows the host's) and GPUs through NVML;
    ``NVIDIA_VISIBLE_DEVICES=all`` asks the NVIDIA container runtime, where there is one, to expose every GPU
    for inspection only: the agent's Pod requests none.
    """
    env = [
        _field_env("NODE_NAME", "spec.nodeName"),
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        {"name": RESOURCE_SLICES_ENV, "value": "true" if parameters.resource_slices else "false"},
    ]
    spec = _pod_spec(NODE_AGENT, parameters.image, env)
    # On a real node the kubelet resets allocatable to capacity at every status update and the NVIDIA device
    # plugin owns nvidia.com/gpu, so the agent leaves that resource alone there; phalanx-scheduler avoids a
    # failed GPU through the phalanx.dev/unhealthy-gpus annotation instead.
    spec["containers"][0]["args"] = ["--no-gpu-resource"]
    spec["tolerations"] = [{"operator": "Exists"}]
    if parameters.dataset_store_claim is not None:
        container = spec["containers"][0]
        container["args"] += [
            "--dataset-store",
            f"{DATASET_STORE_PATH}/store",
            "--cache-dir",
            parameters.cache_dir,
            "--sample-dir",
            SAMPLE_MOUNT_PATH,
        ]
        container["volumeMounts"] = [
            {"name": "dataset-store", "mountPath": DATASET_STORE_PATH, "readOnly": True},
            {"name": "dataset-cache", "mountPath": parameters.cache_dir},
            {"name": "sample-cache", "mountPath": SAMPLE_MOUNT_PATH},
        ]
        # The hostPath the kubelet creates belongs to root: the agent writes it as root, with no capability.
        container["securityContext"] = {**container["securityContext"], "runAsUser": 0, "runAsNonRoot": False}
        spec["volumes"] = [
            _store_volume(parameters),
            {"name": "dataset-cache", "hostPath": {"path": parameters.cache_dir, "type": "DirectoryOrCreate"}},
            {"name": "sample-cache", "hostPath": {"path": SAMPLE_MOUNT_PATH, "type": "DirectoryOrCreate"}},
        ]
    if parameters.kubelet_config is not None:
        container = spec["containers"][0]
        container["args"] += ["--kubelet-config", KUBELET_CONFIG_MOUNT]
        container["volumeMounts"] = [
            *container.get("volumeMounts", []),
            {"name": "kubelet-config", "mountPath": KUBELET_CONFIG_MOUNT, "readOnly": True},
        ]
        kubelet_file = {"path": parameters.kubelet_config, "type": "File"}
        spec["volumes"] = [*spec.get("volumes", []), {"name": "kubelet-config", "hostPath": kubelet_file}]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NODE_AGENT.account, "namespace": parameters.namespace, "labels": NODE_AGENT.labels},
        "spec": {
            "selector": {"matchLabels": NODE_AGENT.selector},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": NODE_AGENT.labels, "annotations": scrape_annotations()}, "spec": spec},
        },
    }
