"""``autoconf-gpu models build VERSION``: train, score, export and seal one learned-model version.

Steps (deterministic: seeded single-threaded LightGBM, AutoGluon's fixed split seed, sorted folds):
1. the training table from data/measurements.csv (train.build_table);
2. leave-one-model-out and leave-one-source-out predictions of every target -> held-out scores, the
   hybrid's choice of corrections per (target, framework) (gate.py), the residual pools of its OOM risk
   and calibration tables (learned.py, heldout.py);
3. the predictors refitted on every row, saved as AutoGluon predictors, copied into numpy
   (fastpath.py) and checked to reproduce AutoGluon on every training row and the sweep space;
4. residuals.npz, card.json and MANIFEST.sha256; the version must stay under 20 MB.
All of it happens in a temporary folder inside the models root, renamed into place at the end.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autoconf.catalog import get_architecture, get_gpu
from autoconf.defaults import models_dir
from autoconf.errors import InvalidInputError
from autoconf.estimators.learned import train as T
from autoconf.estimators.learned import versions as V
from autoconf.estimators.learned.domain import CorrectionDomain, answerable_domain, training_domain
from autoconf.evaluation import gate as G
from autoconf.evaluation import heldout as H
from autoconf.evaluation import learned as E
from autoconf.evaluation.data import default_path, load_measurements, row_to_inputs
from autoconf.evaluation.space import space_features

log = logging.getLogger(__name__)
TARGET_TEXT = {"memory_allocated": "torch max_memory_allocated / theory allocator peak (peak - overhead)",
               "memory_reserved": "torch max_memory_reserved / theory reserved peak",
               "memory_device": "nvidia-smi peak / theory peak", "oom": "P(status = oom) among ok and oom runs",
               "throughput": "measured tokens/s / theory tokens/s"}

# What a version learns from, per major version (SemVer: new training data or features => major). Built from the
# shipped table, 1.x learns from the fms-acceleration runs only with the 1.x features (what 1.0.0 was built from,
# so a rebuild of 1.0.0 gives the same predictors); 2.x from every source's scored rows (``scored`` = 1, see
# data/README.md: a row whose setup a Job cannot express, or whose value is an author's statement, is not
# trained on) with the stack's profile behaviours and the GPU as features and one predictor per memory metric.
# A table given with --data (a user's own runs, `autoconf-gpu data import`) is used whole (its scored rows).
@dataclass(frozen=True)
class TrainingRule:
    sources: tuple[str, ...] | None  # None: every source
    scored_only: bool
    targets: dict[str, T.Target]
    risk_model: str = "conformal"  # the hybrid's oom_risk (card hybrid.risk_model; estimators/hybrid.py)


# 2.x states the hybrid's risk with theory's model ("theory-sigma"): among the risk models compared on the same
# cross-fitted rows (docs/accuracy.md, section oom-classifier) it refused the fewest completed runs with the fewest
# dangerous calls (the conformal band pools refused about twice as many at the same dangerous count).
RULES = {1: TrainingRule(("fms-acceleration",), False, T.TARGETS_V1),
         2: TrainingRule(None, True, T.TARGETS_V2, "theory-sigma")}
TRAINING_SOURCES = RULES[1].sources  # kept for the 1.x documentation
FASTPATH_TOLERANCE = 1e-6  # LightGBM's JSON dump rounds leaf values; 400 trees stay far below this


def rule_for(version: str) -> TrainingRule:
    """The rule of ``version``'s major (0.x, test builds: the newest)."""
    major = int(V.check_version(version).split(".")[0])
    known = [k for k in RULES if k <= major]
    return RULES[max(known)] if known else RULES[max(RULES)]


def training_rows(frame: pd.DataFrame, rule: TrainingRule, shipped: bool) -> pd.DataFrame:
    """The rows of ``frame`` a version trains on: the rule's sources (shipped table only), scored rows."""
    if shipped and rule.sources is not None and "source" in frame:
        frame = frame[frame["source"].isin(rule.sources)]
    if rule.scored_only and "scored" in frame:
        frame = frame[frame["scored"].fillna(1).astype(int) == 1]
    return frame


def _export(table: T.Table, folder: Path) -> dict[str, Any]:
    """Refit every target on all rows; save predictor + fast path; check they agree."""
    checks: dict[str, Any] = {}
    space = space_features()
    for name, target in table.targets.items():
        frame = T.training_frame(table, target)
        if len(frame) < T.MIN_TRAINING_ROWS or frame["label"].nunique() < 2:
            checks[name] = {"trained": False, "rows": int(len(frame)),
                            "why": f"fewer than {T.MIN_TRAINING_ROWS} rows with a finite target (or one class)"}
            continue
        predictor = T.fit(T.training_frame(table, target), target, folder / "autogluon" / name)
        predictor.save_space()
        shutil.rmtree(folder / "autogluon" / name / "logs", ignore_errors=True)
        forest = T.export_forest(predictor, target)
        forest.save(folder / "fastpath" / f"{name}.npz")
        diffs = []
        for x in (table.x, space):
            fast = forest.predict(x[list(forest.features)].to_numpy())
            diffs.append(T.max_abs_difference(fast, T.predict(predictor, x, target)))
        if max(diffs) > FASTPATH_TOLERANCE:
            raise RuntimeError(f"fast path of {name} differs from AutoGluon by {max(diffs):.3g} "
                               f"(> {FASTPATH_TOLERANCE})")
        checks[name] = {"trees": int(len(forest.roots)), "max_depth": forest.depth,
                        "features_used": list(forest.features),
                        "rows_trained": int(len(T.training_frame(table, target))),
                        "max_abs_difference_vs_autogluon": {"training_rows": diffs[0], "sweep_space_rows": diffs[1]},
                        "sweep_space_rows_checked": int(len(space))}
    return checks


def _fastpath_digest(folder: Path) -> str:
    """SHA-256 over the arrays of every fast-path file (npz zip metadata excluded): equal builds, equal digest."""
    digest = hashlib.sha256()
    for path in sorted((folder / "fastpath").glob("*.npz")):
        with np.load(path, allow_pickle=False) as z:
            for key in sorted(z.files):
                digest.update(key.encode())
                digest.update(np.ascontiguousarray(z[key]).tobytes())
    return digest.hexdigest()


def _card(version: str, data: Path, frame_rows: int, table: T.Table, checks: dict[str, Any], report: dict[str, Any],
          corrections: dict[str, Any], pools: dict[str, np.ndarray], seconds: float, command: str) -> dict[str, Any]:
    rows = table.rows
    cols = {c: table.x[c].to_numpy() for c in table.x.columns}
    canonical = [get_architecture(name).name for name in rows["model_name"].tolist()]  # catalogue names, not the source's
    boards = [get_gpu(name).name for name in rows["gpu_model"].tolist()]
    train_dom = training_domain(canonical, rows["method"].tolist(), boards,
                                rows["tokens_per_sample"].to_numpy(int), rows["batch_size"].to_numpy(int),
                                rows["number_gpus"].to_numpy(int))
    return {
        "version": version, "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "build_command": command,
        "build_seconds": round(seconds, 1), "seed": T.SEED,
        "data": {"path": "data/measurements.csv", "sha256": V.sha256_file(data), "rows": frame_rows,
                 "rows_used": int(len(table)),
                 "rows_per_target": {k: int(table.y[k].notna().sum()) for k in table.targets},
                 "rows_per_source": {str(k): int(v) for k, v in rows["source"].value_counts().sort_index().items()}
                 if "source" in rows else {}},
        "features": {name: list(t.features) for name, t in table.targets.items() if checks[name].get("trained", True)},
        "targets": {k: v for k, v in TARGET_TEXT.items() if k in table.targets},
        "model": {"library": f"autogluon.tabular {package_version('autogluon.tabular')}",
                  "algorithm": "LightGBM (AutoGluon 'GBM')",
                  "hyperparameters": T.GBM_PARAMS, "predictors": checks},
        "fastpath": {"format": "numpy .npz of the LightGBM trees (no pickle), verified against AutoGluon at build",
                     "tolerance": FASTPATH_TOLERANCE, "arrays_sha256": None},
        "answerable_domain": answerable_domain(), "training_domain": train_dom.to_json(),
        "correction_domain": CorrectionDomain.from_features(cols).to_json(),
        "hybrid": {"corrections": corrections, "out_of_domain_residual_scale": E.OUT_OF_DOMAIN_SCALE,
                   "risk_model": rule_for(version).risk_model,
                   "residual_rows": {k: int(np.isfinite(v).sum()) for k, v in pools.items()}},
        "held_out": report,
        "environment": {"python": platform.python_version(), "autogluon.tabular": package_version("autogluon.tabular"),
                        "lightgbm": package_version("lightgbm"), "numpy": package_version("numpy")},
    }


def build_version(version: str, data: Path | None = None, root: Path | None = None,
                  command: str | None = None, force: bool = False) -> Path:
    """Build ``version`` from ``data`` (default data/measurements.csv) into ``root``/version.

    The version is MAJOR.MINOR.PATCH (never a path). Everything is written into a fresh temporary
    folder inside ``root`` and renamed into place at the end, so a failed or interrupted build leaves
    the installed versions as they were; an existing version is replaced only with ``force``, and
    nothing outside the temporary folders this call created is ever deleted.
    """
    V.check_version(version)
    base = Path(root) if root is not None else models_dir()
    target = base / version
    if (target.exists() or target.is_symlink()) and not force:
        raise InvalidInputError("version", f"{version} already exists in {base}; pass --force to replace it")
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".build-{version}-", dir=base))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it 0700; a version is as readable as a plain mkdir's
    try:
        _build_into(staging, version, data, command)
        _install(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # our own temporary folder only (empty after _install)
    return target


def _install(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``; an old ``target`` is first moved into a temporary folder of ours."""
    if not (target.exists() or target.is_symlink()):
        os.replace(staging, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".old-{target.name}-", dir=target.parent))
    try:
        os.replace(target, old / target.name)  # a symlink is moved as a link; its destination is untouched
        os.replace(staging, target)
    finally:
        shutil.rmtree(old, ignore_errors=True)


def _build_into(folder: Path, version: str, data: Path | None, command: str | None) -> None:
    """Train, score, export and seal one version into the (empty) ``folder``."""
    start = time.time()
    data_path = Path(data) if data else default_path()
    rule = rule_for(version)
    whole = load_measurements(data_path)
    frame = training_rows(whole, rule, shipped=data is None)
    table = T.build_table(frame, row_to_inputs, rule.targets)
    with tempfile.TemporaryDirectory(prefix="autoconf-build-") as tmp:
        lomo = E.grouped_predictions(table, Path(tmp) / "model")
        loso = E.grouped_predictions(table, Path(tmp) / "source", table.sources)
    corrections, w_lomo, w_loso = G.decide(table, lomo, loso)
    if not rule.targets.keys() >= {"memory_reserved"}:  # 1.x: one decision for every row, as 1.0.0's card
        corrections = {k: {**v["frameworks"].get("fms-hf-tuning", v["unseen"]), "applied": v["applied"]}
                       if "frameworks" in v else v for k, v in corrections.items()}
    preds, preds_loso = E.predictions(table, lomo, w_lomo), E.predictions(table, loso, w_loso)
    applied, applied_loso = E.applied_rows(w_lomo, len(table)), E.applied_rows(w_loso, len(table))
    peak, peak_loso = preds["hybrid"]["peak"], preds_loso["hybrid"]["peak"]
    shipped = E.strata("band", table, peak)
    pools = E.residual_pools(table, preds, applied, shipped)
    sigma_shipped = rule.risk_model == "theory-sigma"
    conformal = E.hybrid_risk(table, peak, pools, lomo.inside, applied, table.groups, shipped)
    sigma = E.theory_sigma_risk(table, peak, lomo.inside)
    risks = {"theory": table.theory.oom_risk, "learned": lomo.oof["oom"], "hybrid": sigma if sigma_shipped else conformal}
    # the variants it was compared with (docs/accuracy.md): the other rule, and conformal / log-normal pools
    risks["hybrid:band" if sigma_shipped else "hybrid:theory-sigma"] = conformal if sigma_shipped else sigma
    for kind in ("all", "method"):
        labels = E.strata(kind, table, peak)
        risks[f"hybrid:{kind}"] = E.hybrid_risk(table, peak, E.residual_pools(table, preds, applied, labels),
                                                lomo.inside, applied, table.groups, labels)
    risks["hybrid:lognormal"] = E.hybrid_risk(table, peak, pools, lomo.inside, applied, table.groups, shipped,
                                              "lognormal")
    labels = E.strata("band", table, peak_loso)
    risks["hybrid:loso"] = (E.theory_sigma_risk(table, peak_loso, loso.inside) if sigma_shipped else E.hybrid_risk(
        table, peak_loso, E.residual_pools(table, preds_loso, applied_loso, labels), loso.inside, applied_loso,
        table.sources, labels))
    report: dict[str, Any] = {
        "split": "leave one model out (grouped by model_name): each model's rows are predicted by predictors trained "
                 "on the other models only", "models": sorted(set(table.groups)),
        "sources": sorted(set(table.sources.tolist())),
        "loso_split": "leave one source out: each source's rows are predicted by predictors trained on the other "
                      "sources only",
        "lomo": H.error_tables(table, preds, w_lomo), "loso": H.error_tables(table, preds_loso, w_loso),
        "by_model": H.by_model(table, preds, lomo.inside),
        "oom": H.oom_report(table, {**preds, "hybrid:loso": preds_loso["hybrid"]}, lomo, risks),
    }
    for metric in report["lomo"]["overall"]:  # the 1.x layout, read by older readers
        report[metric] = report["lomo"]["overall"][metric]
    (folder / "fastpath").mkdir(parents=True)
    checks = _export(table, folder)
    # one dict of arrays: numpy's stub would let a ``**`` key stand for its bool ``allow_pickle``
    residuals: dict[str, Any] = {k: np.sort(v[np.isfinite(v)]) for k, v in pools.items()}
    np.savez_compressed(folder / "residuals.npz", **residuals)
    card = _card(version, data_path, len(whole), table, checks, report, corrections, pools, time.time() - start,
                 command or f"autoconf-gpu models build {version}")
    card["fastpath"]["arrays_sha256"] = _fastpath_digest(folder)
    (folder / V.CARD).write_text(json.dumps(card, indent=1, default=float) + "\n", encoding="utf-8")
    V.write_manifest(folder)
    size = V.folder_bytes(folder)
    if size > V.MAX_VERSION_BYTES:
        limit = V.MAX_VERSION_BYTES / 2**20
        raise RuntimeError(f"version {version} is {size / 2**20:.1f} MiB; it must stay under {limit:.0f} MiB")
    log.info("built %s in %.0f s (%.1f MiB)", version, time.time() - start, size / 2**20)
