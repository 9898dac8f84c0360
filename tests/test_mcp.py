"""The MCP server answered by the SDK's own client: ``autoconf-gpu mcp`` as a stdio subprocess, its tools
listed with their schemas and called, the answers compared with the REST/CLI answers' shape and values
known without the estimator (a 70B model's bf16 weights alone exceed one 80 GB GPU)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
GPU = "NVIDIA-A100-80GB-PCIe"


def _session(calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """Start the server, list its tools and make ``calls``; (tools, results)."""
    server = StdioServerParameters(command=sys.executable, args=["-m", "autoconf.interfaces.cli", "mcp"],
                                   env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})

    async def talk() -> tuple[list[Any], list[Any]]:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            results = [await session.call_tool(name, args) for name, args in calls]
            return tools, results

    return anyio.run(talk)


def _json(result: Any) -> dict[str, Any]:  # noqa: ANN401
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


@pytest.mark.slow
def test_tools_are_listed_and_answer() -> None:
    config = (FIXTURES / "torchtune/70B_full.yaml").read_text(encoding="utf-8")
    calls = [
        ("catalog", {"kind": "gpus", "contains": "A100"}),
        ("estimate", {"request": {"model": "llama3.1-8b", "method": "lora", "gpu_model": GPU, "estimator": "theory"}}),
        ("recommend", {"request": {"model": "llama3.1-70b", "method": "lora", "gpu_model": GPU,
                                   "estimator": "theory", "tokens_per_sample": 2048, "batch_size": 8}}),
        ("check", {"request": {"from_config": config, "gpu_model": GPU, "number_gpus": 1, "estimator": "theory"}}),
        ("check", {"request": {"model": "llama3.1-8b", "gpu_model": "NoSuchGPU"}}),
    ]
    tools, (gpus, estimate, recommend, check, bad) = _session(calls)
    assert {t.name for t in tools} == {"estimate", "recommend", "check", "catalog"}
    schema = next(t for t in tools if t.name == "estimate").input_schema
    assert "from_config" in json.dumps(schema) and "tokens_per_sample" in json.dumps(schema)
    assert "dataset_path" not in json.dumps(schema)
    assert all("A100" in g["name"] for g in _json(gpus)["gpus"]) and _json(gpus)["count"] >= 2
    memory = _json(estimate)["results"][0]["memory"]
    assert memory["total_memory_gib"] > memory["weights_gib"] > 0
    assert _json(recommend)["results"][0]["can_recommend"] == 1
    guard = _json(check)
    assert guard["fits"] is False and guard["largest_micro_batch"] == 0 and guard["fewest_gpus"] > 2
    assert guard["job"]["framework"] == "torchtune"
    assert bad.is_error and "gpu_model: 'NoSuchGPU' is not a known GPU" in bad.content[0].text
    assert "\n" not in bad.content[0].text
