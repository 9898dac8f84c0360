"""Approximate architectures are answered, flagged, kept outside the hybrid's correction and refused by strict.

ado's reference space names three IBM models whose config.json is not public: granite-34b-code-base
(its shape is published: arXiv:2405.04324), granite-13b-v2 and granite-8b-japanese (only size and
context are public: approximate). Every point of the 3,960-point space must be answered from a
resolved architecture, and every answer about an approximate one must say so.
"""

from __future__ import annotations

import math

import pytest

from autoconf.catalog import approximation_note, get_architecture, resolve_model
from autoconf.estimators.contract import get_estimator
from autoconf.estimators.theory.risk_table import SIGMA
from autoconf.evaluation.space import space_frame
from autoconf.recommend.frame import recommend_frame
from autoconf.recommend.search import recommend
from autoconf.schema import Job, Placement

A100 = "NVIDIA-A100-SXM4-80GB"
APPROXIMATE = ("granite-13b-v2", "granite-8b-japanese")


def _granite_34b_by_hand() -> int:
    """arXiv:2405.04324: the 34B model is granite-20b-code-base (52 layers) depth-upscaled to 2 × (52 − 8) = 88
    layers of the same block: gpt_bigcode, hidden 6144, 48 heads of 128, MQA (one K and one V head of 128),
    MLP 4 × 6144 = 24576 (GELU), LayerNorm and biases everywhere, learned positions 8192, vocab 49152, tied."""
    h, kv, ffn, layers, vocab, positions = 6144, 128, 24576, 88, 49152, 8192
    attention = h * (h + 2 * kv) + (h + 2 * kv) + h * h + h  # fused QKV (MQA) + output projection, with biases
    mlp = h * ffn + ffn + ffn * h + h
    norms = 2 * 2 * h  # two LayerNorms (weight + bias) per layer
    return layers * (attention + mlp + norms) + vocab * h + positions * h + 2 * h  # + final LayerNorm


@pytest.mark.parametrize(("name", "approximate", "total"), [
    ("granite-34b-code-base", False, _granite_34b_by_hand()),
    # Llama-2-13B's published count (13,015,864,320): the inferred shape of granite-13b-v2
    ("granite-13b-v2", True, 13_015_864_320),
    ("granite-8b-japanese", True, None),
])
def test_the_three_ibm_names_resolve(name: str, approximate: bool, total: int | None) -> None:
    arch = resolve_model(name).architecture
    assert arch.name == name and arch.approximate is approximate and arch.answerable
    assert bool(arch.approximation_reason) is approximate
    if total is not None:
        assert arch.total_params == total
    assert get_architecture(name) == arch  # the estimators' entry point answers it too, flag included


def test_granite_34b_is_about_34b_and_reached_by_its_hub_id() -> None:
    assert _granite_34b_by_hand() == 33_715_603_456  # the paper calls it 34B
    assert resolve_model("ibm-granite/granite-34b-code-base-8k").architecture.name == "granite-34b-code-base"


@pytest.mark.parametrize("estimator", ["theory", "learned", "hybrid"])
@pytest.mark.parametrize("model", APPROXIMATE)
def test_every_estimate_of_an_approximate_model_carries_the_note(estimator: str, model: str) -> None:
    est = get_estimator(estimator).estimate(Job(model=model, method="lora"), Placement(gpu_model=A100, number_gpus=2))
    flagged = [n for n in est.memory.notes if n.startswith("approximate architecture: ")]
    assert flagged == [approximation_note(model)] and len(flagged[0]) > len("approximate architecture: ") + 20


def test_an_exact_model_carries_no_approximation_note() -> None:
    est = get_estimator("hybrid").estimate(Job(model="granite-34b-code-base", method="lora"),
                                           Placement(gpu_model=A100, number_gpus=4))
    assert not any("approximate" in n for n in est.memory.notes)


@pytest.mark.parametrize("model", APPROXIMATE)
def test_hybrid_answers_an_approximate_model_with_theory_and_the_wider_margin(model: str) -> None:
    job, place = Job(model=model, method="full", batch_size=8), Placement(gpu_model=A100, number_gpus=8)
    hybrid = get_estimator("hybrid")
    theory = get_estimator("theory").estimate(job, place).memory
    memory = hybrid.estimate(job, place).memory
    assert memory.peak_bytes == pytest.approx(theory.peak_bytes, rel=1e-12)  # no learned correction
    assert any("outside the learned correction domain" in n for n in memory.notes)
    # 2.x: theory's log-normal risk (σ of the method, risk_table.py) widened by the card's out-of-domain scale, of
    # the device peak less the FSDP side-stream blocks the allocator releases before an allocation fails
    model_ = hybrid.model_  # type: ignore[attr-defined]
    assert model_.risk_model == "theory-sigma"
    sigma = SIGMA[job.method][0] * model_.out_of_domain_scale
    headroom = math.log(memory.capacity_bytes / (theory.peak_bytes - theory.releasable_bytes))
    assert memory.oom_risk == pytest.approx(0.5 * math.erfc(headroom / (sigma * math.sqrt(2))), rel=1e-9, abs=1e-300)
    assert memory.oom_risk >= theory.oom_risk  # the wider margin


@pytest.mark.parametrize("estimator", ["theory", "hybrid"])
def test_strict_refuses_an_approximate_model_with_the_reason(estimator: str) -> None:
    job = Job(model="granite-13b-v2", method="lora")
    relaxed = recommend(job, A100, get_estimator(estimator))
    strict = recommend(job, A100, get_estimator(estimator), strict=True)
    assert relaxed.can_recommend == 1 and "approximate architecture" in relaxed.reason
    assert strict.can_recommend == 0 and "approximate architecture: " in strict.reason


def test_every_point_of_the_reference_space_is_answered_from_a_resolved_architecture() -> None:
    space = space_frame()
    out = recommend_frame(space, get_estimator("hybrid"))
    assert len(out) == 3960
    errors = out["error"].dropna().astype(str)
    assert errors.empty, errors.head().tolist()
    assert not out["reason"].astype(str).str.contains("unverified|not verified", case=False).any()
    assert set(out["can_recommend"]) <= {0, 1}
    flagged = out["model_name"].isin(APPROXIMATE)
    assert flagged.sum() == 360
    assert out.loc[flagged, "reason"].str.contains("approximate architecture: ").all()
    assert not out.loc[~flagged, "reason"].astype(str).str.contains("approximate architecture").any()
