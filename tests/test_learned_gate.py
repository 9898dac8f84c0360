"""The 2.x learned layer's rules, with hand-derived expectations: corrected peaks, the per-framework gate,
the risk bands and the training rule of each major version."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autoconf.estimators.learned.estimator import corrected_peaks
from autoconf.estimators.learned.model import VersionModel, band, conformal_risk
from autoconf.estimators.theory.vector import MemoryBatch
from autoconf.evaluation.build import rule_for, training_rows

GB = 1e9


def _theory(allocated: float, reserved: float, peak: float) -> MemoryBatch:
    one = np.array
    return MemoryBatch(parts={}, allocated=one([allocated]), reserved=one([reserved]), peak=one([peak]), phase=[""],
                       capacity=one([80 * GB]), oom_risk=one([np.nan]), micro_batch=one([1]), errors=[None])


@pytest.mark.parametrize("ratio, weight, expected", [
    # nothing applied: theory's three peaks
    ({"memory_allocated": 1.21, "memory_reserved": 2.0, "memory_device": 0.5}, {}, (10, 11, 14)),
    # allocated × 1.21**0.5 = 11; reserved (w 0) keeps theory's 11; device (w 0) keeps 14
    ({"memory_allocated": 1.21, "memory_reserved": 2.0, "memory_device": 0.5}, {"memory_allocated": 0.5},
     (11, 11, 14)),
    # device × 0.5 = 7 < allocated 10: the peak is never below the allocator's; reserved clipped to it
    ({"memory_allocated": 1.0, "memory_reserved": 1.0, "memory_device": 0.5}, {"memory_device": 1.0}, (10, 10, 10)),
    # 1.x (no reserved predictor): reserved follows the allocator's ratio, 11 × 1.1 = 12.1
    ({"memory_allocated": 1.1, "memory_device": 1.0}, {"memory_allocated": 1.0}, (11, 12.1, 14)),
])
def test_corrected_peaks(ratio: dict[str, float], weight: dict[str, float], expected: tuple[float, ...]) -> None:
    got = corrected_peaks(_theory(10, 11, 14), {k: np.array([v]) for k, v in ratio.items()},
                          {k: np.array([v]) for k, v in weight.items()})
    assert [float(g[0]) for g in got] == pytest.approx(expected)


def _model(corrections: dict[str, object]) -> VersionModel:
    forests = dict.fromkeys(("memory_allocated", "memory_device", "throughput"))
    return VersionModel(version="9.9.9", folder=Path("."), card={"hybrid": {"corrections": corrections}},
                        forests=forests, residuals={})  # type: ignore[arg-type]


def test_gate_weights_per_framework_with_unseen_default() -> None:
    model = _model({"memory_device": {"applied": True, "unseen": {"applied": False, "weight": 0.0}, "frameworks": {
        "fms-hf-tuning": {"applied": True, "weight": 0.5}, "ms-swift": {"applied": False, "weight": 0.0}}}})
    got = model.gate_weights("memory_device", np.array(["fms-hf-tuning", "ms-swift", "a-new-stack"]))
    assert got.tolist() == [0.5, 0.0, 0.0]
    assert model.gate_weights("memory_allocated", np.array(["fms-hf-tuning"])).tolist() == [0.0]  # no decision
    assert model.gate_weights("memory_reserved", np.array(["fms-hf-tuning"])).tolist() == [0.0]  # no predictor


@pytest.mark.parametrize("decision, expected", [
    ({"applied": True, "weight": 0.25}, 0.25), ({"applied": False, "weight": 0.5}, 0.0),
    ({"applied": True}, 1.0),  # 1.x throughput: applied whole, no weight recorded
])
def test_gate_weights_of_a_1x_card_hold_for_every_stack(decision: dict[str, object], expected: float) -> None:
    got = _model({"throughput": decision}).gate_weights("throughput", np.array(["hf-trainer", "fms-hf-tuning"]))
    assert got.tolist() == [expected, expected]


def test_band_splits_at_half_the_capacity() -> None:
    assert band(np.array([39.0, 40.0, 79.0]), np.array([80.0, 80.0, 80.0])).tolist() == ["far", "near", "near"]


@pytest.mark.parametrize("capacity", [[40, 80, 141]])
def test_conformal_risk_never_rises_with_capacity(capacity: list[int]) -> None:
    residuals = np.sort(np.array([-0.2, -0.1, 0.0, 0.05, 0.1, 0.3]))
    risks = conformal_risk(residuals, np.log(np.array(capacity, dtype=float) / 60.0))
    assert risks.tolist() == sorted(risks.tolist(), reverse=True)
    assert risks[0] == 1.0 and risks[-1] == pytest.approx(1 / 7)  # all 6 above log(40/60); none above log(141/60)


def test_training_rule_per_major_version() -> None:
    assert rule_for("1.0.0").sources == ("fms-acceleration",) and not rule_for("1.4.2").scored_only
    assert "memory_reserved" not in rule_for("1.0.0").targets
    assert rule_for("2.0.0").sources is None and rule_for("2.0.0").scored_only
    assert "memory_reserved" in rule_for("2.1.0").targets and rule_for("0.0.1") == rule_for("2.0.0")
    frame = pd.DataFrame({"source": ["fms-acceleration", "ms-swift", "ms-swift"], "scored": [1, 1, 0]})
    assert len(training_rows(frame, rule_for("1.0.0"), shipped=True)) == 1
    assert training_rows(frame, rule_for("2.0.0"), shipped=True)["scored"].tolist() == [1, 1]
    assert len(training_rows(frame, rule_for("1.0.0"), shipped=False)) == 3  # --data FILE: every row
