"""Job.kbit_prepare: whether a QLoRA script calls peft's prepare_model_for_kbit_training (fp32 non-4-bit params).

Expected values are our own H100 measurements (data/probe/, torch max_memory_allocated): the probe builds its
4-bit model without that call, so its rows read ``kbit_prepare = False`` and theory must match them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from autoconf.estimators.theory.memory import estimate_memory
from autoconf.estimators.theory.vector import theory_batch
from autoconf.evaluation.data import row_to_inputs
from autoconf.schema import job_and_placement

PROBE = sorted((Path(__file__).resolve().parents[1] / "data" / "probe").glob("*.csv"))
ROWS = pd.concat([pd.read_csv(p) for p in PROBE])
QLORA = ROWS[(ROWS.method == "qlora") & (ROWS.status == "ok")].to_dict(orient="records")


@pytest.mark.parametrize("row", QLORA, ids=lambda r: f"{r['model_name']}-{r['tokens_per_sample']}x{r['batch_size']}")
def test_probe_qlora_rows_are_answered_without_the_upcast(row: dict[str, object]) -> None:
    job, place = row_to_inputs(row)
    assert job.kbit_prepare is False
    measured = float(row["torch_allocated_bytes"])  # type: ignore[arg-type]
    assert estimate_memory(job, place).peak_allocated_bytes == pytest.approx(measured, rel=0.04)
    upcast = estimate_memory(job.model_copy(update={"kbit_prepare": True}), place)
    assert upcast.peak_allocated_bytes > 1.05 * measured  # the stack default (TRL calls it) is well above


@pytest.mark.parametrize("word", ["false", "off", "no"])
def test_kbit_prepare_word_overrides_the_stack_in_one_estimate_and_a_batch(word: str) -> None:
    words = {"model": "llama3.1-8b", "method": "qlora", "tokens_per_sample": 2048, "batch_size": 1,
             "framework": "hf-trainer", "gpu_model": "NVIDIA-H100-80GB-HBM3", "kbit_prepare": word}
    job, place = job_and_placement(words)
    default, _ = job_and_placement({k: v for k, v in words.items() if k != "kbit_prepare"})
    one, batch = estimate_memory(job, place), theory_batch([job, default], [place, place])
    assert one.peak_allocated_bytes == batch.allocated[0] < batch.allocated[1]
