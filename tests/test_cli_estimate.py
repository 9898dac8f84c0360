"""The `estimate`, `sweep` and `catalog` verbs through the real console entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

CLI = [sys.executable, "-m", "autoconf.interfaces.cli"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True)


def test_estimate_prints_component_table() -> None:
    res = _run("estimate", "--model", "llama3.1-8b", "--lora", "--seq-len", "2048", "--per-device-batch", "2", "--gpu",
               "L40S")
    assert res.returncode == 0, res.stderr
    for word in ("weights", "gradients", "optimizer", "activations", "logits", "overhead", "total (peak)", "capacity",
                 "fits"):
        assert word in res.stdout
    assert "44.99" in res.stdout  # L40S capacity 46068 MiB = 44.99 GiB


def test_estimate_json_and_flags() -> None:
    res = _run("estimate", "--params", "7e9", "--dp", "4", "--zero", "3", "--seq-len", "1024", "--json")
    data = json.loads(res.stdout)
    assert data["placement"]["number_gpus"] == 4 and data["placement"]["strategy"] == "zero3"
    assert data["memory"]["peak_bytes"] > 0


@pytest.mark.parametrize(
    "args, field",
    [
        (["--model", "no-such-model"], "model"),
        (["--model", "llama3.1-8b", "--gpu", "H900"], "gpu_model"),
        (["--model", "llama3.1-8b", "--zero", "5"], "zero"),
        (["--model", "llama3.1-8b", "--tp", "3"], "tp"),
        (["--model", "llama3.1-8b", "--seq-len", "0"], "seq-len"),
        (["--model", "llama3.1-8b", "--per-device-batch", "-2"], "per-device-batch"),
        (["--model", "powerlm-3b"], "model"),
        (["--model", "llama3.1-8b", "--dtype", "int3"], "dtype"),
        (["--model", "llama3.1-8b", "--transformers-version", "4.38.2"], "transformers_version"),
        (["--model", "llama3.1-8b", "--bitsandbytes-version", "latest"], "bitsandbytes_version"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], field: str) -> None:
    res = _run("estimate", *args)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in res.stderr


def test_sweep_theory_answers_good_rows_and_reports_bad_ones(tmp_path) -> None:
    src = tmp_path / "in.csv"
    pd.DataFrame(
        [
            {"model_name": "llama3.1-8b", "method": "lora", "gpu_model": "L40S", "tokens_per_sample": 2048,
             "batch_size": 8, "number_gpus": 2, "tag": "a"},
            {"model_name": "nope", "method": "full", "gpu_model": "L40S", "tokens_per_sample": 2048, "batch_size": 8,
             "number_gpus": 1, "tag": "b"},
        ]
    ).to_csv(src, index=False)
    out = tmp_path / "out.csv"
    res = _run("sweep", "--input", str(src), "--output", str(out), "--estimator", "theory")
    assert res.returncode == 0, res.stderr
    frame = pd.read_csv(out)
    assert list(frame["tag"]) == ["a", "b"]
    assert frame.loc[0, "peak_memory_gib"] > 0 and pd.isna(frame.loc[0, "error"])
    assert "nope" in frame.loc[1, "error"]


def test_catalog_lists_models_and_gpus() -> None:
    res = _run("catalog")
    assert "llama3.1-8b" in res.stdout and "NVIDIA-A100-80GB-PCIe" in res.stdout and "NOT answerable" in res.stdout
