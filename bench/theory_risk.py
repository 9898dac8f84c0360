"""Calibrate theory's oom_risk on held-out residuals; show the gate's trade-off between dangerous and refused runs.

    python bench/theory_risk.py [--data PATH] [--write]

Theory is run leave-one-source-out (bench/accuracy_sources.py ``held_out``); the log residuals of its
torch_allocated and nvidia-smi peaks give σ per method (autoconf/evaluation/risk.py). ``--write`` writes the
table to autoconf/estimators/theory/risk_table.py and section ``theory-risk`` of docs/accuracy.md. Every risk
figure printed is cross-fitted: a row's risk comes from σ fitted without its (source, model) group. Rerun
after any change to theory's formulas (its residuals change with them).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.defaults import MAX_OOM_RISK  # noqa: E402
from autoconf.estimators.learned.model import conformal_risk  # noqa: E402
from autoconf.evaluation import risk as rk  # noqa: E402
from autoconf.evaluation.accuracy import markdown_table  # noqa: E402
from autoconf.evaluation.data import load_measurements  # noqa: E402
from bench._report import update_section  # noqa: E402
from bench.accuracy_sources import per_source  # noqa: E402

TABLE = Path(__file__).resolve().parents[1] / "autoconf/estimators/theory/risk_table.py"
COMMAND = "python bench/theory_risk.py --write"
# The inputs of one setting: a completed run whose setting also ran out of memory in another run cannot be
# passed by any risk of these inputs without passing that OOM too.
SETTING = ("source", "gpu_model", "model_name", "method", "strategy", "number_gpus", "per_device_batch_size",
           "tokens_per_sample", "gradient_checkpointing", "kernels", "fused_loss", "dtype")
NEAR = 0.3  # a variant fits σ only where the gate matters: runs predicted to fill ≥ 30 % of the board
OLD_SIGMA = 0.12  # 0.2.0's single spread (relative error, normal), kept here only to show the before figures


def _group_keys(frame: pd.DataFrame) -> pd.Series:
    return frame[list(rk.GROUP)].astype(str).agg("/".join, axis=1)


def conformal_cross_fit(check: pd.DataFrame, residuals: pd.DataFrame) -> pd.Series:
    """Split-conformal risk per method (empirical residuals of the other groups), for comparison."""
    room, keys, res_keys = rk.headroom(check), _group_keys(check), _group_keys(residuals)
    risk = pd.Series(np.nan, index=check.index)
    for key in keys.unique():
        cal = residuals[res_keys != key]
        for method, index in check[keys == key].groupby("method").groups.items():
            mine = cal[cal["method"] == method] if (cal["method"] == method).sum() >= rk.MIN_ROWS else cal
            risk[index] = conformal_risk(np.sort(mine["residual"].to_numpy()), room[index].to_numpy())
    return risk


def oracle_floor(check: pd.DataFrame) -> tuple[int, int]:
    """Per method, pass only rows with more headroom than every OOM row of that method (chosen on the very rows
    scored): the fewest completed runs any risk of (method, headroom) can refuse with 0 dangerous."""
    room = rk.headroom(check)
    refused = 0
    for _, g in check.groupby("method"):
        worst_oom = room[g.index][g["status"] == "oom"].max()
        if np.isfinite(worst_oom):
            refused += int(((g["status"] == "ok") & (room[g.index] <= worst_oom)).sum())
    return 0, refused


def _board_share(check: pd.DataFrame) -> pd.Series:
    """Predicted device peak / capacity per run (``source_ref``)."""
    runs = check.drop_duplicates("source_ref").set_index("source_ref")
    return runs["predicted_peak"] / runs["capacity"]


def gate_scan(check: pd.DataFrame, risk: pd.Series, gates: tuple[float, ...] = (0.01, 0.05, 0.1, 0.2, 0.5)) -> pd.DataFrame:
    """The shipped risk at other gates: dangerous vs refused."""
    return pd.concat([rk.gate_confusion(check.assign(oom_risk=risk), gate=g).assign(gate=g) for g in gates],
                     ignore_index=True)[["gate", "oom_rows", "dangerous", "ok_rows", "refused", "refused_pct"]]


def variants(check: pd.DataFrame, residuals: pd.DataFrame) -> pd.DataFrame:
    room = rk.headroom(check)
    old = pd.Series([0.5 * math.erfc((math.exp(h) - 1) / OLD_SIGMA / math.sqrt(2)) for h in room], index=check.index)
    pooled = pd.Series(np.nan, index=check.index)
    keys, res_keys = _group_keys(check), _group_keys(residuals)
    for key in keys.unique():
        sigma = rk.robust_sigma(residuals.loc[res_keys != key, "residual"])
        pooled[keys == key] = rk.normal_risk(room[keys == key].to_numpy(), sigma)
    options = {"0.2.0: one σ = 0.12 of relative error (not fitted)": old,
               "one σ (MAD) for all methods, cross-fitted": pooled,
               "σ per method (MAD), cross-fitted (shipped)": rk.cross_fit_risk(check, residuals),
               "split-conformal per method (empirical residuals), cross-fitted": conformal_cross_fit(check, residuals),
               f"σ per method (MAD) of rows predicted ≥ {NEAR:.0%} of the board, cross-fitted": rk.cross_fit_risk(
                   check, residuals[residuals["source_ref"].map(_board_share(check)) >= NEAR])}
    rows = []
    for name, risk in options.items():
        c = rk.gate_confusion(check.assign(oom_risk=risk)).iloc[0]
        rows.append({"risk model": name, "dangerous": int(c["dangerous"]), "oom_rows": int(c["oom_rows"]),
                     "refused": int(c["refused"]), "ok_rows": int(c["ok_rows"]), "refused_pct": c["refused_pct"]})
    _, floor = oracle_floor(check)
    ok_rows = int((check["status"] == "ok").sum())
    rows.append({"risk model": "floor: per-method thresholds picked on the scored rows (in-sample, not a model)",
                 "dangerous": 0, "oom_rows": int((check["status"] == "oom").sum()), "refused": floor,
                 "ok_rows": ok_rows, "refused_pct": 100.0 * floor / ok_rows})
    return pd.DataFrame(rows)


def refused_profile(check: pd.DataFrame, risk: pd.Series) -> pd.DataFrame:
    """Completed runs the gate refuses: how close to the board they really ran, per method and model."""
    refused = check[(check["status"] == "ok") & (risk > MAX_OOM_RISK)].copy()
    refused["measured_pct_of_board"] = 100 * refused["nvidia_smi_bytes"].astype(float) / refused["capacity"]
    refused["predicted_pct_of_board"] = 100 * refused["predicted_peak"] / refused["capacity"]
    setting = [c for c in SETTING if c in check]
    oom_settings = set(check.loc[check["status"] == "oom", setting].astype(str).agg("/".join, axis=1))
    refused["same_setting_also_oom"] = refused[setting].astype(str).agg("/".join, axis=1).isin(oom_settings)
    return (refused.groupby(["method", "model_name"], sort=True)
            .agg(refused=("status", "size"), same_setting_also_oom=("same_setting_also_oom", "sum"),
                 median_measured_pct_of_board=("measured_pct_of_board", "median"),
                 min_measured_pct_of_board=("measured_pct_of_board", "min"),
                 median_predicted_pct_of_board=("predicted_pct_of_board", "median")).reset_index())


def table_source(table: dict[str, tuple[float, int]], rows: int, sources: list[str]) -> str:
    lines = ['"""Theory\'s oom_risk spread per training method. Generated: do not edit; regenerate with',
             f"``{COMMAND}`` (autoconf/evaluation/risk.py says how).", "",
             "SIGMA[method] = 1.4826 · MAD of log(measured / predicted) peak over leave-one-source-out theory estimates of",
             f"{rows} scored ok-row metrics (torch_allocated, nvidia_smi; peak batch length known) of data/measurements.csv, "
             f"sources: {', '.join(sources)};",
             "``*`` = all methods; a method with fewer than 100 residuals uses ``*``.", '"""', "",
             "# method: (sigma of log residual, residual rows it was fitted on)",
             "SIGMA: dict[str, tuple[float, int]] = {"]
    lines += [f'    "{method}": ({sigma:.4f}, {n}),' for method, (sigma, n) in table.items()]
    return "\n".join([*lines, "}", ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="measurements CSV (default: $AUTOCONF_DATA or data/)")
    parser.add_argument("--write", action="store_true", help="write risk_table.py and section theory-risk")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    frame = load_measurements(args.data)
    scored, check = per_source(frame, "theory", loso=True)
    check = check[check["error"] == ""]
    residuals = rk.log_residuals(scored)
    table = rk.fit_sigmas(residuals)
    risk = rk.cross_fit_risk(check, residuals)
    fitted = pd.DataFrame([{"method": m, "sigma_log": s, "residual_rows": n} for m, (s, n) in table.items()])
    parts = ["## Theory's oom_risk: calibrated on held-out residuals",
             f"Regenerate (after any change to theory): `{COMMAND}`; it writes `autoconf/estimators/theory/risk_table.py`. "
             "risk = P(Normal(0, σ_method) > log(capacity / predicted device peak)); σ = 1.4826·MAD of leave-one-source-out "
             "log(measured / predicted) peaks (torch_allocated and nvidia_smi) of runs whose peak batch length is known "
             "(a variable-length row states the mean length: its residual measures that input, not theory). "
             "All figures below are cross-fitted: each (source, model) group's risk uses σ fitted without it. "
             f"Gate: risk ≤ {MAX_OOM_RISK}.",
             "### σ per method (shipped table)", markdown_table(fitted, 4),
             "### Trade-off: risk models at the gate (theory, leave-one-source-out)", markdown_table(variants(check, residuals)),
             "### The shipped risk at other gates (held out)", markdown_table(gate_scan(check, risk), 2),
             "### Held-out confusion per method (shipped σ)",
             markdown_table(rk.gate_confusion(check.assign(oom_risk=risk), ["method"])),
             "### Calibration curve (held out)", markdown_table(rk.calibration_curve(risk, check["status"] == "oom")),
             "### Why completed runs are refused",
             "Completed runs the shipped gate refuses, per method and model: how full the board really was (nvidia-smi), "
             "what theory predicted, and how many share every input with a run of the same source that ran out of memory "
             "(run-to-run variation, or a difference theory does not model, such as baseline vs accelerated kernels).",
             markdown_table(refused_profile(check, risk))]
    markdown = "\n\n".join(parts) + "\n"
    print(markdown)
    print(f"runtime {time.perf_counter() - start:.0f} s")
    if args.write:
        TABLE.write_text(table_source(table, len(residuals), sorted(residuals["source"].unique())), encoding="utf-8")
        print(f"wrote {TABLE} and section theory-risk of {update_section('docs/accuracy.md', 'theory-risk', markdown)}")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
