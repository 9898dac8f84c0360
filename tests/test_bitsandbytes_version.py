"""Job.bitsandbytes_version: bitsandbytes up to 0.43.1 keeps every 4-bit matmul's input for backward.

Expected values come from the sources, not the code: ``MatMul4Bit.forward`` sets ``ctx.tensors = (A, B)`` at the
bitsandbytes tags 0.39.1 … 0.43.1 and ``(None, B)`` from 0.43.2 (released 2024-07-23; #1270); transformers 4.x
checkpoints with ``use_reentrant=True`` unless told (modeling_utils.py 4.44.2, 4.53.0, 4.57.6), 5.x with False;
fms-acceleration's requirement files pin bitsandbytes 0.43.1 at b92c99d, 0.43.2 at b6c1455, 0.43.3 from 4e81c64 on
(``git show <commit>:scripts/benchmarks/refs/requirements.txt``), and the campaigns before b92c99d pin nothing and
were committed before 2024-07-23.
"""

from __future__ import annotations

import pytest

from autoconf.catalog import get_architecture
from autoconf.estimators.traced.job_spec import trace_spec
from autoconf.schema import Job
from tests._fms_campaigns import fms_campaigns

MISTRAL = "mistral-7b-v0.1"


@pytest.mark.parametrize("word", ["0.38.1", "0.4", "latest", "", "1"])
def test_releases_without_4bit_matmuls_or_malformed_are_refused_naming_the_field(word: str) -> None:
    with pytest.raises(ValueError, match="bitsandbytes_version"):
        Job(model=MISTRAL, method="qlora", bitsandbytes_version=word)


@pytest.mark.parametrize("word", ["0.39", "0.43.1", "0.41.3.post2", "0.45.0.dev0", "1.0.0"])
def test_releases_are_kept_as_spelled(word: str) -> None:
    assert Job(model=MISTRAL, method="qlora", bitsandbytes_version=word).bitsandbytes_version == word


@pytest.mark.parametrize(("fields", "keeps", "reentrant"), [
    ({"bitsandbytes_version": "0.43.1"}, True, True),  # transformers unstated: 5.x refuses bitsandbytes < 0.46.1
    ({"bitsandbytes_version": "0.39"}, True, True),
    ({"bitsandbytes_version": "0.43.1", "transformers_version": "4.39.3"}, True, True),
    ({"bitsandbytes_version": "0.43.1", "transformers_version": "5.0.0"}, True, False),
    ({"bitsandbytes_version": "0.43.1", "gradient_checkpointing": False}, True, False),
    ({"bitsandbytes_version": "0.43.2"}, False, False),
    ({"bitsandbytes_version": "0.43.3", "transformers_version": "4.44.2"}, False, False),
    ({}, False, False),  # the installed release (0.50) keeps (None, B)
    ({"bitsandbytes_version": "0.43.1", "method": "lora"}, False, False),  # no 4-bit matmul
])
def test_trace_routes_old_bitsandbytes_to_the_kept_input(fields: dict[str, object], keeps: bool,
                                                         reentrant: bool) -> None:
    job = Job(**{"model": MISTRAL, "method": "qlora", "gradient_checkpointing": True, **fields})
    spec = trace_spec(job, get_architecture(MISTRAL))
    assert spec.get("bnb_keeps_input", False) is keeps
    assert spec.get("reentrant", False) is reentrant


def test_fms_rows_carry_their_campaigns_bitsandbytes() -> None:
    fms, first, dated = fms_campaigns()
    version = {c: job.bitsandbytes_version for c, job in first.items()}
    assert version["refs/a100_80gb@2024-07-15:b92c99d"] == "0.43.1"
    assert version["refs/a100_80gb@2024-07-29:b6c1455"] == "0.43.2"
    assert version["refs/a100_80gb@2024-09-16:4e81c64"] == "0.43.3"
    assert version["refs/a100_80gb@2025-02-07:24bdadb"] == "0.43.3"
    assert version["refs/a100_80gb@2024-05-24:f39d03c"] == "0.43.1"  # unpinned: the bound by date, <= 0.43.1
    bound = fms.framework_version.str.contains("bitsandbytes <=0.43.1", regex=False)
    assert (bound == (dated < "2024-07-12")).all()  # exactly the campaigns without a requirements file
    assert fms.framework_version.str.contains("bitsandbytes").all()


@pytest.mark.parametrize(("version", "keeps"), [("0.43.1", True), ("0.43.3", False)])
def test_fsdp1_ranks_keep_the_input_under_their_own_4x_checkpoint(version: str, keeps: bool) -> None:
    """peft QLoRA on 2 GPUs (fms-acceleration's baseline-peft-bnb): the FSDP1 rank runs transformers 4.x's
    checkpoint around each unit (``hf4_checkpointing``), so the step's ``reentrant`` is dropped there."""
    from autoconf.estimators.traced.ranks import rank_plan
    from autoconf.schema import Placement

    job = Job(model=MISTRAL, method="qlora", framework="peft", gradient_checkpointing=True,
              bitsandbytes_version=version)
    placement = Placement(gpu_model="NVIDIA-A100-SXM4-80GB", number_gpus=2, strategy="fsdp")
    spec, ranks = rank_plan(job, placement, trace_spec(job, get_architecture(MISTRAL)), 2)
    assert spec.get("bnb_keeps_input", False) is keeps and spec["hf4_checkpointing"] is True
    assert "reentrant" not in spec and ranks == [0]


@pytest.mark.slow
def test_routed_trace_keeps_each_4bit_linears_input_of_the_recomputed_layer() -> None:
    """Tiny llama (h 64, I 176, q 64, kv 32) QLoRA on one GPU with peft's kbit upcast, 2 × 64 tokens, bitsandbytes
    0.43.1 routed (reentrant checkpoint): every 4-bit linear of the recomputed layer keeps a bf16 copy of its fp32
    input (Linear4bit casts it to the compute dtype per call): q, k, v 3·2h, o_proj 2h (4 heads × 16), gate and up
    2·2h, down 2I → 12h + 2I = 1,120 bytes per token more at the activations' peak than the same trace without the
    kept input (mistral-7b: 77,824, finding 22.2's +78 kB)."""
    from autoconf.estimators.traced.step import trace

    tiny = "tiny-llama-test"
    job = Job(model=tiny, method="qlora", tokens_per_sample=64, batch_size=1, gradient_checkpointing=True,
              bitsandbytes_version="0.43.1")
    spec = {**trace_spec(job, get_architecture(tiny)), "shapes": [[2, 64]]}
    kept, plain = (trace(s)["results"][0]["samples"].max(axis=0)
                   for s in (spec, {k: v for k, v in spec.items() if k != "bnb_keeps_input"}))
    activations = 3  # the samples' columns: weights, gradients, optimizer, activations, logits, phase
    assert kept[activations] - plain[activations] == (12 * 64 + 2 * 176) * 2 * 64
    assert list(kept[:3]) == list(plain[:3])


@pytest.mark.parametrize(("version", "keeps"), [
    ("0.39.1", True), ("0.41.3.post2", True), ("0.43.1", True),  # tags 0.39.1 … 0.43.1: ctx.tensors = (A, B)
    ("0.43.2", False), ("0.43.3", False), ("0.45", False), ("", False),  # #1270: (None, B); "" = installed
])
def test_theory_keeps_the_4bit_input_by_release(version: str, keeps: bool) -> None:
    """Theory's gate (coefficients.quant_saves_input) follows the Job's bitsandbytes release, for a profile whose
    stack keeps the input (peft) and never for one that does not (fms-hf-tuning's quant_saves_input False)."""
    from autoconf.estimators.theory.coefficients import bnb_release_keeps_input, quant_saves_input

    assert bnb_release_keeps_input(version) is keeps
    peft = Job(model=MISTRAL, method="qlora", framework="peft", bitsandbytes_version=version or None)
    fms = Job(model=MISTRAL, method="qlora", framework="fms-hf-tuning", bitsandbytes_version=version or None)
    assert bool(quant_saves_input(peft)) is keeps
    assert bool(quant_saves_input(fms)) is False
