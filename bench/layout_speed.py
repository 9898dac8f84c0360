"""Speed of the layout search (recommend/layout.py, the throughput objective): layouts evaluated per second of a
first search of a job and of the same search again, against the code before in the same run.

    python bench/layout_speed.py [--repeats 5] [--baseline-rev REV]

Searches: the 26 cells of nanotron's benchmark (bench/layout_vs_nanotron.py: 1.3B-80B, 8-512 H100, global batch
256 × 4,096 tokens; nanotron's stack, so TP and PP are searched) and four fine-tuning jobs (HF stack: data-parallel
layouts) over every GPU count of one to eight nodes, as the ado throughput_recommender does; theory estimator.

- *first search*: every memo table of the search, of the theory and of the LoRA targets emptied before each search
  (the catalogue's parsed Architecture of the model stays: reading a config is no search's time); the whole
  ``fastest_layout`` call is timed: search space, memory gate, tokens/s, ranking, the chosen layouts;
- *again*: the same search once more in the same process (whatever the code memoises).

Each search's figure is its least time of ``--repeats`` runs, wall (``perf_counter``) and CPU (``process_time``: the
machine's 2 cores are shared with other work, and CPU time of this single-threaded process is what the search costs
whatever they take). Layouts per second = layouts evaluated (memory gate and tokens/s of each) ÷ the summed times.

Both code trees run in fresh Python processes on this machine: this tree and ``git archive REV autoconf`` (default:
the parent of the commit that added bench/layout_identity.py, the search before its first-search speed-up). Their
answers are equal (``bench/layout_identity.py --check``). The 3,960-point seed space through the throughput objective
(``recommend.fastest.fastest`` at ado's default of one node, one fresh process, every point once) is timed the same
way, and this tree's first searches once more part by part (search space, memory gate, tokens/s). Writes the
section ``layout-speed`` of docs/benchmarks.md.
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

def forget():
    for name, module in list(sys.modules.items()):
        if name.startswith(("autoconf.recommend", "autoconf.estimators", "autoconf.catalog.lora")):
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()

def search(case):
    job = Job(**case["job"])
    return fastest_layout(job, case["gpu"], case["counts"], theory, inter_node_gbps=case["network"],
                          stack=case["stack"]).evaluated

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


def report(result: dict[str, list[dict[str, Any]]], seed: dict[str, dict[str, Any]], parts: list[dict[str, float]],
           rev: str, repeats: int) -> str:
    new, old = result["this code"], result["baseline"]
    mean = {k: sum(p[k] for p in parts) / len(parts) * 1000 for k in ("whole", "gate", "speeds", "space")}
    fixed, per = _fit([p["layouts"] for p in parts], [p["whole"] for p in parts])
    gate_fixed, gate_per = _fit([p["layouts"] for p in parts], [p["gate"] for p in parts])
    lines = [
        f"{len(new)} searches: the 26 nanotron cells (one GPU count each, TP × PP × DP) and {len(FINE_TUNING)} "
        "fine-tuning jobs over every GPU count of 1-8 nodes; theory estimator; least of "
        f"{repeats} runs per search; {os.cpu_count()} CPU cores ({platform.machine()}) shared with other work, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the end. Baseline: "
        f"`git archive {rev} autoconf` (one scalar phase table per memory group of a first search). "
        "Command: `python bench/layout_speed.py`.",
        "",
        "| search | code | layouts | wall ms per search (mean / max) | layouts per wall s | layouts per CPU s "
        "| baseline / this code (CPU) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind in (None, "nanotron", "fine-tuning"):
        trees = {label: [r for r in rows if kind is None or r["kind"] == kind]
                 for label, rows in (("baseline", old), ("this code", new))}
        layouts = sum(r["layouts"] for r in trees["this code"])
        for key, name in (("first", "first search"), ("again", "again")):
            for label, picked in trees.items():
                wall, cpu = _sum(picked, key, 0), _sum(picked, key, 1)
                ratio = _sum(trees["baseline"], key, 1) / cpu
                worst = max(r[key][0] for r in picked) * 1000
                lines.append(f"| {kind or 'all'}: {name} | {label} | {layouts:,} | {wall / len(picked) * 1000:.1f} / "
                             f"{worst:.1f} | {layouts / wall:,.0f} | {layouts / cpu:,.0f} | {ratio:.1f}× |")
    layouts = sum(r["layouts"] for r in new)
    first_wall, first_cpu = _sum(new, "first", 0), _sum(new, "first", 1)
    s_new, s_old = seed["this code"], seed["baseline"]
    lines += [
        "",
        f"- Goal ≥ 1,000,000 layouts per second on a first search: {layouts / first_wall:,.0f} per wall second, "
        f"{layouts / first_cpu:,.0f} per CPU second over all searches ("
        f"{'met' if layouts / first_cpu >= 1e6 else 'not met'}); see below for where the time goes.",
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
        f"{gate_per * 1e6:.2f} µs, most of it memory.theory_rows): 1,000,000 layouts per second needs under 1 µs per "
        "layout and, at that, searches of many thousand layouts; the searches here have "
        f"{min(p['layouts'] for p in parts):,.0f}-{max(p['layouts'] for p in parts):,.0f}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline-rev", default=None)
    parser.add_argument("--output", default="docs/benchmarks.md")
    args = parser.parse_args(argv)
    rev = args.baseline_rev or baseline_rev()
    searches = cases()
    words = json.dumps([{k: v for k, v in c.items() if k != "kind"} for c in searches])
    result: dict[str, list[dict[str, Any]]] = {}
    seed: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this code": ROOT, "baseline": _export(rev, Path(tmp) / "baseline")}
        for name, tree in trees.items():
            rows = _python(tree, WORKER, words, str(args.repeats))
            result[name] = [{**r, "kind": c["kind"]} for r, c in zip(rows, searches, strict=True)]
            seed[name] = _python(tree, SEED, str(ROOT / "sweep" / "space.yaml"))
    parts = _python(ROOT, PARTS, words, str(args.repeats))
    short = subprocess.run(["git", "rev-parse", "--short=12", rev], cwd=ROOT, check=True, capture_output=True,
                           text=True).stdout.strip()
    text = report(result, seed, parts, short, args.repeats)
    print(text)
    update_section(Path(args.output), "layout-speed", "## Layout search speed\n\n" + text, title="Benchmarks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
