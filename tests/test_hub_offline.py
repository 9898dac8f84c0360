"""Without a network, an unknown hub id fails fast (<= 1 s), in one line, naming the real cause.

The endpoint is a name under ``.invalid``, which RFC 2606 reserves so that it never resolves; the run is a
real subprocess of the installed CLI with its own environment, timed from outside.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from autoconf.catalog import hub
from autoconf.catalog.config_view import ModelNotAvailableError
from autoconf.catalog.resolve import resolve_model

ROOT = Path(__file__).resolve().parents[1]
UNRESOLVABLE = "http://nonexistent.invalid"


def _cli(*argv: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    base = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", *argv], capture_output=True, text=True,
                          env={**base, "PYTHONPATH": str(ROOT), **env}, timeout=60, check=False)
    return done, time.perf_counter() - started


@pytest.mark.parametrize(("env", "cause"), [
    ({"HF_ENDPOINT": UNRESOLVABLE}, "cannot resolve the hub's host 'nonexistent.invalid'"),
    ({"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": UNRESOLVABLE}, "offline: HF_HUB_OFFLINE is set"),
])
def test_unknown_name_without_network_is_one_quick_line(env: dict[str, str], tmp_path: Path, cause: str) -> None:
    # interpreter start-up and imports are timed too; a process that only imports the CLI takes ~0.3 s here
    done, seconds = _cli("estimate", "--model", "someorg/NotAModel-7B", HF_HOME=str(tmp_path), **env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no retry warnings, no traceback
    assert cause in lines[0] and "someorg/NotAModel-7B" in lines[0]
    assert lines[0].index(cause) < 120  # the cause comes first, before the suggestions
    assert seconds <= 1.0 + _startup_seconds()


def _startup_seconds() -> float:
    """The same process without the hub: start-up, imports and the parser (``estimate --help``)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "estimate", "--help"], capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    return time.perf_counter() - started


@pytest.mark.slow
def test_a_sweep_of_unknown_names_asks_each_once(tmp_path: Path) -> None:
    rows = ["model,gpu_model,number_gpus", *["someorg/unknown-a,NVIDIA-A100-80GB-PCIe,1"] * 20,
            *["someorg/unknown-b,NVIDIA-A100-80GB-PCIe,1"] * 20, "llama3.2-1b,NVIDIA-A100-80GB-PCIe,1"]
    (tmp_path / "in.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    done, seconds = _cli("sweep", "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "out.csv"),
                         "--estimator", "theory", HF_ENDPOINT=UNRESOLVABLE, HF_HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr
    errors = pd.read_csv(tmp_path / "out.csv")["error"].fillna("")
    assert errors.str.contains("cannot resolve the hub's host").sum() == 40 and errors.iloc[-1] == ""
    assert "Retrying" not in done.stderr
    known = tmp_path / "known.csv"  # the same sweep with catalogued names: no hub at all
    known.write_text("\n".join(r.replace("someorg/unknown-a", "llama3.2-1b").replace("someorg/unknown-b", "phi-2")
                               for r in rows) + "\n", encoding="utf-8")
    _, baseline = _cli("sweep", "--input", str(known), "--output", str(tmp_path / "known-out.csv"), "--estimator",
                       "theory", HF_ENDPOINT=UNRESOLVABLE, HF_HOME=str(tmp_path))
    assert seconds <= baseline + 2.0  # one failed lookup (≤ 1 s) for the two names, not 40


def test_each_unknown_name_is_asked_for_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", UNRESOLVABLE)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    asked: list[str] = []
    real = hub._download
    monkeypatch.setattr(hub, "_download", lambda *a: asked.append(a[0]) or real(*a))
    for _ in range(3):
        for name in ("someorg/first-unknown", "someorg/second-unknown"):
            with pytest.raises(ModelNotAvailableError, match="cannot resolve"):
                resolve_model(name)
    assert asked == ["someorg/first-unknown", "someorg/second-unknown"]
