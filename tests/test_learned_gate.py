"""The 2.x learned layer's rules, with hand-derived expectations: corrected peaks, the per-framework gate,
the risk bands and the training rule of each major version."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autoconf.estimators.learned import train as T
from autoconf.estimators.learned.estimator import corrected_peaks
from autoconf.estimators.learned.model import VersionModel, band, conformal_risk
from autoconf.estimators.theory.vector import MemoryBatch
from autoconf.evaluation.build import rule_for, training_rows
from autoconf.evaluation.data import load_measurements, row_to_inputs
from autoconf.evaluation.gate import decide
from autoconf.evaluation.learned import GroupedPredictions, predictions

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


# ---- the gate on held-out predictions (gate.decide), without training: the out-of-fold ratios are given ----

@pytest.fixture(scope="module")
def two_sources() -> T.Table:
    """fms-acceleration ok rows of two models; the second model's rows relabelled as another source of the same
    stack (fms-hf-tuning), so the gate must hold on each source separately."""
    frame = load_measurements()
    keep = frame[frame["model_name"].isin(["mistral-7b-v0.1", "llama3-8b"]) & (frame["status"] == "ok")
                 & (frame["duplicate_of"] == "") & (frame["variable_length"] == 0) & (frame["framework"] == "fms-hf-tuning")
                 & frame["nvidia_smi_bytes"].notna()].groupby("model_name").head(30)
    table = T.build_table(keep, row_to_inputs)
    table.rows.loc[table.rows["model_name"] == "llama3-8b", "source"] = "other-source"
    return table


def _held_out(table: T.Table, ratios: dict[str, np.ndarray]) -> GroupedPredictions:
    nan = np.full(len(table), np.nan)
    oof = {t: ratios.get(t, nan) for t in table.targets}
    return GroupedPredictions(oof=oof, inside=np.ones(len(table), dtype=bool), groups=table.sources)


def test_gate_applies_a_correction_that_wins_on_every_source(two_sources: T.Table) -> None:
    y = two_sources.y["memory_device"].to_numpy()  # measured / theory: a perfect held-out ratio
    perfect = _held_out(two_sources, {"memory_device": y})
    corrections, w_lomo, _ = decide(two_sources, perfect, perfect)
    fms = corrections["memory_device"]["frameworks"]["fms-hf-tuning"]
    assert fms["applied"] and fms["weight"] == 1.0 and fms["corrected_median_abs_error_pct"] == 0.0
    assert (w_lomo["memory_device"] == 1.0).all()
    assert corrections["memory_device"]["unseen"]["applied"]  # both held-out sources beaten
    assert not corrections["memory_allocated"]["frameworks"]["fms-hf-tuning"]["applied"]  # no prediction: theory


def test_gate_refuses_a_correction_that_loses_on_one_source(two_sources: T.Table) -> None:
    y = two_sources.y["memory_device"].to_numpy()
    other = two_sources.sources == "other-source"
    # perfect on fms-acceleration; on the other source 1/y: theory × y**-w is further from measured for any w > 0
    mixed = _held_out(two_sources, {"memory_device": np.where(other, 1 / y, y)})
    corrections, w_lomo, w_loso = decide(two_sources, mixed, mixed)
    assert not corrections["memory_device"]["frameworks"]["fms-hf-tuning"]["applied"]
    assert not corrections["memory_device"]["unseen"]["applied"]
    hybrid = predictions(two_sources, mixed, w_lomo)
    assert np.array_equal(hybrid["hybrid"]["peak"], two_sources.theory.peak)  # not applied => exactly theory


def test_unseen_stack_needs_two_held_out_sources(two_sources: T.Table) -> None:
    y = two_sources.y["memory_device"].to_numpy()
    one = _held_out(two_sources, {"memory_device": np.where(two_sources.sources == "other-source", np.nan, y)})
    corrections, _, _ = decide(two_sources, one, one)
    unseen = corrections["memory_device"]["unseen"]
    assert not unseen["applied"]  # the other source has no held-out prediction: no evidence there


def test_a_forest_without_a_split_predicts_its_constant_for_many_rows() -> None:
    """A predictor fitted on a few rows can be a single leaf per tree: it must still answer every row."""
    from autoconf.estimators.learned.fastpath import DEDUPE_MIN_ROWS, Forest

    one = np.array
    forest = Forest(features=("a",), feature=one([-1, -1], dtype=np.int32), threshold=one([0.0, 0.0]),
                    left=one([0, 1], dtype=np.int32), right=one([0, 1], dtype=np.int32),
                    default_left=one([False, False]), missing=one([0, 0], dtype=np.int8), value=one([0.75, 0.25]),
                    roots=one([0, 1], dtype=np.int32), depth=0, link="identity")
    got = forest.predict(np.zeros((DEDUPE_MIN_ROWS + 5, 1)))
    assert got.shape == (DEDUPE_MIN_ROWS + 5,) and np.all(got == 1.0)  # 0.75 + 0.25 on every row


def _two_stacks(table: T.Table, theory_pct: np.ndarray) -> T.Table:
    """``table`` as one source whose first half is stack peft, the second fms-hf-tuning; every run measured
    1000 tokens/s and theory off by ``theory_pct`` %."""
    from dataclasses import replace

    half = len(table) // 2
    jobs = [j.model_copy(update={"framework": "peft" if i < half else "fms-hf-tuning"}) for i, j in enumerate(table.jobs)]
    rows = table.rows.assign(source="fms-acceleration", tokens_per_second=1000.0)
    x = table.x.assign(theory_tokens_per_second_per_gpu=1000.0 * (1 + theory_pct / 100) / table.x["number_gpus"])
    return replace(table, rows=rows, jobs=jobs, x=x, y=table.y.assign(throughput=1.0))


def test_gate_revokes_a_stack_when_its_source_gets_worse(two_sources: T.Table) -> None:
    """Each stack's correction wins on its own rows, the source's median does not: medians do not add up.
    Hand-derived (|error %| of 60 rows, median = mean of the 30th and 31st):
    peft, theory 15 rows at 0 and 15 at 10 (median 5) -> corrected 30 at 4.5 (wins by 0.5);
    fms-hf-tuning, theory 30 at 3 -> corrected 30 at 2 (wins by 1). Source: theory 15×0, 30×3, 15×10 -> 3;
    both corrected 30×2, 30×4.5 -> 3.25, worse. Revoking the smaller gain (peft) leaves 15×0, 30×2, 15×10 -> 2."""
    assert len(two_sources) == 60
    theory_pct = np.r_[np.zeros(15), np.full(15, 10.0), np.full(30, 3.0)]
    hybrid_pct = np.r_[np.full(30, 4.5), np.full(30, 2.0)]
    table = _two_stacks(two_sources, theory_pct)
    ratio = (1 + hybrid_pct / 100) / (1 + theory_pct / 100)  # theory × ratio = measured × (1 + hybrid %)
    held = _held_out(table, {"throughput": ratio})
    corrections, w_lomo, _ = decide(table, held, held)
    stacks = corrections["throughput"]["frameworks"]
    assert stacks["peft"]["corrected_median_abs_error_pct"] == pytest.approx(4.5)
    assert not stacks["peft"]["applied"] and stacks["peft"]["why"].startswith("revoked")
    assert stacks["fms-hf-tuning"]["applied"] and stacks["fms-hf-tuning"]["weight"] == 1.0
    tokens = predictions(table, held, w_lomo)["hybrid"]["tokens"]
    assert np.median(np.abs(tokens / 1000.0 - 1) * 100) == pytest.approx(2.0)
