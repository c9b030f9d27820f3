"""The REST API server: Kubernetes-shaped routes over the services layer, for any backend (``create_app``).

``kinds`` is the table of resources (plural, kind, scope, as the CRDs name them); ``selectors`` and ``paging``
read the list query (``labelSelector``, ``limit``, ``continue``); ``statuses`` writes every error as a Kubernetes
``Status``, and ``fallbacks`` answers what no route matched; ``access`` is the hook authorization plugs into;
``app`` builds the FastAPI application; ``serving`` runs it with uvicorn for ``phalanx server``. FastAPI and
uvicorn are the ``server`` extra: nothing outside this package needs them (``phalanx server`` checks for them).
"""
