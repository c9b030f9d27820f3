"""A schemathesis check of this project (loaded through ``SCHEMATHESIS_HOOKS``): every 4xx is a Status that says why.

Kept apart from the test module: schemathesis imports it in its own process, by module name.
"""

from __future__ import annotations

from typing import Any

import schemathesis

#: The shortest message that can name a field and a fix; a refusal's sentence is longer than this.
MIN_SENTENCE = 20


@schemathesis.check
def refusals_are_statuses(ctx: Any, response: Any, case: Any) -> None:
    """A 4xx answer is a Kubernetes ``Status`` whose ``message`` is a sentence, not a bare code or a traceback."""
    if not 400 <= response.status_code < 500:
        return
    body = response.json()
    assert isinstance(body, dict) and body.get("kind") == "Status", (
        f"a {response.status_code} that is no Status: {response.text[:300]}"
    )
    message = body.get("message")
    assert isinstance(message, str) and len(message) >= MIN_SENTENCE, f"a Status without a sentence: {body}"
    assert "Traceback" not in message, f"a Status carrying a traceback: {message[:300]}"
    assert body.get("code") == response.status_code, f"a Status whose code is not the answer's: {body}"
