"""``--from FILE``: 37 training configurations of 7 stacks, each read into the fields that decide memory.

The table's expected values were written by reading each fixture (tests/fixtures/configs/, see its README),
not by running the readers: the model the file names, method, sequence length, micro-batch per GPU,
gradient accumulation, precision, activation checkpointing and the sharding on the file's own GPU count.
Where a file leaves a field out, the expectation is the stack's documented default (named in the reader's
docstring) or ours (4096 tokens; checkpointing on), and the answer lists that field as defaulted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from autoconf.catalog.catalogue import alias_index
from autoconf.errors import InvalidInputError
from autoconf.estimators.theory.estimator import TheoryEstimator
from autoconf.interfaces.configs import build_inputs, read_configs
from autoconf.interfaces.configs.detect import read_text

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
GPU = "NVIDIA-A100-80GB-PCIe"

# files -> (model named in the file, method, seq_len, micro_batch, grad_accum, dtype, checkpointing, strategy, GPUs)
TABLE: dict[str, tuple[str, str, int, int, int, str, bool, str, int]] = {
    "axolotl/lora-1b.yml": ("NousResearch/Llama-3.2-1B", "lora", 2048, 2, 2, "bf16", True, "ddp", 1),
    "axolotl/qlora-fsdp-70b.yaml": ("meta-llama/Meta-Llama-3-70B", "qlora", 1024, 1, 4, "bf16", True, "fsdp", 1),
    "axolotl/fft-8b-zero3.yaml": ("meta-llama/Llama-3.1-8B", "full", 4096, 1, 8, "bf16", True, "zero3", 1),
    "axolotl/qwen-lora-8bit.yml": ("Qwen/Qwen2.5-7B", "lora", 2048, 2, 4, "bf16", False, "ddp", 1),
    "axolotl/mistral-qlora-liger.yml": ("mistralai/Mistral-7B-v0.1", "qlora", 8192, 1, 4, "bf16", True, "ddp", 1),
    "torchtune/8B_lora_single_device.yaml": ("meta-llama/Llama-3.1-8B", "lora", 2048, 2, 8, "bf16", True, "ddp", 1),
    "torchtune/70B_full.yaml": ("meta-llama/Llama-3.1-70B", "full", 4096, 2, 1, "bf16", True, "ddp", 1),
    "torchtune/1B_full_single_device.yaml": ("meta-llama/Llama-3.2-1B", "full", 4096, 4, 1, "bf16", False, "ddp", 1),
    "torchtune/8B_qlora_single_device.yaml": ("meta-llama/Llama-3.1-8B", "qlora", 8192, 2, 16, "bf16", True, "ddp", 1),
    "torchtune/qwen2_5_7B_lora.yaml": ("Qwen/Qwen2.5-7B-Instruct", "lora", 1024, 4, 4, "bf16", False, "ddp", 1),
    "llama-factory/llama3_lora_sft.yaml": ("meta-llama/Meta-Llama-3-8B-Instruct", "lora", 2048, 1, 8, "bf16", True,
                                           "ddp", 1),
    "llama-factory/llama3_lora_sft_ds3.yaml": ("meta-llama/Meta-Llama-3-8B-Instruct", "lora", 4096, 2, 2, "bf16", True,
                                               "zero3", 1),
    "llama-factory/qwen2_5_full_sft.yaml": ("Qwen/Qwen2.5-7B-Instruct", "full", 8192, 1, 2, "amp-bf16", True, "zero2", 1),
    "llama-factory/llama3_qlora_sft.yaml": ("meta-llama/Meta-Llama-3-8B-Instruct", "qlora", 1024, 4, 4, "bf16", True,
                                            "ddp", 1),
    "llama-factory/mistral_lora_liger.yaml": ("mistralai/Mistral-7B-v0.3", "lora", 2048, 8, 1, "bf16", False, "ddp", 1),
    "llama-factory/qwen3_full_pure_bf16.yaml": ("Qwen/Qwen3-4B", "full", 2048, 2, 4, "bf16", True, "ddp", 1),
    "trl/sft_qwen_lora.yaml+trl/deepspeed_zero3.yaml": ("Qwen/Qwen2.5-1.5B", "lora", 2048, 4, 4, "bf16", True, "zero3", 8),
    "trl/training_args_full.json": ("meta-llama/Llama-3.2-3B", "full", 4096, 2, 16, "amp-bf16", True, "fsdp", 1),
    "trl/sft_gemma_qlora.yaml": ("google/gemma-2-9b", "qlora", 1024, 2, 8, "bf16", True, "ddp", 1),
    "trl/sft_smollm_fsdp2.yaml+trl/fsdp2.yaml": ("HuggingFaceTB/SmolLM2-1.7B", "full", 8192, 1, 4, "amp-bf16", True,
                                                 "fsdp", 4),
    "trl/sft_phi_zero2.json": ("microsoft/phi-2", "full", 512, 16, 1, "amp-fp16", True, "zero2", 1),
    "trl/sft_mistral_ddp.yaml+trl/multi_gpu.yaml": ("mistralai/Mistral-7B-v0.1", "lora", 1024, 4, 2, "amp-bf16", True,
                                                    "ddp", 16),
    "fms-hf-tuning/granite_lora.json": ("ibm-granite/granite-3.1-8b-instruct", "lora", 4096, 4, 4, "bf16", True, "ddp", 1),
    "fms-hf-tuning/llama_full_fsdp.json": ("meta-llama/Llama-3.1-8B", "full", 8192, 2, 1, "bf16", True, "fsdp", 1),
    "fms-hf-tuning/mistral_qlora.json": ("mistralai/Mistral-7B-v0.1", "qlora", 2048, 8, 2, "bf16", True, "ddp", 1),
    "fms-hf-tuning/granite_full_packing.json": ("ibm-granite/granite-3.1-2b-base", "full", 1024, 16, 1, "bf16", False,
                                                "ddp", 1),
    "fms-hf-tuning/qwen_lora_eager.json": ("Qwen/Qwen2.5-3B", "lora", 16384, 1, 8, "amp-bf16", True, "ddp", 1),
    "litgpt/llama-3.1-8b-qlora.yaml": ("meta-llama/Meta-Llama-3.1-8B", "qlora", 512, 2, 4, "bf16", False, "ddp", 1),
    "litgpt/llama-2-7b-lora.yaml": ("meta-llama/Llama-2-7b-hf", "lora", 512, 2, 4, "bf16", False, "ddp", 1),
    "litgpt/phi-2-full.yaml": ("microsoft/phi-2", "full", 512, 4, 1, "bf16", False, "fsdp", 2),
    "litgpt/tiny-llama-lora-mixed.yaml": ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "lora", 1024, 4, 4, "amp-bf16", False,
                                          "fsdp", 4),
    "litgpt/llama-3.2-1b-full.yaml": ("meta-llama/Llama-3.2-1B", "full", 2048, 16, 4, "fp32", False, "ddp", 1),
    "ms-swift/qwen2_5_lora.sh": ("Qwen/Qwen2.5-7B-Instruct", "lora", 2048, 1, 16, "bf16", True, "ddp", 1),
    "ms-swift/qwen3_full_zero3.sh": ("Qwen/Qwen3-8B", "full", 8192, 2, 4, "bf16", True, "zero3", 8),
    "ms-swift/llama_qlora.sh": ("meta-llama/Llama-3.1-8B-Instruct", "qlora", 4096, 2, 8, "bf16", True, "ddp", 1),
    "ms-swift/atom_style_v2.sh": ("mistralai/Mistral-7B-v0.1", "lora", 2048, 1, 16, "bf16", True, "ddp", 1),
    "ms-swift/gemma_lora_ddp.sh": ("google/gemma-2-2b", "lora", 1024, 4, 2, "bf16", False, "zero2", 4),
}
FRAMEWORK = {"axolotl": "axolotl", "torchtune": "torchtune", "llama-factory": "llama-factory", "trl": "hf-trainer",
             "fms-hf-tuning": "fms-hf-tuning", "litgpt": "litgpt", "ms-swift": "ms-swift"}


def _same_model(named: str, read: str) -> bool:
    index = alias_index()
    bare = named.lower().rsplit("/", 1)[-1]
    return index.get(read.lower(), read) in (index.get(named.lower()), index.get(bare))


def test_the_table_covers_30_files_of_7_stacks() -> None:
    assert len(TABLE) >= 30 and len({files.split("/")[0] for files in TABLE}) >= 7


@pytest.mark.parametrize("files", sorted(TABLE))
def test_each_file_is_read_and_answered(files: str) -> None:
    model, method, seq_len, micro, accum, dtype, checkpoint, strategy, gpus = TABLE[files]
    found = read_configs([FIXTURES / f for f in files.split("+")])
    job, placement = build_inputs(found, {}, GPU)
    assert _same_model(model, job.model), (model, job.model)
    assert (job.method, job.tokens_per_sample, job.gradient_accumulation_steps, job.dtype) == (method, seq_len, accum,
                                                                                                dtype)
    assert job.batch_size == micro * accum * placement.dp and placement.number_gpus == gpus
    assert (job.gradient_checkpointing, placement.effective_strategy) == (checkpoint, strategy)
    assert job.framework == FRAMEWORK[files.split("/")[0]]
    estimate = TheoryEstimator().estimate(job, placement)
    assert estimate.memory.peak_bytes > 0
    report = found.report()
    assert set(report["read"]) | set(report["defaulted"]) >= {"model", "method", "seq_len", "micro_batch"}


def test_what_the_file_leaves_out_is_listed_as_defaulted() -> None:
    report = read_configs([FIXTURES / "torchtune/70B_full.yaml"]).report()
    assert "seq_len" in report["defaulted"]  # tokenizer.max_seq_len: null
    assert "learning_rate" not in report["no_effect"]  # nested under optimizer, which was read
    assert {"epochs", "checkpointer", "metric_logger"} <= set(report["no_effect"])


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", *argv], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_flags_beside_from_override_the_file() -> None:
    done = _cli("estimate", "--from", str(FIXTURES / "axolotl/lora-1b.yml"), "--seq-len", "4096",
                "--per-device-batch", "1", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["job"]["tokens_per_sample"] == 4096 and answer["job"]["batch_size"] == 1 * 2
    assert answer["job"]["framework"] == "axolotl" and answer["job"]["method"] == "lora"
    assert answer["from"]["overridden_by_flags"] == ["micro_batch", "seq_len"]
    assert "learning_rate" in answer["from"]["no_effect"]


@pytest.mark.parametrize(("text", "expected"), [
    ("base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: two\n", "axolotl key 'micro_batch_size' must be an integer"),
    ("model_name_or_path: x/y\nfinetuning_type: prefix\n", "llama-factory key 'finetuning_type' must be lora, full"),
    ('{"model_name_or_path": "m", "peft_method": "pt"}', "fms-hf-tuning key 'peft_method'"),
    ("checkpoint_dir: checkpoints/a/b\nprecision: bf17\ntrain: {}\n", "litgpt key 'precision' must be one of"),
    ("model:\n  _component_: torchtune.models.foo.bar_7b\n", "the file names no model this reader maps"),
    ("swift sft --model Qwen/Qwen3-8B --max_length long\n", "ms-swift key 'max_length' must be an integer"),
    ("learning_rate: 1e-4\nwarmup: 3\n", "not a training config of a known stack"),
    ("a: [1, 2\n", "neither JSON nor YAML could read it at line"),
    ("base_model: m\n1: 2\nmicro_batch_size: 1e400\n", "axolotl key 'micro_batch_size' must be an integer"),
])
def test_a_file_that_cannot_be_read_is_one_line_naming_key_and_format(tmp_path: Path, text: str,
                                                                     expected: str) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(text, encoding="utf-8")
    done = _cli("estimate", "--from", str(path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert expected in done.stderr


def test_content_reads_the_same_as_the_file() -> None:
    path = FIXTURES / "ms-swift/qwen3_full_zero3.sh"
    assert read_text(path.read_text(encoding="utf-8")).values == read_configs([path]).values


@pytest.mark.slow
def test_recommend_takes_from_and_the_same_job_flags_as_estimate() -> None:
    config = str(FIXTURES / "litgpt/phi-2-full.yaml")  # phi-2 full, 2 devices, micro 4, global 8
    done = _cli("recommend", "--from", config, "--gpu", "A100-80GB", "--estimator", "theory", "--seq-len", "1024",
                "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["from"]["format"] == "litgpt" and answer["from"]["overridden_by_flags"] == ["seq_len"]
    assert answer["estimate"]["job"]["tokens_per_sample"] == 1024 and answer["estimate"]["job"]["batch_size"] == 8
    assert answer["estimate"]["job"]["framework"] == "litgpt"
    both = ("--method", "lora", "--seq-len", "2048", "--grad-accum", "2", "--lora-rank", "16", "--dtype", "bf16")
    estimate = _cli("estimate", "--model", "phi-2", *both, "--json")
    recommend = _cli("recommend", "--model", "phi-2", "--gpu", "A100-80GB", "--estimator", "theory", *both, "--json")
    assert estimate.returncode == 0 and recommend.returncode == 0, estimate.stderr + recommend.stderr
    fields = ("method", "tokens_per_sample", "gradient_accumulation_steps", "lora_r", "dtype")
    job = json.loads(estimate.stdout)["job"]
    assert {f: job[f] for f in fields} == {f: json.loads(recommend.stdout)["estimate"]["job"][f] for f in fields}


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["estimate", "recommend"])
def test_any_typed_job_flag_beside_from_overrides_the_file(verb: str) -> None:
    """Flags of Job fields no config reader sets (they were dropped by recommend --from) reach the job."""
    config = str(FIXTURES / "litgpt/phi-2-full.yaml")
    extra = ("--gpu", "A100-80GB") if verb == "recommend" else ()
    done = _cli(verb, "--from", config, *extra, "--estimator", "theory", "--samples-vary-in-length",
                "--save-only-model", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    job = answer["estimate"]["job"] if verb == "recommend" else answer["job"]
    assert job["samples_vary_in_length"] is True and job["save_only_model"] is True


@pytest.mark.slow
def test_sweep_reads_a_from_column_once_per_distinct_file(tmp_path: Path) -> None:
    rows = ["from,gpu_model,number_gpus,tokens_per_sample",
            f"{FIXTURES / 'axolotl/lora-1b.yml'},NVIDIA-A100-80GB-PCIe,,",
            f"{FIXTURES / 'axolotl/lora-1b.yml'},NVIDIA-A100-80GB-PCIe,,4096",
            "../trl/sft_qwen_lora.yaml+../trl/deepspeed_zero3.yaml,NVIDIA-H100-80GB-HBM3,,"]
    (tmp_path / "trl").mkdir()
    for name in ("sft_qwen_lora.yaml", "deepspeed_zero3.yaml"):  # the third row's paths are relative to the CSV
        (tmp_path / "trl" / name).write_bytes((FIXTURES / "trl" / name).read_bytes())
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "in.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    done = _cli("sweep", "--input", str(tmp_path / "sweeps" / "in.csv"), "--output", str(tmp_path / "out.csv"),
                "--estimator", "theory")
    assert done.returncode == 0, done.stderr
    import pandas as pd

    out = pd.read_csv(tmp_path / "out.csv")
    assert out["error"].isna().all(), out["error"].tolist()
    assert out["tokens_per_sample"].tolist() == [2048, 4096, 2048]  # the row's own cell wins
    assert out["framework"].tolist() == ["axolotl", "axolotl", "hf-trainer"]
    assert out["number_gpus"].tolist()[2] == 8 and out["strategy"].tolist()[2] == "zero3"


KEYS = ("base_model", "sequence_len", "micro_batch_size", "adapter", "lora_target_modules", "model",
        "finetuning_type", "cutoff_len", "checkpoint_dir", "train", "devices", "precision", "peft_method",
        "training_data_path", "per_device_train_batch_size", "fsdp", "fsdp_config", "deepspeed", "distributed_type",
        "num_processes", "zero_optimization", "bf16", "torch_dtype", "optimizer", "gradient_checkpointing")
VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats() | st.text(max_size=12),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner,
                                                                                   max_size=3), max_leaves=6)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1, max_size=6))
def test_any_mapping_is_read_or_refused_in_one_line(data: dict[str, object]) -> None:
    """Random keys of every format with random values: an answer, or an InvalidInputError; nothing else."""
    try:
        found = read_text(json.dumps(data, default=str))
        build_inputs(found, {"model": "llama3.2-1b"}, GPU)
    except InvalidInputError as exc:
        assert "\n" not in str(exc).strip()
    except ValidationError:  # a value the file allowed but a Job refuses: the CLI's describe() makes it one line
        pass


def test_a_model_the_reader_cannot_map_is_named_by_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text("model:\n  _component_: torchtune.models.gemma3.lora_gemma3_12b\nbatch_size: 2\n", encoding="utf-8")
    done = _cli("estimate", "--from", str(path), "--model", "gemma-3-12b-it", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["job"]["method"] == "lora" and answer["job"]["batch_size"] == 2
    assert answer["from"]["overridden_by_flags"] == ["model"] and "give --model" in answer["from"]["notes"][0]


@pytest.mark.parametrize("files", sorted(TABLE))
def test_the_cli_reads_each_file_as_the_library_does(files: str, capsys: pytest.CaptureFixture[str]) -> None:
    """estimate --from (flags filled from the file) and build_inputs (REST, MCP, sweep) agree on every file."""
    from autoconf.interfaces.cli import main

    paths = [str(FIXTURES / f) for f in files.split("+")]
    argv = ["estimate", *[w for p in paths for w in ("--from", p)], "--gpu", GPU, "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    cli = json.loads(capsys.readouterr().out)
    job, placement = build_inputs(read_configs(paths), {}, GPU)
    fields = ("model", "method", "tokens_per_sample", "batch_size", "gradient_accumulation_steps",
              "gradient_checkpointing", "attention", "framework", "optimizer", "lora_r", "packing")
    assert {f: cli["job"][f] for f in fields} == {f: getattr(job, f) for f in fields}
    dtype = {"int8": "bf16"}.get(cli["job"]["dtype"], cli["job"]["dtype"])
    assert dtype == job.dtype
    assert (cli["placement"]["number_gpus"], cli["placement"]["offload"]) == (placement.number_gpus, placement.offload)
    assert (cli["placement"]["strategy"] or "ddp") == (placement.strategy or "ddp")
