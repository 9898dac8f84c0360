"""Fuzz the REST API (issue 16): bodies generated from the app's own OpenAPI schema (leaves sometimes
hostile), random JSON and raw hostile bytes, sent through a real socket to a real uvicorn server that
has a --data-dir holding files marked with a secret. No 5xx, no internal error, no echoed content."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoconf.interfaces.api.app import app
from tests._fuzz import POST_ROUTES, SECRET, rest_bodies, rest_outcome
from tests._server import serve

SPEC = app.openapi()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    data = tmp_path_factory.mktemp("fuzz-data")
    (data / "config.json").write_text(json.dumps({"model_type": SECRET, SECRET: 1}))
    (data / "d.jsonl").write_text(json.dumps({SECRET: SECRET}) + "\n")
    (data / "text.jsonl").write_text(json.dumps({"text": SECRET}) + "\n")
    with serve("--data-dir", str(data)) as http:
        yield http


@pytest.mark.slow
@settings(max_examples=500, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(route=st.sampled_from(POST_ROUTES), body=rest_bodies(SPEC))
def test_schema_driven_bodies_never_5xx(client: httpx.Client, route: str, body: bytes) -> None:
    assert rest_outcome(client, route, body) == "ok", body[:300]


@pytest.mark.parametrize("body", [
    {"configs": [{"data": {"dataset": "1" * 3000}}]},  # was HTTP 500 (a long digit string)
    {"model": "\ud800", "gpu_model": "A100"},  # was 500 (lone surrogate)
    {"model": "llama3.1-8b", "gpu_model": "\ud800"},
    {"model": "llama3.1-8b", "gpu_model": "A100", "lora_alpha": 123456789012345678901234567890},
    {"model": "config.json", "gpu_model": "A100"},  # was: echoed the file's model_type
    {"model": "./config.json", "gpu_model": "A100"},
    {"model": "llama3.1-8b", "gpu_model": "A100", "dataset_path": "d.jsonl"},  # was: echoed field names
    {"configs": [{"fm": {"base_model_path": "llama3.1-8b"}, "data": {"dataset": "d.jsonl"}}]},
    {"configs": [{"fm": {"base_model_path": "config.json"}}]},
])
def test_fuzz_findings_stay_fixed(client: httpx.Client, body: dict[str, object]) -> None:
    raw = json.dumps(body).encode("utf-8", "surrogatepass")
    for route in POST_ROUTES:
        assert rest_outcome(client, route, raw) == "ok"


def test_answers_do_not_quote_an_allowed_dataset(client: httpx.Client) -> None:
    """Reading an allowed file is fine; its text is counted, never returned."""
    res = client.post("/api/tokens", json={"model": "llama3.1-8b", "gpu_model": "A100", "estimator": "theory",
                                           "dataset_path": "text.jsonl"})
    assert res.status_code == 200 and SECRET not in res.text
    assert res.json()["results"][0]["tokens"]["num_samples"] == 1
