"""The VRAM-budget CLI's documented command lines, unchanged but for the program name, through our `estimate`;
its boolean words, space-separated targets and factor flags; and `plan` against hand calculations."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "autoconf.interfaces.cli"]
THEIRS = "python scripts/estimate_memory_budget.py"

# Its four "Usage Examples", copied from reference/vram-budget-cli.md (line continuations joined).
EXAMPLES = [
    "python scripts/estimate_memory_budget.py --model meta-llama/Llama-2-7b-hf --dtype bf16 --seq-len 4096 "
    "--per-device-batch 2 --grad-accum 128 --zero 2 --dp 8 --flashattn true --grad-checkpoint true",
    "python scripts/estimate_memory_budget.py --model meta-llama/Llama-2-13b-hf --dtype bf16 --seq-len 8192 "
    "--per-device-batch 1 --grad-accum 256 --lora true --lora-rank 8 --lora-target-modules q_proj k_proj v_proj "
    "o_proj --zero 3 --dp 16 --flashattn true --grad-checkpoint true",
    "python scripts/estimate_memory_budget.py --model meta-llama/Llama-2-70b-hf --dtype bf16 --qlora true "
    "--lora-rank 64 --seq-len 4096 --per-device-batch 1 --grad-accum 512 --zero 3 --dp 32 --tp 4 --flashattn true "
    "--grad-checkpoint true",
    "python scripts/estimate_memory_budget.py --model mistralai/Mistral-7B-v0.1 --dtype bf16 --seq-len 4096 "
    "--per-device-batch 1 --grad-accum 64 --flashattn true --grad-checkpoint true --probe true --warmup-steps 3 "
    "--probe-steps 6",
]
BUDGET_LINES = ("Base weights", "Trainable state", "Attention activ.", "MLP activ.", "Output logits",
                "Fragmentation", "Total (peak)")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def _ours(example: str) -> list[str]:
    return ["estimate", *shlex.split(example.removeprefix(THEIRS))]


@pytest.mark.parametrize("example", EXAMPLES, ids=["full-7b", "lora-13b", "qlora-70b", "probe-mistral"])
def test_documented_examples_run_and_print_the_budget_lines(example: str) -> None:
    as_written = _run(*_ours(example))
    assert as_written.returncode == 0 and "total (peak)" in as_written.stdout, as_written.stderr
    res = _run(*_ours(example), "--format", "budget")
    assert res.returncode == 0, res.stderr
    assert "=== Memory Estimate (per GPU) ===" in res.stdout
    for label in BUDGET_LINES:
        assert any(line.startswith(label) and line.rstrip().endswith("GiB") for line in res.stdout.splitlines()), label
    if "--probe true" in example:
        assert "--- Empirical Probe ---" in res.stdout
        probe = res.stdout.split("--- Empirical Probe ---", 1)[1].strip().splitlines()
        assert probe[0].startswith(("probe not run: no CUDA GPU", "max_memory_allocated", "probe "))


def test_example_1_header_and_base_weights() -> None:
    """Its header names dtype, seq_len, micro_batch, GA, DP/TP/PP/ZeRO. By hand, ZeRO-2 keeps every weight on
    each GPU: Llama-2-7b's 6,738,415,616 parameters (published config) × 2 B, plus one bf16 bucket of
    DeepSpeed's default reduce_bucket_size (5e8 elements × 2 B) = 13,476,831,232 + 1e9 B
    = 13.48 GiB. (The reference also prints 13.48, but as decimal GB of the weights alone.)"""
    out = _run(*_ours(EXAMPLES[0]), "--format", "budget").stdout
    assert "dtype=bf16, seq_len=4096, micro_batch=2, GA=128" in out
    assert "DP=8, TP=1, PP=1, ZeRO=2, LoRA=False, QLoRA=False" in out
    assert f"Base weights        : {(6_738_415_616 * 2 + 5e8 * 2) / 2**30:6.2f} GiB" in out


@pytest.mark.parametrize("word, expected", [("true", "flash"), ("1", "flash"), ("yes", "flash"), ("false", "eager"),
                                            ("0", "eager"), ("no", "eager"), (None, "flash")])
def test_boolean_words(word: str | None, expected: str) -> None:
    flag = ["--flashattn"] + ([word] if word else [])
    res = _run("estimate", "--model", "llama3.1-8b", "--seq-len", "1024", *flag, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["job"]["attention"] == expected


@pytest.mark.parametrize("flag", ["--lora", "--flashattn", "--probe", "--estimate-only", "--cpu-offload-optimizer"])
def test_non_boolean_word_is_exit_2_naming_flag_and_words(flag: str) -> None:
    res = _run("estimate", "--model", "llama3.1-8b", flag, "maybe")
    assert res.returncode == 2
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1 and flag in line and "true, yes, on, 1, t, y, false, no, off, 0, f, n" in line \
        and "maybe" in line


def test_space_separated_targets_and_comma_lists_agree() -> None:
    spaced = _run("estimate", "--model", "llama3.1-8b", "--lora", "--lora-target-modules", "q_proj", "k_proj",
                  "v_proj", "o_proj", "--json")
    commas = _run("estimate", "--model", "llama3.1-8b", "--lora", "true", "--lora-target-modules",
                  "q_proj,k_proj,v_proj,o_proj", "--json")
    a, b = json.loads(spaced.stdout), json.loads(commas.stdout)
    assert a["job"]["lora_target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert a["memory"] == b["memory"]


def test_defaults_that_differ_are_noted_only_when_asked() -> None:
    quiet = _run("estimate", "--model", "llama3.1-8b", "--dp", "2").stdout
    assert "not given" not in quiet  # the default answer carries only notes that change how to read it
    out = _run("estimate", "--model", "llama3.1-8b", "--dp", "2", "-v").stdout
    assert out == _run("-v", "estimate", "--model", "llama3.1-8b", "--dp", "2").stdout
    for flag in ("--flashattn", "--grad-checkpoint", "--seq-len", "--zero", "--grad-ckpt-reduction",
                 "--attn-act-factor-fa", "--mlp-act-factor", "--fragmentation-gib", "--misc-overhead-gib"):
        assert any(line.startswith(f"note: {flag} not given") for line in out.splitlines()), flag
    given = _run("estimate", "--model", "llama3.1-8b", "--flashattn", "true", "--seq-len", "2048", "--format",
                 "budget").stdout
    assert "note: --grad-checkpoint not given" in given
    assert "note: --flashattn" not in given and "note: --seq-len" not in given


def _peak(*args: str) -> float:
    res = _run("estimate", "--model", "meta-llama/Llama-2-7b-hf", "--seq-len", "4096", "--per-device-batch", "2",
               "--lora", "--json", *args)
    assert res.returncode == 0, res.stderr
    return float(json.loads(res.stdout)["memory"]["logits_bytes"])


def test_logits_factor_means_bytes_per_token_per_vocab_entry() -> None:
    """--logits-factor 40: B × S × vocab × 40 = 2 × 4096 × 32000 × 40 bytes at the loss peak (its formula);
    with --fused-loss its × 0.2."""
    assert _peak("--logits-factor", "40") == pytest.approx(2 * 4096 * 32000 * 40)
    assert _peak("--logits-factor", "40", "--fused-loss", "true") == pytest.approx(2 * 4096 * 32000 * 40 * 0.2)


def test_storage_dtypes() -> None:
    def weights(*args: str) -> float:
        res = _run("estimate", "--model", "llama3.1-8b", "--seq-len", "1024", "--json", *args)
        assert res.returncode == 0, res.stderr
        return float(json.loads(res.stdout)["memory"]["weights_bytes"])

    bf16, int8 = weights("--lora"), weights("--lora", "--dtype", "int8")
    # Llama-3.1-8B layer linears: 32 × (4096·(4096+1024+1024+4096) + 3·4096·14336) = 6,979,321,856 weights
    # (published config); 1 byte instead of 2 saves one byte each.
    assert bf16 - int8 == pytest.approx(32 * (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336), rel=1e-6)
    assert weights("--dtype", "nf4") == weights("--qlora")
    res = _run("estimate", "--model", "llama3.1-8b", "--dtype", "int8")
    assert res.returncode == 2 and "--lora" in res.stderr


def test_estimate_only_skips_the_probe() -> None:
    out = _run(*_ours(EXAMPLES[3]), "--estimate-only", "true").stdout
    assert "probe skipped: --estimate-only" in out


@pytest.mark.slow
def test_probe_verb_accepts_its_probe_word(tmp_path: Path) -> None:
    """`probe --probe true` (its spelling) runs; before, argparse read --probe as --probe-steps. A tiny
    2-layer Llama-shaped config.json on the CPU keeps the run to seconds."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 256,
        "tie_word_embeddings": False}))
    res = _run("probe", "--model", str(config), "--device", "cpu", "--tokens-per-sample", "16", "--per-device-batch",
               "1", "--probe", "true", "--probe-steps", "1", "--warmup-steps", "0", "--estimators", "theory")
    assert res.returncode == 0, res.stderr
    bad = _run("probe", "--model", str(config), "--tokens-per-sample", "4", "--per-device-batch", "1",
               "--probe", "maybe")
    assert bad.returncode == 2 and "--probe" in bad.stderr and "true, yes, on, 1" in bad.stderr
