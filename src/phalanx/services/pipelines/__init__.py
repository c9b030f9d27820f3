"""Pipelines run by one controller over the backend port (``controller``), for the embedded runtime and Kubernetes."""
