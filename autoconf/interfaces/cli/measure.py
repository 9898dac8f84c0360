"""``autoconf-gpu measure``: a bounded grid of probes, one subprocess per point, rows appended to a CSV.

A grid file (YAML) holds ``name``, ``max_points`` (the grid is refused above it), ``time_limit_s``
(per point), ``settings`` (probe flags shared by every point) and ``grid`` (or a list ``grids``) of
flag -> list of values whose product gives the points. Keys are ``autoconf-gpu probe`` flags with
``_`` for ``-``. Each point runs ``autoconf-gpu probe ... --json`` in its own process (a crash,
a hang or a CUDA OOM cannot spoil the next point) and appends one row (columns: ``ROW_COLUMNS``).

Resumable: points whose settings are already in the output file are skipped. An OOM is a row; so is
a time-out or a crash (``failed``, with the reason). Points at larger tokens *and* batch than an OOM of
the same other settings are not run (memory only grows with both), unless ``--no-skip-above-oom``.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypedDict

import yaml

from autoconf.errors import InvalidInputError
from autoconf.interfaces.cli.probe import add_arguments, job_from_args, settings_from_args
from autoconf.interfaces.probe.runner import (
    ROW_COLUMNS,
    SOURCE,
    ProbeResult,
    ProbeSettings,
    data_row,
    environment,
    source_ref,
)
from autoconf.schema import Job

log = logging.getLogger(__name__)

DEFAULT_MAX_POINTS = 200  # a cap that a grid file must raise on purpose
DEFAULT_TIME_LIMIT_S = 600.0  # import + random init + steps of an 8B model take ~1-2 min on one H100
# Columns that identify a point (resume); the OOM boundary compares points equal on all but the last two.
KEY_COLUMNS = ("gpu_model", "model_name", "method", "dtype", "gradient_accumulation_steps",
               "gradient_checkpointing", "attention", "lora_r", "lora_alpha", "lora_target_modules",
               "optimizer", "optimizer_impl", "loss_kernel", "tokens_per_sample", "per_device_batch_size")
TOP_KEYS = ("name", "max_points", "time_limit_s", "settings", "grid", "grids")


class GridHeader(TypedDict):
    """A grid file's header: its name, its cap on points and the per-point time limit."""

    name: str
    max_points: int
    time_limit_s: float


RUNNER = "import sys; from autoconf.interfaces.cli import main; sys.exit(main(sys.argv[1:]))"


class _GridParser(argparse.ArgumentParser):
    """The probe's flags, with errors raised as typed errors naming the grid."""

    def error(self, message: str) -> NoReturn:
        raise InvalidInputError("grid", f"points must be valid probe flags; got {message}")


def _probe_parser() -> _GridParser:
    parser = _GridParser(prog="autoconf-gpu probe", add_help=False)
    add_arguments(parser)
    return parser


GRID_KEYS = tuple(a.dest for a in _probe_parser()._actions)


@dataclass(frozen=True)
class Point:
    """One grid point: its probe flags, the Job they describe, how it is probed and the GPU it will run on."""

    flags: dict[str, object]
    job: Job
    settings: ProbeSettings
    gpu_model: str

    @property
    def argv(self) -> list[str]:
        return point_argv(self.flags)

    def key(self) -> tuple[str, ...]:
        return row_key(data_row(self.job, None, self.gpu_model, ""))


def point_argv(flags: dict[str, object]) -> list[str]:
    """Probe command-line flags of a point (booleans as --x / --no-x, lists comma-joined)."""
    argv: list[str] = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, (list, tuple)):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def row_key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row.get(c, "") for c in KEY_COLUMNS)


def load_grid(path: Path) -> tuple[GridHeader, list[dict[str, object]]]:
    """The grid file's header (name, max_points, time_limit_s) and its points' flags, small values first."""
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInputError("grid", f"must be a readable YAML file; got {path}: {exc}") from exc
    if not isinstance(spec, dict):
        raise InvalidInputError("grid", f"must be a YAML mapping; got {type(spec).__name__}")
    unknown = set(spec) - set(TOP_KEYS)
    if unknown:
        raise InvalidInputError("grid", f"top-level keys must be among {', '.join(TOP_KEYS)}; got {sorted(unknown)}")
    grids = spec.get("grids") or [spec.get("grid") or {}]
    settings = spec.get("settings") or {}
    points = [p for grid in grids for p in _expand({**settings, **grid})]
    header: GridHeader = {"name": str(spec.get("name", path.stem)),
                          "max_points": int(spec.get("max_points", DEFAULT_MAX_POINTS)),
                          "time_limit_s": float(spec.get("time_limit_s", DEFAULT_TIME_LIMIT_S))}
    return header, points


def _expand(values: dict[str, object]) -> list[dict[str, object]]:
    unknown = set(values) - set(GRID_KEYS)
    if unknown:
        raise InvalidInputError("grid", f"keys must be probe flags ({', '.join(GRID_KEYS)}); got {sorted(unknown)}")
    # a list is an axis; lora_target_modules sets are strings ("q_proj,v_proj", "all-linear")
    lists = {k: (v if isinstance(v, list) else [v]) for k, v in values.items()}
    # tokens then batch innermost and ascending: the OOM boundary is met from below
    order = [k for k in lists if k not in ("tokens_per_sample", "per_device_batch")]
    for k in ("tokens_per_sample", "per_device_batch"):
        if k in lists:
            order.append(k)
            lists[k] = sorted(lists[k])
    return [dict(zip(order, combo, strict=True)) for combo in itertools.product(*(lists[k] for k in order))]


def resolve(flags: dict[str, object], gpu_models: dict[str, str]) -> Point:
    """Validate a point with the probe's own parser and fill every default."""
    args = _probe_parser().parse_args(point_argv(flags))
    if args.device not in gpu_models:
        gpu_models[args.device] = _expected_gpu(args.device)
    return Point(flags, job_from_args(args), settings_from_args(args), gpu_models[args.device])


def _expected_gpu(device: str) -> str:
    return environment("cuda" if device != "cpu" else "cpu")["gpu_model"]


def read_rows(out: Path) -> list[dict[str, str]]:
    """Rows already in the output file (none if it does not exist); refuses a file of another table."""
    if not out.is_file() or out.stat().st_size == 0:
        return []
    with out.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    # The probe writes the measurement table's own columns, so a probe table is told apart by its rows: every
    # one written by the probe. Appending to another table (data/measurements.csv) is refused.
    if tuple(reader.fieldnames or ()) != ROW_COLUMNS or any(r.get("source") != SOURCE for r in rows):
        raise InvalidInputError("out", f"must be a probe table (rows written by `autoconf-gpu measure`); got {out}")
    return rows


def append_row(out: Path, row: dict[str, str]) -> None:
    """Append one row now (a crash of measure itself keeps every finished point)."""
    new = not out.is_file() or out.stat().st_size == 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=ROW_COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow(row)


def above_oom(key: tuple[str, ...], ooms: list[tuple[str, ...]]) -> bool:
    """True if an OOM of the same settings had no more tokens and no larger batch than this point."""
    return any(oom[:-2] == key[:-2] and int(oom[-2]) <= int(key[-2]) and int(oom[-1]) <= int(key[-1])
               for oom in ooms)


def run_point(point: Point, time_limit_s: float) -> tuple[ProbeResult | None, str]:
    """``autoconf-gpu probe ... --json`` in a new process group; (result, reason when there is none)."""
    command = [sys.executable, "-c", RUNNER, "probe", *point.argv, "--json", "--estimators", ""]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=time_limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the probe and its nvidia-smi poller
        proc.communicate()
        return None, f"timeout: no result within {time_limit_s:g} s (process killed)"
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return ProbeResult(**json.loads(line)["result"]), ""
    tail = [t for t in stderr.splitlines() if t.strip()]
    if proc.returncode < 0:
        killer = " (the kernel's OOM killer?)" if proc.returncode == -9 else ""
        return None, f"killed by signal {-proc.returncode}" + killer
    return None, (tail[-1] if tail else f"exit code {proc.returncode} without a result")[:500]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("measure", help="run a bounded grid of probes, one process per point, rows to a CSV")
    p.add_argument("--grid", required=True, type=Path, help="grid YAML (see examples/grid_cpu.yaml)")
    p.add_argument("--out", required=True, type=Path, help="CSV to append to, e.g. data/probe_h100.csv")
    p.add_argument("--time-limit-s", type=float, help="per point (default: the grid's time_limit_s)")
    p.add_argument("--max-points", type=int, help="raise the grid's max_points cap")
    p.add_argument("--no-skip-above-oom", dest="skip_above_oom", action="store_false",
                   help="also run points dominated by an OOM")
    p.add_argument("--dry-run", action="store_true", help="list the points and exit")
    p.add_argument("--in-process", action="store_true",
                   help="one process for the whole grid: each model built once, its points run in turn (a short GPU lease)")
    p.add_argument("--budget-s", type=float,
                   help="with --in-process: stop starting points after this many seconds (rows so far are kept)")


def run(args: argparse.Namespace) -> int:
    header, flags = load_grid(args.grid)
    cap = args.max_points or header["max_points"]
    if len(flags) > cap:
        raise InvalidInputError("grid", f"must have at most max_points = {cap} points; got {len(flags)} "
                                "(narrow it or pass --max-points)")
    gpus: dict[str, str] = {}
    points = [resolve(f, gpus) for f in flags]
    if args.dry_run:
        for point in points:
            sys.stdout.write(shlex.join(["autoconf-gpu", "probe", *point.argv]) + "\n")
        return 0
    existing = read_rows(args.out)
    done = {row_key(r) for r in existing}
    ooms = [row_key(r) for r in existing if r["status"] == "oom"]
    if args.in_process:
        return _run_in_process(args, header["name"], [p for p in points if p.key() not in done
                                                      and not (args.skip_above_oom and above_oom(p.key(), ooms))])
    if args.budget_s is not None:
        raise InvalidInputError("budget_s", "applies to --in-process only; got it without --in-process")
    limit = args.time_limit_s or header["time_limit_s"]
    counts = {"ok": 0, "oom": 0, "failed": 0, "already": 0, "above_oom": 0}
    for index, point in enumerate(points, 1):
        key = point.key()
        if key in done:
            counts["already"] += 1
            continue
        if args.skip_above_oom and above_oom(key, ooms):
            counts["above_oom"] += 1
            continue
        row = _measure(point, limit, f"{SOURCE}/{header['name']}")
        append_row(args.out, row)
        done.add(key)
        counts[row["status"]] += 1
        if row["status"] == "oom":
            ooms.append(key)
        sys.stderr.write(f"[{index}/{len(points)}] {shlex.join(point.argv)}: {row['status']} {row['reason']}\n")
    sys.stderr.write(
        f"{len(points)} points: measured {counts['ok'] + counts['oom'] + counts['failed']} (ok {counts['ok']}, "
        f"oom {counts['oom']}, failed {counts['failed']}); {counts['already']} already in {args.out}; "
        f"{counts['above_oom']} skipped above an OOM boundary\n")
    return 0


def _measure(point: Point, limit: float, campaign: str) -> dict[str, str]:
    """Run one point and turn whatever happened into its row."""
    command = shlex.join(["autoconf-gpu", "probe", *point.argv, "--json", "--estimators", ""])
    result, reason = run_point(point, limit)
    if result is None:
        env = environment("cpu" if point.gpu_model == "cpu" else "cuda")
        return data_row(point.job, None, point.gpu_model, source_ref(command, env), campaign, reason)
    return data_row(point.job, result, result.gpu_model, source_ref(command, result.environment), campaign)


def _run_in_process(args: argparse.Namespace, name: str, points: list[Point]) -> int:
    """The whole grid in this process (autoconf.interfaces.probe.campaign); a row per point as it ends."""
    if args.budget_s is not None and not args.budget_s > 0:
        raise InvalidInputError("budget_s", f"must be a positive number of seconds; got {args.budget_s}")
    settings = {p.settings for p in points}
    if len(settings) > 1:
        raise InvalidInputError("grid", "with --in-process every point must share device, warmup_steps, probe_steps, "
                                "seed and host_memory_limit_gib (one process runs them all)")
    if not points:
        sys.stderr.write(f"no point left to measure in {args.out}\n")
        return 0
    from autoconf.interfaces.probe.campaign import run_campaign  # torch: only now

    command = shlex.join(["autoconf-gpu", "measure", "--grid", str(args.grid), "--in-process"]
                         + (["--budget-s", f"{args.budget_s:g}"] if args.budget_s is not None else []))
    campaign = f"{SOURCE}/{name}"

    def emit(job: Job, result: ProbeResult) -> None:
        row = data_row(job, result, result.gpu_model, source_ref(command, result.environment), campaign)
        append_row(args.out, row)
        sys.stderr.write(f"{job.model} {job.method} {job.tokens_per_sample}x{job.batch_size} "
                         f"ckpt={int(job.gradient_checkpointing)} {job.attention} {job.effective_loss_kernel}: "
                         f"{result.status} {row['peak_memory_bytes']} {row['tokens_per_second']} {result.reason[:160]}\n")

    counts = run_campaign([p.job for p in points], settings.pop(), args.budget_s, emit)
    for line in counts.skipped:
        sys.stderr.write(f"skipped {line}\n")
    sys.stderr.write(f"{len(points)} points: ok {counts.ok}, oom {counts.oom}, failed {counts.failed}; skipped "
                     f"{counts.above_oom} above an OOM boundary, {counts.out_of_time} out of time, {counts.unbuilt} in groups "
                     "whose model could not be built\n")
    return 0
