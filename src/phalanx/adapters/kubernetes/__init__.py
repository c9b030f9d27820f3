"""Phalanx's Kubernetes adapter: what speaks the Kubernetes API and its objects; nothing here decides.

- ``api``: a small dict-level client of the API (connection and auth from lightkube); ``informer``: one kind
  cached by a LIST and kept current by a WATCH; ``parsed``: cached objects parsed once per resourceVersion.
- ``objects``: API objects (jobs, JobTypes, Queues, Datasets, Sweeps, Pipelines, PipelineRuns, Nodes, Pods,
  Events) read as models, and the
  bodies of objects users submit and of job statuses written back;
  ``rendering``: a job into the Pods, headless Service, hostfile ConfigMap and SSH key Secret that run it;
  ``sshkeys``: the SSH key pair of such a Secret; ``node_report``: a
  discovered node into the labels, annotations and GPU quantities its node agent writes on the Node;
  ``cache_report``: the dataset cache report a node agent writes on its Node, and eviction requests;
  ``kubelet_config``: the kubelet's CPU and topology manager policies, read from its configuration file and
  written on the Node; ``dra``: Dynamic Resource Allocation's ResourceSlices, claim templates and claim
  allocations, so that a Pod gets exactly the GPUs Phalanx chose.
- ``crds``: the CustomResourceDefinitions of TrainingJob, JobType, Queue, Dataset, Sweep, Pipeline and
  PipelineRun, generated from the models
  (``schemas``) and checked structural (``structural``); ``kubeflow_crds``: the opt-in CRDs of the Kubeflow kinds
  (PyTorchJob... TrainJob), open schemas for upstream files as written; ``manifests``: the install manifests;
  ``server_manifests``: the REST server's ServiceAccount and ClusterRole (when it runs on the cluster).
- ``reviews``: TokenReview and SubjectAccessReview, asked for the REST server's callers (answers cached briefly).

The operator, scheduler and node agent that use them are ``services.kubernetes``; their mains are
``entrypoints.kubernetes``.
"""
