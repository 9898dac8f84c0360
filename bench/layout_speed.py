"""Speed of the layout recommender (recommend/layout.py): ms per job and layouts evaluated per second, against the
scalar baseline in the same process.

Jobs: the 26 cells of nanotron's benchmark (bench/layout_vs_nanotron.py: 1.3B-80B, 8-512 H100, global
batch 256 × 4,096 tokens; nanotron's shapes and stack, so TP and PP are searched) and four fine-tuning jobs (HF stack: data
parallel layouts) searched over every GPU count of one to eight nodes, as the ado throughput_recommender does. For
each job:

- *baseline*: the search as it was before the array version: every layout built as a Job and a Placement, one
  theory ``memory_batch`` over all of them, the scalar ``estimate_throughput`` of each one that fits, the fastest
  taken;
- *array, first*: ``fastest_layout`` with theory's memo tables and the layout memory groups emptied (the first search
  of a job shape in a process);
- *array, again*: the same search once more (memory groups memoised; as for a second global batch or a sweep).

Each figure is the least CPU time of ``--repeats`` runs (the machine's 2 cores are shared with other workers: CPU
time of this single-threaded process is what the search costs, whatever they take). Writes the section
``layout-speed`` of docs/benchmarks.md.

    python bench/layout_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.catalog import get_architecture
from autoconf.estimators import get_estimator
from autoconf.estimators.theory import layout_grid, vector
from autoconf.estimators.theory import throughput as tp
from autoconf.evaluation.data import load_measurements
from autoconf.recommend import layout_space
from autoconf.recommend.fastest import Fastest, fastest
from autoconf.recommend.layout import MODEL_PARALLEL_STACKS, fastest_layout, layouts
from autoconf.recommend.objectives import throughput_batch
from autoconf.recommend.search import candidate_gpus
from autoconf.schema import Job
from bench._report import update_section
from bench.layout_vs_nanotron import GPU, LINK, SEQ, SHAPES, STACK

ROOT = Path(__file__).resolve().parents[1]
ESTIMATOR = get_estimator("theory")
FINE_TUNING = [  # (job, GPU, GPU counts): one to eight nodes of 8
    (Job(model="llama3.1-8b", method="lora", tokens_per_sample=4096, batch_size=64), "H100"),
    (Job(model="llama3.1-70b", method="qlora", tokens_per_sample=2048, batch_size=32), "NVIDIA-A100-80GB-PCIe"),
    (Job(model="qwen2.5-7b", method="full", tokens_per_sample=4096, batch_size=128), "H100"),
    (Job(model="mistral-7b-v0.3", method="full", tokens_per_sample=2048, batch_size=256), "NVIDIA-A100-80GB-PCIe"),
]


def cases() -> list[tuple[str, Job, str, list[int], float | None, str | None]]:
    table = load_measurements()
    out = []
    for _, row in table[table["source"] == "nanotron-benchmarks"].iterrows():
        job = Job(model=SHAPES[row["model_name"]], method="full", dtype="amp-bf16", tokens_per_sample=SEQ,
                  batch_size=int(row["batch_size"]))
        out.append(("nanotron", job, GPU, [int(row["number_gpus"])], LINK, STACK))
    counts = list(candidate_gpus(64, 8))
    out += [("fine-tuning", job, gpu, counts, None, None) for job, gpu in FINE_TUNING]
    return out


def baseline(job: Job, gpu: str, counts: list[int], network: float | None, stack: str | None) -> int:
    """The scalar search: Job/Placement objects, one memory_batch, estimate_throughput per fitting layout."""
    pairs = list(layouts(job, gpu, counts, inter_node_gbps=network, model_parallel=stack in MODEL_PARALLEL_STACKS))
    memory = ESTIMATOR.memory_batch([j for j, _ in pairs], [p for _, p in pairs])
    speeds = [tp.estimate_throughput(j, p, stack=stack).tokens_per_second for i, (j, p) in enumerate(pairs)
              if memory.errors[i] is None and memory.oom_risk[i] <= 0.05]
    assert speeds
    return len(pairs)


def forget() -> None:
    """Empty every memo table of the search (a first search of every job shape)."""
    for module in (layout_space, layout_grid, vector):
        for value in vars(module).values():
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()


def best_of(repeats: int, run: Callable[[], object], before: Callable[[], None] | None = None) -> float:
    """The least CPU time of ``repeats`` runs (CPU seconds of this process: what other workers on the shared cores
    take does not count; one thread, so it bounds the wall time of an idle machine)."""
    times = []
    for _ in range(repeats):
        if before:
            before()
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def measure(repeats: int) -> list[dict[str, object]]:
    rows = []
    for kind, job, gpu, counts, network, stack in cases():
        def array(job: Job = job, gpu: str = gpu, counts: list[int] = counts, network: float | None = network,
                  stack: str | None = stack) -> int:
            return fastest_layout(job, gpu, counts, ESTIMATOR, inter_node_gbps=network, stack=stack).evaluated

        def scalar(job: Job = job, gpu: str = gpu, counts: list[int] = counts, network: float | None = network,
                   stack: str | None = stack) -> int:
            return baseline(job, gpu, counts, network, stack)

        evaluated = array()
        rows.append({"kind": kind, "layouts": evaluated, "baseline": best_of(repeats, scalar, forget),
                     "first": best_of(repeats, array, forget), "again": best_of(repeats, array)})
    return rows


def seed_space() -> dict[str, float]:
    """The 3,960-point seed space (sweep/space.yaml) answered by the throughput objective at ado's default of one
    node (recommend/fastest.py), against the GPU count × accumulation search it replaced
    (objectives.throughput_batch), in one process, CPU seconds."""
    import itertools

    import yaml

    space = yaml.safe_load((ROOT / "sweep" / "space.yaml").read_text())["entitySpace"]
    names = [d["identifier"] for d in space]
    points = [dict(zip(names, v, strict=True)) for v in itertools.product(*(d["propertyDomain"]["values"]
                                                                             for d in space))]
    jobs = [Job(model=p["model_name"], method=p["method"], tokens_per_sample=p["tokens_per_sample"],
                batch_size=p["batch_size"]) for p in points]
    forget()
    start = time.process_time()
    found = [fastest(j, p["gpu_model"], ESTIMATOR, max_gpus=8) for j, p in zip(jobs, points, strict=True)]
    layout_s = time.process_time() - start
    start = time.process_time()
    old = throughput_batch(jobs, [p["gpu_model"] for p in points], ESTIMATOR, max_gpus=8)
    old_s = time.process_time() - start
    chosen = [f for f in found if isinstance(f, Fastest)]
    return {"points": len(points), "layout_s": layout_s, "old_s": old_s, "answered": len(chosen),
            "old_answered": int((old.row >= 0).sum()), "layouts": sum(f.choice.evaluated for f in chosen),
            "placements": old.evaluated}


def report(rows: list[dict[str, object]], repeats: int, seed: dict[str, float]) -> str:
    def total(key: str, kind: str | None = None) -> float:
        return sum(float(r[key]) for r in rows if kind is None or r["kind"] == kind)  # type: ignore[arg-type]

    def worst(key: str) -> float:
        return max(float(r[key]) for r in rows) * 1000  # type: ignore[arg-type]

    layouts_n = total("layouts")
    lines = [
        f"{len(rows)} searches: the 26 nanotron cells (one GPU count each) and {len(FINE_TUNING)} fine-tuning jobs "
        "over every GPU count of 1-8 nodes; theory estimator; best of "
        f"{repeats} runs; {os.cpu_count()} CPU cores ({platform.machine()}), Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f}. Command: `python bench/layout_speed.py`.",
        "",
        "| search | layouts | total CPU s | CPU ms per search (mean / max) | layouts per CPU second | vs baseline |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, name in (("baseline", "baseline (objects + memory_batch + scalar tokens/s)"),
                      ("first", "array, first search of each job"), ("again", "array, again (groups memoised)")):
        seconds = total(key)
        lines.append(f"| {name} | {layouts_n:,.0f} | {seconds:.3f} | {seconds / len(rows) * 1000:.1f} / "
                     f"{worst(key):.1f} | {layouts_n / seconds:,.0f} | {total('baseline') / seconds:.1f}× |")
    lines += [
        "",
        f"- Target ≤ 50 ms per search: {'met' if worst('first') <= 50 else 'not met'} (worst first search "
        f"{worst('first'):.0f} ms); ≥ 1,000,000 layouts per second: "
        f"{'met' if layouts_n / total('again') >= 1e6 else 'not met'} by the memoised search "
        f"({layouts_n / total('again'):,.0f}/s), {layouts_n / total('first'):,.0f}/s on first searches.",
        "- Where a first search spends its time: one theory row per (GPUs, tp, pp, sharding) and three phase "
        "tables per (tp, pp, checkpointing, FSDP) (recommend/layout_memory.py), each through the scalar phase "
        "formulas; every layout after that is numpy. The winner and runner-up get the estimator's own memory (one "
        "memory_batch of two rows).",
        f"- The {seed['points']:,.0f}-point seed space (sweep/space.yaml) through the throughput objective at ado's "
        f"default of one node, first searches, one process: {seed['layout_s']:.1f} CPU s for {seed['layouts']:,.0f} "
        f"layouts of the {seed['answered']:,.0f} points answered; the GPU count × accumulation search it replaced "
        f"(objectives.throughput_batch): {seed['old_s']:.2f} CPU s for {seed['placements']:,.0f} placements, "
        f"{seed['old_answered']:,.0f} answered.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default="docs/benchmarks.md")
    args = parser.parse_args(argv)
    for path in SHAPES.values():  # reading the shapes and the catalogue's one-off load are no search's time
        get_architecture(path)
    text = report(measure(args.repeats), args.repeats, seed_space())
    print(text)
    update_section(Path(args.output), "layout-speed", "## Layout recommender speed\n\n" + text, title="Benchmarks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
