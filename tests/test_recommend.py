"""The min-GPU recommender (design §5), its batch form, recommend_frame, and the recommend/models/sweep CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from autoconf.estimators.contract import get_estimator
from autoconf.estimators.learned import versions as V
from autoconf.evaluation import space
from autoconf.interfaces.cli import main
from autoconf.recommend.frame import recommend_frame
from autoconf.recommend.search import candidate_gpus, recommend, recommend_batch
from autoconf.schema import Job, Placement

ROOT = Path(__file__).resolve().parents[1]
PCIE = "NVIDIA-A100-80GB-PCIe"
JOBS = [Job(model=m, method=meth, tokens_per_sample=s, batch_size=b)
        for m in ("llama3.1-8b", "llama3.1-70b", "mistral-7b-v0.1", "powerlm-3b")
        for meth in ("full", "lora") for s in (1024, 8192) for b in (1, 8, 64)]


@pytest.mark.parametrize("max_gpus, per_node, expected", [
    (64, 8, [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]), (8, 8, [1, 2, 4, 8]), (12, 4, [1, 2, 4, 8, 12]), (3, 8, [1, 2])])
def test_candidates(max_gpus: int, per_node: int, expected: list[int]) -> None:
    assert list(candidate_gpus(max_gpus, per_node)) == expected


@pytest.mark.parametrize("name", ["theory", "hybrid", "learned"])
def test_first_acceptable_placement_wins(name: str) -> None:
    est = get_estimator(name)
    for job in JOBS[::5]:
        rec = recommend(job, PCIE, est)
        if not rec.can_recommend:
            continue
        assert rec.estimate is not None and rec.estimate.memory.oom_risk <= 0.05
        assert rec.workers * rec.gpus == rec.number_gpus and rec.gpus <= 8
        assert rec.estimate.memory == est.estimate(job, rec.estimate.placement).memory.model_copy(
            update={"notes": rec.estimate.memory.notes})
        smaller = [n for n in candidate_gpus() if n < rec.number_gpus and job.batch_size % n == 0]
        for n in smaller:  # every smaller candidate was too risky
            place = Placement(gpu_model=PCIE, number_gpus=n, gpus_per_worker=min(n, 8))
            assert est.estimate(job, place).memory.oom_risk > 0.05


@pytest.mark.parametrize("name", ["theory", "hybrid"])
def test_batch_equals_one_by_one(name: str) -> None:
    est = get_estimator(name)
    search = recommend_batch(JOBS, [PCIE] * len(JOBS), est)
    for i, job in enumerate(JOBS):
        rec = recommend(job, PCIE, est)
        assert (rec.number_gpus, rec.reason) == (int(search.number_gpus[i]), search.reasons[i])


def test_refusals_are_answers() -> None:
    hybrid = get_estimator("hybrid")
    huge = recommend(Job(model="llama3.1-405b", tokens_per_sample=8192, batch_size=64), PCIE, hybrid, max_gpus=8)
    assert huge.can_recommend == 0 and huge.reason.startswith("nothing fits up to 8 GPUs")
    odd = recommend(Job(model="llama3.1-8b", batch_size=3, gradient_accumulation_steps=2), PCIE, hybrid)
    assert odd.can_recommend == 0 and "does not split evenly" in odd.reason
    unknown = recommend(Job(model="no-such-model-xyz"), PCIE, hybrid)
    assert unknown.can_recommend == 0 and "not a known model" in unknown.reason
    strict = recommend(Job(model="llama3.1-8b", tokens_per_sample=4096, batch_size=8), PCIE, hybrid, strict=True)
    assert strict.can_recommend == 0 and "outside the training domain of model version" in strict.reason
    inside = recommend(Job(model="mistral-7b-v0.1", tokens_per_sample=4096, batch_size=8), "NVIDIA-A100-SXM4-80GB",
                       hybrid, strict=True)
    assert inside.can_recommend == 1


def test_frame_recommends_or_uses_the_given_placement() -> None:
    frame = pd.DataFrame({
        "model_name": ["mistral-7b-v0.1", "mistral-7b-v0.1", "powerlm-3b", "llama3.1-405b"],
        "method": ["full", "full", "full", "full"], "gpu_model": [PCIE] * 4, "tokens_per_sample": [4096] * 4,
        "batch_size": [8] * 4, "number_gpus": [None, 2, None, None], "note": ["a", "b", "c", "d"],
    })
    hybrid = get_estimator("hybrid")
    out = recommend_frame(frame, hybrid, max_gpus=16)
    assert out["note"].tolist() == ["a", "b", "c", "d"]
    rec = recommend(Job(model="mistral-7b-v0.1", tokens_per_sample=4096, batch_size=8), PCIE, hybrid, max_gpus=16)
    assert out.loc[0, "can_recommend"] == 1 and out.loc[0, "gpus"] * out.loc[0, "workers"] == rec.number_gpus
    assert out.loc[0, "peak_memory_gib"] == pytest.approx(rec.estimate.memory.peak_gib, abs=1e-4)
    given = hybrid.estimate(Job(model="mistral-7b-v0.1", tokens_per_sample=4096, batch_size=8),
                            Placement(gpu_model=PCIE, number_gpus=2))
    assert out.loc[1, "peak_memory_gib"] == pytest.approx(given.memory.peak_gib, abs=1e-4)
    assert out.loc[2, "can_recommend"] == 0 and "unverified" in out.loc[2, "error"]
    assert out.loc[3, "can_recommend"] == 0 and out.loc[3, "reason"].startswith("nothing fits")
    assert np.isfinite(out.loc[3, "peak_memory_gib"])  # the best (largest) placement tried


def test_space_module_matches_sweep_space_yaml() -> None:
    spec = yaml.safe_load((ROOT / "sweep" / "space.yaml").read_text())
    domains = {p["identifier"]: p["propertyDomain"]["values"] for p in spec["entitySpace"]}
    assert tuple(domains["model_name"]) == space.MODELS and tuple(domains["tokens_per_sample"]) == space.TOKENS
    assert tuple(domains["batch_size"]) == space.BATCHES and tuple(domains["gpu_model"]) == space.GPUS
    assert tuple(domains["method"]) == space.METHODS and len(space.space_frame()) == 3960


# ---- CLI ---------------------------------------------------------------------------------------

def test_cli_recommend_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--model", "mistral-7b-v0.1", "--gpu", PCIE, "--batch-size", "8", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["can_recommend"] == 1 and rec["estimator"] == "hybrid" and rec["model_version"] == "2.5.0"  # the newest
    assert main(["recommend", "--model", "mistral-7b-v0.1", "--gpu", PCIE, "--estimator", "theory"]) == 0
    assert "recommended:" in capsys.readouterr().out


def test_cli_unknown_model_version_lists_versions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--model", "llama3.1-8b", "--gpu", PCIE, "--model-version", "9.9.9"]) == 2
    assert "model_version: must be one of 1.0.0, 2.0.0, 2.1.0, 2.2.0, 2.3.0, 2.4.0, 2.5.0; got '9.9.9'" in capsys.readouterr().err


def test_cli_models_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "list"]) == 0
    assert "1.0.0" in capsys.readouterr().out
    assert main(["models", "show", "1.0.0"]) == 0
    out = capsys.readouterr().out
    assert "manifest verified" in out and "training domain" in out


def test_cli_refuses_a_tampered_version(tmp_path: Path) -> None:
    root = tmp_path / "models"
    shutil.copytree(V.version_dir("1.0.0"), root / "1.0.0")
    card = root / "1.0.0" / "card.json"
    card.write_text(card.read_text().replace('"widen": 2.0', '"widen": 200.0'))
    env = {"AUTOCONF_MODELS": str(root), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "recommend", "--model", "llama3-8b", "--gpu",
                          PCIE],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    assert run.returncode == 2 and "card.json does not match MANIFEST.sha256" in run.stderr and "refusing" in run.stderr


def test_cli_sweep(tmp_path: Path) -> None:
    frame = space.space_frame().iloc[::97]
    frame.to_csv(tmp_path / "in.csv", index=False)
    assert main(["sweep", "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "out.csv")]) == 0
    out = pd.read_csv(tmp_path / "out.csv")
    assert len(out) == len(frame) and {"can_recommend", "gpus", "workers", "oom_risk", "reason"} <= set(out.columns)
    assert set(out["estimator"]) == {"hybrid"} and out["can_recommend"].sum() > 0
