"""Answer.AI fsdp_qlora's train.py as the traced step runs it (docs/traced_vs_theory.md finding 23)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from autoconf.catalog import get_architecture
from autoconf.estimators.traced.job_spec import trace_spec
from autoconf.schema import Job
from tests._cache import fresh_cache  # noqa: F401 (an autouse fixture: a fresh cache per module)

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

TINY = "tiny-llama-test"  # h 64, I 176, 2 layers, 4 heads (2 kv) of 16, vocabulary 512, untied
BATCH, SEQ, VOCAB = 2, 64, 512


def _end_of_backward(keep_output: bool) -> int:
    """Live bytes at the last sample of the backward phase of one traced train.py step, with or without the held
    output (the stack's own spec holds it)."""
    from autoconf.estimators.traced.live_bytes import BACKWARD
    from autoconf.estimators.traced.step import trace

    job = Job(model=TINY, framework="fsdp-qlora", method="lora", lora_dropout=0.0, optimizer_impl="foreach",
              tokens_per_sample=SEQ, batch_size=BATCH, gradient_checkpointing=False)
    spec = {**trace_spec(job, get_architecture(TINY)), "shapes": [[BATCH, SEQ]]}
    assert spec.pop("keep_output") is True
    samples: np.ndarray = trace({**spec, "keep_output": True} if keep_output else spec)["results"][0]["samples"]
    backward = samples[samples[:, -1] == BACKWARD]
    return int(backward[-1, :-1].sum())


def test_train_py_holds_the_model_output_through_backward() -> None:
    """train.py binds ``output = model(...)`` and sets it to None only after ``optimizer.step()``: the output's bf16
    logits (batch × length × vocabulary × 2 bytes) and its 0-dim fp32 loss stay live through backward, where the
    HF Trainer keeps only the loss. Without checkpointing: with it the held graph also keeps the non-reentrant
    checkpoints' saved layer inputs (2·h bytes per token per layer) to the end of backward, which train.py's
    reentrant ones are not."""
    assert _end_of_backward(True) - _end_of_backward(False) == BATCH * SEQ * VOCAB * 2 + 4


@pytest.mark.parametrize(("framework", "dtype"), [("fsdp-qlora", "bfloat16"), ("hf-trainer", "float32")])
def test_adapters_follow_the_stacks_peft(framework: str, dtype: str) -> None:
    """train.py's peft (0.7-0.11: ``update_layer`` moves new adapters to the base weight's floating dtype) builds
    bf16 adapters on the bf16 model; peft from 0.12 (``autocast_adapter_dtype=True``), under the HF Trainer, fp32."""
    import torch

    from autoconf.estimators.traced.model import build_model

    job = Job(model=TINY, framework=framework, method="lora", tokens_per_sample=SEQ, batch_size=BATCH)
    model = build_model(trace_spec(job, get_architecture(TINY)), None)
    adapters = {p.dtype for n, p in model.named_parameters() if "lora_" in n}
    assert adapters == {getattr(torch, dtype)}


def _rank_optimizer_peak(keep_output: bool) -> int:
    """Rank 0 of 2's peak over step 2's optimizer step (FSDP1, LoRA), with or without the held output."""
    from autoconf.estimators.traced.rank_cache import trace_ranks
    from autoconf.estimators.traced.ranks import fsdp1_settings

    job = Job(model=TINY, framework="fsdp-qlora", method="lora", lora_dropout=0.0, optimizer_impl="foreach",
              tokens_per_sample=SEQ, batch_size=BATCH, gradient_checkpointing=False)
    spec = {**trace_spec(job, get_architecture(TINY)), "world": 2, "shape": [BATCH, SEQ], **fsdp1_settings(job)}
    assert spec.pop("keep_output") is True  # the stack's own spec holds it
    summary = trace_ranks({**spec, "keep_output": True} if keep_output else spec)
    return int(next(p for p in summary["phases"] if p["step"] == 2 and p["phase"] == "optimizer")["peak"])


@pytest.mark.slow
def test_train_py_rank_holds_the_model_output_through_the_optimizer_step() -> None:
    """An FSDP1 rank of train.py keeps the output until after ``optimizer.step()`` as one GPU does: each sample of
    the optimizer step holds the bf16 logits (FSDP1's bf16 compute under autocast: b × s × V × 2 bytes) and the
    0-dim fp32 loss more."""
    assert _rank_optimizer_peak(True) - _rank_optimizer_peak(False) == BATCH * SEQ * VOCAB * 2 + 4


@pytest.mark.parametrize("gpus", [1, 2])
def test_train_py_quant_states_stay_whole_on_every_gpu(gpus: int) -> None:
    """The replica's sharding keeps the 4-bit quant states whole on each GPU (no parameters: FSDP neither shards nor
    offloads them), doubly quantised as train.py's ``Linear4bit`` default: per quantised weight a uint8 absmax per 64
    and an fp32 absmax per 256 blocks. Tiny llama: 2 layers of q, o (64 × 64), k, v (64 × 32), gate, up, down
    (64 × 176): 92,160 weights, 1,440 + 22.5 bytes. What the optimizer step's weight scale takes from them is added
    back; one GPU scales nothing."""
    from autoconf.estimators.traced.estimator import WEIGHTS, sharding
    from autoconf.estimators.traced.fit import PHASE_NAMES
    from autoconf.schema import Placement

    job = Job(model=TINY, framework="fsdp-qlora", method="qlora", tokens_per_sample=SEQ, batch_size=BATCH)
    placement = Placement(gpu_model="A100-80GB", number_gpus=gpus, strategy="fsdp" if gpus > 1 else None)
    scale, add = sharding(job, get_architecture(TINY), placement)
    stepping = PHASE_NAMES.index("optimizer")  # where no gathered unit is added
    expected = (92_160 / 64 + 4 * 92_160 / 64 / 256) * (1 - scale[stepping, WEIGHTS])
    assert add[stepping, WEIGHTS] == pytest.approx(expected)
    assert (add[stepping, WEIGHTS] > 0) == (gpus > 1)


MIB = 1024 * 1024


@pytest.mark.parametrize(("sizes", "expected"), [
    # tensor_flatten.cpp take_tensors: a group closes once it holds at least the 250 MiB limit
    ([100, 100, 100], [300]),
    ([300, 10], [300, 10]),  # a tensor over the limit is a bucket of its own; the rest is flushed at the end
    ([86, 86, 86, 32, 32], [258, 64]),  # a Llama-2-7B unit's MLP then attention weights (bf16)
])
def test_broadcast_buckets_follow_take_tensors(sizes: list[int], expected: list[int]) -> None:
    import torch

    from autoconf.estimators.traced.fsdp1 import broadcast_buckets

    assert broadcast_buckets([(torch.bfloat16, s * MIB) for s in sizes]) == [e * MIB for e in expected]


def test_buckets_are_grouped_by_dtype() -> None:
    """fp32 buffers and bf16 weights never share a flattened bucket (take_tensors groups by type)."""
    import torch

    from autoconf.estimators.traced.fsdp1 import broadcast_buckets

    sizes = [(torch.bfloat16, 200 * MIB), (torch.float32, 1 * MIB), (torch.bfloat16, 60 * MIB)]
    assert broadcast_buckets(sizes) == [260 * MIB, 1 * MIB]


def test_the_device_load_copies_each_unit_to_the_device() -> None:
    """train.py's FSDP1 (``device_id`` a GPU, ``sync_module_states``) copies each unit's weights to the device and
    broadcasts them in buckets before flattening them: the tiny llama's root unit (embedding and head, 512 × 64 bf16
    each, and the final norm's 64: 131,200 bytes) is one bucket, allocated only with the device load."""
    from autoconf.estimators.traced.dist import trace_rank
    from autoconf.estimators.traced.ranks import fsdp1_settings

    job = Job(model=TINY, framework="fsdp-qlora", method="lora", tokens_per_sample=SEQ, batch_size=BATCH)
    spec = {**trace_spec(job, get_architecture(TINY)), "world": 2, "shape": [BATCH, SEQ], **fsdp1_settings(job)}
    assert spec["device_load"] is True

    def load_events(device_load: bool) -> list[int]:
        out = trace_rank(spec if device_load else {k: v for k, v in spec.items() if k != "device_load"})
        return [int(n) for _, n, _ in out["events"] if n > 0]

    extra = sorted(load_events(True))
    for size in load_events(False):
        extra.remove(size)
    root = 2 * 512 * 64 * 2 + 64 * 2
    assert root in extra  # the root's bucket: embedding, norm and head flattened together
