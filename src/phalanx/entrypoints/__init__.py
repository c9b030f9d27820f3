"""Entry points: the ``phalanx`` CLI, the Python SDK client and the control-plane main."""
