"""bench/traced_vs_theory.py: an architecture whose trace fails is named in the report with a one-line reason."""

from __future__ import annotations

import pytest

from autoconf.errors import InvalidInputError
from autoconf.estimators.traced.fit import TraceFailed
from bench.traced_vs_theory import not_traced_lines, one_line

# the worker's last stderr line for gemma2 on transformers 5.24 (fit.run_worker quotes it)
GEMMA2 = ("trace worker for gemma-2-2b exited with 1: Gemma2ForCausalLM does not support an attention implementation "
          "through torch.nn.functional.scaled_dot_product_attention yet. Please request the support for this "
          "architecture: https://github.com/huggingface/transformers/issues/28005. If you believe this error is a bug,")

# torch's CPU allocator under an address-space limit (the worker's last line)
OOM = ("trace worker for llama3.1-8b exited with 1: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. "
       "DefaultCPUAllocator: can't allocate memory: you tried to allocate 939524096 bytes. Error code 12 (Cannot "
       "allocate memory)")


@pytest.mark.parametrize(("exc", "expected"), [
    (TraceFailed("the op sequence of x changes with the shape; cannot fit it"),
     "the op sequence of x changes with the shape; cannot fit it"),
    (TraceFailed(GEMMA2), GEMMA2[:GEMMA2.index(" Please")]),  # long: its sentences that fit
    (TraceFailed(OOM), OOM[:OOM.index(" Error code")]),
    (TraceFailed("first line\nsecond line"), "first line"),
    (TraceFailed("a, " * 100), "a, " * 66 + "a…"),  # one long sentence: cut at 200 characters
    (InvalidInputError("lora_target_modules", "must name linear modules"), "lora_target_modules: must name linear "
                                                                           "modules"),
])
def test_one_line(exc: Exception, expected: str) -> None:
    assert one_line(exc) == expected


def test_not_traced_lines_list_every_model_with_its_reason() -> None:
    assert not_traced_lines({}) == []
    lines = not_traced_lines({"mpt-7b": "no SDPA", "gemma-2-2b": "no SDPA either"})
    assert lines == ["Not traced (2; left out of every table below):", "", "- gemma-2-2b: no SDPA either",
                     "- mpt-7b: no SDPA", ""]
