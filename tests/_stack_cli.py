"""What the stack-driver test modules share for their interface tests: one tiny job (LoRA unless the stack trains
full only) and the real CLI."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TINY = "tiny-llama-test"
GPU = "NVIDIA-A100-80GB-PCIe"


@pytest.fixture(scope="module", name="cache")
def cache_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``cache``: the module's own trace cache (its first call traces, the rest read it); import this name to use it."""
    return {**os.environ, "AUTOCONF_CACHE": str(tmp_path_factory.mktemp("stack-cache"))}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", *args], capture_output=True, text=True,
                          env=env, timeout=600, check=False)


def estimate_args(framework: str, method: str = "lora") -> tuple[str, ...]:
    """``estimate`` of the tiny job (``method``, 64 tokens, micro-batch 1) traced by ``framework``'s own code."""
    flags = ("--lora",) if method == "lora" else ()
    return ("estimate", "--model", TINY, "--seq-len", "64", "--per-device-batch", "1", *flags, "--estimator",
            "traced", "--framework", framework)


def check_sweep_row_is_the_estimate(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    framework: str, own_code: str, method: str = "lora", gpus: int = 1,
                                    strategy: str | None = None) -> None:
    """The sweep's row for the tiny job (one sample per GPU) is the traced estimator's answer for it, from
    ``framework``'s own code."""
    from autoconf.estimators.contract import get_estimator
    from autoconf.schema import Job, Placement

    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text("model_name,method,gpu_model,tokens_per_sample,batch_size,number_gpus,strategy,framework\n"
                   f"{TINY},{method},{GPU},64,{gpus},{gpus},{strategy or ''},{framework}\n", encoding="utf-8")
    done = cli(env, "sweep", "--input", str(src), "--output", str(out), "--estimator", "traced")
    assert done.returncode == 0, done.stderr
    answer = next(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    monkeypatch.setenv("AUTOCONF_CACHE", env["AUTOCONF_CACHE"])
    job = Job(model=TINY, method=method, tokens_per_sample=64, batch_size=gpus, framework=framework)
    memory = get_estimator("traced").estimate(job, Placement(gpu_model=GPU, number_gpus=gpus, strategy=strategy)).memory
    assert own_code in memory.notes[0]
    assert float(answer["peak_allocated_gib"]) == pytest.approx(memory.peak_allocated_bytes / 2**30, abs=1e-4)


def check_rest_answers_from_the_stack(env: dict[str, str], framework: str, own_code: str, method: str = "lora",
                                      gpus: int = 1, strategy: str | None = None) -> None:
    """POST /api/memory over a real socket answers the tiny job from ``framework``'s own code."""
    from tests._server import serve

    body = {"model": TINY, "method": method, "gpu_model": GPU, "number_gpus": gpus, "tokens_per_sample": 64,
            "batch_size": gpus, "estimator": "traced", "framework": framework, **({"strategy": strategy} if strategy else {})}
    with serve(env={"AUTOCONF_CACHE": env["AUTOCONF_CACHE"]}) as http:
        res = http.post("/api/memory", json=body)
    assert res.status_code == 200, res.text
    assert own_code in json.dumps(res.json())
