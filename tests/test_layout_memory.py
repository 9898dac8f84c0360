"""JobColumns.broadcast (the layout search's job row, Python scalars) against the one-entry columns of
JobColumns.of: the same fields, each with the same value and type, on every framework profile."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from autoconf.estimators.theory.frameworks import PROFILES
from autoconf.estimators.theory.rows import Codes, JobColumns
from autoconf.schema import Job

JOBS = [Job(model="llama3.1-8b", method=method, framework=framework, **extra)
        for framework in sorted(PROFILES)
        for method, extra in (("full", {}), ("qlora", {"fused_loss": True, "double_quant": False}),
                              ("lora", {"loss_kernel": "chunked", "optimizer_in_backward": True,
                                        "expandable_segments": False, "kbit_prepare": True}))]


def _fields(columns: object) -> dict[str, Any]:
    return {k: v for k, v in vars(columns).items() if k not in ("settings", "profile", "size")}


def _same(scalar: Any, column: Any) -> None:  # noqa: ANN401
    if isinstance(column, Codes):
        assert isinstance(scalar, Codes) and scalar.table == column.table
        return
    assert isinstance(column, np.ndarray) and column.shape == (1,)
    assert type(scalar) is type(column.item()) and scalar == column.item()


@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"{j.framework}-{j.method}")
def test_broadcast_holds_the_one_row_columns_as_scalars(job: Job) -> None:
    one, many = JobColumns.of([job]), JobColumns.broadcast(job, 5)
    assert many.size == 5
    for mine, theirs in ((many, one), (many.settings, one.settings), (many.settings.profile, one.settings.profile)):
        assert _fields(mine).keys() == _fields(theirs).keys()
        for name, value in _fields(theirs).items():
            _same(getattr(mine, name), value)


def test_broadcast_reads_the_overrides_and_the_loss_kernel() -> None:
    job = Job(model="llama3.1-8b", method="lora", framework="hf-trainer", loss_kernel="chunked",
              optimizer_in_backward=True)
    row = JobColumns.broadcast(job, 3)
    assert row.effective_loss_kernel == "chunked" and row.settings.optimizer_in_backward is True
    assert JobColumns.broadcast(job.model_copy(update={"loss_kernel": None, "fused_loss": True}), 3
                                ).effective_loss_kernel == "fused-linear-ce"
