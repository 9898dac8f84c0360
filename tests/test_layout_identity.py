"""The layout search against two sources it does not produce itself.

- *Memory, frozen.* tests/fixtures/layout_identity_sample.json holds a few searches (the benchmark's and random jobs:
  models, methods, dtypes, GPUs, GPU counts, stacks, shardings, free batches) with the memory record the code
  *before* the search became array arithmetic end to end made (commit 2732b7e, ``memory_batch`` on every layout's
  own Job and Placement): layouts, how many pass the gate and which (a digest), summed and sampled peaks. The search's
  memory gate must give the same to 1e-9 whatever the throughput formulas become. Written by
  ``python bench/layout_identity.py --sample DUMP FIXTURE`` from the dump that ``--against 2732b7e --keep DUMP``
  writes; the full comparison (230 searches, every layout; answers too) is ``bench/layout_identity.py --against REV``.
- *Choice, brute force.* The search's winner and runner-up (Job, Placement, tokens/s) are those of a plain loop over
  every layout of the space: theory's memory of each through ``memory_batch``, ``oom_risk ≤ MAX_OOM_RISK``, the
  scalar ``theory/throughput.estimate_throughput`` of each that fits, the fastest first and ties to the simpler
  layout (docs/layouts.md). Both sides run today's formulas, so a formula change moves them together.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autoconf.catalog import get_gpu
from autoconf.defaults import GPUS_PER_NODE, MAX_OOM_RISK
from autoconf.errors import AutoconfError
from autoconf.estimators.theory import throughput as tp
from autoconf.recommend.layout import SHARDINGS, fastest_layout, row_inputs, search_space
from autoconf.schema import Job, Placement
from bench.layout_identity import ESTIMATOR, _setup, gate_memory, same
from tests._identity import memory_as_at_the_sample  # noqa: F401 (an autouse fixture: the frozen memory formulas)

SAMPLE = json.loads((Path(__file__).parent / "fixtures" / "layout_identity_sample.json").read_text(encoding="utf-8"))
TIE = 1e-9  # tokens/s this close are a tie for the brute force (two implementations round differently)


def _id(item: dict[str, Any]) -> str:
    return f"{Path(item['case']['job']['model']).parent.name or item['case']['job']['model']}-{item['case']['gpu']}"


@pytest.mark.parametrize("item", SAMPLE, ids=_id)
def test_memory_gate_as_before(item: dict[str, Any]) -> None:
    assert same(item["memory"], gate_memory(item["case"])) == []


def _simpler(found: tuple[float, Job, Placement]) -> tuple[int, bool, int, int, int]:
    """docs/layouts.md's tie order: fewer model-parallel GPUs, no checkpointing, less sharding, fewer GPUs, fewer
    micro-steps."""
    _, job, place = found
    assert place.strategy is not None
    return (place.tp * place.pp, job.gradient_checkpointing, SHARDINGS.index(place.strategy), place.number_gpus,
            job.gradient_accumulation_steps)


def _first(scored: list[tuple[float, Job, Placement]]) -> tuple[float, Job, Placement] | None:
    if not scored:
        return None
    top = max(s for s, _, _ in scored)
    return min((f for f in scored if f[0] >= top * (1 - TIE)), key=_simpler)


def brute_force(case: dict[str, Any]) -> tuple[int, list[tuple[float, Job, Placement]]]:
    """(layouts that fit, [winner, runner-up]) by evaluating every layout one by one."""
    job, extra, model_parallel = _setup(case)
    space = search_space(job, case["counts"], GPUS_PER_NODE, extra.get("shardings", SHARDINGS), case["free"],
                         model_parallel)
    pairs = [row_inputs(job, case["gpu"], space, r, case["network"]) for r in range(len(space))]
    batch = ESTIMATOR.memory_batch([j for j, _ in pairs], [p for _, p in pairs])
    fits = (batch.ok & (batch.oom_risk <= MAX_OOM_RISK)).tolist()
    scored = [(tp.estimate_throughput(j, p, stack=case["stack"]).tokens_per_second, j, p)
              for (j, p), f in zip(pairs, fits, strict=True) if f]
    chosen = []
    for _ in range(2):
        if (found := _first(scored)) is not None:
            chosen.append(found)
            scored.remove(found)
    return sum(fits), chosen


@pytest.mark.parametrize("item", SAMPLE, ids=_id)
def test_search_picks_the_brute_force_best(item: dict[str, Any]) -> None:
    case = item["case"]
    job, extra, model_parallel = _setup(case)
    try:
        choice = fastest_layout(job, case["gpu"], case["counts"], ESTIMATOR, inter_node_gbps=case["network"],
                                stack=case["stack"], free_batch=case["free"], **extra)
    except AutoconfError as exc:  # refused: no layout divides the batch, or the GPU has no published peak
        empty = not len(search_space(job, case["counts"], GPUS_PER_NODE, extra.get("shardings", SHARDINGS),
                                     case["free"], model_parallel))
        assert empty or not get_gpu(case["gpu"]).peak_tflops(job.dtype), exc
        return
    fitting, chosen = brute_force(case)
    assert choice.fitting == fitting
    got = [layout for layout in (choice.best, choice.runner_up) if layout is not None]
    assert len(got) == len(chosen)
    for layout, (speed, want_job, want_place) in zip(got, chosen, strict=True):
        assert (layout.job, layout.placement) == (want_job, want_place)
        assert layout.throughput.tokens_per_second == pytest.approx(speed, rel=1e-9)
