"""A theory sweep reads its rows column by column (estimators/columns.py) and must refuse and answer each row
exactly as the one way in (``schema.job_and_placement``) and the per-row search (``recommend_batch``) do."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoconf.errors import describe
from autoconf.estimators.contract import get_estimator
from autoconf.recommend.frame import recommend_frame
from autoconf.recommend.search import recommend_batch
from autoconf.schema import job_and_placement

GOOD = {"model": "llama3.1-8b", "gpu_model": "NVIDIA-A100-80GB-PCIe", "method": "lora", "tokens_per_sample": 2048,
        "batch_size": 8}
BAD_CELLS = [("method", "lora2"), ("gradient_checkpointing", "ture"), ("tokens_per_sample", -5), ("tp", 3),
             ("strategy", "zero9"), ("lora_r", "eight"), ("number_gpus", 0), ("model", " "), ("packing", "maybe"),
             ("framework", "keras")]


@pytest.mark.parametrize(("field", "value"), BAD_CELLS)
def test_a_bad_cell_refuses_its_row_with_the_one_row_error(field: str, value: object) -> None:
    rows = [GOOD, {**GOOD, field: value}, {**GOOD, "method": "full"}]
    with pytest.raises(ValueError) as caught:
        job_and_placement(rows[1])
    out = recommend_frame(pd.DataFrame(rows), get_estimator("theory"))
    assert out["error"].tolist()[1] == describe(caught.value, with_input=False)
    assert out["error"].isna().tolist() == [True, False, True]
    assert out["can_recommend"].tolist()[0] in (0, 1)


def test_aliases_per_device_batch_and_words_read_as_one_rows() -> None:
    """VRAM-CLI names, a per-device batch (read row by row) and words for booleans give the one-row Jobs."""
    rows = [{"model_name": "mistral-7b-v0.1", "gpu_model": "L40S", "seq_len": 1024, "per_device_batch_size": 2,
             "number_gpus": 2, "grad_checkpoint": "off"},
            {"model": "granite-3-8b", "model_name": "ignored", "gpu_model": "NVIDIA-A100-80GB-PCIe", "batch_size": 4,
             "packing": "on", "framework": "fms-hf-tuning"}]
    theory = get_estimator("theory")
    out = recommend_frame(pd.DataFrame(rows), theory)
    assert out["error"].isna().all()
    for i, row in enumerate(rows):
        job, place = job_and_placement({k: v for k, v in row.items() if not (isinstance(v, float) and np.isnan(v))})
        memory = theory.estimate(job, place).memory if "number_gpus" in row else None
        if memory is not None:  # a row that names its GPUs: the memory of that placement
            assert out["peak_memory_gib"][i] == round(memory.peak_bytes / 2**30, 4)
        search = recommend_batch([job], [place.gpu_model], theory, strategies=[place.strategy])
        assert out["can_recommend"][i] == int(bool(search.number_gpus[0]))
        assert out["reason"][i] == search.reasons[0]


def test_chunks_of_rows_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large sweep runs in chunks (input rows per pass, rows per theory batch); the output is the same."""
    import autoconf.recommend.columns as search_columns
    import autoconf.recommend.frame as frame_module
    from autoconf.evaluation.space import space_frame

    frame = space_frame().iloc[::37].reset_index(drop=True)
    frame.loc[3, "method"] = "lora2"  # a refused row inside a chunk
    whole = recommend_frame(frame, get_estimator("theory")).to_csv(index=False)
    monkeypatch.setattr(frame_module, "THEORY_ROWS", 17)
    monkeypatch.setattr(search_columns, "ROW_CHUNK", 5)
    assert recommend_frame(frame, get_estimator("theory")).to_csv(index=False) == whole
