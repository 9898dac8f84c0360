"""Issue 16, learned artifacts: a corrupt manifest is one line and never breaks the ado plugin; the
AutoGluon backend unpickles only a version whose manifest hash is pinned in the package (or trusted).

Expected hashes come from ``sha256sum`` semantics (hashlib over the file's bytes), not from our code.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autoconf.defaults import bundled
from autoconf.estimators.learned import versions as V

SHIPPED = bundled("AutoGluonModels", "AutoGluonModels")
CLI = [sys.executable, "-m", "autoconf.interfaces.cli"]


@pytest.fixture()
def models(tmp_path: Path) -> Path:
    """A copy of the shipped versions to tamper with."""
    root = tmp_path / "models"
    shutil.copytree(SHIPPED, root)
    return root


def test_pinned_hash_is_the_shipped_manifest() -> None:
    for version, pinned in V.PINNED_MANIFESTS.items():
        manifest = SHIPPED / version / V.MANIFEST
        assert hashlib.sha256(manifest.read_bytes()).hexdigest() == pinned, f"re-pin {version} after a rebuild"
    assert set(V.PINNED_MANIFESTS) == set(V.list_versions(SHIPPED))
    assert V.verify_pinned(SHIPPED / "1.0.0") == V.PINNED_MANIFESTS["1.0.0"]


def test_resealed_version_is_refused_by_the_pickle_check(models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed file re-sealed with a fresh manifest passes verify() (it is not signed) but not verify_pinned()."""
    folder = models / "1.0.0"
    (folder / "card.json").write_text((folder / "card.json").read_text() + " ")
    V.write_manifest(folder)
    V.verify(folder)
    with pytest.raises(V.IntegrityError, match="not pinned"):
        V.verify_pinned(folder)
    digest = hashlib.sha256((folder / V.MANIFEST).read_bytes()).hexdigest()
    monkeypatch.setenv(V.TRUST_ENV, f"deadbeef,{digest}")
    assert V.verify_pinned(folder) == digest


@pytest.mark.parametrize("manifest", [b"\xff\xfe\x00garbage\n", b"oneword\n", b"abc  card.json\n", b"\n\n"])
def test_corrupt_manifest_is_refused_in_one_line(models: Path, manifest: bytes) -> None:
    (models / "1.0.0" / V.MANIFEST).write_bytes(manifest)
    with pytest.raises(V.IntegrityError):
        V.verify(models / "1.0.0")
    env = {**os.environ, "AUTOCONF_MODELS": str(models)}
    res = subprocess.run([*CLI, "models", "show", "1.0.0"], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    listed = subprocess.run([*CLI, "models", "list"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0 and "TAMPERED (refused)" in listed.stdout, listed.stderr


@pytest.mark.parametrize("what", ["manifest-binary", "manifest-oneword", "card-binary", "card-list"])
def test_corrupt_version_never_breaks_importing_the_plugin(models: Path, what: str) -> None:
    pytest.importorskip("ado")
    target = models / "1.0.0" / (V.MANIFEST if what.startswith("manifest") else V.CARD)
    target.write_bytes({"manifest-binary": b"\xff\xfe", "manifest-oneword": b"word\n", "card-binary": b"\xff{",
                        "card-list": b"[1, 2]"}[what])
    code = ("import autoconf.interfaces.ado.experiments as e; "
            "r = e.min_gpu_recommender(model_name='llama3.1-8b', method='lora', gpu_model='NVIDIA-A100-80GB-PCIe', "
            "tokens_per_sample=2048, batch_size=16, estimator='theory'); print(int(r['can_recommend']))")
    env = {**os.environ, "AUTOCONF_MODELS": str(models)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0 and res.stdout.strip() == "1", res.stderr[-2000:]


def test_refused_named_version_is_not_answered_by_theory(models: Path) -> None:
    """A tampered version asked for by name: can_recommend = 0 and the reason, never a silent theory answer."""
    pytest.importorskip("ado")
    (models / "1.0.0" / "residuals.npz").write_bytes(b"tampered")
    code = ("import autoconf.interfaces.ado.experiments as e; "
            "r = e.min_gpu_recommender(model_name='llama3.1-8b', method='lora', gpu_model='NVIDIA-A100-80GB-PCIe', "
            "tokens_per_sample=2048, batch_size=16, estimator='hybrid', model_version='1.0.0'); "
            "print(int(r['can_recommend']), r.get('answered_by', '-'), '|', r['reason'])")
    env = {**os.environ, "AUTOCONF_MODELS": str(models)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("0 - |") and "1.0.0" in res.stdout and "MANIFEST" in res.stdout, res.stdout


@pytest.mark.slow
def test_autogluon_backend_refuses_a_resealed_version_before_unpickling(models: Path) -> None:
    """The pickle of a re-sealed version is never loaded: a marker pickle that would write a file stays inert."""
    folder = models / "1.0.0"
    marker = models / "PWNED"
    payload = f"import pickle, os\nclass P:\n    def __reduce__(self):\n        return (os.mkdir, ({str(marker)!r},))\n"
    code = (payload + "pickle.dump(P(), open(__import__('sys').argv[1], 'wb'))\n")
    target = next((folder / "autogluon").rglob("*.pkl"))
    subprocess.run([sys.executable, "-c", code, str(target)], check=True)
    V.write_manifest(folder)  # re-sealed: verify() passes
    load = ("from autoconf.estimators.learned import model; "
            "import autoconf.estimators.learned.versions as V\n"
            "try:\n    model.load('1.0.0', backend='autogluon')\n"
            "except V.IntegrityError as e:\n    print('refused', e)")
    env = {**os.environ, "AUTOCONF_MODELS": str(models)}
    res = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, env=env)
    assert res.stdout.startswith("refused") and "not pinned" in res.stdout, (res.stdout, res.stderr[-2000:])
    assert not marker.exists()
