"""The layout recommender (recommend/layout.py): its search space and its choice under the memory gate."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autoconf.estimators import get_estimator
from autoconf.recommend.layout import fastest_layout, layouts
from autoconf.schema import Job

JOB = Job(model="llama3.1-8b", tokens_per_sample=4096, batch_size=32)


def test_two_gpus_space_by_hand() -> None:
    """2 GPUs, global batch 2: (tp, pp) = (1, 1) with dp 2 takes ddp/zero1/zero2/fsdp at micro-batch 1; (2, 1)
    and (1, 2) have dp 1, so ddp only, at micro-batch 1 or 2; each with checkpointing on or off: 8 + 4 + 4."""
    found = list(layouts(JOB.model_copy(update={"batch_size": 2}), "H100", 2))
    assert len(found) == 16
    assert {(p.tp, p.pp) for _, p in found} == {(1, 1), (2, 1), (1, 2)}


@pytest.mark.parametrize("gpus", [8, 16])
def test_every_layout_is_consistent(gpus: int) -> None:
    for job, place in layouts(JOB, "H100", gpus):
        micro = job.batch_size // (place.dp * job.gradient_accumulation_steps)
        assert micro * place.dp * job.gradient_accumulation_steps == job.batch_size
        assert place.dp * place.tp * place.pp == gpus and place.tp <= 8
        assert place.effective_strategy == "ddp" or place.dp > 1
        assert place.effective_strategy != "fsdp-hybrid" or gpus > 8


def test_fastest_fits_and_beats_the_runner_up() -> None:
    choice = fastest_layout(JOB, "H100", 8, get_estimator("theory"))
    assert choice.best is not None and choice.runner_up is not None
    assert choice.best.oom_risk <= 0.05 and choice.fitting <= choice.evaluated
    assert choice.best.throughput.tokens_per_second >= choice.runner_up.throughput.tokens_per_second
    assert "runner-up" in choice.why


def test_nothing_fits_says_so() -> None:
    big = Job(model="llama3.1-405b", tokens_per_sample=4096, batch_size=2)
    choice = fastest_layout(big, "L4", 2, get_estimator("theory"))
    assert choice.best is None and "fits" in choice.why


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "recommend", "--model", "llama3.1-8b", "--gpu", "H100",
                           "--estimator", "theory", *args], capture_output=True, text=True, timeout=120, check=False)


def test_cli_layouts_json() -> None:
    done = _cli("--objective", "throughput", "--layouts", "--number-gpus", "8", "--batch-size", "64", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["can_recommend"] and "runner-up" in answer["why"]
    place = answer["placement"]
    assert place["number_gpus"] == 8 and 8 % (place["tp"] * place["pp"]) == 0


def test_cli_layouts_need_the_throughput_objective() -> None:
    done = _cli("--layouts", "--number-gpus", "8")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "layouts" in done.stderr
