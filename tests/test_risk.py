"""OOM gate scoring and theory's calibrated risk on tiny hand-made frames (expected values counted by hand)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from autoconf.estimators.risk import need_threshold, oom_probability, sigma_risk
from autoconf.estimators.theory.risk_table import SIGMA
from autoconf.evaluation.risk import (
    calibration_curve,
    cross_fit_risk,
    fit_sigmas,
    gate_confusion,
    log_residuals,
    normal_risk,
    robust_sigma,
)

GIB = 2**30

# status, risk, fits, method: hand-counted at gate 0.05 below
CHECK = pd.DataFrame({
    "status": ["oom", "oom", "oom", "ok", "ok", "ok", "ok", "ok"],
    "oom_risk": [0.01, 0.50, 0.05, 0.00, 0.04, 0.06, 0.90, 0.02],
    "predicted_fits": [True, False, True, True, True, True, False, True],
    "method": ["lora", "full", "full", "lora", "lora", "full", "full", "lora"],
    "error": [""] * 8,
})


def test_gate_confusion_overall() -> None:
    # OOM rows with risk ≤ 0.05: 0.01 and 0.05 (the gate is inclusive) → 2 dangerous; "said fits": rows 0 and 2.
    # ok rows with risk > 0.05: 0.06 and 0.90 → 2 refused of 5 (40 %); ok said not to fit: the 0.90 row.
    row = gate_confusion(CHECK, gate=0.05).iloc[0]
    assert (row["oom_rows"], row["dangerous"], row["oom_said_fits"]) == (3, 2, 2)
    assert (row["ok_rows"], row["refused"], row["ok_said_no_fit"], row["refused_pct"]) == (5, 2, 1, 40.0)


def test_gate_confusion_per_method_and_refused_rows() -> None:
    frame = pd.concat([CHECK, CHECK.iloc[:1].assign(error="model: unknown", oom_risk=np.nan)], ignore_index=True)
    table = gate_confusion(frame, ["method"], gate=0.05).set_index("method")
    # full: oom 0.50 (passes? no) and 0.05 (passes) → 1 dangerous; ok 0.06, 0.90 → 2 refused of 2
    assert table.loc["full", ["oom_rows", "dangerous", "ok_rows", "refused"]].tolist() == [2, 1, 2, 2]
    # lora: oom 0.01 → 1 dangerous; ok 0.00, 0.04, 0.02 all pass; the refused (error) row is not counted
    assert table.loc["lora", ["oom_rows", "dangerous", "ok_rows", "refused"]].tolist() == [1, 1, 3, 0]


def test_calibration_binning() -> None:
    risk = [0.0, 0.02, 0.03, 0.3, 0.4, 1.0, np.nan]
    oom = [False, False, True, True, False, True, True]
    curve = calibration_curve(risk, oom, edges=(0.0, 0.01, 0.05, 0.5, 1.0)).set_index("stated_risk")
    assert curve["rows"].tolist() == [1, 2, 2, 1]  # the NaN row is dropped; 1.0 falls in the closed last bin
    assert curve["oom_rows"].tolist() == [0, 1, 1, 1]
    assert curve.loc["[0.01, 0.05)", "observed_oom_pct"] == pytest.approx(50.0)
    assert curve.loc["[0.05, 0.5)", "mean_stated_pct"] == pytest.approx(35.0)
    assert curve.loc["[0.5, 1]", "observed_oom_pct"] == pytest.approx(100.0)


@pytest.mark.parametrize("values, expected", [
    ([-1.0, 0.0, 1.0], 1.4826),           # deviations 1, 0, 1 → MAD 1
    ([0.1, 0.1, 0.1, 0.5], 0.0),          # three equal values: MAD 0 whatever the outlier
    ([0.0, 0.2, 0.4, 10.0], 1.4826 * 0.2),  # median 0.3; deviations 0.3, 0.1, 0.1, 9.7 → MAD 0.2
])
def test_robust_sigma(values: list[float], expected: float) -> None:
    assert robust_sigma(values) == pytest.approx(expected)


def test_fit_sigmas_needs_enough_rows_per_method() -> None:
    residuals = pd.DataFrame({"method": ["full"] * 4 + ["lora"] * 2, "residual": [-1.0, 0.0, 1.0, 0.0, 0.5, 0.5]})
    table = fit_sigmas(residuals, min_rows=3)
    assert set(table) == {"*", "full"}
    assert table["full"][0] == pytest.approx(1.4826 * 0.5) and table["full"][1] == 4


@pytest.mark.parametrize("headroom, sigma, expected", [
    (0.0, 0.1, 0.5),                  # predicted peak = capacity: even odds
    (0.1645, 0.1, 0.05),              # 1.645 σ of headroom: the one-sided 5 % normal quantile
    (-0.2326, 0.1, 0.99),             # 2.326 σ short of the board
])
def test_normal_risk(headroom: float, sigma: float, expected: float) -> None:
    assert normal_risk(headroom, sigma)[0] == pytest.approx(expected, abs=1e-3)


def test_cross_fit_holds_out_the_scored_group() -> None:
    # Group a's residuals are wide (±1), b's are narrow (±0.01): a row of group b is scored with a's σ only.
    residuals = pd.DataFrame({"source": ["s"] * 6, "model_name": ["a"] * 3 + ["b"] * 3, "method": ["full"] * 6,
                              "residual": [-1.0, 0.0, 1.0, -0.01, 0.0, 0.01]})
    check = pd.DataFrame({"source": ["s"], "model_name": ["b"], "method": ["full"], "capacity": [80.0 * GIB],
                          "predicted_peak": [80.0 * GIB / math.exp(0.1)]})
    risk = cross_fit_risk(check, residuals).iloc[0]
    assert risk == pytest.approx(0.5 * math.erfc(0.1 / 1.4826 / math.sqrt(2)), rel=1e-6)


@pytest.mark.parametrize("method", ["full", "lora", "qlora", None, "unknown-method"])
def test_theory_risk_in_unit_interval_and_monotone_in_capacity(method: str | None) -> None:
    capacities = [c * GIB for c in (0, 20, 40, 60, 70, 80, 90, 120, 1000)]
    risks = [oom_probability(70 * GIB, cap, method=method) for cap in capacities]
    assert all(0.0 <= r <= 1.0 for r in risks)
    assert all(a >= b for a, b in zip(risks, risks[1:], strict=False))
    assert risks[0] == 1.0 and risks[-1] < 1e-6


def test_theory_risk_table_is_used_per_method() -> None:
    # 1.645 σ of the method's own headroom is its 5 % point; an unknown method falls back to the pooled σ
    for method in ("full", "lora", "qlora"):
        sigma = SIGMA[method][0]
        assert oom_probability(1.0 * GIB, GIB * math.exp(1.645 * sigma), method=method) == pytest.approx(0.05, abs=1e-3)
    assert oom_probability(GIB, GIB * math.exp(SIGMA["*"][0]), method="other") == pytest.approx(0.1587, abs=1e-3)


@pytest.mark.parametrize(("method", "inside", "scale"), [("full", True, 2.0), ("lora", False, 2.0), ("qlora", False, 1.5),
                                                      ("other", True, 3.0)])
def test_hybrid_and_layout_gate_state_the_same_risk(method: str, inside: bool, scale: float) -> None:
    # Φ from the standard library, independent of the erfc form; the gate's bound is where that risk is 5 %
    sigma = SIGMA.get(method, SIGMA["*"])[0] * (1.0 if inside else scale)
    need, capacity = np.array([60.0 * GIB, np.nan]), np.array([80.0 * GIB, 80.0 * GIB])
    risk = sigma_risk(need, capacity, np.array([method, method], dtype=object), np.array([inside, inside]), scale)
    assert risk[0] == pytest.approx(1 - NormalDist(0, sigma).cdf(math.log(80 / 60)), rel=1e-9)
    assert math.isnan(risk[1])
    bound = need_threshold(80.0 * GIB, 0.05, method)
    assert oom_probability(bound, 80.0 * GIB, method=method) == pytest.approx(0.05, rel=1e-9)


@pytest.mark.parametrize(("variable", "expected_rows"), [([0, 0, 0], 3), ([0, 1, 0], 2), ([1, 1, 1], 0)])
def test_log_residuals_only_where_the_peak_length_is_known(variable: list[int], expected_rows: int) -> None:
    scored = pd.DataFrame({"error": [""] * 3, "metric": ["nvidia_smi", "torch_allocated", "nvidia_smi"],
                           "measured": [2.0, 1.0, 4.0], "predicted": [1.0, 1.0, 4.0], "variable_length": variable,
                           "method": ["full"] * 3})
    out = log_residuals(scored)
    assert len(out) == expected_rows
    if expected_rows == 3:  # log(2/1), log(1/1), log(4/4)
        assert out["residual"].tolist() == pytest.approx([math.log(2), 0.0, 0.0])
