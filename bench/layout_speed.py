"""Speed of the layout search (recommend/layout.py, the throughput objective): layouts evaluated per second of a
first search of a job and of the same search again, against the code before in the same run.

    python bench/layout_speed.py [--repeats 5] [--baseline-rev REV] [--previous-rev REV]

Searches: the 26 cells of nanotron's benchmark (bench/layout_vs_nanotron.py: 1.3B-80B, 8-512 H100, global batch
256 × 4,096 tokens; nanotron's stack, so TP and PP are searched) and four fine-tuning jobs (HF stack: data-parallel
layouts) over every GPU count of one to eight nodes, as the ado throughput_recommender does; theory estimator.

- *first search*: every memo table of the search, of the theory and of the LoRA targets emptied before each search
  (the catalogue's parsed Architecture of the model stays: reading a config is no search's time; only memo tables
  defined in those modules are emptied, not the catalogue's ``get_architecture`` they import); the whole
  ``fastest_layout`` call is timed: search space, memory gate, tokens/s, ranking, the chosen layouts;
- *again*: the same search once more in the same process (whatever the code memoises).

Each search's figure is its least time of ``--repeats`` runs, wall (``perf_counter``) and CPU (``process_time``: the
machine's 2 cores are shared with other work, and CPU time of this single-threaded process is what the search costs
whatever they take). Layouts per second = layouts evaluated (memory gate and tokens/s of each) ÷ the summed times.

Large searches: four jobs over every GPU count of one to 64 nodes (1, 2, 4, 8, 16, ... 512 GPUs; Megatron and
nanotron stacks, so TP and PP are searched; two with a fixed global batch, two with a free one as ado's batch 0):
13,000-109,000 layouts each, where the fixed cost of a search no longer dominates.

The code trees run in fresh Python processes on this machine: this tree, ``git archive REV autoconf`` of the
baseline (default: the parent of the commit that added bench/layout_identity.py, the search before its first-search
speed-up; the 30 searches and the seed space only: it takes minutes per large search) and of ``--previous-rev``
(default PREVIOUS, the code before the fixed-cost round of issue 26's search4 helper; skipped when the clone
lacks it). Their memory gates are equal on every layout (``bench/layout_identity.py --against REV --memory-only``),
and so are their answers where the throughput formulas are the same (``--against REV``). The 3,960-point seed space
through the throughput objective (``recommend.fastest.fastest`` at ado's default of one node, one fresh process,
every point once) is timed the same way, and this tree's first searches once more part by part (search space,
memory gate, tokens/s). Writes the section ``layout-speed`` of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.evaluation.data import load_measurements
from autoconf.recommend.search import candidate_gpus
from autoconf.schema import Job
from bench._report import update_section
from bench.layout_vs_nanotron import GPU, LINK, SEQ, SHAPES, STACK

ROOT = Path(__file__).resolve().parents[1]
PREVIOUS = "1eaa09ef6636"  # the integration merge before the search fixed-cost round (issue 26, search4)
LARGE = [  # (job, GPU, stack, free global batch): searched over one to 64 nodes of 8
    (Job(model="llama3.1-70b", method="full", dtype="amp-bf16", tokens_per_sample=4096, batch_size=1536), "H100",
     "megatron", False),
    (Job(model="llama3.1-405b", method="full", dtype="amp-bf16", tokens_per_sample=4096, batch_size=1024), "H100",
     "megatron", False),
    (Job(model="llama3.1-8b", method="full", dtype="amp-bf16", tokens_per_sample=4096), "H100", "nanotron", True),
    (Job(model="llama3.1-70b", method="full", dtype="amp-bf16", tokens_per_sample=4096), "H100", "megatron", True),
]
FINE_TUNING = [  # (job, GPU): searched over one to eight nodes of 8
    (Job(model="llama3.1-8b", method="lora", tokens_per_sample=4096, batch_size=64), "H100"),
    (Job(model="llama3.1-70b", method="qlora", tokens_per_sample=2048, batch_size=32), "NVIDIA-A100-80GB-PCIe"),
    (Job(model="qwen2.5-7b", method="full", tokens_per_sample=4096, batch_size=128), "H100"),
    (Job(model="mistral-7b-v0.3", method="full", tokens_per_sample=2048, batch_size=256), "NVIDIA-A100-80GB-PCIe"),
]

# Runs in a fresh process of either tree (PYTHONPATH): the searches of argv[1] (JSON), argv[2] repeats each.
WORKER = r"""
import functools, json, sys, time
from autoconf.estimators import get_estimator
from autoconf.recommend.layout import fastest_layout
from autoconf.schema import Job

cases, repeats = json.loads(sys.argv[1]), int(sys.argv[2])
theory = get_estimator("theory")

PREFIXES = ("autoconf.recommend", "autoconf.estimators", "autoconf.catalog.lora")

def forget():  # the memo tables defined in these modules (not the catalogue's get_architecture they import)
    for name, module in list(sys.modules.items()):
        if name.startswith(PREFIXES):
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper) and value.__module__.startswith(PREFIXES):
                    value.cache_clear()

def search(case):
    job = Job(**case["job"])
    return fastest_layout(job, case["gpu"], case["counts"], theory, inter_node_gbps=case["network"],
                          stack=case["stack"], free_batch=case.get("free", False)).evaluated

def timed(case, before):
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        if before:
            forget()
        wall, cpu = time.perf_counter(), time.process_time()
        search(case)
        best = [min(best[0], time.perf_counter() - wall), min(best[1], time.process_time() - cpu)]
    return best

out = []
for case in cases:
    layouts = search(case)
    first = timed(case, True)
    again = timed(case, False)
    out.append({"layouts": layouts, "first": first, "again": again})
print(json.dumps(out))
"""

# This tree only: CPU seconds of a first search's parts (space, memory gate, tokens/s) and of the whole, per search.
PARTS = WORKER.split("out = []")[0] + r"""
from autoconf.catalog import get_architecture
from autoconf.estimators.theory.layout_grid import layout_speeds
from autoconf.recommend.layout import MODEL_PARALLEL_STACKS, search_space
from autoconf.recommend.layout_memory import theory_gate

def least(run):
    best = float("inf")
    for _ in range(repeats):
        forget()
        cpu = time.process_time()
        run()
        best = min(best, time.process_time() - cpu)
    return best

out = []
for case in cases:
    job = Job(**case["job"])
    model_parallel = (case["stack"] or job.framework) in MODEL_PARALLEL_STACKS
    space = search_space(job, case["counts"], model_parallel=model_parallel)
    out.append({"layouts": len(space), "whole": least(lambda: search(case)),
                "space": least(lambda: search_space(job, case["counts"], model_parallel=model_parallel)),
                "gate": least(lambda: theory_gate(job, case["gpu"], space, 0.05)),
                "speeds": least(lambda: layout_speeds(job, case["gpu"], space.rows, stack=case["stack"],
                                                      inter_node_gbps=case["network"]))})
print(json.dumps(out))
"""

# The seed space through the throughput objective, one fresh process, every point once.
SEED = r"""
import itertools, json, sys, time
from pathlib import Path
import yaml
from autoconf.estimators import get_estimator
from autoconf.recommend.fastest import Fastest, fastest
from autoconf.schema import Job

space = yaml.safe_load(Path(sys.argv[1]).read_text())["entitySpace"]
names = [d["identifier"] for d in space]
points = [dict(zip(names, v)) for v in itertools.product(*(d["propertyDomain"]["values"] for d in space))]
jobs = [Job(model=p["model_name"], method=p["method"], tokens_per_sample=p["tokens_per_sample"],
            batch_size=p["batch_size"]) for p in points]
theory = get_estimator("theory")
wall, cpu = time.perf_counter(), time.process_time()
found = [fastest(j, p["gpu_model"], theory, max_gpus=8) for j, p in zip(jobs, points)]
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
chosen = [f for f in found if isinstance(f, Fastest)]
print(json.dumps({"points": len(points), "answered": len(chosen), "layouts": sum(f.choice.evaluated for f in chosen),
                  "wall": wall, "cpu": cpu}))
"""


def cases() -> list[dict[str, Any]]:
    """The searches, as plain words (both trees read them)."""
    table = load_measurements()
    out = []
    for _, row in table[table["source"] == "nanotron-benchmarks"].iterrows():
        job = Job(model=SHAPES[row["model_name"]], method="full", dtype="amp-bf16", tokens_per_sample=SEQ,
                  batch_size=int(row["batch_size"]))
        out.append({"kind": "nanotron", "job": job.model_dump(mode="json"), "gpu": GPU,
                    "counts": [int(row["number_gpus"])], "network": LINK, "stack": STACK})
    counts = list(candidate_gpus(64, 8))
    out += [{"kind": "fine-tuning", "job": job.model_dump(mode="json"), "gpu": gpu, "counts": counts, "network": None,
             "stack": None} for job, gpu in FINE_TUNING]
    return out


def large_cases() -> list[dict[str, Any]]:
    """The large searches, as plain words."""
    counts = list(candidate_gpus(512, 8))
    return [{"kind": "large", "job": job.model_dump(mode="json"), "gpu": gpu, "counts": counts, "network": LINK,
             "stack": stack, "free": free} for job, gpu, stack, free in LARGE]


def _python(tree: Path, code: str, *args: str) -> Any:  # noqa: ANN401 - the worker's JSON
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=tree, check=True, capture_output=True,
                          text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def baseline_rev() -> str:
    """The parent of the commit that added bench/layout_identity.py: the search before its speed-up."""
    first = subprocess.run(["git", "log", "--format=%H", "--diff-filter=A", "--", "bench/layout_identity.py"],
                           cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    return f"{first[-1]}^" if first else "HEAD"


def _export(rev: str, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", rev, "autoconf"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _sum(rows: list[dict[str, Any]], key: str, clock: int, kind: str | None = None) -> float:
    return sum(r[key][clock] for r in rows if kind is None or r["kind"] == kind)


def _fit(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y on x."""
    mx, my = sum(x) / len(x), sum(y) / len(y)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sum((a - mx) ** 2 for a in x)
    return my - slope * mx, slope


def _label(case: dict[str, Any]) -> str:
    job = case["job"]
    batch = "free batch" if case.get("free") else f"batch {job['batch_size']:,}"
    return f"{job['model']} {job['method']}, {batch}, {case['stack']}"


def report(result: dict[str, list[dict[str, Any]]], large: dict[str, list[dict[str, Any]]], big: list[dict[str, Any]],
           seed: dict[str, dict[str, Any]], parts: list[dict[str, float]], revs: dict[str, str], repeats: int) -> str:
    new = result["this code"]
    mean = {k: sum(p[k] for p in parts) / len(parts) * 1000 for k in ("whole", "gate", "speeds", "space")}
    fixed, per = _fit([p["layouts"] for p in parts], [p["whole"] for p in parts])
    gate_fixed, gate_per = _fit([p["layouts"] for p in parts], [p["gate"] for p in parts])
    trees = ", ".join(f"{label}: `git archive {rev} autoconf`" for label, rev in revs.items())
    lines = [
        f"{len(new)} searches: the 26 nanotron cells (one GPU count each, TP × PP × DP) and {len(FINE_TUNING)} "
        "fine-tuning jobs over every GPU count of 1-8 nodes; theory estimator; least of "
        f"{repeats} runs per search; {os.cpu_count()} CPU cores ({platform.machine()}) shared with other work, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the end. Trees: {trees} "
        "(baseline: one scalar phase table per memory group of a first search; previous: before the search's "
        "fixed-cost round: the gate's totals only, each phase sum and micro-batch once). Command: `python bench/layout_speed.py`.",
        "",
        "| search | code | layouts | wall ms per search (mean / max) | layouts per wall s | layouts per CPU s "
        "| baseline / this row (CPU) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind in (None, "nanotron", "fine-tuning"):
        picked = {label: [r for r in rows if kind is None or r["kind"] == kind] for label, rows in result.items()}
        layouts = sum(r["layouts"] for r in picked["this code"])
        for key, name in (("first", "first search"), ("again", "again")):
            for label, rows in picked.items():
                wall, cpu = _sum(rows, key, 0), _sum(rows, key, 1)
                ratio = _sum(picked["baseline"], key, 1) / cpu
                worst = max(r[key][0] for r in rows) * 1000
                lines.append(f"| {kind or 'all'}: {name} | {label} | {layouts:,} | {wall / len(rows) * 1000:.1f} / "
                             f"{worst:.1f} | {layouts / wall:,.0f} | {layouts / cpu:,.0f} | {ratio:.1f}× |")
    layouts = sum(r["layouts"] for r in new)
    first_wall, first_cpu = _sum(new, "first", 0), _sum(new, "first", 1)
    lines += [
        "",
        f"Large searches (every GPU count of 1-64 nodes, {len(LARGE)} jobs; least of {repeats} runs; the baseline "
        "is not run: minutes per search):",
        "",
        "| search | code | layouts | first search: CPU ms | first: layouts per CPU s | first: layouts per wall s "
        "| again: layouts per CPU s | previous / this code (CPU, first) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for i, case in enumerate(big):
        for label, rows in large.items():
            row = rows[i]
            ratio = large["previous"][i]["first"][1] / row["first"][1] if "previous" in large else float("nan")
            lines.append(f"| {_label(case)} | {label} | {row['layouts']:,} | {row['first'][1] * 1000:.1f} | "
                         f"{row['layouts'] / row['first'][1]:,.0f} | {row['layouts'] / row['first'][0]:,.0f} | "
                         f"{row['layouts'] / row['again'][1]:,.0f} | {ratio:.2f}× |")
    big = large["this code"]
    big_layouts, big_cpu, big_wall = sum(r["layouts"] for r in big), _sum(big, "first", 1), _sum(big, "first", 0)
    s_new, s_old = seed["this code"], seed["baseline"]
    lines += [
        "",
        f"- Goal ≥ 1,000,000 layouts per second on a first search: the {len(new)} searches of "
        f"{min(p['layouts'] for p in parts):,.0f}-{max(p['layouts'] for p in parts):,.0f} layouts "
        f"{layouts / first_wall:,.0f} per wall second, {layouts / first_cpu:,.0f} per CPU second "
        f"({'met' if layouts / first_cpu >= 1e6 else 'not met'}); the {len(big)} large searches "
        f"{big_layouts / big_wall:,.0f} per wall second, {big_layouts / big_cpu:,.0f} per CPU second "
        f"({'met' if big_layouts / big_cpu >= 1e6 else 'not met'}). Wall time is the CPU time plus whatever the "
        "other work on the 2 shared cores takes from it.",
        f"- The {s_new['points']:,}-point seed space (sweep/space.yaml) through the throughput objective at ado's "
        f"default of one node, one fresh process: this code {s_new['wall']:.2f} s wall / {s_new['cpu']:.2f} CPU s "
        f"for {s_new['layouts']:,} layouts of {s_new['answered']:,} points answered "
        f"({s_new['layouts'] / s_new['cpu']:,.0f} layouts per CPU s, each answer's Estimate included); baseline "
        f"{s_old['wall']:.2f} s wall / {s_old['cpu']:.2f} CPU s ({s_old['answered']:,} answered): "
        f"{s_old['cpu'] / s_new['cpu']:.1f}×.",
        f"- Where a first search spends its time (this code, CPU ms per search, mean over the {len(parts)} searches, "
        f"each part timed alone from empty memo tables): the whole search {mean['whole']:.2f}, of which the memory "
        f"gate (one theory call over every layout, recommend/layout_memory.py) {mean['gate']:.2f}, tokens/s "
        f"(estimators/theory/layout_grid.py) {mean['speeds']:.2f}, the search space {mean['space']:.2f}; the rest is "
        "the job's columns, the ranking and the two chosen layouts' objects. Fitted over the searches, one costs "
        f"{fixed * 1000:.2f} ms plus {per * 1e6:.2f} µs per layout (the gate alone {gate_fixed * 1000:.2f} ms plus "
        f"{gate_per * 1e6:.2f} µs): a search of ~1,000 layouts is bound by the fixed cost, a few hundred numpy "
        "calls of the theory formulas on short arrays, each a few µs whatever the array's length.",
    ]
    return "\n".join(lines)


def _rev_exists(rev: str) -> bool:
    return subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=ROOT,
                          capture_output=True).returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline-rev", default=None)
    parser.add_argument("--previous-rev", default=PREVIOUS)
    parser.add_argument("--output", default="docs/benchmarks.md")
    parser.add_argument("--raw", default=None, help="also write the measurements to this JSON file")
    args = parser.parse_args(argv)
    revs = {"baseline": args.baseline_rev or baseline_rev()}
    if _rev_exists(args.previous_rev):
        revs["previous"] = args.previous_rev
    searches, big = cases(), large_cases()

    def words(picked: list[dict[str, Any]]) -> str:
        return json.dumps([{k: v for k, v in c.items() if k != "kind"} for c in picked])

    result: dict[str, list[dict[str, Any]]] = {}
    large: dict[str, list[dict[str, Any]]] = {}
    seed: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {label: _export(rev, Path(tmp) / label) for label, rev in revs.items()} | {"this code": ROOT}
        for name, tree in trees.items():
            rows = _python(tree, WORKER, words(searches), str(args.repeats))
            result[name] = [{**r, "kind": c["kind"]} for r, c in zip(rows, searches, strict=True)]
            if name != "baseline":
                large[name] = _python(tree, WORKER, words(big), str(args.repeats))
            if name != "previous":
                seed[name] = _python(tree, SEED, str(ROOT / "sweep" / "space.yaml"))
    parts = _python(ROOT, PARTS, words(searches), str(args.repeats))
    short = {label: subprocess.run(["git", "rev-parse", "--short=12", rev], cwd=ROOT, check=True, capture_output=True,
                                   text=True).stdout.strip() for label, rev in revs.items()}
    if args.raw:  # the measurements, to render the report again without rerunning them
        Path(args.raw).write_text(json.dumps([result, large, seed, parts, short]), encoding="utf-8")
    text = report(result, large, big, seed, parts, short, args.repeats)
    print(text)
    update_section(Path(args.output), "layout-speed", "## Layout search speed\n\n" + text, title="Benchmarks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
