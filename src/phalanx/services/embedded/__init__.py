"""The embedded backend: the control plane of one machine over a SQLite store and local processes.

The controller, the scheduler loop, the node runtime (replicas as processes), the dataset manager of this machine,
the leader lease of a state directory and the local API over a Unix socket. Nothing here knows of Kubernetes
(``services.kubernetes``); what both backends share lives in ``services`` itself.
"""
