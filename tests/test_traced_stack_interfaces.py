"""Every traced stack's own code answers through every interface (issue 20: CLI, sweep, REST and ado).

One tiny job per stack on a shared cache (the first call traces): DeepSpeed ZeRO-2 on a fake world of 2 (its
engine runs on several GPUs only), torchtitan full (it trains full models only), torchtune, TRL and LitGPT LoRA on
one device. What the traces hold is checked by hand in each stack's own test module (test_traced_stacks.py,
test_traced_titan.py, test_traced_trl.py, test_traced_litgpt.py); here each interface must return the stack's own
trace, not the HF step.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from autoconf.estimators.traced.stacks.memory import stack_version
from tests._stack_cli import (  # noqa: F401 (the cache fixture)
    GPU,
    TINY,
    cache_fixture,
    check_rest_answers_from_the_stack,
    check_sweep_row_is_the_estimate,
    estimate_args,
)
from tests._stack_cli import cli as _cli

# (framework, method, GPUs, strategy, what its note names (torchtune's local build may say 0.6.1+cpu))
STACKS = [
    pytest.param("deepspeed", "full", 2, "zero2", "deepspeed 0.19.8's own code", id="deepspeed",
                 marks=pytest.mark.skipif(stack_version("deepspeed") is None or shutil.which("c++") is None,
                                          reason="deepspeed or a C++ compiler not installed")),
    pytest.param("torchtune", "lora", 1, None, "torchtune 0.6.1", id="torchtune",
                 marks=pytest.mark.skipif(stack_version("torchtune") is None, reason="torchtune not installed")),
    pytest.param("torchtitan", "full", 1, None, "torchtitan 0.3.0", id="torchtitan",
                 marks=pytest.mark.skipif(stack_version("torchtitan") is None, reason="torchtitan not installed")),
    pytest.param("trl", "lora", 1, None, "trl 1.16.0's own code", id="trl",
                 marks=pytest.mark.skipif(stack_version("trl") is None, reason="trl not installed")),
    pytest.param("litgpt", "lora", 1, None, "litgpt 0.5.13's own code", id="litgpt",
                 marks=pytest.mark.skipif(stack_version("litgpt") is None or stack_version("lightning") is None,
                                          reason="litgpt or lightning not installed")),
]


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "method", "gpus", "strategy", "own_code"), STACKS)
def test_cli_answers_from_the_stacks_code(cache: dict[str, str], framework: str, method: str, gpus: int,
                                          strategy: str | None, own_code: str) -> None:
    world = ("--dp", str(gpus), "--strategy", strategy) if strategy else ()
    done = _cli(cache, *estimate_args(framework, method), *world)
    assert done.returncode == 0, done.stderr
    where = "single device" if gpus == 1 else f"a fake process group of {gpus}"
    assert own_code in done.stdout and "own code" in done.stdout and where in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "method", "gpus", "strategy", "own_code"), STACKS)
def test_sweep_answers_from_the_stacks_code(cache: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            framework: str, method: str, gpus: int, strategy: str | None,
                                            own_code: str) -> None:
    check_sweep_row_is_the_estimate(cache, tmp_path, monkeypatch, framework, own_code, method, gpus, strategy)


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "method", "gpus", "strategy", "own_code"), STACKS)
def test_rest_answers_from_the_stacks_code(cache: dict[str, str], framework: str, method: str, gpus: int,
                                           strategy: str | None, own_code: str) -> None:
    check_rest_answers_from_the_stack(cache, framework, own_code, method, gpus, strategy)


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "method", "gpus", "strategy", "own_code"), STACKS)
def test_ado_answers_from_the_stacks_code(cache: dict[str, str], monkeypatch: pytest.MonkeyPatch, framework: str,
                                          method: str, gpus: int, strategy: str | None, own_code: str) -> None:
    """ado's resource_estimate is the traced estimator's answer for the stack's own trace; a ZeRO stage reaches it
    the way an ado user states it, in the DeepSpeed config the point carries (``from_config``)."""
    from autoconf.estimators.contract import get_estimator
    from autoconf.interfaces.ado import experiments
    from autoconf.schema import Job, Placement

    monkeypatch.setenv("AUTOCONF_CACHE", cache["AUTOCONF_CACHE"])
    config = {"from_config": json.dumps({"zero_optimization": {"stage": int(strategy[-1])}})} if strategy else {}
    out = experiments.resource_estimate(model_name=TINY, method=method, gpu_model=GPU, tokens_per_sample=64,
                                        batch_size=gpus, number_gpus=gpus, estimator="traced", framework=framework,
                                        **config)
    job = Job(model=TINY, method=method, tokens_per_sample=64, batch_size=gpus, framework=framework)
    memory = get_estimator("traced").estimate(job, Placement(gpu_model=GPU, number_gpus=gpus, strategy=strategy,
                                                             gpus_per_worker=gpus)).memory
    assert own_code in memory.notes[0] and out["answered_by"].startswith("traced"), out
    assert out["peak_memory_gib"] == pytest.approx(memory.peak_bytes / 2**30, rel=1e-6), out
