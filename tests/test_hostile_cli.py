"""Issue 27, CLI and upload store: every input error is exit 2 with one line; data import never overwrites
silently; the upload store keeps its quota and expiry (real files in a temporary folder)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoconf.errors import InvalidInputError
from autoconf.interfaces.api import uploads
from autoconf.interfaces.cli import main
from tests._hostile import LLAMA, hostile_configs


def _sft(folder: Path) -> Path:
    """A real SFTTrainer CSV of our own measured rows (the import suite's converter), first 5 rows."""
    from tests.test_ado_import import _sfttrainer_file, _source_rows

    return _sfttrainer_file(_source_rows().head(5), folder / "sft.csv")


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _refused(argv: list[str], expect: str) -> None:
    code, err = _run(argv)
    assert code == 2 and err.count("\n") == 1 and "internal error" not in err, err
    assert expect in err, err


@pytest.mark.parametrize("argv, expect", [
    (["estimate", "--model", "llama3.1-8b", "--mlp-act-factor", "1e999"], "--mlp-act-factor: must be a finite"),
    (["estimate", "--model", "llama3.1-8b", "--lora-alpha", "nan"], "--lora-alpha: must be a finite"),
    (["plan", "--model", "llama3.1-8b", "--epochs", "nan"], "--epochs: must be a finite"),
    (["plan", "--model", "llama3.1-8b", "--epochs=-inf"], "--epochs: must be a finite"),
    (["estimate", "--model", "llama3.1-8b", "--grad-accum=--"], "--grad-accum: needs a value"),
    (["estimate", "--model=--"], "--model: needs a value"),
    (["estimate", "--model", "llama3.1-8b", "--grad-accum", "x"], "invalid int value"),
])
def test_malformed_flag_values(argv: list[str], expect: str) -> None:
    _refused(argv, expect)


@pytest.mark.parametrize("address", ["1", "http://x:1", "host", "a b:1", "ray://", ":"])
def test_bad_ray_addresses(tmp_path: Path, address: str) -> None:
    source = tmp_path / "in.csv"
    source.write_text("model,method,gpu_model,tokens_per_sample,batch_size\nllama3.1-8b,lora,A100,2048,16\n")
    _refused(["sweep", "--input", str(source), "--output", str(tmp_path / "out.csv"), "--ray-address", address,
              "--workers", "2"], "--ray-address")
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("name", sorted(hostile_configs()))
def test_hostile_configs_via_config(tmp_path: Path, name: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(hostile_configs()[name])
    _refused(["estimate", "--config", str(path), "--gpu", "A100"], "--config")


def test_data_import_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    source, out = _sft(tmp_path), tmp_path / "out"
    out.mkdir()
    target = out / "precious.csv"
    target.write_text("keep me\n")
    _refused(["data", "import", "--format", "ado-sfttrainer", str(source), "--output", str(target)], "--force")
    assert target.read_text() == "keep me\n"
    code, err = _run(["data", "import", "--format", "ado-sfttrainer", str(source), "--output", str(target), "--force"])
    assert code == 0, err
    assert "model_name" in target.read_text().splitlines()[0]
    assert [p.name for p in out.iterdir()] == ["precious.csv"]  # no temporary file left beside it


def test_data_import_never_replaces_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.csv")
    _refused(["data", "import", "--format", "ado-sfttrainer", str(_sft(tmp_path)), "--output",
              str(tmp_path / "fifo.csv"), "--force"], "FIFO")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("AUTOCONF_API_UPLOAD_DIR", str(tmp_path / "up"))
    uploads.upload_dir.cache_clear()
    yield tmp_path / "up"
    uploads.upload_dir.cache_clear()


def _variant(i: int) -> dict[str, object]:
    return {**LLAMA, "num_hidden_layers": 1 + i}


def test_upload_store_quota_keeps_the_most_recent(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uploads, "MAX_FILES", 3)
    paths = []
    for i in range(5):
        paths.append(uploads.store_config(_variant(i))[0])
        os.utime(paths[-1], (time.time() - 100 + i, time.time() - 100 + i))  # distinct ages, oldest first
    kept = sorted(p.name for p in store.glob("config-*.json"))
    assert kept == sorted(p.name for p in paths[2:])


def test_upload_store_byte_quota_and_expiry(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = uploads.store_config(_variant(0))[0]
    size = first.stat().st_size
    monkeypatch.setattr(uploads, "MAX_TOTAL_BYTES", 2 * size + 10)
    os.utime(first, (time.time() - 50, time.time() - 50))
    second = uploads.store_config(_variant(1))[0]
    third = uploads.store_config(_variant(2))[0]
    assert not first.exists() and second.exists() and third.exists()
    os.utime(second, (time.time() - uploads.TTL_S - 1, time.time() - uploads.TTL_S - 1))
    uploads.store_config(_variant(3))
    assert not second.exists() and third.exists()


def test_refused_upload_leaves_no_file(store: Path) -> None:
    for raw in hostile_configs().values():
        with contextlib.suppress(ValueError, RecursionError):  # JSON the parser refuses never reaches the store
            config = json.loads(raw)
            with pytest.raises(InvalidInputError):
                uploads.store_config(config)
    assert not list(store.glob("*"))
