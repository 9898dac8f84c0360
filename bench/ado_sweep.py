"""Time the 3,960-point min-GPU sweep through ado (grid operator and random_walk) and the direct path.

ado paths, each in a fresh local context (XDG_CONFIG_HOME in a temporary directory): ``ado create
space -f sweep/space.yaml``, ``ado create operation`` with ``sweep/operation_grid.yaml`` (autoconf's
``autoconf_grid`` operator) or ``sweep/operation.yaml`` (ado's random_walk, the baseline), and the
CSV export. Direct path: ``autoconf-gpu sweep --input CSV --output CSV`` over the same points, and
the in-process loop over the decorated experiment. Every path must give the same can_recommend /
gpus / workers at every point; the script checks that and writes the section ``ado-sweep`` of
docs/benchmarks.md.

    python bench/ado_sweep.py                          # grid + full random_walk baseline (~15 min on 2 cores)
    python bench/ado_sweep.py --skip-baseline          # grid and direct paths only (~1 min)
    python bench/ado_sweep.py --baseline-points 400    # random_walk on the first ~400 points only
    python bench/ado_sweep.py --points 200             # quick look at a cut space, no report written
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import itertools
import os
import platform
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autoconf.defaults import ADO_FRAMEWORK  # noqa: E402
from bench._ado_env import ado_env  # noqa: E402
from bench._report import update_section  # noqa: E402

BIN = Path(sys.executable).parent
INPUTS = ["model_name", "tokens_per_sample", "batch_size", "gpu_model", "method"]
ANSWERS = ["can_recommend", "gpus", "workers"]
# ado prints the operation's status events as YAML: "- event: started\n  recorded_at: '...'".
EVENT = re.compile(r"event: (\w+)\n(?:\s+exit_state: \w+\n)?(?:\s+message: [^\n]*\n)?\s+recorded_at: '([^']+)'")


def space_points(space_file: Path) -> pd.DataFrame:
    """Every point of an ado space YAML whose dimensions are all given by value lists."""
    space = yaml.safe_load(space_file.read_text())
    dims = {p["identifier"]: p["propertyDomain"]["values"] for p in space["entitySpace"]}
    return pd.DataFrame(list(itertools.product(*dims.values())), columns=list(dims))


def _run(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def _operation_seconds(stdout: str) -> float:
    """started -> finished of the operation, from ado's own status events."""
    events = {name: dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) for name, stamp in EVENT.findall(stdout)}
    return (events["finished"] - events["started"]).total_seconds()


def _space_file(work: Path, points: int | None) -> Path:
    """sweep/space.yaml, or a copy cut to the first values of model_name so it holds ~points points."""
    if points is None:
        return ROOT / "sweep" / "space.yaml"
    space = yaml.safe_load((ROOT / "sweep" / "space.yaml").read_text())
    models = space["entitySpace"][0]["propertyDomain"]["values"]
    per_model = len(space_points(ROOT / "sweep" / "space.yaml")) // len(models)
    space["entitySpace"][0]["propertyDomain"]["values"] = models[: max(1, points // per_model)]
    work.mkdir(parents=True, exist_ok=True)
    target = work / f"space-{points}.yaml"
    target.write_text(yaml.safe_dump(space), encoding="utf-8")
    return target


def request_times(database: Path) -> list[dt.datetime]:
    """When ado recorded each measurement request, from the local context's SQLite sample store."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        rows = db.execute("select timestamp from sqlsource_default_measurement_requests order by insert_id")
        return [dt.datetime.fromisoformat(str(stamp)) for (stamp,) in rows]


def tenths(stamps: list[dt.datetime]) -> list[float]:
    """Seconds ado took for each successive tenth of the points (its cost per point grows with the store)."""
    cuts = [stamps[round(i * (len(stamps) - 1) / 10)] for i in range(11)]
    return [(b - a).total_seconds() for a, b in itertools.pairwise(cuts)]


def time_ado(space_file: Path, operation_file: str, batch_size: int, work: Path) -> dict[str, Any]:
    """space + operation + CSV export in a fresh context under ``work``; wall seconds of each and the CSV."""
    work.mkdir(parents=True, exist_ok=True)
    env = ado_env(work)
    operation = yaml.safe_load((ROOT / "sweep" / operation_file).read_text())
    operation["operation"]["parameters"]["batchSize"] = batch_size
    (work / "operation.yaml").write_text(yaml.safe_dump(operation), encoding="utf-8")
    space_s, _ = _run([str(BIN / "ado"), "create", "space", "-f", str(space_file)], env, work)
    op_s, stdout = _run([str(BIN / "ado"), "create", "operation", "-f", str(work / "operation.yaml"),
                         "--use-latest", "space"], env, work)
    export_s, _ = _run([str(BIN / "ado"), "show", "measurements", "space", "--use-latest", "-o", "csv",
                        "--output-file", str(work / "ado.csv")], env, work)
    return {"space_s": space_s, "operation_s": op_s, "operation_inner_s": _operation_seconds(stdout),
            "export_s": export_s, "frame": pd.read_csv(work / "ado.csv"),
            "tenths": tenths(request_times(work / "xdg" / "ado" / "databases" / "local.db"))}


def time_direct(points: pd.DataFrame, estimator: str, work: Path) -> dict[str, float | pd.DataFrame]:
    # like for like: the ado experiments default to ado's own stack (fms-hf-tuning); the CLI's default is
    # hf-trainer, so the sweep input names the stack explicitly; and min_gpu_recommender's max_gpus is IBM's 8
    # (properties.IBM_MAX_GPUS) where the CLI's is 64
    points.assign(framework=ADO_FRAMEWORK).to_csv(work / "points.csv", index=False)
    cli_s, _ = _run([str(BIN / "autoconf-gpu"), "sweep", "--input", str(work / "points.csv"), "--output",
                     str(work / "direct.csv"), "--estimator", estimator, "--max-gpus", "8"], dict(os.environ), work)
    from autoconf.interfaces.ado import experiments  # imported here so its import time is not in the CLI number

    start = time.perf_counter()
    rows = [experiments.min_gpu_recommender(**row, estimator=estimator) for row in points.to_dict(orient="records")]
    loop_s = time.perf_counter() - start
    loop = pd.concat([points, pd.DataFrame(rows)[ANSWERS]], axis=1)
    return {"cli_s": cli_s, "loop_s": loop_s, "frame": pd.read_csv(work / "direct.csv"), "loop": loop}


def agreement(left: pd.DataFrame, right: pd.DataFrame) -> tuple[int, int]:
    """Rows of ``left`` whose can_recommend/gpus/workers equal ``right``'s at the same point."""
    merged = left[INPUTS + ANSWERS].merge(right[INPUTS + ANSWERS], on=INPUTS, suffixes=("_l", "_r"))
    left_values, right_values = merged[[f"{a}_l" for a in ANSWERS]], merged[[f"{a}_r" for a in ANSWERS]]
    same = (left_values.to_numpy() == right_values.to_numpy()).all(axis=1)
    return int(same.sum()), len(merged)


def _rows(label: str, run: dict[str, Any]) -> list[tuple[str, int, float]]:
    n = len(run["frame"])
    total = run["space_s"] + run["operation_s"] + run["export_s"]
    return [(f"ado + {label}: create space + operation + CSV export (wall)", n, total),
            (f"ado + {label}: `ado create operation` alone (wall, incl. Ray start/stop)", n, run["operation_s"]),
            (f"ado + {label}: operation started -> finished (ado's own events)", n, run["operation_inner_s"])]


def baseline_note(n: int, base: dict[str, Any] | None) -> str:
    """What the random_walk number means, with an extrapolation when it ran on a subset."""
    if base is None:
        return ("- random_walk baseline skipped (`--skip-baseline`); measured earlier on this machine: ~806 s for "
                "the 3,960 points (docs/ado.md).")
    m = len(base["frame"])
    tenths = ", ".join(f"{t:.0f}" for t in base["tenths"])
    text = f"- random_walk's seconds per tenth of its {m} points, in order: {tenths} (the cost per point grows)."
    if m < n:
        per_point = base["operation_inner_s"] / m
        text += (f" It ran on {m} of the {n} points only: scaling its {per_point * 1000:.0f} ms per point linearly "
                 f"gives ≥ {per_point * n:.0f} s for all {n}, a lower bound, since each point's sample-store lookup "
                 "reads every entity already stored (quadratic in the points).")
    return text


def report(n: int, estimator: str, grid: dict[str, Any], base: dict[str, Any] | None, direct: dict[str, Any],
           agree: dict[str, tuple[int, int]], load: tuple[float, float]) -> str:
    rows = [*_rows("autoconf_grid", grid), *(_rows("random_walk", base) if base else []),
            ("direct: `autoconf-gpu sweep --input --output` (wall, incl. start-up)", n, direct["cli_s"]),
            ("direct: in-process loop over min_gpu_recommender", n, direct["loop_s"])]
    lines = [
        f"## ado sweep: {n:,}-point min-GPU space, grid operator vs random_walk vs direct batch path", "",
        f"{n} points (sweep/space.yaml), estimator `{estimator}`; grid: sweep/operation_grid.yaml (batchSize 500); "
        f"random_walk: sweep/operation.yaml (batchSize 4); {os.cpu_count()} CPU cores "
        f"({platform.processor() or platform.machine()}), Python {platform.python_version()}, "
        f"ado-core {importlib.metadata.version('ado-core')}, ray {importlib.metadata.version('ray')}; "
        f"{dt.date.today().isoformat()}. Command: `python bench/ado_sweep.py`.", "",
        "| path | points | seconds | points/s |", "|---|---:|---:|---:|",
        *[f"| {name} | {m} | {sec:.1f} | {m / sec:.0f} |" for name, m, sec in rows], "",
        *[f"- same can_recommend/gpus/workers, {k}: {a} of {b} points" for k, (a, b) in agree.items()],
        baseline_note(n, base),
        f"- Machine load average (1 min) at start / end: {load[0]:.1f} / {load[1]:.1f} "
        "(the 2 cores are shared with other jobs, so timings are upper bounds).",
        "- Fixed cost of every `ado create operation`, whatever the operator: local Ray start (~8 s here), ado's "
        "1 s + 10 s waits at shutdown; attach to a running Ray (`RAY_ADDRESS`, docs/ado.md) to skip the start.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, help="cut the space to about this many points (no report written)")
    parser.add_argument("--skip-baseline", action="store_true", help="do not time random_walk")
    parser.add_argument("--baseline-points", type=int, help="time random_walk on about this many points only")
    args = parser.parse_args(argv)
    from autoconf.interfaces.ado.experiments import DEFAULT_ESTIMATOR_NAME as estimator

    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ado-sweep-") as tmp:
        work = Path(tmp)
        space_file = _space_file(work, args.points)
        points = space_points(space_file)
        grid = time_ado(space_file, "operation_grid.yaml", 500, work / "grid")
        base = None
        if not args.skip_baseline:
            subset = args.baseline_points if args.baseline_points and args.baseline_points < len(points) else None
            base_space = _space_file(work / "rw", subset) if subset else space_file
            base = time_ado(base_space, "operation.yaml", 4, work / "rw")
        direct = time_direct(points, estimator, work)
    agree = {"grid operator vs `autoconf-gpu sweep`": agreement(grid["frame"], direct["frame"]),
             "grid operator vs in-process loop": agreement(grid["frame"], direct["loop"])}
    if base is not None:
        agree["random_walk vs grid operator"] = agreement(base["frame"], grid["frame"])
    text = report(len(points), estimator, grid, base, direct, agree, (load_start, os.getloadavg()[0]))
    print(text)
    if args.points is None:
        update_section("docs/benchmarks.md", "ado-sweep", text, title="Benchmarks")
    ok = all(a == b == len(points) for k, (a, b) in agree.items() if "random_walk" not in k)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
