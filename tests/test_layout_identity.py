"""The layout search answers as the code before its speed-up did, on a sample of that code's own outputs.

tests/fixtures/layout_identity_sample.json holds inputs and answers produced by the code *before* the first search
of a job became array arithmetic end to end (commit 2732b7e: one scalar phase table per memory group), written by
``python bench/layout_identity.py --sample DUMP FIXTURE`` from a dump that code made with ``--write``: a few of the
benchmark's searches and random jobs (models, methods, dtypes, GPUs, GPU counts, stacks, shardings, free batches),
some through the throughput objective. The full comparison (230 searches) is ``bench/layout_identity.py --check``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.layout_identity import answer, same

SAMPLE = json.loads((Path(__file__).parent / "fixtures" / "layout_identity_sample.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("item", SAMPLE, ids=lambda item: f"{item['case']['job']['model']}-{item['case']['gpu']}")
def test_search_answers_as_before(item: dict[str, Any]) -> None:
    new = json.loads(json.dumps(answer(item["case"])))
    assert same(item["answer"], new) == []
