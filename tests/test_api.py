"""The REST API over a real socket: `autoconf-gpu serve` in a subprocess on 127.0.0.1, every route called,
the resource-estimator design's example body, 422s that name the field, and a 1,000-case fuzz with no 5xx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoconf.interfaces.api.inputs import seed_example
from tests._server import serve

POST_ROUTES = ("/api/memory", "/api/time", "/api/tokens", "/api/cost", "/api/estimate", "/api/recommend")
GET_ROUTES = ("/healthz", "/api/models", "/api/gpus", "/docs", "/openapi.json")
FLAT = {"model": "llama3.1-8b", "method": "lora", "gpu_model": "NVIDIA-A100-80GB-PCIe", "number_gpus": 2,
        "tokens_per_sample": 2048, "batch_size": 16, "estimator": "theory", "num_samples": 10_000, "epochs": 2}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the test server lets clients name files in (serve --data-dir)."""
    return tmp_path_factory.mktemp("api-data")


@pytest.fixture(scope="module")
def client(data_dir: Path) -> Iterator[httpx.Client]:
    with serve("--data-dir", str(data_dir)) as http:
        yield http


@pytest.mark.parametrize("route", GET_ROUTES)
def test_get_routes(client: httpx.Client, route: str) -> None:
    res = client.get(route)
    assert res.status_code == 200
    if route == "/api/models":
        names = {m["name"] for m in res.json()["models"]}
        assert "llama3.1-8b" in names
    if route == "/api/gpus":
        a100 = next(g for g in res.json()["gpus"] if g["name"] == "NVIDIA-A100-SXM4-80GB")
        assert a100["bf16_tflops"] == 312 and any(p["default"] for p in a100["prices"])
    if route == "/openapi.json":
        spec = res.json()
        assert set(POST_ROUTES) | {"/healthz", "/api/models", "/api/gpus"} <= set(spec["paths"])
        assert {"FlatBody", "EstimateInput"} <= set(spec["components"]["schemas"])


def test_flat_body_on_every_post_route(client: httpx.Client) -> None:
    answers = {route: client.post(route, json=FLAT) for route in POST_ROUTES}
    assert {r: a.status_code for r, a in answers.items()} == dict.fromkeys(POST_ROUTES, 200)
    memory = answers["/api/memory"].json()["results"][0]["memory"]
    assert memory["total_memory_gib"] > memory["weights_gib"] > 0 and memory["num_gpus"] == 2
    est = answers["/api/estimate"].json()["results"][0]
    assert est["memory"] == memory
    assert est["throughput"]["tokens_per_second"] > 0
    assert est["time"]["tokens"] == 10_000 * 2048 * 2
    assert est["time"]["time_seconds"] == pytest.approx(
        est["time"]["train_seconds"] + est["time"]["load_seconds"] + est["time"]["checkpoint_seconds"])
    assert est["cost"]["cost_usd"] == pytest.approx(est["cost"]["gpu_hours"] * est["cost"]["price_per_gpu_hour_usd"])
    assert answers["/api/cost"].json()["results"][0]["cost"] == est["cost"]
    rec = answers["/api/recommend"].json()["results"][0]
    assert rec["can_recommend"] == 1 and rec["gpus"] * rec["workers"] == rec["number_gpus"] >= 1


# granite-3b-code-base-128k by hand from its published config.json (hidden 2560, intermediate 10240, 32 layers,
# 32 heads = 32 KV heads, vocab 49152, tied embeddings, biases on attention and MLP): embeddings 49152·2560;
# per layer 4 × 2560² + 4 × 2560 (attention) + 3 × 2560·10240 + 2 × 10240 + 2560 (MLP) + 2 × 2560 (norms);
# plus the final norm 2560.
GRANITE_3B_128K_PARAMS = 49152 * 2560 + 32 * (4 * 2560**2 + 4 * 2560 + 3 * 2560 * 10240 + 2 * 10240 + 2560
                                              + 2 * 2560) + 2560


def _seed_with_model(model: str) -> dict[str, Any]:
    body = seed_example()
    body["configs"][0]["fm"]["base_model_path"] = model
    return body


def test_seed_example_body_for_a_catalogued_model(client: httpx.Client) -> None:
    """The design document's example with the catalogued 128k variant of its model: full fine-tuning in
    float32 on one A100 (numGpusPerPod 1 × numPods 1) holds fp32 weights (4 B/param) and AdamW's two fp32
    moments (8 B/param)."""
    assert GRANITE_3B_128K_PARAMS == 3_482_503_680
    res = client.post("/api/estimate", json=_seed_with_model("ibm-granite/granite-3b-code-base-128k"))
    assert res.status_code == 200
    mem = res.json()["results"][0]["memory"]
    assert mem["num_gpus"] == 1 and mem["capacity_gib"] == pytest.approx(80.0, rel=0.01)
    assert mem["weights_gib"] == pytest.approx(GRANITE_3B_128K_PARAMS * 4 / 2**30, rel=1e-6)
    assert mem["optimizer_gib"] == pytest.approx(GRANITE_3B_128K_PARAMS * 8 / 2**30, rel=1e-6)
    assert mem["total_memory_gib"] > mem["weights_gib"] + mem["optimizer_gib"]


def test_seed_example_body_for_an_unknown_model(client: httpx.Client) -> None:
    """An uncatalogued model in the same body is a 422 naming the field, with the closest catalogued names."""
    res = client.post("/api/estimate", json=_seed_with_model("ibm-granite/granite-3b-code-base-nonexistent"))
    assert res.status_code == 422
    err = res.json()["detail"][0]
    assert err["loc"] == ["configs", 0, "fm", "base_model_path"]
    assert "granite-3b-code-base-128k" in err["suggestions"]


def test_framework_field_follows_the_stack(client: httpx.Client) -> None:
    """hf-trainer by default (fused AdamW, 0.5 GiB context); fms-hf-tuning's foreach step adds a params-sized
    bf16 temporary (2.5e9 × 2 B ≈ 4.7 GiB) and its measured 3.1 GiB device line."""
    full = {**FLAT, "method": "full", "model": "granite-3.1-2b", "number_gpus": 1, "batch_size": 1}
    hf, fms = (client.post("/api/memory", json={**full, **extra}).json()["results"][0]["memory"]
               for extra in ({}, {"framework": "fms-hf-tuning"}))
    assert fms["total_memory_gib"] > hf["total_memory_gib"] + 4.0


@pytest.mark.parametrize("route", POST_ROUTES)
def test_seed_example_with_catalogued_model(client: httpx.Client, route: str) -> None:
    body = seed_example()
    body["configs"][0]["fm"]["base_model_path"] = "granite-3b-code-base-128k"
    res = client.post(route, json=body)
    assert res.status_code == 200, res.text
    out = res.json()["results"][0]
    assert out["job"]["dtype"] == "fp32" and out["job"]["attention"] == "sdpa"  # float32, flash_attention_v2 "false"
    assert out["job"]["batch_size"] == 8 and out["job"]["tokens_per_sample"] == 2048  # HF default batch 8
    if route == "/api/memory":
        assert out["memory"]["capacity_gib"] == pytest.approx(80.0)  # A100 + 80 GB -> A100-80GB
    if route in ("/api/time", "/api/cost"):
        assert out["time"] is None and any("max_steps" in n for n in out["notes"])  # no data, no max_steps


def test_several_configs_and_an_aggregate(client: httpx.Client) -> None:
    config = seed_example()["configs"][0]
    config["fm"].update(base_model_path="llama3.1-8b", technique="lora", torch_dtype="bfloat16")
    config["hf_training"].update(max_steps=100, per_device_train_batch_size=4)
    second = json.loads(json.dumps(config))
    second["infra"].update(numGpusPerPod=4, gpuModel="H100")
    res = client.post("/api/estimate", json={"estimator": {"method": "theory"}, "configs": [config, second]})
    assert res.status_code == 200, res.text
    data = res.json()
    first = data["results"][0]
    assert first["time"]["tokens"] == 100 * 4 * 2048
    agg = data["aggregate"]
    assert agg["configs"] == 2
    assert agg["total_time_seconds"] == pytest.approx(sum(r["time"]["time_seconds"] for r in data["results"]))
    assert agg["total_cost_usd"] == pytest.approx(sum(r["cost"]["cost_usd"] for r in data["results"]))
    assert agg["max_total_memory_gib"] == max(r["memory"]["total_memory_gib"] for r in data["results"])


def test_tokens_route_counts_texts_and_files(client: httpx.Client, data_dir: Path) -> None:
    res = client.post("/api/tokens", json={**FLAT, "texts": ["a" * 40, "b" * 8], "tokens_per_sample": 8})
    tokens = res.json()["results"][0]["tokens"]
    assert tokens["total_tokens"] == 12 and tokens["padded_tokens"] == 16 and tokens["exact"] is False
    data = data_dir / "d.jsonl"
    data.write_text('{"text": "' + "x" * 400 + '"}\n')
    res = client.post("/api/estimate", json={**FLAT, "dataset_path": str(data), "num_samples": None})
    out = res.json()["results"][0]
    assert out["tokens"]["total_tokens"] == 100
    assert out["time"]["tokens"] == 2048 * 2  # one sample padded to tokens_per_sample, 2 epochs


def test_price_override(client: httpx.Client) -> None:
    res = client.post("/api/cost", json={**FLAT, "price_per_gpu_hour_usd": 1.5})
    cost = res.json()["results"][0]["cost"]
    assert cost["price_source"] == "user" and cost["cost_usd"] == pytest.approx(cost["gpu_hours"] * 1.5)


def test_recommend_nothing_fits_is_an_answer(client: httpx.Client) -> None:
    body = {"model": "llama3.1-70b", "method": "full", "gpu_model": "L4", "batch_size": 8, "estimator": "theory",
            "max_gpus": 2}
    rec = client.post("/api/recommend", json=body).json()["results"][0]
    assert rec["can_recommend"] == 0 and rec["gpus"] == 0 and "nothing fits" in rec["reason"]


def test_default_estimator_is_hybrid_or_says_why_not(client: httpx.Client) -> None:
    body = {k: v for k, v in FLAT.items() if k != "estimator"}
    out = client.post("/api/memory", json=body).json()["results"][0]
    assert out["estimator"] in ("hybrid", "theory")
    if out["estimator"] == "theory":
        assert any("hybrid" in note for note in out["notes"])


@pytest.mark.parametrize(
    "body, loc",
    [
        ({**FLAT, "batch_size": "many"}, ["batch_size"]),
        ({k: v for k, v in FLAT.items() if k != "gpu_model"}, ["gpu_model"]),
        ({**FLAT, "colour": "blue"}, ["colour"]),
        ({**FLAT, "tokens_per_sample": -1}, ["tokens_per_sample"]),
        ({**FLAT, "framework": "megatron"}, ["framework"]),
        ({**FLAT, "gpu_model": "H900"}, ["gpu_model"]),
        ({**FLAT, "transformers_version": "4.38.2"}, ["transformers_version"]),
        ({**FLAT, "bitsandbytes_version": "0.38.1"}, ["bitsandbytes_version"]),
        ({**FLAT, "number_gpus": 3, "tp": 2}, ["number_gpus"]),
        ([1, 2], ["body"]),
        ({"configs": []}, ["configs"]),
        ({"configs": [{"fm": {"technique": "prompt-tuning", "base_model_path": "llama3.1-8b"}}]},
         ["configs", 0, "fm", "technique"]),
        ({"configs": [{"infra": {"numGpusPerPod": "two"}}]}, ["configs", 0, "infra", "numGpusPerPod"]),
    ],
)
def test_malformed_bodies_name_the_field(client: httpx.Client, body: Any, loc: list[Any]) -> None:
    res = client.post("/api/estimate", json=body)
    assert res.status_code == 422, res.text
    got = res.json()["detail"][0]["loc"]
    assert got[: len(loc)] == loc


def test_invalid_json_is_422(client: httpx.Client) -> None:
    res = client.post("/api/memory", content=b"{not json", headers={"content-type": "application/json"})
    assert res.status_code == 422 and res.json()["detail"][0]["loc"] == ["body"]


def test_unknown_model_gets_closest_names(client: httpx.Client) -> None:
    res = client.post("/api/estimate", json={**FLAT, "model": "llama3.1-8B-instruct-typo"})
    assert res.status_code == 422
    err = res.json()["detail"][0]
    assert err["loc"] == ["model"] and "llama3.1-8b" in err["suggestions"]


# ---- fuzz: no route ever answers 5xx ------------------------------------------------------------------
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12), st.sampled_from(["llama3.1-8b", "A100", "H100", "L4", "lora", "qlora", "full", "fsdp",
                                           "zero3", "bf16", "fp32", "flash", "eager", "[q_proj, v_proj]", "7e9"]),
)
_values = st.recursive(_scalars,
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                   max_size=3), max_leaves=6)
_FIELDS = ["model", "method", "dtype", "tokens_per_sample", "batch_size", "gradient_accumulation_steps", "lora_r",
           "lora_target_modules", "gradient_checkpointing", "attention", "fused_loss", "gpu_model", "number_gpus",
           "gpus_per_worker", "strategy", "tp", "pp", "offload", "estimator", "token_budget", "num_samples", "epochs",
           "price_per_gpu_hour_usd", "provider", "max_gpus", "texts", "dataset_path", "tokenizer_path", "text_field"]
_GOOD = {"model": st.sampled_from(["llama3.1-8b", "mistral-7b-v0.1", "mixtral-8x7b-instruct-v0.1", "granite-3.1-2b",
                                   "3e9"]),
         "gpu_model": st.sampled_from(["A100", "H100", "L40S", "L4", "A10G", "V100", "NVIDIA-H200"]),
         "method": st.sampled_from(["full", "lora", "qlora"]),
         "dtype": st.sampled_from(["bf16", "fp16", "fp32", "amp-bf16"]),
         "tokens_per_sample": st.integers(1, 300_000), "batch_size": st.integers(1, 4096),
         "number_gpus": st.integers(1, 64), "estimator": st.sampled_from(["theory", "theory", "learned", None]),
         "strategy": st.sampled_from(["ddp", "fsdp", "zero2", "zero3", "fsdp-hybrid"]),
         "token_budget": st.floats(1, 1e15), "max_gpus": st.integers(1, 64), "tp": st.sampled_from([1, 1, 2, 3, 8])}
_flat = st.fixed_dictionaries({}, optional={**_GOOD, **{f: _values for f in _FIELDS if f not in _GOOD}})
_valid_flat = st.fixed_dictionaries(
    {"model": _GOOD["model"], "gpu_model": _GOOD["gpu_model"], "estimator": st.just("theory")},
    optional={k: v for k, v in _GOOD.items() if k not in ("model", "gpu_model", "estimator")},
)
_nested_config = st.fixed_dictionaries({}, optional={
    "fm": st.fixed_dictionaries({},
                                optional={"base_model_path": _GOOD["model"] | _values,
                                          "technique": _GOOD["method"] | _values,
                                              "torch_dtype": st.sampled_from(["float32", "bfloat16", "x"]),
                                              "max_seq_length": _values | _GOOD["tokens_per_sample"]}),
    "infra": st.fixed_dictionaries({}, optional={"numGpusPerPod": st.integers(-1, 9), "numPods": st.integers(-1, 4),
                                                 "gpuModel": _GOOD["gpu_model"] | _values,
                                                 "gpu_memory_in_gb": _values}),
    "hf_training": st.dictionaries(st.sampled_from(["per_device_train_batch_size", "max_steps", "num_train_epochs",
                                                    "bf16"]), _values),
    "peft_lora": st.dictionaries(st.sampled_from(["r", "target_modules", "lora_alpha"]), _values),
    "data": st.dictionaries(st.sampled_from(["dataset", "dataset_text_field"]), _values),
})
_bodies = st.one_of(_values, _flat, _valid_flat, _valid_flat, _valid_flat,
                    st.fixed_dictionaries({"configs": st.lists(_nested_config, max_size=3)},
                                          optional={"estimator": st.fixed_dictionaries(
                                              {"method": st.sampled_from(["theory", "hybrid", "x"])})}))


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(route=st.sampled_from(POST_ROUTES), body=_bodies)
def test_fuzz_never_5xx(client: httpx.Client, route: str, body: Any) -> None:
    res = client.post(route, json=body)
    assert res.status_code < 500, (route, body, res.text)
    assert res.status_code in (200, 422), (route, body, res.text)


@pytest.mark.slow
def test_load_bench_writes_its_section(tmp_path: Path) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "api_load.py"
    spec = importlib.util.spec_from_file_location("bench_api_load", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "benchmarks.md"
    assert bench.main(["--seconds", "0.4", "--connections", "2", "--output", str(out)]) == 0
    text = out.read_text()
    assert "<!-- section:api-load -->" in text and "| POST /api/estimate, flat body |" in text
    assert "| 0 | 1.00 |" in text  # baseline row: no errors, ratio 1


@pytest.mark.parametrize(("objective", "status"), [("min-gpus", 200), ("avoid-oom", 200), ("throughput", 200),
                                                   ("fastest", 422)])
def test_recommend_objective(client: httpx.Client, objective: str, status: int) -> None:
    """The same objectives as `recommend --objective`; avoid-oom keeps the 2 GPUs asked for when the job fits."""
    body = {k: v for k, v in FLAT.items() if k not in ("num_samples", "epochs")}
    r = client.post("/api/recommend", json={**body, "objective": objective})
    assert r.status_code == status, r.text
    if status == 422:
        assert "objective" in r.text
        return
    got = r.json()["results"][0]
    assert got["objective"] == objective and got["can_recommend"] == 1
    if objective == "avoid-oom":
        assert got["number_gpus"] == 2 and got["job"]["batch_size"] == 16  # per-device 8 kept on the 2 GPUs
    if objective == "throughput":  # the fastest layout: data-parallel ranks × micro-steps divide the batch
        steps, place = got["job"]["gradient_accumulation_steps"], got["placement"]
        dp = got["number_gpus"] // (place["tp"] * place["pp"])
        assert got["job"]["batch_size"] == 16 and 16 % (dp * steps) == 0 and got["reason"].startswith("layout: ")


def _nested_with(section: str, key: str, value: object) -> dict[str, Any]:
    body = seed_example()
    body["configs"][0]["fm"]["technique"] = "lora"
    body["configs"][0][section][key] = value
    return body


@pytest.mark.parametrize(("section", "key", "value"), [
    ("hf_training", "dora", "yes"), ("fm", "samples_vary_in_length", "on"), ("hf_training", "torch_compile", True),
])
def test_nested_section_key_named_as_a_job_field_sets_it(client: httpx.Client, section: str, key: str,
                                                         value: object) -> None:
    res = client.post("/api/memory", json=_nested_with(section, key, value))
    assert res.status_code == 200 and res.json()["results"][0]["job"][key] is True


def test_nested_job_field_typo_is_named_where_the_body_has_it(client: httpx.Client) -> None:
    res = client.post("/api/memory", json=_nested_with("hf_training", "dora", "ture"))
    assert res.status_code == 422
    assert res.json()["detail"][0]["loc"] == ["configs", 0, "hf_training", "dora"]


def test_save_only_model_reaches_the_time_from_both_bodies(client: httpx.Client) -> None:
    """A Job field added with no interface edit (issue 26): the flat body and the nested hf_training section."""
    def seconds(body: dict[str, Any]) -> float:
        res = client.post("/api/time", json=body)
        assert res.status_code == 200
        return float(res.json()["results"][0]["time"]["checkpoint_seconds"])

    flat = {**FLAT, "method": "full"}
    assert seconds({**flat, "save_only_model": True}) == pytest.approx(seconds(flat) * 2 / (2 + 2 * 2))
    nested = _nested_with("hf_training", "max_steps", 10)
    nested["configs"][0]["fm"]["technique"] = "full"
    light = _nested_with("hf_training", "save_only_model", True)
    light["configs"][0]["hf_training"]["max_steps"] = 10
    light["configs"][0]["fm"]["technique"] = "full"
    assert seconds(light) < seconds(nested)
