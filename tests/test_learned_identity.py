"""The hybrid and learned estimators answer as the code before their columns path, on a sample of its outputs.

tests/fixtures/learned_identity_sample.json holds inputs and outputs produced by the code *before* the learned and
hybrid sweeps ran on columns (one Job per row; commit 2732b7e), written by
``python bench/learned_identity.py --sample DUMP_DIR JSON`` from a dump that code made with ``--write``. The full
comparison (every measured row, the 3,960-point sweep through the CLI, 500 random jobs, both estimators) is
``bench/learned_identity.py --check``. Tokens/s is left out: the throughput model changed after the sample was
made (issue 22).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from autoconf.estimators.contract import get_estimator
from autoconf.estimators.frame import OUTPUT_COLUMNS
from autoconf.evaluation.data import load_measurements, row_to_inputs
from autoconf.recommend.frame import recommend_frame
from bench.learned_identity import answer
from tests._identity import as_sampled, memory_as_at_the_sample, same  # noqa: F401 (an autouse fixture)

SAMPLE = json.loads((Path(__file__).parent / "fixtures" / "learned_identity_sample.json").read_text(encoding="utf-8"))
NAMES = ("hybrid", "learned")
VERSION = "2.1.0"  # the learned-model version the sample was made with (newer versions answer differently)


def _cell(text: str) -> Any:  # noqa: ANN401
    try:
        return float(text)
    except ValueError:
        return text


def _rows(frame: pd.DataFrame) -> tuple[list[str], list[list[Any]]]:
    """The frame as `autoconf-gpu sweep` writes it, read back cell by cell (numbers as floats)."""
    written = pd.read_csv(io.StringIO(frame.to_csv(index=False)), keep_default_na=False, dtype=str)
    return list(written.columns), [[_cell(c) for c in row] for row in written.itertuples(index=False)]


@pytest.mark.parametrize("name", NAMES)
def test_measured_rows_answer_as_before(name: str) -> None:
    rows = load_measurements().to_dict(orient="records")
    for item in SAMPLE[name]["measurements"]:
        old = item["answer"]
        if isinstance(old, str) and old.startswith("input: "):
            continue  # the row's words are refused before any estimator (theory's identity test covers it)
        assert same(old, answer(name, *row_to_inputs(as_sampled(rows[item["row"]])), VERSION)), item["row"]



@pytest.mark.parametrize(("name", "part"), [(n, p) for n in NAMES for p in ("sweep", "random", "strict")])
def test_sweep_rows_are_written_as_before(name: str, part: str) -> None:
    """Seed-sweep rows (searched over GPU counts), random jobs (at their own number_gpus) and both searched in
    strict mode (refused outside the version's training domain), as a sweep writes them."""
    items = SAMPLE[name][part]
    frame = pd.DataFrame([i["words"] for i in items])
    header, rows = _rows(recommend_frame(frame, get_estimator(name, VERSION), strict=part == "strict"))
    old_header = SAMPLE[name][f"{part}_header"]
    assert header[-len(OUTPUT_COLUMNS):] == old_header[-len(OUTPUT_COLUMNS):] == list(OUTPUT_COLUMNS)
    for item, new in zip(items, rows, strict=True):  # the answer's columns (a sample holds fewer input columns)
        old = dict(zip(OUTPUT_COLUMNS, [_cell(c) for c in item["cells"][-len(OUTPUT_COLUMNS):]], strict=True))
        assert same(old, dict(zip(OUTPUT_COLUMNS, new[-len(OUTPUT_COLUMNS):], strict=True))), item["words"]
