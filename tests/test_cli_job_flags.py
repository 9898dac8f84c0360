"""The CLI's Job flags are generated from the Job's fields: every field has a flag on estimate and recommend."""

from __future__ import annotations

import argparse

import pytest

from autoconf.interfaces.cli import build_parser
from autoconf.interfaces.cli.estimate import inputs_from_args
from autoconf.schema import Job

# Fields that a verb spells in the VRAM-budget CLI's way instead (docs/dialects.md), written out here.
ESTIMATE_SPELLINGS = {"model": "--model", "batch_size": "--per-device-batch", "gradient_checkpointing": "--grad-checkpoint",
                      "tokens_per_sample": "--seq-len", "gradient_accumulation_steps": "--grad-accum",
                      "lora_r": "--lora-rank"}


def _options(verb: str) -> set[str]:
    parser = build_parser(verb)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return set(sub.choices[verb]._option_string_actions)  # noqa: SLF001


@pytest.mark.parametrize("verb", ["estimate", "recommend"])
def test_every_job_field_has_a_flag(verb: str) -> None:
    options = _options(verb)
    spelled = ESTIMATE_SPELLINGS if verb == "estimate" else {"batch_size": "--batch-size"}
    missing = [n for n in Job.model_fields if spelled.get(n, f"--{n.replace('_', '-')}") not in options]
    assert missing == []


@pytest.mark.parametrize(("flags", "field", "expected"), [
    (["--dora"], "dora", True),
    (["--dora", "Yes"], "dora", True),  # a word, as every entry point reads it
    (["--save-only-model", "off"], "save_only_model", False),
    (["--no-freeze-vision"], "freeze_vision", False),
    (["--sequence-parallel", "2", "--dp", "2"], "sequence_parallel", 2),
    (["--packing"], "packing", True),
    (["--loss-kernel", "chunked"], "loss_kernel", "chunked"),
    (["--transformers-version", "4.48.1"], "transformers_version", "4.48.1"),
    (["--bitsandbytes-version", "0.43.1"], "bitsandbytes_version", "0.43.1"),
])
def test_a_generated_flag_reaches_the_job(flags: list[str], field: str, expected: object) -> None:
    args = build_parser("estimate").parse_args(["estimate", "--model", "llama3.1-8b", *flags])
    job, _, _, _ = inputs_from_args(args)
    assert getattr(job, field) == expected
