"""autoconf's estimators behind IBM's classifier and regressor contracts.

IBM's recommenders call ``classifier.predict(frame)`` (1 = the job runs, 0 = it runs out of memory) and
``regressor.predict(frame)`` (dataset tokens per second) on frames with the columns ``model_name``,
``method``, ``gpu_model``, ``tokens_per_sample``, ``batch_size`` (global) and ``number_gpus``.
``EnginePredictor`` answers both from one estimator call per frame (``memory_batch``, then ``annotate``
for the rows that fit): a row runs when its ``oom_risk`` is at most ``max_oom_risk`` (5 %, design §5).
Placement and job settings are those of ado's SFTTrainer stack (FSDP full shard, bf16, flash attention,
gradient checkpointing: ``properties.JOB_DEFAULTS``), the stack IBM's measurements come from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from autoconf.defaults import MAX_OOM_RISK
from autoconf.errors import describe
from autoconf.interfaces.ado.answers import ANSWERABLE, LATEST, answered_by, estimator_of, job_of, plain
from autoconf.interfaces.ado.ibm.model_paths import IBM_VERSIONS
from autoconf.interfaces.ado.properties import DEFAULT_ESTIMATOR_NAME, GPUS_PER_NODE_LIMIT, JOB_DEFAULTS, VERSIONS
from autoconf.schema import GIB, Job, Placement

COLUMNS = ("fits", "oom_risk", "peak_memory_gib", "tokens_per_second", "reason", "answered_by")


def version_note(model_version: str) -> tuple[str, str]:
    """(our version to use, note): ours as asked, or an IBM name answered by our newest, said in the note."""
    if model_version in VERSIONS:
        return model_version, ""
    if model_version in IBM_VERSIONS:
        return LATEST, (f"model_version {model_version} is IBM ado-autoconf's; answered by autoconf's newest "
                        "model version")
    known = ", ".join([*VERSIONS, *IBM_VERSIONS])
    raise ValueError(f"Unknown model_version: {model_version} (known: {known})")


@dataclass(frozen=True)
class EnginePredictor:
    """IBM's classifier/regressor contract answered by ``estimator`` at ``model_version``."""

    estimator: str = DEFAULT_ESTIMATOR_NAME
    model_version: str = LATEST
    max_oom_risk: float = MAX_OOM_RISK
    note: str = ""

    def _placed(self, row: dict[str, Any]) -> tuple[Job, Placement]:
        n = int(plain(row["number_gpus"]))
        job = job_of({**JOB_DEFAULTS, **row})
        return job, Placement(gpu_model=str(row["gpu_model"]), number_gpus=n,
                              gpus_per_worker=min(n, GPUS_PER_NODE_LIMIT))

    def assess(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Per row: fits (1/0), oom_risk, peak_memory_gib, tokens_per_second, reason, answered_by."""
        rows = frame.to_dict("records")
        out = pd.DataFrame({"fits": 0, "oom_risk": math.nan, "peak_memory_gib": math.nan,
                            "tokens_per_second": math.nan, "reason": "", "answered_by": ""},
                           index=range(len(rows)))
        estimator, fallback = estimator_of(self.estimator, self.model_version)
        out["answered_by"] = answered_by(estimator.name, estimator.model_version)
        ok, jobs, places = [], [], []
        for i, row in enumerate(rows):
            try:
                job, place = self._placed(row)
            except (*ANSWERABLE, KeyError, TypeError, ValueError, OverflowError) as exc:
                out.loc[i, "reason"] = describe(exc)
                continue
            ok.append(i)
            jobs.append(job)
            places.append(place)
        if ok:
            batch = estimator.memory_batch(jobs, places)
            risk = np.clip(np.nan_to_num(batch.oom_risk, nan=1.0), 0.0, 1.0)
            fits = np.array([err is None for err in batch.errors]) & (risk <= self.max_oom_risk)
            out.loc[ok, "oom_risk"] = np.where([e is None for e in batch.errors], risk, math.nan)
            out.loc[ok, "peak_memory_gib"] = batch.peak / GIB
            out.loc[ok, "fits"] = fits.astype(int)
            out.loc[ok, "reason"] = [e or "" for e in batch.errors]
            if fits.any():
                notes, throughput = estimator.annotate(jobs, places, batch, fits)
                chosen = [ok[k] for k in np.flatnonzero(fits).tolist()]
                out.loc[chosen, "tokens_per_second"] = [t.tokens_per_second if t else math.nan for t in throughput]
                out.loc[chosen, "reason"] = ["; ".join(n[1:]) for n in notes]
        for extra in filter(None, [self.note, fallback]):
            out["reason"] = [f"{r}; {extra}" if r else extra for r in out["reason"]]
        return out

    def predict(self, frame: pd.DataFrame) -> pd.Series:
        """The classifier's answer (1 runs, 0 out of memory or unanswerable) per row, index 0..n-1."""
        return self.assess(frame)["fits"].astype(int)


@dataclass(frozen=True)
class EngineRegressor:
    """IBM's throughput regressor contract: dataset tokens per second of each row (NaN where unanswered)."""

    predictor: EnginePredictor

    def predict(self, frame: pd.DataFrame) -> pd.Series:
        return self.predictor.assess(frame)["tokens_per_second"].astype(float)
