"""Phalanx on Kubernetes: CRD manifests generated from the models, and the install manifests.

The client, pod and service rendering and binding come with the operator and scheduler (issue 3).
"""
