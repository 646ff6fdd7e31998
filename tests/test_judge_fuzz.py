"""Schemathesis against the judging site's own OpenAPI schema (GET /api/openapi.json), in this
process, over a real study of the bundled sample. No answer may be a server error, carry a status
its operation does not declare, or break the schema it declares.

    RRT_FUZZ_EXAMPLES=1000 python -m pytest tests/test_judge_fuzz.py   # the larger run
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
import schemathesis
from conftest import SAMPLE
from hypothesis import HealthCheck, settings

from judge.app import build_app
from judge.study import create_study
from rrt.config import load_settings
from testing.rewrite_runs import write_runs

# A small budget per operation keeps CI to seconds; RRT_FUZZ_EXAMPLES raises it.
EXAMPLES = int(os.environ.get("RRT_FUZZ_EXAMPLES", "25"))
JUDGE = load_settings().judge

# The schema comes from the app, and the app from a study: both are made at import, as schemathesis
# parametrizes at collection.
FOLDER = tempfile.mkdtemp(prefix="rrt-judge-fuzz-")
atexit.register(shutil.rmtree, FOLDER, True)  # every process that collects this module makes one
MADE = create_study(
    os.path.join(FOLDER, "study"),
    list(write_runs(str(SAMPLE), os.path.join(FOLDER, "runs"), ("guide", "copy")).values()),
    JUDGE.model_copy(update={"recipes": 4, "judges": 5, "human_rewrites": 1}),
)
APP = build_app(os.path.join(FOLDER, "study"), JUDGE.max_chars, JUDGE.body_timeout_s)
schema = schemathesis.openapi.from_asgi("/api/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def cleanup():
    """Remove the study once the module is done."""
    yield
    APP.state.study.close()
    shutil.rmtree(FOLDER, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_error_and_every_answer_keeps_the_schema(case):
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        response_schema_conformance,
        status_code_conformance,
    )

    token = (
        MADE["admin_token"]
        if case.path.startswith("/api/admin")
        else next(iter(MADE["tokens"].values()))
    )
    case.call_and_validate(
        headers={"Authorization": f"Bearer {token}"},
        checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
    )
