"""data/measurements.csv: conversion from the fms-acceleration tables, loading, row -> (Job, Placement)."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from autoconf.errors import InvalidInputError
from autoconf.evaluation.data import DATA_ENV, default_path, job_dtype, load_measurements, row_to_inputs

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "external" / "fms-acceleration"
needs_source = pytest.mark.skipif(not (SOURCE / "SOURCE.md").is_file(), reason="shared fms-acceleration copy absent")


def _converter():
    spec = importlib.util.spec_from_file_location("convert_fms", ROOT / "data" / "convert_fms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    """The fms-acceleration rows (the other sources are checked in tests/test_data_external.py)."""
    full = load_measurements()
    return full[full["source"] == "fms-acceleration"].reset_index(drop=True)


def test_row_count_and_statuses(table: pd.DataFrame) -> None:
    # 2,021 runs in SOURCE.md; 1,490 with train_tokens_per_second; 432 oom_suspected there.
    assert len(table) == 2021
    assert table["status"].value_counts().to_dict() == {"ok": 1490, "oom": 432, "failed": 99}
    assert set(table["source"]) == {"fms-acceleration"}
    assert table["source_ref"].is_unique


@pytest.mark.parametrize(
    "ref, column, value",
    [  # values copied by hand from the raw CSVs named in source_ref
        ("raw/refs__a100_80gb__2024-05-24__f39d03c.csv@f39d03cb2bb85f1af0e40bb44134aec4dfef4f01#row=0",
         "torch_allocated_bytes", 72971724288),
        ("raw/refs__a100_80gb__2024-05-24__f39d03c.csv@f39d03cb2bb85f1af0e40bb44134aec4dfef4f01#row=0",
         "nvidia_smi_bytes", 77705 * 2**20),
        ("raw/refs__a100_80gb__2024-05-24__f39d03c.csv@f39d03cb2bb85f1af0e40bb44134aec4dfef4f01#row=0",
         "tokens_per_second", 2775.237),
        ("raw/refs_orca__a100_80gb_pf__2024-08-23__4224c66.csv@4224c66d02957ee55dc9a381e53d729e94b141df#row=1",
         "tokens_per_second", 1102.661 * 2),  # 2 GPUs: whole job = per device x 2
        ("raw/refs_orca__a100_80gb_pf__2024-08-23__4224c66.csv@4224c66d02957ee55dc9a381e53d729e94b141df#row=1",
         "gradient_accumulation_steps", 2),  # scenarios-orca.yaml; samples/steps = 8 / (2 x 2)
        ("raw/refs__a100_80gb_moe__2024-11-03__4e9bfa0.csv@4e9bfa0890d39ded148b294eb68e7b8446d4066c#row=1",
         "batch_size", 8 * 2 * 8),  # per device 8, 2 GPUs, accumulation 8
        ("raw/refs__a100_80gb__2024-06-01__2f98563.csv@2f98563a6927ed0227f92b0cb943b07d0e919269#row=0",
         "kernels", "baseline-peft-bnb"),
    ],
)
def test_rows_match_raw_values(table: pd.DataFrame, ref: str, column: str, value: object) -> None:
    row = table.set_index("source_ref").loc[ref]
    assert row[column] == pytest.approx(value) if isinstance(value, float) else row[column] == value


def test_derived_columns(table: pd.DataFrame) -> None:
    ok = table[(table["status"] == "ok") & (table["variable_length"] == 0)]
    assert set(ok["tokens_per_sample"].dropna()) == {2048, 4096}  # santacoder ran at 2048
    multi = table[table["number_gpus"] > 1]
    assert set(multi["strategy"]) == {"fsdp"}
    assert (table.loc[table["kernels"].str.contains("liger"), "fused_loss"] == 1).all()
    assert (table.loc[~table["kernels"].str.contains("liger"), "fused_loss"] == 0).all()
    assert (table.loc[table["gpu_model"] == "NVIDIA-A100-SXM4-80GB", "gpu_variant_stated"] == 0).all()
    oom = table[table["status"] == "oom"]
    assert (oom["nvidia_smi_bytes"] >= 0.9 * 81920 * 2**20).all()
    dup = table[table["duplicate_of"] != ""]
    assert dup["duplicate_of"].isin(table["source_ref"]).all() and len(dup) > 0


@needs_source
def test_conversion_reproduces_committed_table(table: pd.DataFrame, tmp_path: Path) -> None:
    out = tmp_path / "m.csv"
    assert _converter().main(["--source", str(SOURCE), "--output", str(out)]) == 0
    converted = load_measurements(out)
    pd.testing.assert_frame_equal(converted, table[list(converted.columns)], check_dtype=False)


@needs_source
@pytest.mark.parametrize("ref_index", [0, 333, 1200, 2020])
def test_source_ref_points_at_raw_row(table: pd.DataFrame, ref_index: int) -> None:
    row = table.iloc[ref_index]
    file_part, row_part = row["source_ref"].split("#row=")
    raw_file = SOURCE / file_part.split("@")[0]
    with raw_file.open(newline="") as handle:
        raw = list(csv.DictReader(handle))[int(row_part)]
    if raw.get("train_tokens_per_second"):
        assert float(raw["train_tokens_per_second"]) == pytest.approx(row["tokens_per_second_per_device"])
    assert str(row["model_hf_id"] or "") == raw.get("model_name_or_path", "")


@pytest.mark.parametrize("index", [30, 400, 1150, 1600, 1990])
def test_row_to_inputs_round_trip(table: pd.DataFrame, index: int) -> None:
    row = table.iloc[index]
    job, placement = row_to_inputs(row)
    assert (job.model, job.method) == (row["model_name"], row["method"])
    assert (job.tokens_per_sample, job.batch_size) == (row["tokens_per_sample"], row["batch_size"])
    assert job.gradient_accumulation_steps == row["gradient_accumulation_steps"]
    assert (job.fused_loss, job.packing, job.gradient_checkpointing) == (
        bool(row["fused_loss"]), bool(row["packing"]), bool(row["gradient_checkpointing"]))
    assert job.attention == row["attention"]
    assert job.effective_loss_kernel == {"": "hf", "foak-fast-loss": "fused-ce", "liger-flce": "fused-linear-ce"}[
        row["loss_kernel"]]
    if row["method"] != "full":
        assert job.lora_r == row["lora_r"]
        assert ",".join(job.lora_target_modules) == row["lora_target_modules"]
    assert (placement.gpu_model, placement.number_gpus, placement.strategy) == (
        row["gpu_model"], row["number_gpus"], row["strategy"])


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"dtype": "bf16", "amp": "bf16", "strategy": "fsdp", "method": "full"}, "amp-bf16"),
        ({"dtype": "fp16", "amp": "fp16", "strategy": "fsdp", "method": "lora"}, "fp16"),
        ({"dtype": "bf16", "amp": "bf16", "strategy": "ddp", "method": "full"}, "bf16"),
        ({"dtype": "", "amp": "", "strategy": "ddp", "method": "full"}, None),
    ],
)
def test_job_dtype(row: dict, expected: str | None) -> None:
    assert job_dtype(row) == expected


def test_row_without_model_is_refused(table: pd.DataFrame) -> None:
    row = table[table["model_name"] == ""].iloc[0]
    with pytest.raises(InvalidInputError, match="model_name"):
        row_to_inputs(row)


def test_load_from_env_and_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    small = tmp_path / "small.csv"
    small.write_text("\n".join(default_path().read_text().splitlines()[:4]) + "\n")
    monkeypatch.setenv(DATA_ENV, str(small))
    frame = load_measurements()
    assert len(frame) == 3 and frame["dtype"].map(type).eq(str).all()
    with pytest.raises(FileNotFoundError, match=DATA_ENV):
        load_measurements(tmp_path / "absent.csv")


_PROBE_ROW = {"model_name": "llama3.2-1b", "method": "full", "tokens_per_sample": 512, "batch_size": 1,
              "gpu_model": "NVIDIA-H100-80GB-HBM3", "number_gpus": 1, "framework": "autoconf-probe",
              "optimizer": "adamw"}


@pytest.mark.parametrize("stated, expected", [("foreach", "foreach"), ("for-loop", "for-loop"), ("", "fused")])
def test_row_keeps_its_optimizer_impl(stated: str, expected: str) -> None:
    # data/probe rows state foreach; the hf-trainer default (fused) holds only where the row is silent
    job, _ = row_to_inputs({**_PROBE_ROW, "optimizer_impl": stated})
    assert job.optimizer_impl == expected


@pytest.mark.parametrize("framework, expected", [("fsdp-qlora", 0.1), ("autoconf-probe", 0.0)])
def test_row_takes_its_frameworks_lora_dropout(framework: str, expected: float) -> None:
    # data/ has no lora_dropout column: an fsdp-qlora row ran train.py's default 0.1, others peft's 0.0
    job, _ = row_to_inputs({**_PROBE_ROW, "framework": framework, "method": "lora"})
    assert job.lora_dropout == expected


def test_row_with_unknown_optimizer_impl_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="optimizer_impl"):
        row_to_inputs({**_PROBE_ROW, "optimizer_impl": "apex"})
