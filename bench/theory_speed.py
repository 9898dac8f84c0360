"""Theory sweep speed, this code against the code before the array theory, in the same run; section `theory-speed`.

    python bench/theory_speed.py [--runs 5] [--rows 1000000] [--baseline-rev REV]

Both code trees run in fresh Python processes on this machine (the baseline is ``git archive REV autoconf``,
by default the commit that added ``bench/theory_identity.py``, whose ``autoconf/`` is the code before this work):

* warm: ``recommend_frame(space_frame(), theory)`` over the 3,960-point seed space (the recommendation over GPU
  counts), after one untimed run in the same process; median of ``--runs``;
* cold: ``autoconf-gpu sweep --estimator theory`` over the same space as a CSV, a new process each run (start-up,
  imports, CSV read and write included); median of ``--runs``;
* large: ``recommend_frame`` over ``--rows`` random rows (seed 26: the seed models and GPUs plus an H100, 6 lengths,
  8 batch sizes, full/LoRA/QLoRA, checkpointing on/off), wall time and peak RSS of that process. The baseline runs
  ``--baseline-rows`` of the same rows (it answers about 2,700 rows/s, a million would take minutes); its line
  for ``--rows`` is that rate extrapolated, and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._report import update_section  # noqa: E402

GOALS = {"warm": 0.15, "cold": 1.2, "large_s": 20.0, "large_gib": 1.5}

WARM = """
import json, statistics, sys, time
from autoconf.estimators.contract import get_estimator
from autoconf.evaluation.space import space_frame
from autoconf.recommend.frame import recommend_frame
frame, theory = space_frame(), get_estimator("theory")
recommend_frame(frame, theory)
times = []
for _ in range(int(sys.argv[1])):
    start = time.perf_counter()
    recommend_frame(frame, theory)
    times.append(time.perf_counter() - start)
print(json.dumps(statistics.median(times)))
"""

LARGE = """
import json, resource, sys, time
import numpy as np, pandas as pd
from autoconf.estimators.contract import get_estimator
from autoconf.evaluation.space import GPUS, MODELS
from autoconf.recommend.frame import recommend_frame
n = int(sys.argv[1])
rng = np.random.default_rng(26)
frame = pd.DataFrame({
    "model_name": rng.choice(MODELS, n), "tokens_per_sample": rng.choice([512, 1024, 2048, 4096, 8192, 16384], n),
    "batch_size": rng.choice([1, 2, 4, 8, 16, 32, 64, 128], n),
    "gpu_model": rng.choice([*GPUS, "NVIDIA-H100-80GB-HBM3"], n), "method": rng.choice(["full", "lora", "qlora"], n),
    "gradient_checkpointing": rng.choice([True, False], n)})
start = time.perf_counter()
out = recommend_frame(frame, get_estimator("theory"))
seconds = time.perf_counter() - start
print(json.dumps([seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, int(out["can_recommend"].sum())]))
"""


def _python(tree: Path, code: str, *args: str) -> object:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=tree, check=True, capture_output=True,
                          text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cold(tree: Path, space: Path, out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "sweep", "--input", str(space), "--output",
                    str(out), "--estimator", "theory", "--force"], env=env, cwd=tree, check=True, capture_output=True)
    return time.perf_counter() - start


def baseline_rev() -> str:
    """The commit that added bench/theory_identity.py: its autoconf/ is the code before the array theory."""
    first = subprocess.run(["git", "log", "--format=%H", "--diff-filter=A", "--", "bench/theory_identity.py"],
                           cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    return first[-1] if first else "HEAD"


def _export(rev: str, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", rev, "autoconf"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--baseline-rows", type=int, default=20_000)
    parser.add_argument("--baseline-rev", default=None)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md as it is")
    args = parser.parse_args(argv)
    rev = args.baseline_rev or baseline_rev()
    with tempfile.TemporaryDirectory() as tmp:
        old = _export(rev, Path(tmp) / "baseline")
        space, out = Path(tmp) / "space.csv", Path(tmp) / "out.csv"
        subprocess.run([sys.executable, "-c", "from autoconf.evaluation.space import space_frame; "
                        f"space_frame().to_csv({str(space)!r}, index=False)"], env={**os.environ, "PYTHONPATH": str(ROOT)},
                       check=True)
        trees = {"this code": ROOT, f"baseline {rev[:12]}": old}
        result: dict[str, dict[str, float]] = {}
        for name, tree in trees.items():
            warm = float(_python(tree, WARM, str(args.runs)))  # type: ignore[arg-type]
            _cold(tree, space, out)  # the OS file cache, not counted
            cold = statistics.median(_cold(tree, space, out) for _ in range(args.runs))
            rows = args.rows if tree is ROOT else args.baseline_rows
            seconds, gib, _ = _python(tree, LARGE, str(rows))  # type: ignore[misc]
            result[name] = {"warm": warm, "cold": cold, "rows": rows, "large_s": seconds, "large_gib": gib}
            print(f"{name}: warm {warm:.3f} s, cold {cold:.2f} s, {rows:,} rows {seconds:.1f} s "
                  f"(peak RSS {gib:.2f} GiB)", flush=True)
    new, base = result["this code"], result[f"baseline {rev[:12]}"]
    base_large = base["large_s"] / base["rows"] * args.rows
    print(f"ratios (baseline / this code): warm {base['warm'] / new['warm']:.1f}x, cold {base['cold'] / new['cold']:.1f}x, "
          f"{args.rows:,} rows {base_large / new['large_s']:.1f}x (baseline extrapolated from {base['rows']:,} rows)")
    if not args.no_write:
        _write(args, rev, new, base, base_large)
    return 0


def _write(args: argparse.Namespace, rev: str, new: dict[str, float], base: dict[str, float], base_large: float) -> None:
    def ok(value: float, goal: float) -> str:
        return "yes" if value <= goal else "no"

    lines = [
        "## Theory sweep: the array theory against the code before it (same run, same machine)",
        f"Command: `python bench/theory_speed.py --runs {args.runs} --rows {args.rows}` on {platform.machine()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} cores shared with other jobs (load average "
        f"{os.getloadavg()[0]:.1f} at the end). Baseline: `git archive {rev[:12]} autoconf` (the scalar theory and "
        "its memoised vector companion), run in its own processes between this code's.",
        "",
        "| measurement | this code | baseline | baseline / this code | goal | within goal |",
        "|---|---|---|---|---|---|",
        f"| 3,960-point seed sweep with the GPU-count recommendation, warm process (median s) | {new['warm']:.3f} | "
        f"{base['warm']:.3f} | {base['warm'] / new['warm']:.1f}× | ≤ {GOALS['warm']} s | {ok(new['warm'], GOALS['warm'])} |",
        f"| `autoconf-gpu sweep --estimator theory` over it, fresh process (median wall s) | {new['cold']:.2f} | "
        f"{base['cold']:.2f} | {base['cold'] / new['cold']:.1f}× | ≤ {GOALS['cold']} s | {ok(new['cold'], GOALS['cold'])} |",
        f"| {args.rows:,} random rows, in process (s) | {new['large_s']:.1f} | {base_large:.0f} (extrapolated from "
        f"{int(base['rows']):,} rows: {base['large_s']:.1f} s) | {base_large / new['large_s']:.0f}× | ≤ {GOALS['large_s']:.0f} s | "
        f"{ok(new['large_s'], GOALS['large_s'])} |",
        f"| peak RSS of that process (GiB) | {new['large_gib']:.2f} | {base['large_gib']:.2f} at {int(base['rows']):,} rows "
        f"| | ≤ {GOALS['large_gib']} GiB | {ok(new['large_gib'], GOALS['large_gib'])} |",
        "",
        "How: one theory implementation over columns (autoconf/estimators/theory/rows.py: Job and Placement fields as "
        "numpy arrays, framework profiles and GPUs resolved per distinct value, branches as masks), run once per model "
        "of a batch; a sweep reads each distinct value of each column once (autoconf/estimators/columns.py) and puts "
        "every candidate GPU count of 50,000 rows into one theory batch (autoconf/recommend/columns.py); tokens/s of "
        "the chosen placements from throughput_grid. Outputs equal the baseline's: `python bench/theory_identity.py "
        "--check DIR` after `--write DIR` with the baseline (0 differences beyond 1e-9 relative; the seed sweep CSV "
        "byte for byte).",
    ]
    update_section("docs/benchmarks.md", "theory-speed", "\n".join(lines), title="Benchmarks")
    print("wrote section theory-speed of docs/benchmarks.md")


if __name__ == "__main__":
    raise SystemExit(main())
