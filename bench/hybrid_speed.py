"""Hybrid (and learned) sweep speed, this code against the code before their columns path, in the same run;
section `hybrid-speed` of docs/benchmarks.md.

    python bench/hybrid_speed.py [--runs 5] [--rows 100000] [--baseline-rows 20000] [--baseline-rev REV]

Both code trees run in fresh Python processes on this machine (the baseline is ``git archive REV autoconf``, by
default the commit before bench/learned_identity.py was added: one Job per row in learned and hybrid sweeps):

* warm: ``recommend_frame(space_frame(), hybrid)`` (and ``learned``) over the 3,960-point seed space, after one
  untimed run in the same process; median of ``--runs``, wall and CPU seconds of the process;
* cold: ``autoconf-gpu sweep --estimator hybrid`` over the same space as a CSV, a new process each run (start-up,
  imports, model load, CSV read and write included); median of ``--runs``, wall and CPU seconds of the process;
* large: ``recommend_frame(..., hybrid)`` over ``--rows`` random rows (bench/theory_speed.py's generator, seed 26),
  rows per second and peak RSS of that process; the baseline runs ``--baseline-rows`` of the same rows.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._report import update_section  # noqa: E402
from bench.theory_speed import LARGE as THEORY_LARGE  # noqa: E402
from bench.theory_speed import _export, _python  # noqa: E402

ESTIMATORS = ("hybrid", "learned")
# bench/theory_speed.py's warm run, with the CPU seconds of the process beside the wall seconds: on a shared
# machine the wall time of either tree also holds the time other jobs had the cores
WARM = """
import json, statistics, sys, time
from autoconf.estimators.contract import get_estimator
from autoconf.evaluation.space import space_frame
from autoconf.recommend.frame import recommend_frame
frame, estimator = space_frame(), get_estimator(sys.argv[2])
recommend_frame(frame, estimator)
wall, cpu = [], []
for _ in range(int(sys.argv[1])):
    start, used = time.perf_counter(), time.process_time()
    recommend_frame(frame, estimator)
    wall.append(time.perf_counter() - start)
    cpu.append(time.process_time() - used)
print(json.dumps([statistics.median(wall), statistics.median(cpu)]))
"""


# bench/theory_speed.py's random rows through the hybrid, CPU seconds beside the wall seconds
LARGE = THEORY_LARGE.replace('get_estimator("theory")', 'get_estimator("hybrid")').replace(
    "start = time.perf_counter()", "start, used = time.perf_counter(), time.process_time()").replace(
    "print(json.dumps([seconds,", "print(json.dumps([seconds, time.process_time() - used,")


def _cold(tree: Path, space: Path, out: Path, estimator: str) -> tuple[float, float]:
    """(wall s, CPU s) of one ``autoconf-gpu sweep`` process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "sweep", "--input", str(space), "--output",
                    str(out), "--estimator", estimator, "--force"], env=env, cwd=tree, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def baseline_rev() -> str:
    """The parent of the commit that added bench/learned_identity.py: learned and hybrid sweeps one Job per row."""
    first = subprocess.run(["git", "log", "--format=%H", "--diff-filter=A", "--", "bench/learned_identity.py"],
                           cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    rev = f"{first[-1]}~1" if first else "HEAD"
    return subprocess.run(["git", "rev-parse", rev], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def measure(tree: Path, space: Path, out: Path, runs: int, rows: int) -> dict[str, float]:
    result: dict[str, float] = {}
    for name in ESTIMATORS:
        result[f"{name}_warm"], result[f"{name}_warm_cpu"] = _python(tree, WARM, str(runs), name)  # type: ignore[misc]
        _cold(tree, space, out, name)  # the OS file cache, not counted
        cold = [_cold(tree, space, out, name) for _ in range(runs)]
        result[f"{name}_cold"] = statistics.median(w for w, _ in cold)
        result[f"{name}_cold_cpu"] = statistics.median(c for _, c in cold)
    seconds, cpu, gib, _ = _python(tree, LARGE, str(rows))  # type: ignore[misc]
    result |= {"rows": rows, "large_s": seconds, "large_gib": gib, "rows_per_s": rows / seconds,
               "rows_per_cpu_s": rows / cpu}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--baseline-rows", type=int, default=20_000)
    parser.add_argument("--baseline-rev", default=None)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md as it is")
    args = parser.parse_args(argv)
    rev = args.baseline_rev or baseline_rev()
    with tempfile.TemporaryDirectory() as tmp:
        old = _export(rev, Path(tmp) / "baseline")
        (old / "AutoGluonModels").symlink_to(ROOT / "AutoGluonModels")  # the same learned models for both trees
        space, out = Path(tmp) / "space.csv", Path(tmp) / "out.csv"
        subprocess.run([sys.executable, "-c", "from autoconf.evaluation.space import space_frame; "
                        f"space_frame().to_csv({str(space)!r}, index=False)"],
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
        new = measure(ROOT, space, out, args.runs, args.rows)
        print("this code:", new, flush=True)
        base = measure(old, space, out, args.runs, args.baseline_rows)
        print("baseline:", base, flush=True)
    for key in ("hybrid_warm", "hybrid_warm_cpu", "hybrid_cold", "hybrid_cold_cpu", "learned_warm", "learned_warm_cpu",
                "learned_cold", "learned_cold_cpu"):
        print(f"{key}: {new[key]:.3f} s vs {base[key]:.3f} s ({base[key] / new[key]:.1f}x)")
    for key in ("rows_per_s", "rows_per_cpu_s"):
        print(f"{key}: {new[key]:,.0f} vs {base[key]:,.0f} ({new[key] / base[key]:.1f}x)")
    if not args.no_write:
        _write(args, rev, new, base)
    return 0


def _write(args: argparse.Namespace, rev: str, new: dict[str, float], base: dict[str, float]) -> None:
    def row(label: str, key: str, digits: int) -> str:
        return (f"| {label} | {new[key]:.{digits}f} | {base[key]:.{digits}f} | {base[key] / new[key]:.1f}× |")

    lines = [
        "## Hybrid and learned sweeps: the columns path against the code before it (same run, same machine)",
        f"Command: `python bench/hybrid_speed.py --runs {args.runs} --rows {args.rows} --baseline-rows "
        f"{args.baseline_rows}` on {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores "
        f"shared with other jobs (load average {os.getloadavg()[0]:.1f} at the end). Baseline: `git archive {rev[:12]} "
        "autoconf` (one Job per row, recommend_batch's waves), run in its own processes after this code's. Learned "
        "models: the installed default version, numpy fast path.",
        "",
        "| measurement | this code | baseline | speed-up |",
        "|---|---|---|---|",
        row("3,960-point seed sweep, `hybrid`, warm process (median wall s)", "hybrid_warm", 3),
        row("the same, CPU s of the process", "hybrid_warm_cpu", 3),
        row("`autoconf-gpu sweep --estimator hybrid` over it, fresh process (median wall s)", "hybrid_cold", 2),
        row("the same, CPU s of the process", "hybrid_cold_cpu", 2),
        row("3,960-point seed sweep, `learned`, warm process (median wall s)", "learned_warm", 3),
        row("the same, CPU s of the process", "learned_warm_cpu", 3),
        row("`autoconf-gpu sweep --estimator learned` over it, fresh process (median wall s)", "learned_cold", 2),
        row("the same, CPU s of the process", "learned_cold_cpu", 2),
        f"| random rows, `hybrid`, in process (rows/s; this code {int(new['rows']):,} rows in {new['large_s']:.1f} s, "
        f"baseline {int(base['rows']):,} rows in {base['large_s']:.1f} s) | {new['rows_per_s']:,.0f} | "
        f"{base['rows_per_s']:,.0f} | {new['rows_per_s'] / base['rows_per_s']:.1f}× |",
        f"| the same, rows per CPU second of the process | {new['rows_per_cpu_s']:,.0f} | {base['rows_per_cpu_s']:,.0f} | "
        f"{new['rows_per_cpu_s'] / base['rows_per_cpu_s']:.1f}× |",
        f"| peak RSS of that process (GiB) | {new['large_gib']:.2f} | {base['large_gib']:.2f} | |",
        "",
        "How: a learned or hybrid sweep reads the rows as columns (autoconf/estimators/columns.py) and runs the theory "
        "over columns once per batch of candidates (autoconf/recommend/columns.py); the features of the learned models "
        "are built from those columns (learned/features.py `feature_columns`: Python per distinct model, GPU and LoRA "
        "target list), each predictor runs once per batch, and the correction, the hybrid's gate and oom_risk are "
        "array arithmetic (learned/estimator.py `memory_columns`). Outputs equal the baseline's: `python "
        "bench/learned_identity.py --check DIR` after `--write DIR` with the baseline (0 differences beyond 1e-9 "
        "relative on every measured row, the seed sweep through the CLI, 500 random jobs and strict mode).",
    ]
    update_section("docs/benchmarks.md", "hybrid-speed", "\n".join(lines), title="Benchmarks")
    print("wrote section hybrid-speed of docs/benchmarks.md")


if __name__ == "__main__":
    raise SystemExit(main())
