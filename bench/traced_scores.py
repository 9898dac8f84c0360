"""Traced against theory on every scored measured row whose stack the tracer can run, in each row's own metric.

    python bench/traced_scores.py [--rows data/measurements.csv data/probe/*.csv] [--cached-only | --trace-budget S]
        [--theory-before PREFIX] [--save PREFIX] [--write]

Rows: the scored ok/oom rows of data/measurements.csv and the rows of data/probe/ (our own H100 rows, all
scored). Each row is answered by theory and by traced; traced says how it answered (its notes), which sorts the
rows into: **step** (one GPU: a traced training step), **rank** (several GPUs: one rank traced on a fake
process group), **replica** (several GPUs with a strategy or stack the ranks do not follow: one traced replica,
sharded by theory) and **theory** (untraceable: the note says why, or the row's fms-acceleration plugin replaces
the model code; counted apart, never as traced). Memory is compared on completed runs in the row's own metrics
(torch allocated / reserved, the NVML or nvidia-smi device figure; ``autoconf.evaluation.accuracy.
PREDICTED_FOR_METRIC``); OOM runs are checked at the gate (``oom_risk <= defaults.MAX_OOM_RISK`` = "fits" =
dangerous). Both estimators are scored on the same rows.

Traces are cached (``$AUTOCONF_CACHE/traced``). ``--trace-budget S`` first traces the uncached fits, the most rows
per unit of CPU first, for at most S seconds (progress on stderr; each fit is cached as it completes, so a later
run resumes), then scores the rows whose traces are cached; ``--cached-only`` traces nothing new. The rows left are
counted as not traced. ``--theory-before PREFIX`` adds theory's scores saved (``--save PREFIX --theory-only``) by the
code before a theory correction. ``--write`` puts the Markdown into section ``scores`` of docs/traced_vs_theory.md
and its headline into section ``traced-scores`` of docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

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
ACCURACY = ROOT / "docs" / "accuracy.md"
# fms-acceleration plugins (data column ``kernels``, data/README.md) whose own Triton kernels replace the model code
# the trace runs: FOAK's fast kernels (autograd functions for LoRA, RMSNorm, RoPE and the loss: fms-acceleration
# plugins/fused-ops-and-kernels) and ScatterMoE (its Triton expert kernels and expert parallelism:
# plugins/accelerated-moe). A Job cannot state them, so traced answers the plain HF model; such rows are not traced
# rows of their stack and are counted with the untraceable ones.
OWN_KERNELS = {"foak": "FOAK's fast Triton kernels (LoRA, RMSNorm, RoPE, loss)",
               "scattermoe": "ScatterMoE's Triton expert kernels and expert parallelism"}


def own_kernels(kernels: object) -> str | None:
    """Why a row's fms-acceleration plugin keeps it from being a traced row of its stack (None: it does not)."""
    for tag, what in OWN_KERNELS.items():
        if isinstance(kernels, str) and tag in kernels:
            return f"fms-acceleration's {what} ({kernels}) are not traced (traced runs the HF model)"
    return None


# Row columns kept with each error (to group by and to find the row again).
KEEP = ("table", "source", "source_ref", "model_name", "method", "framework", "strategy", "number_gpus", "dtype",
        "tokens_per_sample", "per_device_batch_size", "gradient_checkpointing", "mode")


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


def pending(rows: pd.DataFrame) -> tuple[pd.Series, dict[str, tuple[dict[str, Any], str, int]]]:
    """Which rows answer without a new fit (cached, untraceable, or one of the few rank-traced rows), and the
    uncached fits the rest need: cache key -> (trace spec, regime, rows it answers)."""
    from autoconf.catalog import get_architecture
    from autoconf.estimators.theory.memory import micro_batch
    from autoconf.estimators.traced.cache import cache_dir, cache_key
    from autoconf.estimators.traced.estimator import _regime
    from autoconf.estimators.traced.job_spec import trace_spec
    from autoconf.estimators.traced.ranks import rank_unsupported
    from autoconf.estimators.traced.refusal import decide
    from autoconf.evaluation.data import row_to_inputs

    ready, todo = [], {}
    for _, row in rows.iterrows():
        if own_kernels(row.get("kernels")):
            ready.append(True)  # scored as untraceable (score)
            continue
        try:
            job, placement = row_to_inputs(row)
            arch = get_architecture(job.model)
        except Exception:  # noqa: BLE001  # refused rows answer at once
            ready.append(True)
            continue
        if decide(job, placement, arch).refusal:  # every stack's refusal (traced/refusal.py): answered at once
            ready.append(True)
        elif (placement.dp > 1 or placement.tp > 1) and rank_unsupported(job, placement) is None:
            ready.append(True)  # rank traces are few (a dozen rows): traced even here
        else:
            spec, regime = trace_spec(job, arch), _regime(job, micro_batch(job, placement))
            key = cache_key(spec, regime)
            cached = (cache_dir() / f"{key}.npz").is_file()
            ready.append(cached)
            if not cached:
                count = todo[key][2] + 1 if key in todo else 1
                todo[key] = (spec, regime, count)
    return pd.Series(ready, index=rows.index), todo


def trace_cost(spec: dict[str, Any], regime: str) -> float:
    """Relative CPU cost of a new fit: fake-tensor ops grow with the decoder layers (each layer's ops, more with
    experts and adapters); an exact-shape regime traces one shape instead of a design of several."""
    arch = spec["arch"]
    per_layer = 1.0 + (0.5 if arch.get("num_experts", 1) > 1 else 0.0) + (0.3 if spec["method"] != "full" else 0.0)
    shapes = 1 if regime.startswith("at ") else 3
    return arch["num_layers"] * per_layer * shapes


def fill(todo: dict[str, tuple[dict[str, Any], str, int]], budget_s: float) -> list[str]:
    """Trace the uncached fits, most rows per unit of cost first, until ``budget_s`` has passed; each is cached as
    it completes, so a later run resumes. Progress on stderr; returns the failures (one line each)."""
    from autoconf.estimators.traced.cache import get_fit
    from autoconf.estimators.traced.fit import TraceFailed

    order = sorted(todo.items(), key=lambda kv: trace_cost(kv[1][0], kv[1][1]) / kv[1][2])
    start, failed = time.perf_counter(), []
    for done, (key, (spec, regime, count)) in enumerate(order):
        spent = time.perf_counter() - start
        if spent > budget_s:
            sys.stderr.write(f"budget spent ({spent:.0f} s): {len(order) - done} fits left for a later run\n")
            break
        label = f"{spec['arch']['name']} {spec['method']} {regime} ({count} rows)"
        sys.stderr.write(f"[{done + 1}/{len(order)} {spent:5.0f} s] tracing {label} ...\n")
        one = time.perf_counter()
        try:
            get_fit(spec, regime)
        except TraceFailed as exc:  # the row is then answered by theory with this reason (mode "theory")
            failed.append(f"{label}: {exc}")
            sys.stderr.write(f"    failed: {exc}\n")
            continue
        sys.stderr.write(f"    {time.perf_counter() - one:.0f} s ({key[:12]})\n")
    return failed


def score(rows: pd.DataFrame, names: tuple[str, ...] = ("theory", "traced")) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                                        pd.DataFrame]:
    """Per-row errors (each estimator of ``names``, every metric the row measured), the OOM-gate check per row,
    and the rows with traced's mode and fallback reason (no mode without traced)."""
    plugins = [own_kernels(kernels) for kernels in rows["kernels"]]
    answers = {name: estimate_rows(name, rows) for name in names if name != "traced"}
    if "traced" in names:  # rows of an fms-acceleration plugin are not traced rows: not asked (nothing traced)
        found = iter(estimate_rows("traced", rows[[p is None for p in plugins]]))
        answers["traced"] = [next(found) if p is None else f"traced cannot run this job: {p}" for p in plugins]
    modes = [("theory", why) if why else mode_of(a) if "traced" in answers else ("", "")
             for a, why in zip(answers.get("traced", answers["theory"]), plugins, strict=True)]
    rows = rows.assign(mode=[m for m, _ in modes], reason=[r for _, r in modes])
    parts, gate = [], []
    for name, found in answers.items():
        ok = [not isinstance(a, str) for a in found]
        for metric in METRICS:
            measured = measured_metric(rows, metric)
            # an OOM run's figure is where it stopped, not what the job needs: scored at the gate only
            has = measured.notna().to_numpy() & np.asarray(ok) & (rows["status"].to_numpy() == "ok")
            if not has.any():
                continue
            predicted = [PREDICTED_FOR_METRIC[metric](a) for a, h in zip(found, has, strict=True) if h]  # type: ignore[arg-type]
            part = rows[has][list(KEEP)].assign(row=rows.index[has])
            part = part.assign(estimator=name, metric=METRICS[metric], measured=measured[has].to_numpy(),
                               predicted=predicted, own=(rows["memory_metric"][has] == metric).to_numpy())
            part["error_pct"] = percent_errors(part["measured"], part["predicted"])
            parts.append(part)
        oom = rows["status"].to_numpy() == "oom"
        said_fits = [not isinstance(a, str) and a.memory.oom_risk <= MAX_OOM_RISK for a in found]
        gate.append(rows[list(KEEP)].assign(
            row=rows.index, estimator=name, oom=oom, said_fits=said_fits, answered=ok))
    return pd.concat(parts, ignore_index=True), pd.concat(gate, ignore_index=True), rows


def table(errors: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    out = []
    for key, group in errors.groupby(by, sort=True):
        stats = stats_of(group["error_pct"].to_numpy())
        out.append({**dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)), **stats})
    frame = pd.DataFrame(out)
    return frame.round({"median_abs_error_pct": 1, "p90_abs_error_pct": 1, "bias_pct": 1})


TRACED_MODES = ("step", "rank", "replica")
ESTIMATORS = ("traced", "theory", "theory before")  # "theory before": --theory-before, the code before the corrections


def before(prefix: Path, rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Theory's errors and gate as saved (``--save``) by the code before this round's corrections, on today's rows
    and modes (rows are matched by their position in the loaded tables, so the data must be the same)."""
    errors = pd.read_csv(f"{prefix}-errors.csv")
    gate = pd.read_csv(f"{prefix}-gate.csv")
    out = []
    for frame in (errors, gate):
        frame = frame[(frame["estimator"] == "theory") & frame["row"].isin(rows.index)]
        out.append(frame.assign(estimator="theory before", mode=rows.loc[frame["row"], "mode"].to_numpy()))
    return out[0], out[1]


def _stats(errors: pd.DataFrame) -> dict[str, float]:
    found = stats_of(errors["error_pct"].to_numpy())
    return {"median": round(found["median_abs_error_pct"], 1), "p90": round(found["p90_abs_error_pct"], 1),
            "bias": round(found["bias_pct"], 1)}


def headline(errors: pd.DataFrame, gate: pd.DataFrame) -> pd.DataFrame:
    """The must-show table: per source and metric, and in all, traced and theory on the same traceable rows (the
    rows' own metric), with the OOM runs each calls "fits"."""
    traced = errors[errors["mode"].isin(TRACED_MODES)]
    gate = gate[gate["mode"].isin(TRACED_MODES) & gate["answered"]]
    own = traced[traced["own"].astype(bool)]
    groups = [((source, "own metric"), part) for source, part in own.groupby("source")]
    groups.append((("all", "own metric"), own))
    groups += [((source, metric), part) for (source, metric), part in traced.groupby(["source", "metric"])]
    groups += [(("all", metric), part) for metric, part in traced.groupby("metric")]
    groups.append((("all", "every metric"), traced))
    out = []
    for (source, metric), part in groups:
        line: dict[str, object] = {"source": source, "metric": metric}
        names = [n for n in ESTIMATORS if n in set(errors["estimator"])]
        for name in names:
            mine = part[part["estimator"] == name]
            line["n"] = len(mine)
            line.update({f"{name} {k}": v for k, v in _stats(mine).items()})
        if metric == "own metric":
            rows = gate if source == "all" else gate[gate["source"] == source]
            for name in names:
                mine = rows[rows["estimator"] == name]
                line["OOM runs"] = int(mine["oom"].sum())
                line[f"{name} OOM called fits"] = int((mine["oom"] & mine["said_fits"]).sum())
        out.append(line)
    frame = pd.DataFrame(out)
    # the OOM columns belong to a source, not to a metric: on its own-metric line only
    for column in [c for c in frame if c.startswith("OOM") or c.endswith("OOM called fits")]:
        frame[column] = frame[column].astype("Int64").astype(str).replace("<NA>", "")
    return frame


def verdict(errors: pd.DataFrame, gate: pd.DataFrame) -> str:
    """Issue 20's must-show on these rows: traced median ≤ 2 %, p90 ≤ 8 % in every metric, no OOM run called fits."""
    traced = errors[errors["mode"].isin(TRACED_MODES) & (errors["estimator"] == "traced")]
    stats, every = _stats(traced[traced["own"].astype(bool)]), _stats(traced)
    called = gate[gate["mode"].isin(TRACED_MODES) & (gate["estimator"] == "traced") & gate["answered"]]
    dangerous = int((called["oom"] & called["said_fits"]).sum())
    met = stats["median"] <= 2 and stats["p90"] <= 8 and dangerous == 0
    return (f"**Issue 20's must-show on these rows ({'met' if met else 'not met'}):** in each row's own metric "
            f"(`memory_metric`, {int(traced['own'].astype(bool).sum())} rows) traced median {stats['median']} % "
            f"(target ≤ 2), p90 {stats['p90']} % (≤ 8); {dangerous} OOM runs called fits (0). Over every metric the "
            f"rows measured ({len(traced)} row-metrics): {every['median']} / {every['p90']} %.")


def above(traced: pd.DataFrame, cut: float = 8.0) -> pd.DataFrame:
    """The traced rows above ``cut`` % in their own metric, grouped (source, model, method, mode, metric): how many,
    traced's and theory's signed error range on them, and the campaigns they come from."""
    own = traced[traced["own"].astype(bool)]
    mine = own[own["estimator"] == "traced"]
    theory = own[own["estimator"] == "theory"].set_index(["row", "metric"])["error_pct"]
    out = mine[mine["error_pct"].abs() > cut].assign(
        theory=lambda f: [theory.get((r, m), np.nan) for r, m in zip(f["row"], f["metric"], strict=True)])
    keys = ["source", "model_name", "method", "mode", "metric"]
    frame = pd.DataFrame([{**dict(zip(keys, key, strict=True)), "rows": len(g),
                           "traced %": f"{g['error_pct'].min():+.1f} … {g['error_pct'].max():+.1f}",
                           "theory %": f"{g['theory'].min():+.1f} … {g['theory'].max():+.1f}",
                           "campaigns": g["source_ref"].str.split("@|#", regex=True).str[0].nunique()}
                          for key, g in out.groupby(keys, sort=True)])
    if not len(frame):
        return frame
    frame = frame.sort_values("rows", ascending=False, kind="stable").reset_index(drop=True)
    total = len(mine)
    frame = frame.astype({"rows": str, "campaigns": str})
    return pd.concat([frame, pd.DataFrame([{"source": "all", "rows": f"{len(out)} of {total}"}])], ignore_index=True)


def render(errors: pd.DataFrame, gate: pd.DataFrame, rows: pd.DataFrame, seconds: float,
           skipped: int, before_label: str = "") -> tuple[str, str]:
    """The headline (every source, both estimators, the gate) and the details (modes, methods, untraceable rows,
    the gate per mode, the largest traced errors)."""
    traced = errors[errors["mode"].isin(TRACED_MODES)]
    lines = [
        "Every scored ok/oom row of `data/measurements.csv` and every row of `data/probe/` (our H100 rows), answered "
        "by theory and by traced; errors in each row's own metric (|error| %, bias = median signed error, + = "
        "over-prediction). Modes: **step** = a traced training step on one GPU, **rank** = one rank traced on a fake "
        "process group, **replica** = one traced replica sharded by theory (strategies or stacks the rank traces do "
        "not follow), **theory** = untraceable (reasons below). Theory is scored on the same rows in each line. "
        f"Regenerate: `python bench/traced_scores.py --trace-budget 3600 --write` ({seconds:.0f} s this run, traces "
        f"cached).{' *theory before*: ' + before_label + '.' if before_label else ''}", "",
        "### Every scored traceable row, by source: traced and theory on the same rows", "",
        "Memory errors on completed (ok) runs: *own metric* = the one the row states (`memory_metric`: torch "
        "allocated where the source logged it, else its device or reserved figure), then every metric the row "
        "measured; an OOM run's figure is where it stopped, so OOM runs are scored at the gate only (*OOM called "
        "fits* = oom_risk ≤ "
        f"{MAX_OOM_RISK}: dangerous).", "",
        markdown_table(headline(errors, gate)), "", verdict(errors, gate), "",
    ]
    head = "\n".join(lines)
    lines = [
        "### Traceable rows by table and mode", "",
        markdown_table(table(traced, ["table", "mode", "metric", "estimator"])), "",
        "### By method (traceable rows)", "",
        markdown_table(table(traced, ["metric", "method", "estimator"])), "",
        "### Untraceable rows (traced refuses them, saying why; theory's score on them)", "",
    ]
    untraceable = errors[(errors["mode"] == "theory") & (errors["estimator"] == "theory")]
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
        if estimator == "traced" and mode == "theory":  # untraceable rows: theory's answer, counted apart
            continue
        oom = group["oom"]
        lines.append(f"- {estimator}, {mode} rows: {int(oom.sum())} OOM runs, **{int((oom & group['said_fits']).sum())} "
                     f"called fits**; {int((~oom & ~group['said_fits']).sum())} of {int((~oom).sum())} completed runs "
                     "refused")
    lines += ["", "### Rows above 8 % in their own metric (traced), by group", "",
              "Traced's own-metric p90 ≤ 8 % allows at most a tenth of the rows above 8 %; these are the rows that are, "
              "by group, with theory's error on the same rows (what each group lacks: section *What the traces "
              "showed*).", "",
              markdown_table(above(traced)), ""]
    worst = traced[traced["estimator"] == "traced"].dropna(subset=["error_pct"])
    worst = worst.reindex(worst["error_pct"].abs().sort_values(ascending=False).index).head(15)
    worst = worst.assign(measured_gib=(worst["measured"] / 2**30).round(2), traced_gib=(worst["predicted"] / 2**30).round(2),
                         error_pct=worst["error_pct"].round(1))
    lines += ["", "### Largest traced errors", "", markdown_table(worst[[
        "table", "mode", "metric", "model_name", "method", "framework", "number_gpus", "measured_gib", "traced_gib",
        "error_pct"]].reset_index(drop=True)), ""]
    return head, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, nargs="+", default=ROWS)
    parser.add_argument("--cached-only", action="store_true", help="trace nothing new (see the module docstring)")
    parser.add_argument("--trace-budget", type=float, default=None, metavar="SECONDS",
                        help="first trace uncached fits, cheapest per row first, for at most this long; then score "
                             "the cached rows")
    parser.add_argument("--write", action="store_true",
                        help="write section scores of docs/traced_vs_theory.md and traced-scores of docs/accuracy.md")
    parser.add_argument("--save", type=Path, default=None, metavar="PREFIX",
                        help="also write the per-row errors and gate checks to PREFIX-errors.csv, PREFIX-gate.csv")
    parser.add_argument("--theory-only", action="store_true", help="score theory alone (for --save, then "
                        "--theory-before: the code before a theory change)")
    parser.add_argument("--theory-before", type=Path, default=None, metavar="PREFIX",
                        help="add theory's scores as saved by the code before the corrections (--save PREFIX there)")
    parser.add_argument("--before-label", default="theory at the code before this round's corrections",
                        help="what --theory-before is, for the report")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = load(args.rows)
    skipped = 0
    if args.trace_budget is not None:
        fill(pending(rows)[1], args.trace_budget)
    if args.cached_only or args.trace_budget is not None:
        ready = pending(rows)[0]
        skipped = int((~ready).sum())
        rows = rows[ready]
    errors, gate, rows = score(rows, ("theory",) if args.theory_only else ("theory", "traced"))
    if args.theory_before:
        old_errors, old_gate = before(args.theory_before, rows)
        errors, gate = pd.concat([errors, old_errors], ignore_index=True), pd.concat([gate, old_gate], ignore_index=True)
    label = args.before_label if args.theory_before else ""
    head, details = render(errors, gate, rows, time.perf_counter() - start, skipped, label)
    markdown = head + "\n" + details
    print(markdown)
    if args.save:
        errors.to_csv(f"{args.save}-errors.csv", index=False)
        gate.to_csv(f"{args.save}-gate.csv", index=False)
    if args.write:
        update_section(REPORT, "scores", "## Traced and theory on measured rows\n\n" + markdown)
        update_section(ACCURACY, "traced-scores", "## Traced and theory on every traceable measured row\n\n" + head +
                       "\nBy mode, method, the untraceable rows and the largest errors: section *Traced and theory on "
                       "measured rows* of [traced_vs_theory.md](traced_vs_theory.md).\n")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
