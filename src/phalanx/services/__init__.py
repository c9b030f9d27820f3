"""Long-running loops and the operations users call.

They wire ``core`` to ``adapters``: the embedded control plane (controller, scheduler and node runtime under
one leader lease) and the operations the CLI and SDK call.
"""
