"""Wall time of `autoconf-gpu sweep` over the 3,960-point ado space in a fresh process; section `sweep-speed`.

    python bench/sweep_speed.py [--runs 5] [--estimators hybrid theory]

Each run is a new Python process (`python -m autoconf.interfaces.cli sweep --input space.csv --output out.csv`), so the
time includes interpreter start-up, every import, loading (and manifest-checking) the model version,
the recommendation of all 3,960 points and writing the CSV. CPU s = user + system time of that process
(independent of other load on the machine, unlike wall time). Goal: ≤ 2 s wall with the hybrid estimator.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.estimators.learned.versions import list_versions
from autoconf.evaluation.space import space_frame
from bench._report import update_section

GOAL_S = 2.0


def one_run(estimator: str, space_csv: Path, out_csv: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh sweep process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "sweep", "--input", str(space_csv), "--output",
                    str(out_csv),
                    "--estimator", estimator], check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--estimators", nargs="+", default=["hybrid", "theory"])
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        space_csv, out_csv = Path(tmp) / "space.csv", Path(tmp) / "out.csv"
        space_frame().to_csv(space_csv, index=False)
        for estimator in args.estimators:
            one_run(estimator, space_csv, out_csv)  # warm the OS file cache; not counted
            runs = [one_run(estimator, space_csv, out_csv) for _ in range(args.runs)]
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            rows.append((estimator, statistics.median(walls), min(walls), max(walls), statistics.median(cpus)))
            print(f"{estimator}: median {rows[-1][1]:.2f} s wall, {rows[-1][4]:.2f} s CPU over {args.runs} runs")
    version = (list_versions() or ["none"])[-1]
    lines = [
        "## `autoconf-gpu sweep` over the 3,960-point ado space, fresh process",
        f"Command: `python bench/sweep_speed.py --runs {args.runs}` on {platform.machine()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} cores (shared with other jobs; load average "
        f"{os.getloadavg()[0]:.1f} at the end). Model version {version}. Each run: interpreter start-up, imports, "
        "manifest check and load of the version, the recommendation (1, 2, 4, 8, 16, ... 64 GPUs) of all 3,960 "
        "points (22 models × 5 sequence lengths × 6 batch sizes × 3 GPUs × 2 methods; the unanswerable models "
        "get can_recommend = 0 and the reason), CSV read and write. CPU = user + system s of the process. "
        f"Goal: ≤ {GOAL_S:.0f} s wall with the hybrid estimator.",
        "",
        "| estimator | median wall s | min wall s | max wall s | median CPU s | wall within goal | CPU within goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, med, low, high, cpu in rows:
        lines.append(f"| {name} | {med:.2f} | {low:.2f} | {high:.2f} | {cpu:.2f} | "
                     f"{'yes' if med <= GOAL_S else 'no'} | {'yes' if cpu <= GOAL_S else 'no'} |")
    lines += ["",
              "Wall time depends on what else runs on the machine (a load average above the core count stretches it); "
              "CPU time is what the sweep itself costs, i.e. its wall time on an idle machine.",
              "", "How: the theory of every candidate placement comes from one batch over columns (`theory/rows.py`, "
              "numpy per model; with the theory estimator the rows are read as columns too, `recommend/columns.py`); "
              "the learned corrections are numpy copies of the LightGBM trees (no AutoGluon import, "
              "one evaluation per batch, identical rows evaluated once); the search runs in waves (one batch call per "
              "candidate GPU count for up to 1,000 points, undecided points only); the CLI imports only the module "
              "of the verb it runs."]
    update_section("docs/benchmarks.md", "sweep-speed", "\n".join(lines), title="Benchmarks")
    print("wrote section sweep-speed of docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
