"""The array theory answers as the code before it did, on a sample of that code's own outputs.

tests/fixtures/theory_identity_sample.json holds inputs and outputs produced by the code *before* the array theory
(the scalar formulas and their memoised vector companion, commit 883718f), written by
``python bench/theory_identity.py --sample DUMP_DIR JSON`` from a dump that code made with ``--write``. The full
comparison (every measured row, the 3,960-point sweep, 500 random jobs) is ``bench/theory_identity.py --check``.
Tokens/s is left out of the comparison: the throughput formulas changed after that commit (issue 22: collective
latency, attention at its kernel's efficiency; changelog), the memory theory did not.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from autoconf.errors import describe
from autoconf.estimators.contract import get_estimator
from autoconf.estimators.theory.vector import theory_batch
from autoconf.evaluation.data import load_measurements, row_to_inputs
from autoconf.recommend.frame import recommend_frame
from autoconf.schema import job_and_placement
from bench.theory_identity import _answer as answer_of  # what the full comparison records per row
from tests._identity import NOT_COMPARED, as_sampled, memory_as_at_the_sample, same  # noqa: F401 (an autouse fixture)

SAMPLE = json.loads((Path(__file__).parent / "fixtures" / "theory_identity_sample.json").read_text(encoding="utf-8"))
ERRORS = (ValueError, TypeError, ArithmeticError)


@pytest.mark.parametrize("item", SAMPLE["random"], ids=lambda item: item["words"]["model"])
def test_random_jobs_answer_as_before(item: dict[str, Any]) -> None:
    try:
        pair = job_and_placement(item["words"])
    except ERRORS as exc:
        assert item["answer"] == "input: " + describe(exc, with_input=False)
        return
    assert same(item["answer"], answer_of(*pair))


def test_measured_rows_answer_as_before() -> None:
    rows = load_measurements().to_dict(orient="records")
    for item in SAMPLE["measurements"]:
        try:
            pair = row_to_inputs(as_sampled(rows[item["row"]]))
        except ERRORS as exc:
            assert item["answer"] == "input: " + describe(exc, with_input=False)
            continue
        assert same(item["answer"], answer_of(*pair)), item["row"]


def test_one_batch_answers_as_before_row_by_row() -> None:
    """Rows of many models, GPUs and settings in one theory batch: each row as the old one-row estimate."""
    pairs, answers = [], []
    for item in SAMPLE["random"]:
        try:
            pairs.append(job_and_placement(item["words"]))
        except ERRORS:
            continue
        answers.append(item["answer"])
    batch = theory_batch([j for j, _ in pairs], [p for _, p in pairs])
    for i, old in enumerate(answers):
        if isinstance(old, str):
            assert "error: " + str(batch.errors[i]) == old
            continue
        assert batch.errors[i] is None and batch.phase[i] == old["peak_phase"]
        for name in ("weights", "gradients", "optimizer", "activations", "logits", "overhead"):
            assert math.isclose(batch.parts[name][i], old[f"{name}_bytes"], rel_tol=1e-9), name
        assert math.isclose(batch.peak[i], old["peak_bytes"], rel_tol=1e-9)
        assert math.isclose(batch.oom_risk[i], old["oom_risk"], rel_tol=1e-9, abs_tol=1e-15)


def test_seed_sweep_rows_are_written_as_before() -> None:
    frame = pd.DataFrame([item["words"] for item in SAMPLE["sweep"]])
    text = recommend_frame(frame, get_estimator("theory")).to_csv(index=False, lineterminator="\n")
    header, *lines = text.splitlines()
    assert header == SAMPLE["sweep_header"]
    skip = header.split(",").index(NOT_COMPARED)

    def cells(line: str) -> list[str]:  # no cell of these rows holds a comma (no error text in the sample)
        return [c for k, c in enumerate(line.split(",")) if k != skip]

    # byte for byte but the tokens/s cell, as `autoconf-gpu sweep` wrote them
    assert [cells(x) for x in lines] == [cells(item["line"]) for item in SAMPLE["sweep"]]
