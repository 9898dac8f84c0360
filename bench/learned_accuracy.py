"""Held-out accuracy of theory vs learned vs hybrid, the OOM classifier and oom_risk calibration.

    python bench/learned_accuracy.py [--version 1.0.0] [--rebuild]

Writes sections ``memory-learned-hybrid``, ``oom-classifier`` and ``oom-risk-calibration`` of
docs/accuracy.md from the held-out scores the build stored in the version's card.json (the build
computes them with a split grouped by model: each model's rows are predicted by predictors trained on
the other models only). ``--rebuild`` first rebuilds the version from data/ (`autoconf-gpu models
build`), so that one command regenerates everything.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.estimators.learned import versions as V
from autoconf.evaluation.accuracy import markdown_table
from autoconf.evaluation.data import default_path
from bench._report import update_section

REPORT = "docs/accuracy.md"
ESTIMATORS = ("theory", "learned", "hybrid")
METRICS = {"torch_allocated": "torch max_memory_allocated (allocator peak)",
           "nvidia_smi": "nvidia-smi peak (what decides an OOM)", "tokens_per_second": "tokens/s (whole job)"}


def _header(card: dict[str, Any], command: str) -> str:
    data = card["data"]
    stale = "" if V.sha256_file(default_path()) == data["sha256"] else (
        " **The data file changed since this build: rebuild the version to refresh these numbers.**")
    return (f"Regenerate: `{command}`. Model version {card['version']} ({card['date']}), data `{data['path']}` "
            f"sha256 `{data['sha256'][:12]}…` ({data['rows']} rows; {data['rows_used']} usable: ok/oom, catalogued "
            f"model, not a copy, fixed-length samples).{stale} Split: {card['held_out']['split']} "
            f"({', '.join(card['held_out']['models'])}).")


def memory_section(card: dict[str, Any], command: str) -> str:
    held = card["held_out"]
    overall = [{"metric": m, "estimator": e, **held[m][e]} for m in METRICS for e in ESTIMATORS]
    parts = ["## Learned and hybrid vs theory, held-out architectures", _header(card, command),
             "Error % = 100·(predicted − measured)/measured; bias = median signed error. learned = theory × the "
             "learned ratio everywhere; hybrid = theory × the learned ratio only inside the correction domain and "
             "only for the corrections that beat theory on these held-out rows (below); theory elsewhere.",
             "### Overall", markdown_table(pd.DataFrame(overall), digits=2)]
    corrections = [{"correction": k, "applied by hybrid": v["applied"],
                    "theory median abs %": v.get("theory_median_abs_error_pct"),
                    "corrected median abs %": v.get("corrected_median_abs_error_pct")}
                   for k, v in card["hybrid"]["corrections"].items() if "theory_median_abs_error_pct" in v]
    parts += ["### Which corrections the hybrid applies", markdown_table(pd.DataFrame(corrections), digits=2)]
    for metric, label in METRICS.items():
        parts += [f"### By held-out model: {label}, median abs % error",
                  markdown_table(pd.DataFrame(held[metric]["by_model"]), digits=2)]
    parts.append("in_correction_domain = share of the model's rows inside the domain learned from the *other* models "
                 "(mixtral is the only MoE and santacoder the only gpt_bigcode model measured, so held out they fall "
                 "outside it and the hybrid answers with theory there).")
    return "\n\n".join(parts) + "\n"


def oom_section(card: dict[str, Any], command: str) -> str:
    oom = card["held_out"]["oom"]
    cls = oom["classifier"]
    rows = [{"estimator": e, "said fits": oom[e]["fits_answers"], "fits but OOM": oom[e]["fits_but_oom"],
             "oom_risk ≤ 0.05": oom[e]["risk_le_0.05_answers"],
             "oom_risk ≤ 0.05 but OOM": oom[e]["risk_le_0.05_but_oom"]}
            for e in ESTIMATORS]
    return "\n\n".join([
        "## Out-of-memory: the classifier and the \"fits\" answers, held-out architectures", _header(card, command),
        f"Rows: {oom['rows']} unique fixed-length runs that completed (`ok`) or ran out of memory (`oom`, "
        f"{oom['oom_rows']} rows). The learned OOM classifier (the learned estimator's `oom_risk`), "
        "trained without the "
        f"scored model: accuracy **{cls['accuracy']:.3f}** at 0.5, ROC AUC **{cls['auc']:.3f}** (n = {cls['n']}).",
        "\"said fits\" = predicted peak ≤ capacity; \"oom_risk ≤ 0.05\" = what the recommender accepts by default. "
        "theory's risk is a log-normal model with σ per method fitted on held-out residuals (section theory-risk); "
        "learned's is the classifier's probability; "
        "hybrid's is split-conformal from held-out residuals of the other models (2× wider outside its domain).",
        markdown_table(pd.DataFrame(rows)),
    ]) + "\n"


def calibration_section(card: dict[str, Any], command: str) -> str:
    oom = card["held_out"]["oom"]
    parts = ["## Calibration of `oom_risk`, held-out architectures", _header(card, command),
             "Rows binned by the stated risk; a calibrated risk has an observed OOM rate close to the mean risk of its "
             "bin (and, for the recommender, none above the 0.05 threshold it accepts)."]
    for name in ESTIMATORS:
        parts += [f"### {name}", markdown_table(pd.DataFrame(oom[name]["calibration"]), digits=4)]
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="latest", help="model version (default: newest installed)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the version from data/ first")
    args = parser.parse_args(argv)
    version = V.resolve(args.version) if not args.rebuild or args.version == "latest" else args.version
    if args.rebuild:
        from autoconf.evaluation.build import build_version

        build_version(version)
    card = V.read_card(version)
    command = "python bench/learned_accuracy.py --rebuild"
    update_section(REPORT, "memory-learned-hybrid", memory_section(card, command),
                   title="Accuracy against measured runs")
    update_section(REPORT, "oom-classifier", oom_section(card, command))
    update_section(REPORT, "oom-risk-calibration", calibration_section(card, command))
    print(f"wrote sections memory-learned-hybrid, oom-classifier, oom-risk-calibration of {REPORT} (version {version})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
