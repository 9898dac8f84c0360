"""One rule for every traced stack: a combination the stack's code cannot run is a one-line error naming why.

For each stack with a traced path (torchtune, torchtitan, TRL, DeepSpeed, the HF step) one combination it cannot
run, through the real CLI (exit 2, one line on stderr), the real server over a socket (422), ``sweep`` (the error
in the row's ``error`` column, exit 0) and ado (``can_recommend`` 0 with the reason, in process and through ado's
``run_experiment``). The reason each is expected to give is the stack's own limit, stated in docs/traced.md's table
(torchtitan's LoRA converter, FSDP2 over torchao's NF4 weights, TRL's fused AdamW only, TP with a ZeRO
strategy, peft's DoRA); none of them needs the stack's driver installed.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoconf.errors import InvalidInputError
from autoconf.estimators.contract import get_estimator
from autoconf.schema import Job, Placement

MODEL, GPU = "llama3.2-1b", "NVIDIA-A100-80GB-PCIe"
# stack -> (job fields, placement fields, CLI flags, words of the reason)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[str, ...], str]] = {
    "torchtitan": ({"method": "lora"}, {}, ("--lora",), "LoRA converter (components/lora.py) is not traced"),
    "torchtune": ({"method": "qlora", "batch_size": 2}, {"number_gpus": 2, "strategy": "fsdp"},
                  ("--qlora", "--dp", "2", "--strategy", "fsdp"), "QLoRA on several GPUs"),
    "trl": ({"method": "lora", "optimizer": "sgd"}, {}, ("--lora", "--optimizer", "sgd"),
            "the Trainer's adamw_torch_fused is traced; sgd"),
    "deepspeed": ({"model": "qwen-7b-chat", "method": "full", "batch_size": 2}, {"number_gpus": 2, "strategy": "zero3"},
                  ("--dp", "2", "--strategy", "zero3"), "qwen is hub remote code"),
    "hf-trainer": ({"model": "mixtral-8x7b", "method": "lora", "dtype": "fp16"}, {}, ("--lora", "--dtype", "fp16"),
                   "MoE experts in fp16: torch's grouped_mm"),
}
STACKS = sorted(CASES)
# ado offers no optimizer knob and runs several GPUs as FSDP full shard, where TRL now traces QLoRA: its case there
ADO_CASES = {"trl": ({"model": "qwen-7b-chat", "method": "lora"}, {}, (), "qwen is hub remote code")}


def _job(stack: str) -> tuple[Job, Placement]:
    job, place, _, _ = CASES[stack]
    return (Job(tokens_per_sample=256, **{"model": MODEL, "batch_size": 1, **job}, framework=stack),
            Placement(gpu_model=GPU, **place))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {**os.environ, "AUTOCONF_CACHE": str(tmp_path_factory.mktemp("refusals"))}


@pytest.mark.parametrize("stack", STACKS)
def test_refused_without_the_stack_installed(stack: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal reads the job only: with no stack package installed it is the same error (a missing driver
    otherwise answers from the HF step with a note; docs/traced.md)."""
    from autoconf.estimators.traced.stacks import memory

    monkeypatch.setattr(memory, "stack_version", lambda name: None)
    with pytest.raises(InvalidInputError) as info:
        get_estimator("traced").estimate(*_job(stack))
    assert info.value.field == "estimator" and CASES[stack][3] in str(info.value)
    assert "\n" not in str(info.value) and f"({stack})" in str(info.value)


@pytest.mark.parametrize(("framework", "fields", "words"), [
    ("hf-trainer", {"method": "lora", "dora": True}, "DoRA: the HF step traces peft's plain LoRA layers"),
    ("torchtune", {"method": "lora", "dora": True}, "DoRA: torchtune's DoRALinear (use_dora) is not traced"),
    ("torchtune", {"method": "full", "optimizer_in_backward": True}, "optimizer-in-backward and activation offloading"),
    ("hf-trainer", {"method": "full", "activation_offloading": True}, "optimizer-in-backward and activation offloading"),
    ("torchtitan", {"method": "qlora"}, "torchtitan has no QLoRA"),
    ("torchtune", {"method": "lora", "loss_kernel": "fused-linear-ce"}, "the fused-linear-ce loss kernel is not theirs"),
    ("torchtune", {"method": "lora", "attention": "eager"}, "it has no eager path"),
    ("torchtitan", {"method": "full", "attention": "eager"}, "it has no eager path"),
    ("torchtune", {"method": "lora", "optimizer_state_dtype": "fp32"}, "keeps its states in the parameter dtype (bf16)"),
    ("trl", {"method": "full", "optimizer_state_dtype": "fp32"}, "keeps its states in the parameter dtype (bf16)"),
    ("hf-trainer", {"model": "gemma-2-2b", "method": "lora"}, "gemma2's attention (logit soft-capping) has no SDPA"),
])
def test_settings_the_trace_would_ignore_are_refused(framework: str, fields: dict[str, Any], words: str) -> None:
    """A job setting the traced code does not run is refused, not traced without it (peft's LoRA for DoRA; every
    gradient and activation kept on the GPU; SDPA for eager; the parameter dtype's AdamW states for fp32 ones)."""
    job = Job(**{"model": MODEL, "tokens_per_sample": 256, "batch_size": 1, "framework": framework, **fields})
    with pytest.raises(InvalidInputError, match="traced cannot run this job") as info:
        get_estimator("traced").estimate(job, Placement(gpu_model=GPU))
    assert words in str(info.value)


@pytest.mark.parametrize("stack", STACKS)
def test_cli_is_one_line_exit_2(stack: str, env: dict[str, str]) -> None:
    model = CASES[stack][0].get("model", MODEL)
    done = subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "estimate", "--model", model,
                           "--seq-len", "256", "--per-device-batch", "1", "--estimator", "traced", "--framework", stack,
                           *CASES[stack][2]], capture_output=True, text=True, env=env, timeout=300, check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("autoconf-gpu: error: estimator: traced cannot run this job")
    assert CASES[stack][3] in lines[0] and lines[0].endswith("use --estimator theory")


def test_rest_is_422_naming_the_field(env: dict[str, str]) -> None:
    from tests._server import serve

    with serve(env={"AUTOCONF_CACHE": env["AUTOCONF_CACHE"]}) as http:
        for stack in STACKS:
            job, place, _, words = CASES[stack]
            body = {"model": MODEL, "gpu_model": GPU, "tokens_per_sample": 256, "batch_size": 1, "estimator": "traced",
                    "framework": stack, **job, **place}
            res = http.post("/api/memory", json=body)
            assert res.status_code == 422, (stack, res.text)
            assert "estimator" in res.text and words in res.text, res.text


def test_sweep_carries_the_error_per_row(env: dict[str, str], tmp_path: Path) -> None:
    """The row's own estimate is the error; the sweep's fewest-GPU search beside it skips refused counts (the
    stacks refused at every GPU count here: a QLoRA row of torchtune or TRL would trace its one-GPU answer)."""
    stacks = [s for s in STACKS if "number_gpus" not in CASES[s][1] or s == "deepspeed"]
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    cols = ("model_name", "method", "gpu_model", "tokens_per_sample", "batch_size", "number_gpus", "strategy",
            "framework", "dtype", "optimizer")
    with src.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(cols)
        for stack in stacks:
            job, place, _, _ = CASES[stack]
            writer.writerow([job.get("model", MODEL), job["method"], GPU, 256, job.get("batch_size", 1),
                             place.get("number_gpus", 1), place.get("strategy", ""), stack, job.get("dtype", "bf16"),
                             job.get("optimizer", "adamw")])
    done = subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "sweep", "--input", str(src), "--output",
                           str(out), "--estimator", "traced"], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    assert [r["framework"] for r in rows] == stacks
    for row in rows:
        assert CASES[row["framework"]][3] in row["error"] and row["error"].startswith("estimator: "), row


@pytest.mark.parametrize("stack", STACKS)
def test_ado_answers_can_recommend_0_with_the_reason(stack: str, env: dict[str, str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from autoconf.interfaces.ado import experiments

    monkeypatch.setenv("AUTOCONF_CACHE", env["AUTOCONF_CACHE"])
    job, place, _, words = ADO_CASES.get(stack, CASES[stack])
    # ado's knobs are the Job's fields: several GPUs are FSDP full shard there, which is each case's strategy but
    # DeepSpeed's, whose model the HF step refuses under any strategy
    knobs = {k: v for k, v in job.items() if k not in ("model", "method", "batch_size")}
    out = experiments.avoid_oom_recommender(model_name=job.get("model", MODEL), method=job["method"], gpu_model=GPU,
                                            tokens_per_sample=256, per_device_train_batch_size=1,
                                            number_gpus=place.get("number_gpus", 1), estimator="traced",
                                            framework=stack, **knobs)
    assert out["can_recommend"] == 0 and words in out["reason"], out


@pytest.mark.slow
def test_ado_run_experiment_answers_the_reason(env: dict[str, str], tmp_path: Path) -> None:
    """ado's own ``run_experiment`` on one point (a local Ray instance, ~20 s)."""
    point = tmp_path / "point.yaml"
    point.write_text(yaml.safe_dump({
        "entity": {"model_name": MODEL, "method": "lora", "gpu_model": GPU, "tokens_per_sample": 256, "batch_size": 2,
                   "estimator": "traced", "framework": "torchtitan"},
        "experiments": [{"actuatorIdentifier": "custom_experiments", "experimentIdentifier": "min_gpu_recommender"}],
    }), encoding="utf-8")
    ado_env = {**env, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    done = subprocess.run([str(Path(sys.executable).parent / "run_experiment"), str(point)], env=ado_env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.stdout.split("Result:", 1)[1]
    values = dict(line.split(None, 1) for line in result.splitlines() if len(line.split(None, 1)) == 2)
    assert values["can_recommend"].strip() == "0"
    assert CASES["torchtitan"][3] in values["reason"] and "use --estimator theory" in values["reason"]


TINY = "tiny-llama-test"


@pytest.mark.slow
def test_a_missing_driver_answers_from_the_hf_step_with_the_install_line(env: dict[str, str],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Not installed is a property of this environment, not of the job: the HF step of the same model answers
    (a trace, with the stack's loss), and a note names what is missing and how to install it."""
    from autoconf.estimators.traced.stacks import memory

    monkeypatch.setenv("AUTOCONF_CACHE", env["AUTOCONF_CACHE"])
    monkeypatch.setattr(memory, "stack_version", lambda name: None)
    notes = get_estimator("traced").estimate(Job(model=TINY, method="lora", tokens_per_sample=64, batch_size=1,
                                                 framework="torchtune"), Placement(gpu_model=GPU)).memory.notes
    assert notes[0].startswith("traced: HF training step on fake CPU tensors")
    assert notes[-1].startswith("traced: torchtune's own code not run: torchtune, torchao not installed (pip install")


@pytest.mark.slow
def test_deepspeed_outside_its_engine_is_one_hf_replica_sharded_by_theory(env: dict[str, str],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed's model and step are the HF Trainer's: where its engine driver does not run (SGD here), one HF
    replica is traced and ZeRO's sharding comes from the theory, as for --framework hf-trainer (a partial trace)."""
    monkeypatch.setenv("AUTOCONF_CACHE", env["AUTOCONF_CACHE"])
    job = Job(model=TINY, method="full", tokens_per_sample=64, batch_size=2, optimizer="sgd", framework="deepspeed")
    notes = get_estimator("traced").estimate(job, Placement(gpu_model=GPU, number_gpus=2, strategy="zero2")).memory.notes
    assert notes[0].startswith("traced: HF training step on fake CPU tensors")
    assert any("one replica, sharded by theory" in n for n in notes)
    assert notes[-1] == ("traced: deepspeed's own code not run: the engine is traced with the Trainer's torch AdamW; "
                         "sgd is not; the HF step answers")
