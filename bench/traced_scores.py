"""Traced against theory on every scored measured row whose stack the tracer can run, in each row's own metric.

    python bench/traced_scores.py [--rows data/measurements.csv data/probe/*.csv] [--cached-only] [--write]

Rows: the scored ok/oom rows of data/measurements.csv and the rows of data/probe/ (our own H100 rows, all
scored). Each row is answered by theory and by traced; traced says how it answered (its notes), which sorts the
rows into: **step** (one GPU: a traced training step), **rank** (several GPUs: one rank traced on a fake
process group), **replica** (several GPUs with a strategy or stack the ranks do not follow: one traced replica,
sharded by theory) and **theory** (untraceable: the note says why; counted apart, never as traced). Memory is
compared in the row's own metrics (torch allocated / reserved, the NVML or nvidia-smi device figure;
``autoconf.evaluation.accuracy.PREDICTED_FOR_METRIC``); on oom rows the OOM gate is checked
(``oom_risk <= defaults.MAX_OOM_RISK`` = "fits" = dangerous). Both estimators are scored on the same rows.

Traces are cached (``$AUTOCONF_CACHE/traced``); ``--cached-only`` answers a row by traced only where its trace is
cached (the rest are listed as not traced), so a report can be rendered inside a CPU budget and resumed later.
``--write`` puts the Markdown into section ``scores`` of docs/traced_vs_theory.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.defaults import MAX_OOM_RISK  # noqa: E402
from autoconf.evaluation.accuracy import (  # noqa: E402
    PREDICTED_FOR_METRIC,
    estimate_rows,
    markdown_table,
    measured_metric,
    percent_errors,
    scorable,
    stats_of,
)
from autoconf.evaluation.data import load_measurements  # noqa: E402
from bench._report import ROOT, update_section  # noqa: E402

ROWS = [ROOT / "data" / "measurements.csv", *sorted((ROOT / "data" / "probe").glob("*.csv"))]
METRICS = {"torch_allocated": "allocated", "torch_reserved": "reserved", "nvidia_smi": "device",
           "stated": "stated peak", "percent_of_device": "share of device"}
REPORT = ROOT / "docs" / "traced_vs_theory.md"


def load(paths: list[Path]) -> pd.DataFrame:
    frames = []
    for path in paths:
        frame = load_measurements(path)
        if "probe" in path.parts:
            frame = frame.assign(scored=1)
        frames.append(frame.assign(table=path.parent.name if "probe" in path.parts else path.stem))
    frame = pd.concat(frames, ignore_index=True)
    return scorable(frame, statuses=("ok", "oom"))


def mode_of(answer: object) -> tuple[str, str]:
    """How traced answered one row: (mode, reason where it fell back)."""
    if isinstance(answer, str):  # traced refuses an untraceable job with a one-line reason
        return ("theory", answer.split(": ", 2)[-1][:120]) if "traced cannot run" in answer else ("refused", answer[:120])
    notes = answer.memory.notes  # type: ignore[attr-defined]
    for note in notes:
        if note.startswith("traced:") and note.endswith("theory estimate"):
            return "theory", note.removeprefix("traced: ").removesuffix("; theory estimate")[:120]
    if any(n.startswith("traced: rank") for n in notes):
        return "rank", ""
    if any("one replica, sharded by theory" in n for n in notes) or answer.placement.number_gpus > 1:  # type: ignore[attr-defined]
        return "replica", ""
    return "step", ""


def cached_only(rows: pd.DataFrame) -> pd.Series:
    """Rows whose traced answer needs no new fit (cached, untraceable, or one of the few rank-traced rows)."""
    from autoconf.catalog import get_architecture
    from autoconf.catalog.families import REMOTE_CODE
    from autoconf.estimators.theory.memory import micro_batch
    from autoconf.estimators.traced.cache import cache_dir, cache_key
    from autoconf.estimators.traced.estimator import _regime, trace_spec, untraceable_reason
    from autoconf.estimators.traced.ranks import rank_unsupported
    from autoconf.evaluation.data import row_to_inputs

    ready = []
    for _, row in rows.iterrows():
        try:
            job, placement = row_to_inputs(row)
            arch = get_architecture(job.model)
        except Exception:  # noqa: BLE001  # refused rows answer at once
            ready.append(True)
            continue
        if untraceable_reason(job, placement) or arch.family in REMOTE_CODE:
            ready.append(True)
        elif (placement.dp > 1 or placement.tp > 1) and rank_unsupported(job, placement) is None:
            ready.append(True)  # rank traces are few (a dozen rows): traced even here
        else:
            key = cache_key(trace_spec(job, arch), _regime(job, micro_batch(job, placement)))
            ready.append((cache_dir() / f"{key}.npz").is_file())
    return pd.Series(ready, index=rows.index)


def score(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per-row errors (both estimators, every metric the row measured), the OOM-gate check per row, and the
    rows with traced's mode and fallback reason."""
    answers = {name: estimate_rows(name, rows) for name in ("theory", "traced")}
    modes = [mode_of(a) for a in answers["traced"]]
    rows = rows.assign(mode=[m for m, _ in modes], reason=[r for _, r in modes])
    parts, gate = [], []
    for name, found in answers.items():
        ok = [not isinstance(a, str) for a in found]
        for metric in METRICS:
            measured = measured_metric(rows, metric)
            has = measured.notna().to_numpy() & np.asarray(ok)
            if not has.any():
                continue
            predicted = [PREDICTED_FOR_METRIC[metric](a) for a, h in zip(found, has, strict=True) if h]  # type: ignore[arg-type]
            part = rows[has][["table", "model_name", "method", "framework", "number_gpus", "mode"]].copy()
            part = part.assign(estimator=name, metric=METRICS[metric], measured=measured[has].to_numpy(),
                               predicted=predicted)
            part["error_pct"] = percent_errors(part["measured"], part["predicted"])
            parts.append(part)
        oom = rows["status"].to_numpy() == "oom"
        said_fits = [not isinstance(a, str) and a.memory.oom_risk <= MAX_OOM_RISK for a in found]
        gate.append(rows[["table", "model_name", "method", "number_gpus", "mode"]].assign(
            estimator=name, oom=oom, said_fits=said_fits, answered=ok))
    return pd.concat(parts, ignore_index=True), pd.concat(gate, ignore_index=True), rows


def table(errors: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    out = []
    for key, group in errors.groupby(by, sort=True):
        stats = stats_of(group["error_pct"].to_numpy())
        out.append({**dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)), **stats})
    frame = pd.DataFrame(out)
    return frame.round({"median_abs_error_pct": 1, "p90_abs_error_pct": 1, "bias_pct": 1})


def render(errors: pd.DataFrame, gate: pd.DataFrame, rows: pd.DataFrame, seconds: float, skipped: int) -> str:
    traced = errors[errors["mode"].isin(["step", "rank", "replica"])]
    lines = [
        "Every scored ok/oom row of `data/measurements.csv` and every row of `data/probe/` (our H100 rows), answered "
        "by theory and by traced; errors in each row's own metric (|error| %, bias = median signed error, + = "
        "over-prediction). Modes: **step** = a traced training step on one GPU, **rank** = one rank traced on a fake "
        "process group, **replica** = one traced replica sharded by theory (strategies or stacks the rank traces do "
        "not follow), **theory** = untraceable (reasons below). Theory is scored on the same rows in each line. "
        f"Regenerate: `python bench/traced_scores.py --write` ({seconds:.0f} s this run, traces cached).", "",
        "### Traceable rows: traced and theory on the same rows", "",
        markdown_table(table(traced, ["table", "mode", "metric", "estimator"])), "",
        "### By method (traceable rows)", "",
        markdown_table(table(traced, ["metric", "method", "estimator"])), "",
        "### Untraceable rows (traced refuses them, saying why; theory's score on them)", "",
    ]
    untraceable = errors[errors["mode"] == "theory"]
    if len(untraceable):
        lines += [markdown_table(table(untraceable, ["table", "metric", "estimator"])), ""]
    reasons = rows[rows["mode"] == "theory"].groupby("reason").size().sort_values(ascending=False)
    lines += [f"- {count} rows: {reason}" for reason, count in reasons.items()]
    if skipped:
        lines.append(f"- {skipped} traceable rows were not traced in this run's CPU budget (`--cached-only`)")
    ranked = rows[rows["mode"] == "rank"]
    if len(ranked):
        lines.append(f"- {len(ranked)} rank-traced rows ({', '.join(sorted(set(ranked['model_name'])))}) state no memory "
                     "figure (throughput rows): scored at the OOM gate only")
    lines += ["", f"### The OOM gate (oom_risk ≤ {MAX_OOM_RISK} = fits)", ""]
    for (estimator, mode), group in gate[gate["answered"]].groupby(["estimator", "mode"]):
        oom = group["oom"]
        lines.append(f"- {estimator}, {mode} rows: {int(oom.sum())} OOM runs, **{int((oom & group['said_fits']).sum())} "
                     f"called fits**; {int((~oom & ~group['said_fits']).sum())} of {int((~oom).sum())} completed runs "
                     "refused")
    worst = traced[traced["estimator"] == "traced"].dropna(subset=["error_pct"])
    worst = worst.reindex(worst["error_pct"].abs().sort_values(ascending=False).index).head(15)
    worst = worst.assign(measured_gib=(worst["measured"] / 2**30).round(2), traced_gib=(worst["predicted"] / 2**30).round(2),
                         error_pct=worst["error_pct"].round(1))
    lines += ["", "### Largest traced errors", "", markdown_table(worst[[
        "table", "mode", "metric", "model_name", "method", "framework", "number_gpus", "measured_gib", "traced_gib",
        "error_pct"]].reset_index(drop=True)), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, nargs="+", default=ROWS)
    parser.add_argument("--cached-only", action="store_true", help="trace nothing new (see the module docstring)")
    parser.add_argument("--write", action="store_true", help="write section scores of docs/traced_vs_theory.md")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = load(args.rows)
    skipped = 0
    if args.cached_only:
        ready = cached_only(rows)
        skipped = int((~ready).sum())
        rows = rows[ready]
    errors, gate, rows = score(rows)
    markdown = render(errors, gate, rows, time.perf_counter() - start, skipped)
    print(markdown)
    if args.write:
        update_section(REPORT, "scores", "## Traced and theory on measured rows\n\n" + markdown)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
