"""The backend port over a Phalanx server's REST API (``operations.HttpBackend``): the CLI and SDK with ``--server``.

Independent of ``services.embedded`` and ``services.kubernetes``: the server runs whichever backend it runs.
"""
