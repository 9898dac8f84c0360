"""Our own GPU rows (data/probe/): provenance and physical invariants, read from the file itself."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autoconf.evaluation.data import MEASUREMENT_COLUMNS, row_to_inputs

FOLDER = Path(__file__).resolve().parents[1] / "data" / "probe"
ROWS = FOLDER / "h100-lease-v1.csv"
TABLES = sorted(FOLDER.glob("*.csv"))


def _rows(path: Path = ROWS) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.name)
def test_table_has_the_measurement_columns(path: Path) -> None:
    with path.open(newline="", encoding="utf-8") as handle:
        assert tuple(next(csv.reader(handle))) == MEASUREMENT_COLUMNS


def test_campaign_size_and_breadth() -> None:
    assert len(TABLES) == 2 and sum(len(_rows(p)) for p in TABLES) == 161
    rows = _rows()
    assert len(rows) >= 80
    assert len({r["model_name"] for r in rows}) >= 6
    assert {r["method"] for r in rows} == {"full", "lora", "qlora"}
    assert {r["loss_kernel"] for r in rows} == {"", "chunked", "liger-flce"}
    assert {r["gradient_checkpointing"] for r in rows} == {"0", "1"}


@pytest.mark.parametrize("row", [r for p in TABLES for r in _rows(p)],
                         ids=lambda r: f"{r['campaign'][-2:]}-{r['model_name']}-{r['method']}-{r['optimizer']}-"
                         f"{r['tokens_per_sample']}x{r['per_device_batch_size']}-{r['gradient_checkpointing']}"
                         f"{r['attention']}{r['loss_kernel']}")
def test_row_provenance_and_invariants(row: dict[str, str]) -> None:
    assert row["source"] == "autoconf-probe" and row["campaign"] in ("autoconf-probe/h100-lease-v1",
                                                                     "autoconf-probe/h100-lease-v2")
    for fact in ("--in-process", "device=NVIDIA H100 80GB HBM3", "torch=2.11.0", "transformers=5.17.0", "date=2026-11-27"):
        assert fact in row["source_ref"]
    figures = [row[c] for c in ("torch_allocated_bytes", "torch_reserved_bytes", "nvidia_smi_bytes", "tokens_per_second")]
    if row["status"] == "oom":
        assert "out of memory" in row["reason"] and figures == ["", "", "", ""]
        return
    assert row["status"] == "ok"
    allocated, reserved, device, tokens = map(float, figures)
    # the caching allocator reserves at least what is allocated; the device holds the pool and the CUDA context
    assert 0 < allocated <= reserved < device < 80 * 2**30 and tokens > 0
    job, placement = row_to_inputs(row)
    assert job.framework == "hf-trainer" and placement.gpu_model == "NVIDIA-H100-80GB-HBM3"
