"""``$(VAR)`` in a replica's command and args: the embedded runtime expands it from the replica's environment as
Kubernetes does for a container's command and args, so a framework that takes its port as an argument (``dask
scheduler --port``, ``ray start --port``) gets the JobType's rendered port on both backends."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Runtime
from phalanx.model.jobs import Phase

WRITE_ARGV = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"


def test_command_and_args_expand_references_to_the_replicas_environment(runtime: Runtime, tmp_path: Path) -> None:
    seen = tmp_path / "argv.json"
    runtime.start_control_plane()
    runtime.submit(
        {
            "metadata": {"name": "refs"},
            "spec": {
                "type": "generic",
                "replicas": {
                    "worker": {
                        "template": {
                            "command": ["python", "-c", WRITE_ARGV, str(seen), "--port=$(COORDINATOR_PORT)"],
                            "args": [
                                "$(PHALANX_ROLE)-$(PHALANX_REPLICA_INDEX)",  # Phalanx's own variables
                                "$(GREETING)",  # the template's env
                                "$$(GREETING)",  # escaped: kept literally, with one $
                                "$(NOT_SET)",  # undefined: kept as written
                                "cost: 5$ or $5 or $",  # a $ without ( is kept
                                "$(GREETING",  # unterminated: kept
                            ],
                            "env": {"GREETING": "hello"},
                            "resources": {"cpu": "100m", "memory": "64Mi"},
                        }
                    }
                },
            },
        }
    )
    final = runtime.wait_phase("refs", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    port = final.status.endpoints["refs-worker-0"].rpartition(":")[2]
    assert json.loads(seen.read_text()) == [
        f"--port={port}",
        "worker-0",
        "hello",
        "$(GREETING)",
        "$(NOT_SET)",
        "cost: 5$ or $5 or $",
        "$(GREETING",
    ]
