"""Score theory, hybrid and traced on our own H100 rows (data/probe/), which nothing was fitted on.

    python bench/probe_accuracy.py [--rows data/probe/*.csv] [--estimators theory,hybrid,traced] [--write]

Each ok row is compared in each metric it measured (torch allocated / reserved, the NVML device peak) with the
estimate's peak of the same kind (``autoconf.evaluation.accuracy.PREDICTED_FOR_METRIC``), and in tokens/s. The
OOM gate (``defaults.MAX_OOM_RISK``) is checked on ok and oom rows: *dangerous* = said to fit (risk ≤ gate) but
ran out of memory, *refused* = risk above the gate but the run completed; every dangerous row is listed with its
inputs. The traced estimator falls back to theory where it cannot trace a model: those rows are counted apart.
``--write`` puts the Markdown into section ``probe-h100`` of docs/accuracy.md. Traced takes ~20-30 s per new
model setting on 2 cores (cached under $AUTOCONF_CACHE afterwards).
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
    GIB,
    estimate_rows,
    markdown_table,
    oom_check,
    scorable,
    score_memory,
    score_throughput,
    summarise,
)
from autoconf.evaluation.data import load_measurements  # noqa: E402
from bench._report import update_section  # noqa: E402

ROWS = sorted((Path(__file__).resolve().parents[1] / "data" / "probe").glob("*.csv"))
LABELS = {"torch_allocated": "allocated", "torch_reserved": "reserved", "nvidia_smi": "device (NVML)",
          "tokens_per_second": "tokens/s"}
INPUTS = ("model_name", "method", "optimizer", "tokens_per_sample", "per_device_batch_size", "gradient_checkpointing", "attention",
          "loss_kernel")


def load(paths: list[Path]) -> pd.DataFrame:
    """The probe tables through the measurements loader (its column types), scored = 1 for every row."""
    frame = pd.concat([load_measurements(p) for p in paths], ignore_index=True)
    return frame.assign(scored=1, notes=frame["notes"].fillna("").astype(str),
                        loss_kernel=frame["loss_kernel"].fillna("").astype(str))


def stats(results: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    table = summarise(results.dropna(subset=["predicted"]), by=by)
    if "metric" in table:
        table["metric"] = table["metric"].map(LABELS).fillna(table["metric"])
    return table


def fallback_rows(frame: pd.DataFrame) -> tuple[pd.Index, dict[str, int]]:
    """Rows traced does not answer itself: it refuses the job (a one-line error saying why) or its trace failed
    (theory's estimate with a note); the count per reason (the settings the tracer cannot run)."""
    rows = scorable(frame, statuses=("ok", "oom"))
    picked, why = [], {}
    for index, answer in zip(rows.index, estimate_rows("traced", rows), strict=True):
        if isinstance(answer, str):
            notes = [answer.split(": ", 2)[-1]] if "traced cannot run" in answer else []
        else:
            notes = [n.removeprefix("traced: ").removesuffix("; theory estimate") for n in answer.memory.notes
                     if n.startswith("traced:") and n.endswith("theory estimate")]
        if notes:
            picked.append(index)
            reason = notes[0][:140]
            key = f"{rows.at[index, 'model_name']} {rows.at[index, 'method']}: {reason}"
            why[key] = why.get(key, 0) + 1
    return pd.Index(picked), why


def gate_lines(name: str, check: pd.DataFrame) -> list[str]:
    """Confusion at the gate and every dangerous row with its inputs."""
    answered = check[check["error"] == ""]
    said_fits = answered["oom_risk"] <= MAX_OOM_RISK
    oom = answered["status"] == "oom"
    dangerous = answered[said_fits & oom]
    refused = int((~said_fits & ~oom).sum())
    lines = [f"- **{name}**: {int(oom.sum())} OOM runs, **{len(dangerous)} dangerous** (said to fit); "
             f"{refused} of {int((~oom).sum())} completed runs refused at oom_risk > {MAX_OOM_RISK}"]
    for _, row in dangerous.iterrows():
        inputs = ", ".join(f"{c}={row[c]}" for c in INPUTS if c in row and row[c] != "")
        lines.append(f"  - dangerous: {inputs}; predicted device peak {row['predicted_peak'] / GIB:.1f} GiB of "
                     f"{row['capacity'] / GIB:.1f}, oom_risk {row['oom_risk']:.3f}")
    return lines


def report(frame: pd.DataFrame, names: list[str]) -> str:
    ok, oom = int((frame.status == "ok").sum()), int((frame.status == "oom").sum())
    parts = [f"Our own rows: `data/probe/h100-lease-v1.csv` and `-v2.csv` ({ok} ok, {oom} oom; H100 80GB HBM3, "
             "data/probe/SOURCE.md). **No estimator was fitted on them** (held out by construction). "
             "Regenerate: `python bench/probe_accuracy.py --write`.", ""]
    memory, speed, gates = [], [], []
    for name in names:
        start = time.perf_counter()
        labelled = [(name, frame)]
        if name == "traced":  # rows the tracer cannot trace get theory's answer: scored apart, never as traced
            fell_back, why = fallback_rows(frame)
            labelled = [(name, frame.drop(index=fell_back)), ("traced→theory", frame.loc[fell_back])]
            gates += [f"- traced fell back to theory on {count} rows: {reason}" for reason, count in why.items()]
        for label, part in labelled:
            scorer = "theory" if label == "traced→theory" else name  # refused rows: theory's answer, apart
            memory.append(score_memory(scorer, part).assign(estimator=label))
            speed.append(score_throughput(scorer, part).assign(estimator=label))
        gates += gate_lines(name, oom_check(name, frame))
        sys.stderr.write(f"{name}: {time.perf_counter() - start:.1f} s\n")
    results = pd.concat(memory + speed, ignore_index=True)
    parts += ["### Memory and tokens/s by metric (|error| %; bias = median signed error, + = over-prediction)", "",
              markdown_table(stats(results, ["estimator", "metric"])), "",
              "### By method", "", markdown_table(stats(results, ["estimator", "metric", "method"])), "",
              "### By model (allocated)", "",
              markdown_table(stats(results[results.metric == "torch_allocated"], ["estimator", "model_name"])), "",
              f"### The OOM gate (oom_risk ≤ {MAX_OOM_RISK} = fits)", "", *gates, ""]
    worst = results[results.metric != "tokens_per_second"].dropna(subset=["predicted"])
    worst = worst.reindex(worst.error_pct.abs().sort_values(ascending=False).index).head(12)
    worst = worst.assign(measured_gib=worst.measured / GIB, predicted_gib=worst.predicted / GIB)
    parts += ["### Largest memory errors", "", markdown_table(worst[[
        "estimator", "metric", "model_name", "method", "tokens_per_sample", "per_device_batch_size",
        "gradient_checkpointing", "measured_gib", "predicted_gib", "error_pct"]].reset_index(drop=True)), ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, nargs="+", default=ROWS)
    parser.add_argument("--estimators", default="theory,hybrid,traced")
    parser.add_argument("--write", action="store_true", help="write section probe-h100 of docs/accuracy.md")
    args = parser.parse_args(argv)
    frame = load(args.rows)
    markdown = report(frame, [n.strip() for n in args.estimators.split(",") if n.strip()])
    print(markdown)
    if args.write:
        update_section("docs/accuracy.md", "probe-h100", "## Our own H100 rows (held out)\n\n" + markdown)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
