"""Issue 16, REST: files only where the operator allows, bounded work per request, no 5xx, no echoed content.

Two real servers on loopback: one as shipped (no --data-dir: every path refused) and one with
``--data-dir`` holding a config, datasets, a FIFO, a binary and a too-large file, and symlinks out.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests._server import serve

FLAT = {"model": "llama3.1-8b", "method": "lora", "gpu_model": "A100", "estimator": "theory", "batch_size": 4,
        "tokens_per_sample": 1024}
SECRET = "S3CRET-CONTENT-7f1c"  # written into every server-side file; must never come back
LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}  # Llama-3.1-8B config.json


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served")
    outside = tmp_path_factory.mktemp("outside")
    data = root / "data"
    data.mkdir()
    (outside / "secret.jsonl").write_text(json.dumps({SECRET: SECRET}) + "\n")
    (outside / "config.json").write_text(json.dumps({**LLAMA, "model_type": SECRET}))
    (data / "config.json").write_text(json.dumps(LLAMA))
    (data / "odd.json").write_text(json.dumps({"model_type": SECRET, SECRET: 1}))
    (data / "fields.jsonl").write_text(json.dumps({SECRET: "x" * 40}) + "\n")
    (data / "ok.jsonl").write_text(json.dumps({"text": "x" * 400}) + "\n")
    (data / "binary.jsonl").write_bytes(b"\x00\xff\xfe" + SECRET.encode())
    (data / "huge.jsonl").write_bytes(b" " * (64 * 2**20 + 1))
    (data / "link.jsonl").symlink_to(outside / "secret.jsonl")
    (data / "dirlink").symlink_to(outside, target_is_directory=True)
    os.mkfifo(data / "fifo.jsonl")
    return {"root": root, "data": data, "outside": outside}


@pytest.fixture(scope="module")
def closed() -> Iterator[httpx.Client]:
    with serve() as http:
        yield http


@pytest.fixture(scope="module")
def opened(files: dict[str, Path]) -> Iterator[httpx.Client]:
    with serve("--data-dir", str(files["data"]), "--timeout-s", "3") as http:
        yield http


def _post(client: httpx.Client, body: Any, route: str = "/api/estimate") -> httpx.Response:
    res = client.post(route, json=body)
    assert res.status_code < 500 and SECRET not in res.text, res.text
    return res


def _bodies(path: str) -> list[dict[str, Any]]:
    nested = {"estimator": {"method": "theory"}, "configs": [{"fm": {"base_model_path": "llama3.1-8b"},
                                                               "data": {"dataset": path}}]}
    return [{**FLAT, "dataset_path": path}, {**FLAT, "tokenizer_path": path}, {**FLAT, "model": path}, nested]


@pytest.mark.parametrize("path", ["/etc/passwd", "/etc/hostname.json", "data.jsonl", "../x.csv", "/proc/self/environ",
                                  "/dev/zero", "~/.bashrc.json"])
def test_without_data_dir_every_path_is_refused_and_says_how_to_enable(closed: httpx.Client, path: str) -> None:
    for body in _bodies(path):
        res = _post(closed, body)
        assert res.status_code == 422, res.text
        if body.get("model") != "data.jsonl":  # a bare name as model is an unknown model, not a path
            assert "--data-dir" in res.text, res.text


@pytest.mark.parametrize("name", ["../outside/secret.jsonl", "link.jsonl", "dirlink/secret.jsonl", "/proc/self/environ",
                                  "/dev/zero", "fifo.jsonl", "huge.jsonl", "missing.jsonl", "/etc/passwd", "."])
def test_paths_out_of_the_data_dir_or_not_regular_files_are_refused(opened: httpx.Client, name: str) -> None:
    for body in _bodies(name):
        res = _post(opened, body)
        assert res.status_code == 422, res.text


def test_traversal_with_absolute_paths(opened: httpx.Client, files: dict[str, Path]) -> None:
    sneaky = str(files["data"] / ".." / ".." / files["outside"].name / "secret.jsonl")
    assert _post(opened, {**FLAT, "dataset_path": sneaky}).status_code == 422
    assert _post(opened, {**FLAT, "model": str(files["outside"] / "config.json")}).status_code == 422


def test_files_under_the_data_dir_are_read(opened: httpx.Client, files: dict[str, Path]) -> None:
    res = _post(opened, {**FLAT, "dataset_path": "ok.jsonl", "num_samples": None})
    assert res.status_code == 200, res.text
    assert res.json()["results"][0]["tokens"]["total_tokens"] == 100  # 400 characters / 4
    res = _post(opened, {**FLAT, "model": str(files["data"] / "config.json")})
    assert res.status_code == 200 and res.json()["results"][0]["memory"]["total_memory_gib"] > 0


@pytest.mark.parametrize("name", ["fields.jsonl", "binary.jsonl", "odd.json"])
def test_errors_never_quote_a_file(opened: httpx.Client, name: str) -> None:
    for body in _bodies(name):
        res = _post(opened, body)  # asserts: no 5xx, the file's content nowhere in the answer
        assert res.status_code in (200, 422), res.text


def test_config_can_be_uploaded_in_the_body(closed: httpx.Client) -> None:
    uploaded = _post(closed, {**FLAT, "model": LLAMA})
    named = _post(closed, {**FLAT, "model": "llama3.1-8b"})
    assert uploaded.status_code == named.status_code == 200, uploaded.text
    up, cat = uploaded.json()["results"][0]["memory"], named.json()["results"][0]["memory"]
    assert up["weights_gib"] == pytest.approx(cat["weights_gib"], rel=1e-6)  # the same architecture
    bad = _post(closed, {**FLAT, "model": {"model_type": SECRET}})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["model"]
    nested = {"estimator": {"method": "theory"}, "configs": [{"fm": {"base_model_path": LLAMA}}]}
    assert _post(closed, nested).status_code == 200


HOSTILE: list[tuple[str, bytes, int]] = [
    ("NaN", b'{"model":"llama3.1-8b","gpu_model":"A100","lora_alpha":NaN}', 422),
    ("Infinity", b'{"model":"llama3.1-8b","gpu_model":"A100","lora_alpha":Infinity}', 422),
    ("-Infinity", b'{"model":"llama3.1-8b","gpu_model":"A100","epochs":-Infinity}', 422),
    ("1e999", b'{"model":"llama3.1-8b","gpu_model":"A100","lora_alpha":1e999}', 422),
    ("30 digits", b'{"model":"llama3.1-8b","gpu_model":"A100","lora_alpha":123456789012345678901234567890}', 422),
    ("5000 digits", b'{"model":"llama3.1-8b","gpu_model":"A100","batch_size":' + b"9" * 5000 + b"}", 422),
    ("nested 1000", b"[" * 1000 + b"]" * 1000, 422),
    ("nested 100000", b"[" * 100_000 + b"]" * 100_000, 422),
    ("object nested 40", b'{"a":' * 40 + b"1" + b"}" * 40, 422),
    ("lone surrogate model", b'{"model":"\\ud800","gpu_model":"A100"}', 422),
    ("lone surrogate gpu", b'{"model":"llama3.1-8b","gpu_model":"\\udfff"}', 422),
    ("lone surrogate key", b'{"\\ud800":1}', 422),
    ("model 257 chars", json.dumps({**FLAT, "model": "m" * 257}).encode(), 422),
    ("digit dataset", json.dumps({"configs": [{"data": {"dataset": "1" * 3000}}]}).encode(), 422),
    ("long dataset", json.dumps({"configs": [{"data": {"dataset": "1" * 4000}}]}).encode(), 422),
    ("2 MB model", json.dumps({**FLAT, "model": "x" * 2_000_000}).encode(), 413),
    ("not utf-8", b'{"model":"\xff\xfe"}', 422),
    ("max_gpus 10**9", json.dumps({**FLAT, "max_gpus": 10**9}).encode(), 422),
    ("gpus_per_node 0", json.dumps({**FLAT, "gpus_per_node": 0}).encode(), 422),
    ("65 configs", json.dumps({"configs": [{}] * 65}).encode(), 422),
]


@pytest.mark.parametrize("name, body, status", HOSTILE, ids=[h[0] for h in HOSTILE])
@pytest.mark.parametrize("route", ["/api/estimate", "/api/recommend"])
def test_hostile_bodies(closed: httpx.Client, name: str, body: bytes, status: int, route: str) -> None:
    res = closed.post(route, content=body, headers={"content-type": "application/json"})
    assert res.status_code == status, res.text
    assert res.json()["detail"][0]["type"] != "internal_error"


@pytest.mark.slow
def test_healthz_answers_fast_while_a_slow_request_runs(opened: httpx.Client) -> None:
    """A traced estimate (seconds of CPU) runs in a worker thread; /healthz stays under 100 ms; the slow
    request is cut at --timeout-s with a 422 that says so."""
    slow: dict[str, Any] = {}
    body = {**FLAT, "estimator": "traced", "tokens_per_sample": 1000 + int(time.time()) % 997}  # a fresh trace

    def call() -> None:
        slow["res"] = opened.post("/api/estimate", json=body)

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.5)
    took: list[float] = []
    while thread.is_alive():
        start = time.perf_counter()
        assert opened.get("/healthz").status_code == 200
        took.append(time.perf_counter() - start)
        time.sleep(0.05)
    thread.join()
    took.sort()
    p90 = took[int(0.9 * (len(took) - 1))]  # p90, not the worst: this test shares 2 cores with the rest of CI
    assert len(took) >= 5 and p90 < 0.1, f"/healthz p90 {p90 * 1000:.0f} ms, worst {took[-1] * 1000:.0f} ms"
    assert slow["res"].status_code in (200, 422), slow["res"].text
    if slow["res"].status_code == 422:
        assert slow["res"].json()["detail"][0]["type"] in ("timeout", "autoconf_error")
