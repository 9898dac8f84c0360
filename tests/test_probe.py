"""The empirical probe on CPU: real training steps of the tiny catalogue model, the measure grid
(one process per point, provenance, resume, OOM and time-out rows) and the shipped grid files."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM

from autoconf.catalog import get_architecture
from autoconf.errors import InvalidInputError
from autoconf.estimators.traced.hf_config import hf_config
from autoconf.interfaces.cli import main
from autoconf.interfaces.cli.measure import KEY_COLUMNS, above_oom, load_grid, read_rows, resolve
from autoconf.interfaces.probe.runner import ROW_COLUMNS, ProbeSettings, run_probe
from autoconf.schema import Job

ROOT = Path(__file__).resolve().parents[1]
TINY = "tiny-llama-test"
CPU_POINT = ["--model", TINY, "--device", "cpu", "--tokens-per-sample", "128", "--per-device-batch", "2"]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _grid(tmp_path: Path, name: str, spec: dict) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def _probe_cli(argv: list[str]) -> str:
    """The CLI in a fresh process, as users run it: the RSS of a long-lived process (the test runner, whose
    heap already holds freed pages) says little about one step."""
    run = subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", *argv], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("method", "trainable"), [("full", "158,016"), ("lora", "3,584")])
def test_probe_prints_estimate_vs_measured(method: str, trainable: str) -> None:
    out = _probe_cli(["probe", *CPU_POINT, "--method", method, "--estimators", "theory,hybrid"])
    assert "status: ok" in out
    built = 158_016 + (3_584 if method == "lora" else 0)
    assert f"parameters: {built:,} built (catalogue 158,016), trainable {trainable}" in out
    assert "host_rss" in out and "Diff (estimate - host_rss): +" in out  # theory includes the CUDA overheads
    assert "Diff (estimate without overhead - host_rss):" in out
    assert "hybrid:" in out  # answered, or skipped with the reason


@pytest.mark.slow
def test_probe_json_counts_tokens_and_adapters() -> None:
    argv = ["probe", *CPU_POINT, "--method", "lora", "--gradient-accumulation-steps", "2",
            "--lora-r", "4", "--lora-target-modules", "q_proj,k_proj,v_proj,o_proj", "--json", "--estimators", "theory"]
    payload = json.loads(_probe_cli(argv))
    result, job = payload["result"], payload["job"]
    arch = get_architecture(TINY)
    assert job["batch_size"] == 4 and job["gradient_accumulation_steps"] == 2
    assert result["trainable_parameters"] == arch.lora_params(("q_proj", "k_proj", "v_proj", "o_proj"), 4)
    assert result["memory_metric"] == "host_rss" and result["peak_memory_bytes"] > 0
    assert result["tokens_per_second"] > 0 and 5.0 < result["loss"] < 7.5  # random init: about ln(512) = 6.2
    assert result["environment"]["torch"].startswith("2.13.0")
    theory = payload["estimates"][0]
    assert theory["estimator"] == "theory" and theory["peak_bytes"] > theory["overhead_bytes"] > 0


@pytest.mark.parametrize(("flags", "message"), [
    (["--method", "qlora"], "qlora needs CUDA and bitsandbytes"),
    (["--attention", "flash"], "flash needs CUDA and flash-attn"),
    (["--optimizer", "adamw-8bit"], "adamw-8bit needs CUDA and bitsandbytes"),
])
def test_probe_refuses_what_cpu_cannot_run(capsys: pytest.CaptureFixture[str], flags: list[str], message: str) -> None:
    assert main(["probe", *CPU_POINT, *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "got device cpu" in err and "Traceback" not in err


def test_probe_failure_is_a_result_not_a_crash() -> None:
    job = Job(model=TINY, method="lora", lora_target_modules="no_such_proj", tokens_per_sample=64,
              batch_size=1, attention="sdpa")
    result = run_probe(job, ProbeSettings(device="cpu", warmup_steps=0, probe_steps=1))
    assert result.status == "failed" and "no_such_proj" in result.reason and result.tokens_per_second is None


@pytest.mark.parametrize("model", [
    "llama3.1-8b", "mistral-7b-v0.1", "granite-3.1-2b", "granite-3.1-3b-a800m-instruct", "qwen2.5-0.5b",
    "santacoder", "mixtral-8x7b-instruct-v0.1",
])
def test_probe_builds_the_catalogue_architecture_exactly(model: str) -> None:
    arch = get_architecture(model)
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(hf_config(arch, "sdpa"), dtype=torch.bfloat16)
    assert sum(p.numel() for p in built.parameters()) == arch.total_params


@pytest.mark.slow
def test_measure_writes_rows_with_provenance_resumes_and_stops_at_oom(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = _grid(tmp_path, "two", {
        "name": "two", "max_points": 3, "time_limit_s": 300,
        # a 0.5 GiB cap: 64 x 2048 tokens needs ~12 B x b·s·V = 0.75 GiB for HF's loss alone
        "settings": {"model": TINY, "device": "cpu", "warmup_steps": 1, "probe_steps": 1, "method": "full",
                     "host_memory_limit_gib": 0.5},
        "grids": [{"tokens_per_sample": 64, "per_device_batch": 1},
                  {"tokens_per_sample": 2048, "per_device_batch": [128, 64]}],  # 128 is above the OOM
    })
    out = tmp_path / "probe.csv"
    assert main(["measure", "--grid", str(grid), "--out", str(out)]) == 0
    assert "measured 2 (ok 1, oom 1, failed 0); 0 already in" in capsys.readouterr().err
    rows = _rows(out)
    assert list(rows[0]) == list(ROW_COLUMNS)
    assert [(r["status"], r["per_device_batch_size"]) for r in rows] == [("ok", "1"), ("oom", "64")]
    ok, oom = rows
    for row in rows:
        assert row["source"] == row["framework"] == "autoconf-probe" and row["campaign"] == "autoconf-probe/two"
        assert row["gpu_model"] == "cpu" and row["model_name"] == TINY
        assert row["batch_size"] == row["per_device_batch_size"]
        ref = row["source_ref"]
        assert ref.startswith("autoconf-gpu probe --") and f"--per-device-batch {row['per_device_batch_size']}" in ref
        for part in ("--model tiny-llama-test", "host=", "device=", "driver=n/a", "torch=2.13.0", "transformers=",
                     "date=20"):
            assert part in ref
    assert ok["memory_metric"] == "host_rss" and int(ok["peak_memory_bytes"]) > 0 and float(ok["tokens_per_second"]) > 0
    assert "can't allocate memory" in oom["reason"] and oom["peak_memory_bytes"] == oom["memory_metric"] == ""
    assert main(["measure", "--grid", str(grid), "--out", str(out)]) == 0  # resumed: nothing runs
    assert "measured 0 (ok 0, oom 0, failed 0); 2 already in" in capsys.readouterr().err
    assert len(_rows(out)) == 2


def test_measure_time_out_is_a_failed_row(tmp_path: Path) -> None:
    grid = _grid(tmp_path, "slow", {"name": "slow", "settings": {"model": TINY, "device": "cpu", "method": "lora"},
                                    "grid": {"tokens_per_sample": 64, "per_device_batch": 1}})
    out = tmp_path / "probe.csv"
    assert main(["measure", "--grid", str(grid), "--out", str(out), "--time-limit-s", "0.5"]) == 0
    (row,) = _rows(out)
    assert row["status"] == "failed" and row["reason"].startswith("timeout: no result within 0.5 s")
    assert row["method"] == "lora" and row["lora_r"] == "8" and "torch=2.13.0" in row["source_ref"]


def test_points_above_an_oom_are_skipped() -> None:
    def key(tokens: int, batch: int, method: str = "full") -> tuple[str, ...]:
        values = dict.fromkeys(KEY_COLUMNS, "x") | {"method": method, "tokens_per_sample": str(tokens),
                                                     "per_device_batch_size": str(batch)}
        return tuple(values[c] for c in KEY_COLUMNS)

    ooms = [key(2048, 4)]
    assert above_oom(key(2048, 8), ooms) and above_oom(key(4096, 4), ooms)
    assert not above_oom(key(1024, 8), ooms) and not above_oom(key(4096, 2), ooms)
    assert not above_oom(key(4096, 8, "lora"), ooms)


@pytest.mark.parametrize(("name", "min_models"), [("grid_cpu.yaml", 1), ("grid_gpu.yaml", 6)])
def test_shipped_grids_are_bounded_and_valid(name: str, min_models: int) -> None:
    header, flags = load_grid(ROOT / "examples" / name)
    assert 0 < len(flags) <= header["max_points"] and header["time_limit_s"] > 0
    gpus = {"cpu": "cpu", "cuda": "NVIDIA-H100-80GB-HBM3", "auto": "cpu"}
    points = [resolve(f, gpus) for f in flags]
    models = {p.job.model for p in points}
    assert len(models) >= min_models and {p.job.method for p in points} == {"full", "lora"}
    for model in models:
        assert get_architecture(model).total_params > 0
    assert len({p.key() for p in points}) == len(points)  # no point twice


def test_grid_over_its_cap_and_foreign_tables_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = _grid(tmp_path, "big", {"max_points": 1, "settings": {"model": TINY},
                                   "grid": {"tokens_per_sample": [64, 128], "per_device_batch": 1}})
    assert main(["measure", "--grid", str(grid), "--out", str(tmp_path / "x.csv")]) == 2
    assert "at most max_points = 1 points; got 2" in capsys.readouterr().err
    bad = _grid(tmp_path, "bad", {"grid": {"tokens": [64]}})
    assert main(["measure", "--grid", str(bad), "--out", str(tmp_path / "x.csv")]) == 2
    with pytest.raises(InvalidInputError, match="must be a probe table"):
        read_rows(ROOT / "data" / "measurements.csv")


def test_probe_columns_extend_the_measurement_table() -> None:
    with (ROOT / "data" / "measurements.csv").open(newline="", encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    assert ROW_COLUMNS[: len(header)] == tuple(header)
