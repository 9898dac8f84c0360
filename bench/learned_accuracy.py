"""Held-out accuracy of theory vs learned vs hybrid per source/framework/metric/method, the gate, oom_risk.

    python bench/learned_accuracy.py [--version 2.0.0] [--rebuild [--pin]]

Writes sections ``memory-learned-hybrid``, ``oom-classifier`` and ``oom-risk-calibration`` of
docs/accuracy.md from the held-out scores the build stored in the version's card.json: leave one model
out (each model's rows predicted by predictors trained on the other models) and leave one source out
(each source's rows predicted without any row of that source). ``--rebuild`` first rebuilds the version
from data/ (`autoconf-gpu models build VERSION --force`); ``--pin`` then writes the new manifest's SHA-256
into ``versions.PINNED_MANIFESTS``: one command regenerates the version, its pin and these sections.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.estimators.learned import versions as V  # noqa: E402
from autoconf.evaluation.accuracy import markdown_table  # noqa: E402
from autoconf.evaluation.data import default_path  # noqa: E402
from bench._report import update_section  # noqa: E402

REPORT = "docs/accuracy.md"
ESTIMATORS = ("theory", "learned", "hybrid")
METRICS = {"torch_allocated": "torch max_memory_allocated (allocator peak)",
           "torch_reserved": "torch max_memory_reserved", "nvidia_smi": "nvidia-smi peak (what decides an OOM)",
           "tokens_per_second": "tokens/s (whole job)"}
CONFORMAL = "conformal, the hybrid's held-out residuals of runs in the same band (near/far from capacity)"
SIGMA = "theory's log-normal σ per method, of the larger of the hybrid's and theory's peak"
RISKS = {"theory": "theory: log-normal, σ per method fitted on held-out residuals", "learned": "learned: the OOM classifier",
         "hybrid": "hybrid as shipped", "hybrid:band": f"variant: {CONFORMAL}",
         "hybrid:theory-sigma": f"variant: {SIGMA}",
         "hybrid:all": "variant: conformal, one pool for every row", "hybrid:method": "variant: conformal, pools per method",
         "hybrid:lognormal": "variant: log-normal, σ = 1.4826·MAD of the same band pools",
         "hybrid:loso": "hybrid held out by source (peaks of predictors trained on the other sources)"}


def _risk_label(card: dict[str, Any], name: str) -> str:
    if name != "hybrid":
        return RISKS[name]
    sigma = card.get("hybrid", {}).get("risk_model", "conformal") == "theory-sigma"
    return f"hybrid as shipped: {SIGMA if sigma else CONFORMAL}"
STATS = ("median", "p90", "bias")


def _header(card: dict[str, Any], command: str) -> str:
    data = card["data"]
    stale = "" if V.sha256_file(default_path()) == data["sha256"] else (
        " **The data file changed since this build: rebuild the version to refresh these numbers.**")
    per_source = ", ".join(f"{k} {v}" for k, v in data.get("rows_per_source", {}).items())
    return (f"Regenerate: `{command}`. Model version {card['version']} ({card['date']}), data `{data['path']}` "
            f"sha256 `{data['sha256'][:12]}…` ({data['rows']} rows; {data['rows_used']} trained on and scored: "
            f"ok/oom, scored = 1, a model and stack theory answers, not a copy, fixed-length samples"
            f"{'; ' + per_source if per_source else ''}).{stale}")


def _wide(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> pd.DataFrame:
    cols = [*keys, "n", *(f"{e}_{s}" for e in ESTIMATORS for s in STATS)]
    return pd.DataFrame(rows)[[c for c in cols if c in (rows[0] if rows else {})]]


def _corrections(card: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for target, c in card["hybrid"]["corrections"].items():
        if "frameworks" not in c:
            continue
        for fw, d in [*c["frameworks"].items(), ("(any other stack)", c["unseen"])]:
            if not d.get("rule", "").startswith(("trained", "no training")):
                continue
            rows.append({"correction": target, "framework": fw, "rule": d["rule"].split(":")[0], "applied": d["applied"],
                         "weight": d["weight"], "rows": d.get("rows"),
                         "theory median abs %": d.get("theory_median_abs_error_pct"),
                         "corrected median abs %": d.get("corrected_median_abs_error_pct"),
                         "why not": d.get("why", "")})
    return pd.DataFrame(rows)


def memory_section(card: dict[str, Any], command: str) -> str:
    held = card["held_out"]
    parts = ["## Learned and hybrid vs theory, held out by model and by source", _header(card, command),
             "Error % = 100·(predicted − measured)/measured; median and p90 of |error %|; bias = median signed "
             "error %. learned = theory × the learned ratio everywhere; hybrid = theory × the learned ratio only "
             "inside the correction domain and only for the (correction, framework) pairs that beat theory on "
             "held-out rows (the gate below); theory elsewhere. Leave one model out: each model's rows are "
             "predicted by predictors trained on the other models (every source). Leave one source out: each "
             "source's rows by predictors trained on the other sources only; there the hybrid corrects a stack "
             "only if the other sources measured it (its trained decision) or the `(any other stack)` rule "
             "applies. The shrinkage weight and each decision are chosen on the same held-out rows that are "
             "reported (four weights, one bit per pair). theory is as shipped: the fms-hf-tuning device line was "
             "fitted on fms-acceleration rows, so theory's nvidia-smi numbers there are in-sample (section `sources` "
             "shows theory with it held out). learned is empty where the fold had no rows to train on.",
             "### The gate: which correction the hybrid applies to which stack (card.json hybrid.corrections)",
             markdown_table(_corrections(card), digits=2),
             "### Must-show: hybrid vs theory per held-out source and metric, leave one source out",
             "`hybrid_not_worse`: the hybrid's median is not above theory's on that source (where it is, the "
             "correction must not be applied there, so hybrid = theory).",
             markdown_table(_wide(held["loso"]["by_source"], ("source", "metric")).assign(
                 corrected_share=[r["corrected_share"] for r in held["loso"]["by_source"]],
                 hybrid_not_worse=[r["hybrid_not_worse"] for r in held["loso"]["by_source"]]), digits=2),
             "### Per source and metric, leave one model out (the stack seen, the architecture not)",
             markdown_table(_wide(held["lomo"]["by_source"], ("source", "metric")).assign(
                 corrected_share=[r["corrected_share"] for r in held["lomo"]["by_source"]],
                 hybrid_not_worse=[r["hybrid_not_worse"] for r in held["lomo"]["by_source"]]), digits=2)]
    for split, label in (("loso", "leave one source out"), ("lomo", "leave one model out")):
        parts += [f"### Per source, framework, metric and method, {label}",
                  markdown_table(_wide(held[split]["by_group"], ("source", "framework", "metric", "method")), digits=2)]
    for metric, label in METRICS.items():
        if metric in held.get("by_model", {}):
            parts += [f"### By held-out model: {label}, median abs % error",
                      markdown_table(pd.DataFrame(held["by_model"][metric]), digits=2)]
    parts.append("in_correction_domain = share of the model's rows inside the domain learned from the *other* models "
                 "(a model whose block family or size no other model covers falls outside it when held out, and the "
                 "hybrid answers with theory there).")
    return "\n\n".join(parts) + "\n"


def oom_section(card: dict[str, Any], command: str) -> str:
    oom = card["held_out"]["oom"]
    cls = oom["classifier"]
    rows = [{"oom_risk": label, "OOM runs": r["oom_rows"], "dangerous (risk ≤ gate, OOM)": r["dangerous"],
             "completed runs": r["ok_rows"], "refused (risk > gate, ok)": r["refused"], "refused %": r["refused_pct"],
             "said fits but OOM": r["fits_but_oom"]}
            for name in RISKS if (r := oom["risks"].get(name)) for label in [_risk_label(card, name)]]
    by_source = [{"oom_risk": name, "source": s, **counts} for name in ("hybrid", "hybrid:loso")
                 for s, counts in oom["risks"].get(name, {}).get("by_source", {}).items() if counts["oom_rows"]
                 or counts["ok_rows"]]
    return "\n\n".join([
        "## Out-of-memory at the recommender's gate, held out", _header(card, command),
        f"Rows: {oom['rows']} runs that completed (`ok`) or ran out of memory (`oom`, {oom['oom_rows']} rows); gate "
        f"oom_risk ≤ {oom['gate']} (defaults.MAX_OOM_RISK). Every peak is held out (predictors trained without the "
        "row's model, or without its source for hybrid:loso), and every risk drawn from residual pools uses the pools "
        "of the other models (or sources) only; theory's σ per method (theory and the theory-sigma rows) is the "
        "shipped table, fitted on leave-one-source-out residuals of all sources (cross-fitted by source and model in "
        "section theory-risk). "
        f"The learned OOM classifier, trained without the scored model: accuracy **{cls['accuracy']:.3f}** at 0.5, "
        f"ROC AUC **{cls['auc']:.3f}** (n = {cls['n']}).",
        markdown_table(pd.DataFrame(rows)),
        ("The shipped risk model (card hybrid.risk_model = theory-sigma) was chosen among the variants in this table on "
         "these same cross-fitted rows — the fewest completed runs refused at the fewest dangerous calls: disclosed, "
         "not validated on other rows. It takes theory's peak where the correction lowers it, so a correction never "
         "lowers the risk; theory's σ was fitted on leave-one-source-out residuals (section theory-risk)."
         if card.get("hybrid", {}).get("risk_model") == "theory-sigma" else
         "The band stratum (near: predicted device peak ≥ 50 % of the GPU) was chosen among the variants in this table "
         "on these same cross-fitted rows: disclosed, not validated on other rows. Near capacity PyTorch's caching "
         "allocator frees its cached blocks and retries before it raises an OOM, so the device residuals of runs far "
         "below capacity (cache kept) overstate the risk of runs close to it."),
        "hybrid:loso takes each row's residuals from the *other* sources only: with one source in the version's "
        "training rows there are none, so every row's risk is 1 and the gate refuses all (nothing measured "
        "calibrates a stack never seen; the number becomes informative as sources are added)."
        if len(card["held_out"].get("sources", [])) < 2 else "",
        "### Completed runs refused by the hybrid's gate, by how much of the GPU they measured (nvidia-smi peak / "
        "capacity; rows without a device peak are not counted)",
        markdown_table(pd.DataFrame(oom.get("refused_by_measured_use", []))),
        "### By source", markdown_table(pd.DataFrame(by_source)) if by_source else "(no rows)",
    ]) + "\n"


def calibration_section(card: dict[str, Any], command: str) -> str:
    oom = card["held_out"]["oom"]
    parts = ["## Calibration of `oom_risk`, held out", _header(card, command),
             "Rows binned by the stated risk (cross-fitted as above); a calibrated risk has an observed OOM rate "
             "close to the mean risk of its bin, and none above the gate among the rows it accepts."]
    for name in RISKS:
        if name in oom["risks"]:
            parts += [f"### {_risk_label(card, name)}",
                      markdown_table(pd.DataFrame(oom["risks"][name]["calibration"]), digits=4)]
    return "\n\n".join(parts) + "\n"


def pin(version: str) -> str:
    """Write ``version``'s manifest SHA-256 into versions.PINNED_MANIFESTS (the source file); return it."""
    digest = V.sha256_file(V.version_dir(version) / V.MANIFEST)
    path = Path(V.__file__)
    text = path.read_text(encoding="utf-8")
    line = f'    "{version}": "{digest}",\n'
    pattern = re.compile(rf'^    "{re.escape(version)}": "[0-9a-f]{{64}}",\n', re.M)
    if pattern.search(text):
        text = pattern.sub(line, text)
    else:  # a new version: appended as the dict's last entry
        start = text.index("PINNED_MANIFESTS: dict[str, str] = {\n")
        end = text.index("}\n", start)
        text = text[:end] + line + text[end:]
    path.write_text(text, encoding="utf-8")
    return digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="latest", help="model version (default: newest installed)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the version from data/ first (--force)")
    parser.add_argument("--pin", action="store_true", help="with --rebuild: pin the new manifest in versions.py")
    args = parser.parse_args(argv)
    version = V.resolve(args.version) if args.version == "latest" or not args.rebuild else args.version
    if args.rebuild:
        from autoconf.evaluation.build import build_version

        build_version(version, force=True, command=f"autoconf-gpu models build {version} --force")
        if args.pin:
            print(f"pinned {version}: {pin(version)}")
    card = V.read_card(version)
    command = f"python bench/learned_accuracy.py --version {version} --rebuild --pin"
    update_section(REPORT, "memory-learned-hybrid", memory_section(card, command),
                   title="Accuracy against measured runs")
    update_section(REPORT, "oom-classifier", oom_section(card, command))
    update_section(REPORT, "oom-risk-calibration", calibration_section(card, command))
    print(f"wrote sections memory-learned-hybrid, oom-classifier, oom-risk-calibration of {REPORT} (version {version})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
