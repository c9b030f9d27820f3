"""The processes Phalanx runs on a Kubernetes cluster: the operator, the scheduler and the node agent.

Each (``phalanx-operator``, ``phalanx-scheduler``, ``phalanx-node-agent``) is a thin ``main`` that parses
options (``common.py``), connects to the API server and runs its service from ``phalanx.services``; the
Deployments and the DaemonSet in ``deploy/`` run them by these names.
"""
