"""Schemathesis against the service's own OpenAPI schema (GET /openapi.json), in this process:
the FastAPI app of serve/app.py in front of a real `Rewriter` on a tiny random-weight model, no
Ray. No answer may be a server error, carry a status its operation does not declare, or break
the schema it declares.

    RRT_FUZZ_EXAMPLES=1000 python -m pytest tests/test_serve_fuzz.py   # the larger run
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from serve_inprocess import gateway
from serve_inprocess import settings as serve_settings

from serve.app import api
from testing.local_service import tiny_model

# A small budget per operation keeps CI to seconds; RRT_FUZZ_EXAMPLES raises it.
EXAMPLES = int(os.environ.get("RRT_FUZZ_EXAMPLES", "30"))
KEY = "fuzz-" + "a1" * 12


# The schema needs no replica: the app serves it from its routes' declarations (serve/openapi.py).
# Loaded at import, as schemathesis's lazy fixture loader does not run on this pytest.
schema = schemathesis.openapi.from_asgi("/openapi.json", api)


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """The Gateway the routes reach: a keyed service on every interface, over a real Rewriter."""
    from ray import serve as ray_serve

    from serve.app import Rewriter

    folder = tmp_path_factory.mktemp("fuzz")
    chosen = serve_settings(("0.0.0.0", 8000), max_step_tokens=8)
    # Short steps of a one-layer random model: a recipe costs milliseconds, so valid bodies reach it.
    rewriter = Rewriter(tiny_model(str(folder / "model")), chosen)
    key = folder / "api_key"
    key.write_text(KEY)
    key.chmod(0o600)
    made = gateway(rewriter, chosen, {"file": str(key)})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            ray_serve, "get_replica_context", lambda: SimpleNamespace(servable_object=made)
        )
        yield made


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_error_and_every_answer_keeps_the_schema(case, replica):
    from schemathesis import checks
    from schemathesis.specs.openapi import checks as openapi_checks

    case.call_and_validate(
        headers={"Authorization": f"Bearer {KEY}"},
        checks=[
            checks.not_a_server_error,
            openapi_checks.status_code_conformance,
            openapi_checks.response_schema_conformance,
        ],
    )
