"""Learned models: real AutoGluon fits on a slice of data/, the numpy fast path, versions and manifests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from autoconf.defaults import MODELS_ENV
from autoconf.errors import InvalidInputError, NotBuiltError
from autoconf.estimators.learned import model as M
from autoconf.estimators.learned import train as T
from autoconf.estimators.learned import versions as V
from autoconf.estimators.learned.fastpath import Forest
from autoconf.evaluation.data import load_measurements, row_to_inputs
from autoconf.evaluation.space import space_features

SHIPPED = "1.0.0"


@pytest.fixture(scope="module")
def table() -> T.Table:
    return T.build_table(load_measurements(), row_to_inputs)


@pytest.fixture(scope="module")
def small_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three measured models, at most 60 rows each: a seconds-long build."""
    frame = load_measurements()
    keep = frame[frame["model_name"].isin(["mistral-7b-v0.1", "llama3-8b", "santacoder"])
                 & (frame["duplicate_of"] == "") & (frame["variable_length"] == 0)]
    part = keep.groupby("model_name").head(60)
    path = tmp_path_factory.mktemp("data") / "measurements.csv"
    part.to_csv(path, index=False)
    return path


def test_table_features_are_architecture_numbers_not_names(table: T.Table) -> None:
    assert "model_name" not in table.x.columns and {"params_b", "num_kv_heads", "vocab_size"} <= set(table.x.columns)
    assert {"theory_activations_gib", "theory_peak_gib"} <= set(table.x.columns)
    assert table.y["memory_allocated"].notna().sum() > 500 and table.y["oom"].sum() > 100
    ratio = table.y["memory_device"].dropna()
    assert 0.5 < ratio.median() < 2.0  # measured/theory ratios are near 1, not raw bytes


@pytest.mark.slow
@pytest.mark.parametrize("target", ["memory_device", "oom"])
def test_fit_exports_a_fast_path_equal_to_autogluon(table: T.Table, target: str, tmp_path: Path) -> None:
    spec = T.TARGETS[target]
    rows = np.isin(table.groups, ["mistral-7b-v0.1", "llama3-8b"])
    predictor = T.fit(T.training_frame(table, spec, rows), spec, tmp_path / target)
    forest = T.export_forest(predictor, spec)
    forest.save(tmp_path / f"{target}.npz")
    loaded = Forest.load(tmp_path / f"{target}.npz")
    x = table.x[~rows]  # rows of models the fit never saw
    fast = loaded.predict(x[list(loaded.features)].to_numpy())
    assert np.max(np.abs(fast - T.predict(predictor, x, spec))) < 1e-6
    if target == "oom":
        assert ((fast >= 0) & (fast <= 1)).all()


@pytest.mark.slow
def test_fits_are_deterministic(table: T.Table, tmp_path: Path) -> None:
    spec = T.TARGETS["memory_device"]
    rows = table.groups == "mistral-7b-v0.1"
    forests = [T.export_forest(T.fit(T.training_frame(table, spec, rows), spec, tmp_path / str(k)),
                               spec) for k in (0, 1)]
    assert np.array_equal(forests[0].value, forests[1].value) and np.array_equal(forests[0].threshold,
                                                                                 forests[1].threshold)


# ---- the shipped version ---------------------------------------------------------------------

@pytest.mark.parametrize("SHIPPED", ["1.0.0", "2.0.0", "2.1.0", "2.2.0", "2.3.0", "2.4.0", "2.5.0"])
def test_shipped_version_card_and_size(SHIPPED: str) -> None:
    assert SHIPPED in V.list_versions() and V.PINNED_MANIFESTS[SHIPPED] == V.sha256_file(
        V.version_dir(SHIPPED) / V.MANIFEST)
    card = V.read_card(SHIPPED)
    assert card["version"] == SHIPPED and card["environment"]["autogluon.tabular"] == "1.6.3"
    assert card["data"]["rows"] > 1000 and len(card["data"]["sha256"]) == 64
    assert set(card["training_domain"]["models"]) <= set(card["answerable_domain"]["models"])
    assert card["answerable_domain"]["gpus"] and card["answerable_domain"]["methods"] == ["full", "lora", "qlora"]
    assert V.folder_bytes(V.version_dir(SHIPPED)) < V.MAX_VERSION_BYTES
    for name, check in card["model"]["predictors"].items():
        if check.get("trained") is False:  # too few rows of the target (2.0.0: memory_reserved on this data)
            assert name not in card["features"] and check["rows"] < 20
            continue
        assert max(check["max_abs_difference_vs_autogluon"].values()) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("version", ["1.0.0", "2.0.0", "2.1.0", "2.2.0", "2.3.0", "2.4.0", "2.5.0"])
def test_shipped_version_loads_with_the_autogluon_backend_and_agrees(version: str) -> None:
    fast, slow = M.load(version), M.load(version, backend="autogluon")
    x = space_features().iloc[::50]
    table = M.FeatureTable(x[list(M.ALL_FEATURES)].to_numpy())
    assert set(fast.forests) == set(slow._predictors) == set(V.read_card(version)["features"])
    for target in fast.forests:
        assert np.max(np.abs(fast.predict(target, table) - slow.predict(target, table))) < 1e-6


def _copy_shipped(tmp: Path) -> Path:
    root = tmp / "models"
    shutil.copytree(V.version_dir(SHIPPED), root / SHIPPED)
    return root


@pytest.mark.parametrize("change", ["tamper", "extra", "missing"])
def test_manifest_refuses_a_changed_version(tmp_path: Path, change: str) -> None:
    root = _copy_shipped(tmp_path)
    folder = root / SHIPPED
    pickle = folder / "autogluon" / "oom" / "predictor.pkl"
    if change == "tamper":
        pickle.write_bytes(pickle.read_bytes() + b"\x00")
    elif change == "extra":
        (folder / "autogluon" / "evil.pkl").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    else:
        pickle.unlink()
    with pytest.raises(V.IntegrityError, match="refus|missing"):
        V.verify(folder)
    with pytest.raises(V.IntegrityError):
        M._load_fast(SHIPPED, folder, "fast")


def test_unknown_version_lists_the_available_ones() -> None:
    with pytest.raises(InvalidInputError, match=f"must be one of .*{SHIPPED}.*got '9.9.9'"):
        V.resolve("9.9.9")


@pytest.mark.slow
def test_small_build_end_to_end(small_slice: Path, tmp_path: Path) -> None:
    from autoconf.evaluation.build import build_version

    folder = build_version("0.0.1", data=small_slice, root=tmp_path)
    V.verify(folder)
    card = json.loads((folder / V.CARD).read_text())
    assert card["data"]["sha256"] == V.sha256_file(small_slice) and card["held_out"]["models"] == [
        "llama3-8b", "mistral-7b-v0.1", "santacoder"]
    assert set(card["hybrid"]["corrections"]) == set(M.TARGETS)
    again = build_version("0.0.1", data=small_slice, root=tmp_path / "again")
    assert json.loads((again / V.CARD).read_text())["fastpath"]["arrays_sha256"] == card["fastpath"]["arrays_sha256"]


def test_unloadable_predictor_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An honest (re-sealed) but unloadable AutoGluon pickle is refused with the command that fixes it."""
    root = _copy_shipped(tmp_path)
    broken = root / SHIPPED / "autogluon" / "memory_device" / "models" / "LightGBM" / "model.pkl"
    broken.write_bytes(b"not a pickle from this environment")
    manifest = V.write_manifest(root / SHIPPED)  # an honest but unloadable file, not a tampered one
    monkeypatch.setenv(V.TRUST_ENV, V.sha256_file(manifest))  # re-sealed: unpickled only if the operator trusts it
    monkeypatch.setenv(MODELS_ENV, str(root))
    M.load.cache_clear()
    try:
        with pytest.raises(NotBuiltError, match=f"models build {SHIPPED} --force"):
            M.load(SHIPPED, backend="autogluon")
    finally:
        M.load.cache_clear()
