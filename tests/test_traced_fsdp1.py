"""FSDP1 rank traces (torch FullyShardedDataParallel as accelerate wraps it) against per-rank bytes derived by hand."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from autoconf.catalog import get_architecture
from autoconf.estimators.contract import get_estimator
from autoconf.estimators.traced.job_spec import trace_spec
from autoconf.estimators.traced.rank_cache import trace_ranks
from autoconf.estimators.traced.ranks import fsdp1_job, fsdp1_settings, rank_unsupported
from autoconf.schema import Job, Placement
from tests._cache import fresh_cache  # noqa: F401 (an autouse fixture: a fresh cache per module)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

TINY = "tiny-llama-test"
SHAPE = (1, 256)


def _job(method: str, framework: str = "fms-hf-tuning") -> Job:
    return Job(model=TINY, method=method, tokens_per_sample=SHAPE[1], batch_size=SHAPE[0], framework=framework,
               gradient_checkpointing=False, optimizer_impl="fused")


def _phase(summary: dict, step: int, phase: str) -> dict:
    return next(p for p in summary["phases"] if p["step"] == step and p["phase"] == phase)


def _units(method: str) -> tuple[list[int], int]:
    """Elements of each FSDP1 flat parameter (wrapping unit) of the tiny llama, and their bytes per element.
    Full: the root (both embeddings and the final norm, untied) and one unit per decoder layer (q, k, v, o, gate,
    up, down and two norms). LoRA (r = 8 on q_proj and v_proj, peft's wrap policy): the frozen root and layers,
    and each lora_A / lora_B a unit of its own (fp32: peft keeps adapters in fp32)."""
    a = get_architecture(TINY)
    h, q, kv = a.hidden_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    root = 2 * a.vocab_size * h + h
    layer = h * q + 2 * h * kv + q * h + 3 * h * a.intermediate_size + 2 * h
    if method == "full":
        return [root] + [layer] * a.num_layers, 2
    r = 8
    return [r * h, q * r, r * h, kv * r] * a.num_layers, 4


@pytest.mark.slow
@pytest.mark.parametrize(("method", "world"), [("full", 4), ("lora", 2)])
def test_fsdp1_rank_holds_its_padded_flat_shards(method: str, world: int) -> None:
    """At step 2's optimizer step rank 0 holds ⌈unit / world⌉ elements of every flat parameter (FSDP1 pads a
    flat parameter to a multiple of the world and keeps one equal chunk per rank), their gradients, AdamW's two
    moments over them, one fp32 step per trained flat parameter and the root's fp32 ``_zero_scalar`` (created by
    ``FullyShardedDataParallel.clip_grad_norm_``)."""
    job = _job(method)
    spec = {**trace_spec(job, get_architecture(TINY)), "world": world, "strategy": "fsdp1", "shape": list(SHAPE)}
    summary = trace_ranks(spec)
    trained, size = _units(method)
    shard = sum(math.ceil(u / world) for u in trained) * size
    frozen = 0
    if method == "lora":  # the bf16 root and layers, frozen: sharded, no gradients, no states
        full, _ = _units("full")
        frozen = sum(math.ceil(u / world) for u in full) * 2
    weights, grads, states = _phase(summary, 2, "optimizer")["parts"][:3]
    assert weights == frozen + shard
    assert grads == shard
    assert states == 2 * shard + 4 * len(trained) + 4
    # load: each unit is flattened whole on the rank, then only its chunk kept; the root, built last, holds at
    # most two whole copies of itself next to every shard (observed: exactly two, for both cases)
    root = _units("full")[0][0] * (2 if method == "lora" else size)
    assert frozen + shard < _phase(summary, 0, "load")["peak"] <= frozen + shard + 2 * root


@pytest.mark.parametrize(("framework", "strategy", "traced"), [
    ("fms-hf-tuning", "fsdp", True), ("fsdp-qlora", "fsdp", True), ("fms-hf-tuning", "ddp", False),
])
def test_fsdp1_stacks_are_rank_traced_for_full_shard(framework: str, strategy: str, traced: bool) -> None:
    why = rank_unsupported(_job("lora", framework), Placement(gpu_model="NVIDIA-A100-80GB-PCIe", number_gpus=2,
                                                               strategy=strategy))
    assert (why is None) is traced


@pytest.mark.slow
def test_fsdp1_estimate_names_the_wrapping() -> None:
    memory = get_estimator("traced").estimate(
        _job("lora").model_copy(update={"batch_size": 2}),
        Placement(gpu_model="NVIDIA-A100-80GB-PCIe", number_gpus=2, strategy="fsdp")).memory
    assert any("FSDP1" in n and "rank 0 of 2" in n for n in memory.notes)
    assert 0 < memory.peak_allocated_bytes <= memory.peak_reserved_bytes <= memory.peak_bytes


def _backward_peak(layers: int, batch: int, hf4: bool, method: str = "lora") -> int:
    job = _job(method, "peft" if method == "qlora" else "fms-hf-tuning").model_copy(
        update={"gradient_checkpointing": True, "batch_size": batch})
    spec = {**trace_spec(job, get_architecture(TINY)), "world": 2, "strategy": "fsdp1", "shape": [batch, SHAPE[1]]}
    if method == "qlora":  # the sharded-QLoRA keys (quant storage, no upcast, mixed precision), 4.x checkpointing
        spec.update(fsdp1_settings(job))
    # a vocabulary below the hidden size, so the peak is the last layer's recomputation, not the loss
    spec["arch"] = {**spec["arch"], "num_layers": layers, "vocab_size": 64}
    if hf4:
        spec["hf4_checkpointing"] = True
    return int(max(p["peak"] for p in trace_ranks(spec)["phases"] if p["step"] == 2 and p["phase"] == "backward"))


@pytest.mark.slow
@pytest.mark.parametrize(("hf4", "method", "per_hidden"), [(False, "lora", 2), (True, "lora", 4), (True, "qlora", 4)])
def test_fsdp1_reentrant_checkpoint_around_the_unit_keeps_input_gradients(hf4: bool, method: str,
                                                                          per_hidden: int) -> None:
    """Bytes per token that each decoder layer adds to the backward peak of rank 0 of 2 (LoRA, checkpointing,
    bf16), from 2 vs 4 layers at batch 1 vs 2. transformers 5.x (non-reentrant checkpoint inside the layer):
    the layer's bf16 input, 2·h. transformers 4.x under FSDP1 (reentrant checkpoint around the FSDP unit): the
    recomputation runs the frozen unit with grad enabled on the checkpoint's detached input, so FSDP1's
    reshard-only hook (``register_multi_grad_hook`` on that input, kept on the flat parameter until the
    end-of-backward callback) keeps the input and the gradient accumulated into it: 2·h + 2·h. peft QLoRA's frozen
    4-bit units (bf16 residual stream: no kbit upcast when sharded) keep the same."""
    h = get_architecture(TINY).hidden_size
    p = {(layers, b): _backward_peak(layers, b, hf4, method) for layers in (2, 4) for b in (1, 2)}
    per_layer_token = (p[4, 2] - p[4, 1] - p[2, 2] + p[2, 1]) / (2 * SHAPE[1])
    assert per_layer_token == per_hidden * h


@pytest.mark.parametrize(("framework", "method", "checkpointing", "hf4"), [
    ("fms-hf-tuning", "lora", True, True), ("fms-hf-tuning", "lora", False, False),
    ("fms-hf-tuning", "full", True, False), ("fsdp-qlora", "lora", True, False),
])
def test_fsdp1_settings_follow_transformers_4_checkpointing_for_fms_lora(
        framework: str, method: str, checkpointing: bool, hf4: bool) -> None:
    """fms-hf-tuning LoRA ran transformers 4.x (reentrant checkpoint around each FSDP unit); fsdp_qlora's train.py
    wraps the decoder-layer class itself (``apply_activation_checkpointing``, ``check_fn`` on the layer class),
    inside the units; full fine-tuning has no frozen unit for the reshard-only hook."""
    job = _job(method, framework).model_copy(update={"gradient_checkpointing": checkpointing})
    settings = fsdp1_settings(job)
    assert settings["strategy"] == "fsdp1"
    assert settings.get("hf4_checkpointing", False) is hf4


def _four_bit_linears() -> list[int]:
    """Elements of each 4-bit linear of one tiny-llama decoder layer: q, k, v, o, gate, up, down."""
    a = get_architecture(TINY)
    h, q, kv, inter = a.hidden_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.intermediate_size
    return [h * q, h * kv, h * kv, q * h, h * inter, h * inter, inter * h]


@pytest.mark.slow
@pytest.mark.parametrize("double_quant", [False, True])
def test_fsdp1_qlora_rank_shards_packed_weights_and_keeps_whole_quant_states(double_quant: bool) -> None:
    """peft QLoRA (the fms-acceleration baseline-peft-bnb stack) on rank 0 of 2 at step 2's optimizer step. Each
    decoder layer's unit flattens its seven packed 4-bit weights (n / 2 bytes each, stored as bf16: n / 4 elements)
    with its two bf16 norms, the root its two bf16 embeddings and final norm: ⌈unit / 2⌉ bf16 elements each. Every
    4-bit layer's quant state is on the rank whole (not a parameter): an fp32 absmax per 64 values and bitsandbytes'
    16-entry fp32 NF4 code; doubly quantised, a uint8 absmax per 64 values, an fp32 absmax per 256 of those, an fp32
    offset and the 256-entry fp32 dynamic code. Adapters as for LoRA (fp32: accelerate upcasts trainable FSDP1
    flat parameters under mixed precision); no kbit upcast (TRL skips prepare_model_for_kbit_training for sharded
    QLoRA), so the norms and embeddings stay bf16."""
    a = get_architecture(TINY)
    job = _job("qlora", "peft").model_copy(update={"double_quant": double_quant, "gradient_checkpointing": True})
    settings = fsdp1_settings(job)
    assert settings["kbit_upcast"] is False and settings["quant_storage"] == "bfloat16"
    spec = {**trace_spec(job, a), "world": 2, "shape": list(SHAPE), **settings}
    linears = _four_bit_linears()
    layer = sum(n // 4 for n in linears) + 2 * a.hidden_size
    root = 2 * a.vocab_size * a.hidden_size + a.hidden_size
    frozen = (math.ceil(root / 2) + a.num_layers * math.ceil(layer / 2)) * 2
    if double_quant:
        state = sum(n // 64 + 4 * math.ceil(n / 64 / 256) + 4 + 4 * 256 + 4 * 16 for n in linears)
    else:
        state = sum(4 * (n // 64) + 4 * 16 for n in linears)
    trained, size = _units("lora")
    shard = sum(math.ceil(u / 2) for u in trained) * size
    weights, grads, states = _phase(trace_ranks(spec), 2, "optimizer")["parts"][:3]
    assert weights == frozen + a.num_layers * state + shard
    assert grads == shard
    assert states == 2 * shard + 4 * len(trained) + 4


@pytest.mark.parametrize(("framework", "method", "strategy", "traced"), [
    ("peft", "qlora", "fsdp", True), ("peft", "qlora", "ddp", False), ("fsdp-qlora", "qlora", "fsdp", True),
    ("fsdp-qlora", "qlora", "ddp", True), ("fsdp-qlora", "qlora", "fsdp-shard-grad-op", False),
    ("peft", "lora", "fsdp", True),
])
def test_fsdp1_ranks_for_the_fsdp1_qlora_stacks(framework: str, method: str, strategy: str, traced: bool) -> None:
    """peft QLoRA runs accelerate's FSDP1 (its ranks traced for full shard only); fsdp_qlora's train.py flattens its
    bf16-stored Params4bit in FSDP1 itself, full shard or, for its DDP, NO_SHARD (finding 27.4); peft LoRA keeps its
    FSDP2 ranks."""
    job = _job(method, framework)
    placement = Placement(gpu_model="NVIDIA-A100-80GB-PCIe", number_gpus=2, strategy=strategy)
    assert (rank_unsupported(job, placement) is None) is traced
    assert fsdp1_job(job, placement) is (framework == "fsdp-qlora" or method == "qlora")


@pytest.mark.parametrize("keep", [False, True])
def test_bitsandbytes_up_to_0_43_1_keeps_the_4bit_matmul_input(keep: bool) -> None:
    """bitsandbytes ≤ 0.43.1's ``MatMul4Bit.forward`` set ``ctx.tensors = (A, B)``; 0.43.2 (#1270) keeps
    ``(None, B)``: a frozen 4-bit weight needs only ``B`` for the input's gradient. With ``keep`` the backward node
    of a real 4-bit linear holds its input in the compute dtype (bf16 here, from an fp32 input)."""
    import bitsandbytes as bnb
    import torch

    from autoconf.estimators.traced.qlora import keep_matmul_input

    linear = bnb.nn.Linear4bit(64, 32, bias=False, compute_dtype=torch.bfloat16)
    linear.weight = bnb.nn.Params4bit(torch.randn(32, 64, dtype=torch.bfloat16), requires_grad=False)
    linear = linear.to("cpu")  # quantised here
    keep_matmul_input(keep)
    try:
        node = linear(torch.randn(3, 64, requires_grad=True)).grad_fn
        while node is not None and not hasattr(node, "tensors"):
            node = node.next_functions[0][0]
        assert node is not None
        kept = node.tensors[0]
        assert (kept is not None) is keep
        if keep:
            assert kept.dtype == torch.bfloat16 and tuple(kept.shape) == (3, 64)
    finally:
        keep_matmul_input(False)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["full", "lora"])
def test_fsdp1_cpu_offload_keeps_the_shards_on_the_host(method: str) -> None:
    """``CPUOffload(offload_params=True)`` (fsdp1_offload.py) on rank 0 of 2. Each flat shard moves to the host when
    its unit is built, its gradient is copied to a pinned host buffer and AdamW steps there: at step 2's optimizer
    step the rank holds no weights, gradients or moments, only AdamW's 0-d fp32 step of each trained flat parameter
    and the root's ``_zero_scalar`` (``clip_grad_norm_``), 4 bytes each, which the fake device cannot place. Through
    forward and backward it holds the same gathered units as without offload, less every resident shard
    (⌈unit / 2⌉ elements each); at load, when the root is built last, less the layers' shards."""
    spec = {**trace_spec(_job(method), get_architecture(TINY)), "world": 2, "strategy": "fsdp1", "shape": list(SHAPE)}
    kept, offloaded = trace_ranks(spec), trace_ranks({**spec, "cpu_offload": True})
    trained, size = _units(method)
    full, _ = _units("full")
    shards = sum(math.ceil(u / 2) for u in full) * 2 + (sum(math.ceil(u / 2) for u in trained) * size
                                                         if method == "lora" else 0)
    weights, grads, states = _phase(offloaded, 2, "optimizer")["parts"][:3]
    assert (weights, grads, states) == (0, 0, 4 * (len(trained) + 1))
    for phase in ("forward", "backward"):
        assert _phase(kept, 2, phase)["parts"][0] - _phase(offloaded, 2, phase)["parts"][0] == shards
    layers = sum(math.ceil(u / 2) for u in full[1:]) * 2
    if method == "full":  # LoRA's adapters units are built before each layer's: the load's order differs
        assert _phase(kept, 0, "load")["parts"][0] - _phase(offloaded, 0, "load")["parts"][0] == layers


@pytest.mark.parametrize(("framework", "offload", "strategy", "traced"), [
    ("fsdp-qlora", "optimizer+params", "fsdp", True), ("fsdp-qlora", "optimizer+params", "ddp", True),
    ("fsdp-qlora", "optimizer", "fsdp", False), ("fms-hf-tuning", "optimizer+params", "fsdp", True),
    ("hf-trainer", "optimizer+params", "fsdp", False),
])
def test_fsdp1_ranks_trace_parameter_offload_only(framework: str, offload: str, strategy: str, traced: bool) -> None:
    """FSDP1's only offload is ``CPUOffload(offload_params=True)`` (parameters, gradients and so the optimizer on the
    host): traced for the FSDP1 stacks; optimizer-only offload and FSDP2 stacks' offload keep the replica."""
    placement = Placement(gpu_model="NVIDIA-A100-80GB-PCIe", number_gpus=2, strategy=strategy, offload=offload)
    why = rank_unsupported(_job("qlora" if framework == "fsdp-qlora" else "lora", framework), placement)
    assert (why is None) is traced


@pytest.mark.slow
def test_fsdp1_gathers_on_its_unshard_stream() -> None:
    """FSDP1 all-gathers each unit into its padded unsharded flat parameter on ``_unshard_stream`` and reduce-
    scatters on ``_post_backward_stream`` (_runtime_utils.py ``_unshard``, ``_post_backward_hook``); the caching
    allocator reuses a block only on the stream that allocated it, so the allocation events carry those streams
    (wrap.tag_streams): the tiny llama's gathered units (bf16, full fine-tuning, 2 ranks: the root's 65,600
    elements, each layer's 46,208) are allocated off the compute stream (0), gradients' shards on a third stream."""
    import numpy as np

    spec = {**trace_spec(_job("full"), get_architecture(TINY)), "world": 2, "strategy": "fsdp1", "shape": list(SHAPE),
            **{k: v for k, v in fsdp1_settings(_job("full")).items() if k != "strategy"}}
    with np.load(trace_ranks(spec)["events_path"]) as data:
        events = data["events"].tolist()
    off_compute = {n for _, n, stream in events if n > 0 and stream != 0}
    full, _ = _units("full")
    assert {u * 2 for u in full} <= off_compute
    assert len({stream for _, _, stream in events}) >= 3
