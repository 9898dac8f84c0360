"""The 3,960-point space answered by the throughput recommender, cold, and placements evaluated per second.

Every point of sweep/space.yaml (autoconf.evaluation.space.space_frame) gets the fastest fitting
placement among all of its candidates (GPU count × gradient accumulation whose product divides the
global batch), with the theory estimator: one memory_batch call over the distinct candidates and one
numpy throughput pass over all of them (recommend/objectives.py). Each repeat runs in a fresh
process (cold: imports, catalogue, memo tables empty). Writes the section ``throughput-speed`` of
docs/benchmarks.md.

    python bench/throughput_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench._report import update_section  # noqa: E402

GOAL_S = 3.0
CHILD = """
import itertools, json, os, resource, time
start = time.perf_counter()
import yaml
from autoconf.estimators.contract import get_estimator
from autoconf.recommend.objectives import throughput_batch
from autoconf.schema import Job
imported = time.perf_counter()
space = yaml.safe_load(open(os.environ["SPACE"]).read())["entitySpace"]
names = [d["identifier"] for d in space]
rows = [dict(zip(names, v)) for v in itertools.product(*(d["propertyDomain"]["values"] for d in space))]
jobs = [Job(model=r["model_name"], method=r["method"], tokens_per_sample=r["tokens_per_sample"],
            batch_size=r["batch_size"]) for r in rows]
searched, cpu0 = time.perf_counter(), time.process_time()
choice = throughput_batch(jobs, [r["gpu_model"] for r in rows], get_estimator("theory"))
done, cpu1 = time.perf_counter(), time.process_time()
print(json.dumps({"points": len(jobs), "placements": choice.evaluated, "answered": int((choice.row >= 0).sum()),
                  "import_s": imported - start, "jobs_s": searched - imported, "search_s": done - searched,
                  "search_cpu_s": cpu1 - cpu0,
                  "total_s": done - start, "cpu_s": sum(resource.getrusage(resource.RUSAGE_SELF)[:2])}))
"""


def run_once() -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "SPACE": str(ROOT / "sweep" / "space.yaml")}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def report(runs: list[dict[str, float]], load: tuple[float, float]) -> str:
    med = {k: statistics.median(r[k] for r in runs) for k in ("import_s", "jobs_s", "search_s", "total_s", "cpu_s",
                                                         "search_cpu_s")}
    first = runs[0]
    rate, cpu_rate = first["placements"] / med["search_s"], first["placements"] / med["search_cpu_s"]
    return "\n".join([
        "## Throughput recommender over the 3,960-point space (cold)", "",
        f"{int(first['points'])} points (sweep/space.yaml), theory estimator, every candidate placement (GPU count "
        "1, 2, 4, 8, 16, 24, … 64 × gradient accumulation, product dividing the global batch): "
        f"{int(first['placements']):,} placements, {int(first['answered'])} points answered (the rest: nothing fits "
        f"or the model is unverified). Median of {len(runs)} fresh processes; {os.cpu_count()} CPU cores "
        f"({platform.processor() or platform.machine()}), Python {platform.python_version()}. "
        "Command: `python bench/throughput_speed.py`.", "",
        "| step | seconds |", "|---|---:|",
        f"| imports (numpy, pydantic, catalogue) | {med['import_s']:.2f} |",
        f"| 3,960 Job objects | {med['jobs_s']:.2f} |",
        f"| search (memory of every candidate + vectorised tokens/s + choice), wall | {med['search_s']:.2f} |",
        f"| search, CPU | {med['search_cpu_s']:.2f} |",
        f"| total, cold process (wall) | {med['total_s']:.2f} |",
        f"| total, cold process (CPU: user + system, independent of other load) | {med['cpu_s']:.2f} |", "",
        f"- Placements evaluated per second in the search: **{rate:,.0f}** per wall second, **{cpu_rate:,.0f}** per "
        f"CPU second (goal ≤ {GOAL_S:.0f} s total: "
        f"{'met' if med['total_s'] <= GOAL_S else 'not met'} in wall time, "
        f"{'met' if med['cpu_s'] <= GOAL_S else 'not met'} in CPU time; aim ≥ 1,000,000 placements/s: "
        f"{'met' if cpu_rate >= 1e6 else 'not met'}).",
        "- Where the time goes: this search (objectives.throughput_batch, GPU count × accumulation; no interface "
        "answers with it since the throughput objective became the layout search, docs/layouts.md) builds a Job and "
        "a Placement per candidate and turns them into columns for the array theory (theory/vector.py "
        "theory_batch); the formulas themselves are numpy over all candidates, and so is the throughput "
        "(theory/throughput_grid.py). The layout search skips the per-candidate objects: section layout-speed.",
        f"- Machine load average (1 min) at start / end: {load[0]:.1f} / {load[1]:.1f} (2 shared cores).",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-report", action="store_true", help="print only; do not write docs/benchmarks.md")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    runs = [run_once() for _ in range(args.repeats)]
    text = report(runs, (load, os.getloadavg()[0]))
    print(text)
    if not args.no_report:
        update_section("docs/benchmarks.md", "throughput-speed", text, title="Benchmarks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
