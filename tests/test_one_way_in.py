"""The same words mean the same thing on every entry point (issue 26): every boolean and choice field of Job and
Placement, read by a sweep row, a flat REST body, ado's point reader and (where the shape has the field) the
nested REST body and the CLI. The expected readings come from the word tables written out here, not from
the code; a typo is one error naming the field and the accepted values on each entry point, end to end."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from autoconf.errors import describe
from autoconf.estimators.frame import row_inputs
from autoconf.interfaces.ado.answers import JOB_KNOBS, job_of
from autoconf.interfaces.api.inputs import parse_body, seed_example
from autoconf.interfaces.cli import main
from autoconf.schema import Job, Placement
from tests._server import serve

TRUE = ("true", "yes", "on", "1", "t", "y", "TRUE", "Yes", " on ")  # pydantic's lax words, any case, trimmed
FALSE = ("false", "no", "off", "0", "f", "n", "FALSE", "No", " off ")
TYPOS = ("ture", "maybe", "2", "")
BASE = {"model": "llama3.1-8b", "gpu_model": "NVIDIA-A100-80GB-PCIe", "method": "lora", "tokens_per_sample": 1024,
        "batch_size": 8}
FIELDS = {**Job.model_fields, **Placement.model_fields}
FLAGS = [n for n, f in FIELDS.items() if f.annotation in (bool, bool | None)]


def _literal(annotation: object) -> tuple[str, ...]:
    """The words of a Literal field (also inside ``X | None``)."""
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    return next((typing.get_args(a) for a in typing.get_args(annotation) if typing.get_origin(a) is typing.Literal), ())


CHOICES = {n: _literal(f.annotation) for n, f in FIELDS.items() if _literal(f.annotation)}


def _sweep(field: str, word: str) -> Any:
    job, place = row_inputs({**BASE, "model_name": BASE["model"], "model": None, field: word})
    return getattr(job if field in Job.model_fields else place, field)


def _flat(field: str, word: str) -> Any:
    found = parse_body({**BASE, field: word})[0]
    return getattr(found.job if field in Job.model_fields else found.placement, field)


def _ado(field: str, word: str) -> Any:
    point = {"model_name": BASE["model"], "method": "lora", "tokens_per_sample": 1024, "batch_size": 8, field: word}
    return getattr(job_of(point), field)


NESTED = {"gradient_checkpointing": ("hf_training", "gradient_checkpointing"), "packing": ("fm", "packing"),
          "framework": ("fm", "framework")}


def _nested(field: str, word: str) -> Any:
    body = seed_example()
    section, key = NESTED[field]
    body["configs"][0][section][key] = word
    return getattr(parse_body(body)[0].job, field)


READERS: dict[str, Callable[[str, str], Any]] = {"sweep": _sweep, "rest-flat": _flat, "ado": _ado,
                                                 "rest-nested": _nested}
COVERS = {"sweep": set(FIELDS), "rest-flat": set(FIELDS), "ado": set(JOB_KNOBS), "rest-nested": set(NESTED)}


def _cases(words: tuple[str, ...], fields: list[str]) -> list[tuple[str, str, str]]:
    return [(entry, field, word) for entry in READERS for field in fields if field in COVERS[entry] for word in words]


def _error(entry: str, field: str, word: str) -> str:
    with pytest.raises(Exception) as caught:  # noqa: PT011 - pydantic's ValidationError or a typed error
        READERS[entry](field, word)
    return describe(caught.value)


@pytest.mark.parametrize("entry, field, word", _cases(TRUE, FLAGS))
def test_true_words_read_true(entry: str, field: str, word: str) -> None:
    assert READERS[entry](field, word) is True


@pytest.mark.parametrize("entry, field, word", _cases(FALSE, FLAGS))
def test_false_words_read_false(entry: str, field: str, word: str) -> None:
    assert READERS[entry](field, word) is False


@pytest.mark.parametrize("entry, field, word", _cases(TYPOS, FLAGS))
def test_a_boolean_typo_is_one_line_naming_the_field_and_the_words(entry: str, field: str, word: str) -> None:
    line = _error(entry, field, word)
    assert "\n" not in line and field in line and "true, yes, on, 1" in line and "false, no, off, 0" in line


@pytest.mark.parametrize("entry, field", [(e, f) for e in READERS for f in CHOICES if f in COVERS[e]])
def test_every_choice_reads_itself_in_any_case_and_a_typo_names_the_choices(entry: str, field: str) -> None:
    for choice in CHOICES[field]:
        assert READERS[entry](field, choice) == choice
        assert READERS[entry](field, f" {choice.upper()} ") == choice
    line = _error(entry, field, "flsh")
    assert field in line and ", ".join(CHOICES[field]) in line and "flsh" in line


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", "--model", "llama3.1-8b", "--format", "json", *args])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("word", [*TRUE, *FALSE])
def test_cli_switch_words_mean_the_same(word: str) -> None:
    code, out, _ = _cli("--grad-checkpoint", word.strip())
    assert code == 0 and json.loads(out)["job"]["gradient_checkpointing"] is (word in TRUE)


@pytest.mark.parametrize("flag, field", [("--attention", "attention"), ("--strategy", "strategy"),
                                         ("--optimizer-impl", "optimizer_impl"), ("--optimizer", "optimizer")])
def test_cli_choices_mean_the_same_and_a_typo_is_exit_2(flag: str, field: str) -> None:
    where = "placement" if field in Placement.model_fields else "job"
    for choice in CHOICES[field]:
        code, out, err = _cli(flag, choice.upper())
        assert code == 0, err
        assert json.loads(out)[where][field] == choice
    code, _, err = _cli(flag, "flsh")
    assert code == 2 and len(err.strip().splitlines()) == 1 and field in err and ", ".join(CHOICES[field]) in err


def test_cli_switch_typo_is_exit_2() -> None:
    code, _, err = _cli("--grad-checkpoint", "ture")
    assert code == 2 and "--grad-checkpoint" in err and "ture" in err


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with serve(timeout=120) as http:
        yield http


def test_rest_typo_is_422_and_on_means_true_over_a_socket(client: httpx.Client) -> None:
    bad = client.post("/api/estimate", json={**BASE, "gradient_checkpointing": "ture"})
    assert bad.status_code == 422 and "gradient_checkpointing" in bad.text and "ture" in bad.text
    nested = seed_example()
    nested["configs"][0]["fm"]["packing"] = "ture"
    bad = client.post("/api/estimate", json=nested)
    assert bad.status_code == 422 and "packing" in bad.text
    on = client.post("/api/memory", json={**BASE, "gradient_checkpointing": "on", "estimator": "theory"})
    true = client.post("/api/memory", json={**BASE, "gradient_checkpointing": True, "estimator": "theory"})
    assert on.status_code == true.status_code == 200 and on.json() == true.json()


def test_ado_typo_is_can_recommend_0_with_the_reason() -> None:
    from autoconf.interfaces.ado.experiments import min_gpu_recommender

    point = {"model_name": "llama3.1-8b", "method": "lora", "gpu_model": "NVIDIA-A100-80GB-PCIe",
             "tokens_per_sample": 1024, "batch_size": 8}
    out = min_gpu_recommender(**point, gradient_checkpointing="ture")
    assert out["can_recommend"] == 0 and "gradient_checkpointing" in out["reason"] and "false, no, off" in out["reason"]
    on = min_gpu_recommender(**point, gradient_checkpointing="on", estimator="theory")
    true = min_gpu_recommender(**point, gradient_checkpointing=True, estimator="theory")
    assert on == true and on["can_recommend"] == 1


def test_sweep_cli_typo_is_the_row_error_and_on_is_true(tmp_path: Path) -> None:
    rows = pd.DataFrame([{**BASE, "packing": "on"}, {**BASE, "packing": True}, {**BASE, "gradient_checkpointing": "ture"},
                         {**BASE, "method": "full", "number_gpus": 8, "sequence_parallel": 8, "batch_size": 16}])
    rows.to_csv(tmp_path / "in.csv", index=False)
    done = subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "sweep", "--input", str(tmp_path / "in.csv"),
                           "--output", str(tmp_path / "out.csv"), "--estimator", "theory"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = pd.read_csv(tmp_path / "out.csv")
    assert out.loc[0, "peak_memory_gib"] == out.loc[1, "peak_memory_gib"] and pd.isna(out.loc[0, "error"])
    assert out.loc[2, "error"].startswith("gradient_checkpointing: must be one of true, yes, on")
    # sequence_parallel 8 over 8 GPUs (tp = pp = 1): answered, not refused at the 1-GPU candidate
    assert pd.isna(out.loc[3, "error"]) and out.loc[3, "can_recommend"] == 1 and out.loc[3, "gpus"] == 8


LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}  # Llama-3.1-8B's sizes


@pytest.mark.parametrize("key, value", [("hidden_size", 64.5), ("hidden_size", True), ("num_hidden_layers", "32"),
                                        ("vocab_size", 0), ("num_attention_heads", -4), ("intermediate_size", 1.5)])
def test_a_config_size_that_is_not_a_positive_whole_number_is_an_error_naming_the_key(
        tmp_path: Path, key: str, value: Any) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_CONFIG, key: value}))
    code, _, err = _cli_model("--config", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"'{key}' must be a" in err and "whole number" in err
    row = pd.DataFrame([{**BASE, "model": str(path)}])
    from autoconf.estimators.contract import get_estimator
    from autoconf.recommend.frame import recommend_frame

    assert f"'{key}' must be a" in recommend_frame(row, get_estimator("theory", None)).loc[0, "error"]


def test_a_whole_config_still_answers(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_CONFIG, "hidden_size": 4096.0}))  # a whole number written as a float
    assert _cli_model("--config", str(path))[0] == 0


def _cli_model(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", "--format", "json", *args])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("objective", ["min-gpus", "throughput", "avoid-oom"])
def test_sequence_parallel_searches_skip_the_counts_it_does_not_divide(objective: str) -> None:
    """sp 8 with tp = pp = 1 needs a multiple of 8 GPUs: no search refuses it at its 1-GPU candidate."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["recommend", "--model", "llama3.1-8b", "--method", "lora", "--gpu", "NVIDIA-A100-80GB-PCIe",
                     "--tokens-per-sample", "4096", "--batch-size", "8", "--sequence-parallel", "8", "--objective",
                     objective, "--estimator", "theory"])
    assert code == 0 and "sequence_parallel" not in out.getvalue() + err.getvalue()
    found = [line for line in out.getvalue().splitlines() if line.startswith("recommended:")]
    assert found and int(found[0].split()[1]) % 8 == 0, out.getvalue()


def test_aliases_are_one_table_and_the_canonical_name_wins() -> None:
    job, _ = row_inputs({"model_name": "llama3.1-8b", "gpu_model": "L40S", "method": "lora", "seq_len": 1024,
                         "grad_accum": 2, "lora_rank": 16, "grad_checkpoint": "off", "batch_size": 8})
    assert (job.model, job.tokens_per_sample, job.gradient_accumulation_steps, job.lora_r) == ("llama3.1-8b", 1024, 2, 16)
    assert job.gradient_checkpointing is False
    both, _ = row_inputs({**BASE, "seq_len": 1024, "tokens_per_sample": 2048})
    assert both.tokens_per_sample == 2048
