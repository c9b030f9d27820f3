"""The Kubernetes backend: phalanx-operator, phalanx-scheduler and the node agent over informers and the API.

Nothing here knows of the embedded runtime (``services.embedded``); what both backends share lives in
``services`` itself, and the wire form of objects is translated in ``adapters.kubernetes``.
"""
