"""REST ``from_config``: the content of a training config in the flat body, over a real socket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests._server import serve

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "configs"


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with serve() as http:
        yield http


def test_config_content_fills_the_body(client: httpx.Client) -> None:
    text = (FIXTURES / "llama-factory/llama3_qlora_sft.yaml").read_text(encoding="utf-8")
    res = client.post("/api/estimate", json={"from_config": text, "gpu_model": "NVIDIA-A100-80GB-PCIe",
                                             "estimator": "theory", "tokens_per_sample": 2048})
    assert res.status_code == 200, res.text
    answer = res.json()["results"][0]
    job = answer["job"] if "job" in answer else answer["estimate"]["job"]
    # the file: Meta-Llama-3-8B-Instruct, quantization_bit 4 + lora, micro 4 × accumulation 4 on one GPU
    assert (job["method"], job["batch_size"], job["gradient_accumulation_steps"]) == ("qlora", 16, 4)
    assert job["framework"] == "llama-factory" and job["tokens_per_sample"] == 2048  # the body's field wins
    note = next(n for n in answer["notes"] if n.startswith("from_config (llama-factory"))
    assert "learning_rate" in note and "seq_len <-" not in note  # the body's tokens_per_sample overrides the file


def test_config_with_its_accelerate_file(client: httpx.Client) -> None:
    texts = [(FIXTURES / name).read_text(encoding="utf-8") for name in ("trl/sft_smollm_fsdp2.yaml", "trl/fsdp2.yaml")]
    res = client.post("/api/recommend", json={"from_config": texts, "gpu_model": "NVIDIA-A100-80GB-PCIe",
                                              "estimator": "theory"})
    assert res.status_code == 200, res.text
    assert res.json()["results"][0]["can_recommend"] == 1


@pytest.mark.parametrize(("config", "named"), [
    ("base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: two\n", "micro_batch_size"),
    ("nothing: here\n", "not a training config"),
    (["a", "b", "c", "d", "e"], "at most 4"),
])
def test_a_bad_config_is_422_naming_from_config(client: httpx.Client, config: object, named: str) -> None:
    res = client.post("/api/estimate", json={"from_config": config, "gpu_model": "NVIDIA-A100-80GB-PCIe"})
    assert res.status_code == 422, res.text
    assert "from_config" in res.text and named in res.text
