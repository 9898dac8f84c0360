"""Framework profiles, their override fields, and the CUDA side (three peaks): hand-derived and published values."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from autoconf.catalog import get_architecture, get_gpu
from autoconf.errors import InvalidInputError
from autoconf.estimators.risk import oom_probability
from autoconf.estimators.theory import activations as act
from autoconf.estimators.theory import loss as ce
from autoconf.estimators.theory.coefficients import attention_coef
from autoconf.estimators.theory.cuda import communicators
from autoconf.estimators.theory.memory import estimate_memory, side_stream_bytes
from autoconf.estimators.theory.states import States, model_states
from autoconf.estimators.theory.vector import theory_batch
from autoconf.estimators.theory.weights import NF4_BYTES, NF4_DQ_BYTES
from autoconf.evaluation.accuracy import score_memory
from autoconf.evaluation.data import row_to_inputs
from autoconf.schema import GIB, Job, MemoryEstimate, Placement

MIB = 2**20
A100, H100, L40S = "NVIDIA-A100-80GB-PCIe", "NVIDIA-H100-80GB-HBM3", "L40S"
LLAMA = "llama3.1-8b"  # h = 4096, 32 layers, kv width 1024, V = 128256


def _mem(gpu: str = A100, gpus: int = 1, **job: object) -> MemoryEstimate:
    base: dict[str, object] = dict(model=LLAMA, method="lora", batch_size=gpus, tokens_per_sample=1024)
    return estimate_memory(Job(**{**base, **job}), Placement(gpu_model=gpu, number_gpus=gpus))


@pytest.mark.parametrize(
    "gpu, workspace",
    [(A100, 2 * 4 * MIB), (L40S, 2 * 4 * MIB), (H100, 2 * 32 * MIB)],  # cuBLAS docs: 4 MiB pre-Hopper, 32 MiB Hopper
)
def test_reserved_is_fragmentation_plus_cublas_workspaces(gpu: str, workspace: float) -> None:
    m = _mem(gpu)
    assert m.reserved_bytes - m.allocated_bytes == pytest.approx(0.08 * m.allocated_bytes + workspace, rel=1e-12)


@pytest.mark.parametrize("gpu", [A100, L40S, H100])
def test_single_gpu_device_adds_the_half_gib_context_only(gpu: str) -> None:
    m = _mem(gpu)  # ≈ 0.3–0.43 GB measured bare contexts (pytorch#107667, #109888; unsloth-zoo#1053) → 0.5 GiB
    assert m.peak_bytes - m.reserved_bytes == pytest.approx(0.5 * GIB, rel=1e-12)
    assert m.fits == (m.peak_bytes <= get_gpu(gpu).memory_bytes)


@pytest.mark.parametrize(
    "gpus, per_worker, strategy, tp, comms",
    [(1, 1, None, 1, 0), (8, 8, "fsdp", 1, 1), (8, 8, "ddp", 1, 1), (16, 8, "fsdp-hybrid", 1, 2), (8, 8, "fsdp", 2, 2),
     (2, 2, None, 2, 1)],  # TP only: no data-parallel communicator, one TP communicator
)
def test_nccl_communicators_by_strategy(gpus: int, per_worker: int, strategy: str | None, tp: int, comms: int) -> None:
    place = Placement(gpu_model=A100, number_gpus=gpus, gpus_per_worker=per_worker, strategy=strategy, tp=tp)
    assert communicators(place, Job(model=LLAMA)) == comms


def test_nccl_buffers_one_gib_per_communicator_by_hand() -> None:
    one, eight = _mem(gpus=1), _mem(gpus=8)
    # 8-GPU FSDP: same formula, one communicator (1.0 GiB, NVIDIA/nccl#864 ≈ 1.6 GB incl. ≈ 0.5 GB context)
    assert eight.peak_bytes - eight.reserved_bytes - (one.peak_bytes - one.reserved_bytes) == pytest.approx(GIB)


@pytest.mark.parametrize("gpus, extra", [(1, 0.0), (4, 2.3)])
def test_fms_hf_tuning_keeps_its_measured_device_line(gpus: int, extra: float) -> None:
    m = _mem(gpus=gpus, batch_size=4, framework="fms-hf-tuning")
    alloc = m.peak_bytes - m.overhead_bytes  # fitted on fms-acceleration A100 rows: 1.08·alloc + 3.1 GiB (+ 2.3)
    assert m.peak_bytes == pytest.approx(1.08 * alloc + (3.1 + extra) * GIB, rel=1e-12)
    assert m.allocated_bytes <= m.reserved_bytes <= m.peak_bytes


@pytest.mark.parametrize("framework, impl",
                         [("hf-trainer", "fused"), ("fms-hf-tuning", "foreach"), ("torchtune", "fused")])
def test_framework_sets_the_optimizer_default_and_an_explicit_value_wins(framework: str, impl: str) -> None:
    # transformers 5.23: optim defaults to adamw_torch_fused with torch >= 2.8; fms rows ran adamw_torch (foreach)
    assert Job(model=LLAMA, framework=framework).optimizer_impl == impl
    assert Job(model=LLAMA, framework=framework, optimizer_impl="for-loop").optimizer_impl == "for-loop"


@pytest.mark.parametrize("framework, dropout", [("fsdp-qlora", 0.1), ("hf-trainer", 0.0), ("fms-hf-tuning", 0.0)])
def test_fsdp_qlora_runs_lora_dropout_0_1_unless_told(framework: str, dropout: float) -> None:
    # fsdp_qlora train.py: ``lora_dropout: float = 0.1``; peft's LoraConfig and the Job default to 0.0
    assert Job(model=LLAMA, framework=framework, method="lora").lora_dropout == dropout
    assert Job(model=LLAMA, framework=framework, method="lora", lora_dropout=0.05).lora_dropout == 0.05


def test_double_quant_is_0_127_bits_per_parameter_of_constants() -> None:
    assert pytest.approx(0.127, abs=5e-4) == (NF4_DQ_BYTES - 0.5) * 8  # QLoRA paper §2
    assert pytest.approx(0.5) == (NF4_BYTES - 0.5) * 8


def test_adapter_dtype_follows_the_framework() -> None:
    arch, place = get_architecture(LLAMA), Placement(gpu_model=A100)
    peft = model_states(Job(model=LLAMA, method="lora", framework="peft"), arch, place)
    tune = model_states(Job(model=LLAMA, method="lora", framework="torchtune"), arch, place)
    adapters = 3_407_872  # peft's "trainable params" for Llama-3-8B, r = 8 on q_proj, v_proj
    assert peft.weights - tune.weights == pytest.approx(adapters * (4 - 2))
    assert peft.optimizer - tune.optimizer == pytest.approx(adapters * (8 - 4))  # AdamW zeros_like(adapter)


@pytest.mark.parametrize("kernel, per_token", [("hf", 12 * 128256), ("chunked", 5 * 128256), ("fused-ce", 8 * 128256),
                                               ("fused-linear-ce", 64 * 4096)])
def test_loss_bytes_per_token_by_kernel(kernel: str, per_token: float) -> None:
    # chunked (torchtune, 8 chunks): 4·V saved fp32 log-softmax + one chunk's 8·V backward transients / 8
    assert ce.loss_bytes_per_token(Job(model=LLAMA, loss_kernel=kernel), get_architecture(LLAMA)) == per_token


def test_litgpt_chunks_add_no_per_token_transient() -> None:
    # LitGPT's 128-position chunks: its one-chunk transient does not grow with the tokens
    job = Job(model=LLAMA, loss_kernel="chunked", framework="litgpt")
    assert ce.loss_bytes_per_token(job, get_architecture(LLAMA)) == 4 * 128256


@pytest.mark.parametrize("framework, per_vocab", [("fms-hf-tuning", 8), ("llm-foundry", 4)])
def test_fused_ce_bytes_follow_the_logits_dtype(framework: str, per_vocab: int) -> None:
    # FOAK over HF's fp32 logits: 4 + 4 (measured); flash_attn's CE over MPT's bf16 logits: logits 2 + gradient 2
    arch = get_architecture("mpt-7b")  # V = 50368
    job = Job(model="mpt-7b", method="full", framework=framework, loss_kernel="fused-ce")
    assert ce.loss_bytes_per_token(job, arch) == per_vocab * 50368


@pytest.mark.parametrize("framework, dtype, per_norm", [("llm-foundry", "amp-bf16", 4), ("llm-foundry", "bf16", 4),
                                                        ("hf-trainer", "bf16", 4), ("hf-trainer", "amp-bf16", 8)])
def test_mpt_layernorm_bytes_follow_where_it_computes(framework: str, dtype: str, per_norm: int) -> None:
    # mpt-7b: h = 4096, 32 heads, MHA. Two norms of per_norm·h, attention q, k, v, out 2·h each + fp32 lse 4·a + 8
    job = Job(model="mpt-7b", method="full", framework=framework, dtype=dtype)
    expected = (2 * per_norm * 4096 + 8 * 4096 + 4 * 32 + 8) / 4096
    assert attention_coef(job, get_architecture("mpt-7b")) == pytest.approx(expected)


def test_quantised_lm_head_saves_weight_bytes_and_adds_a_dequantised_copy() -> None:
    head = 128256 * 4096
    arch, place = get_architecture(LLAMA), Placement(gpu_model=A100)
    off = model_states(Job(model=LLAMA, method="qlora", quantize_lm_head=False), arch, place)
    on = model_states(Job(model=LLAMA, method="qlora", quantize_lm_head=True), arch, place)
    # hf-trainer's QLoRA runs prepare_model_for_kbit_training, which makes an unquantised head fp32 (4 B)
    assert off.weights - on.weights == pytest.approx(head * (4 - NF4_BYTES))
    assert ce.loss_fixed_bytes(Job(model=LLAMA, method="qlora", quantize_lm_head=True), arch) == 2 * head


@pytest.mark.parametrize(("keeps", "kept"), [(True, 2 * 4096 + 2 * 4096 + 2 * 14336), (False, 0)])
def test_bnb_qlora_without_checkpointing_keeps_frozen_layer_inputs(monkeypatch: pytest.MonkeyPatch, keeps: bool,
                                                                   kept: int) -> None:
    """bitsandbytes < 0.43.2 kept MatMul4Bit's bf16 input: the MLP input, o_proj input, down_proj input; since
    #1270 (ctx.tensors = (None, B)) nothing."""
    monkeypatch.setattr("autoconf.estimators.theory.coefficients.BNB_KEEPS_4BIT_INPUT", keeps)
    kw: dict[str, object] = dict(model=LLAMA, method="qlora", gradient_checkpointing=False)
    arch = get_architecture(LLAMA)
    # LLaMA-Factory: HF Trainer + bitsandbytes without peft's fp32 upcast (its own prepare keeps bf16 norms)
    hf = act.layer_bytes_per_token(Job(**kw, framework="llama-factory"), arch)
    fms = act.layer_bytes_per_token(Job(**kw, framework="fms-hf-tuning"), arch)
    assert hf - fms == kept


def test_optimizer_in_backward_keeps_one_parameters_gradient() -> None:
    arch = get_architecture(LLAMA)
    st = model_states(Job(model=LLAMA, optimizer_in_backward=True), arch, Placement(gpu_model=A100))
    assert st.gradients == 128256 * 4096 * 2 and st.optimizer_step_temp == 0.0 and not st.grads_persist


def test_paged_optimizer_states_are_outside_torch_but_on_the_device() -> None:
    paged, plain = _mem(optimizer="paged-adamw"), _mem(optimizer="adamw", optimizer_state_dtype="fp32")
    states = 3_407_872 * 8  # bitsandbytes 32-bit AdamW: fp32 m and v per adapter parameter
    assert plain.allocated_bytes - paged.allocated_bytes == pytest.approx(states)
    assert paged.peak_bytes - paged.reserved_bytes == pytest.approx(0.5 * GIB + states)


def test_activation_offloading_keeps_two_checkpoints_on_the_gpu() -> None:
    on, off = _mem(activation_offloading=True, batch_size=8), _mem(activation_offloading=False, batch_size=8)
    per_layer = 2 * 4096 * 8 * 1024  # bf16 layer input per checkpoint, 8 × 1024 tokens
    assert off.activations_bytes - on.activations_bytes == pytest.approx((32 - 2) * per_layer)


def test_sequence_parallel_splits_samples_not_tokens_per_gpu() -> None:
    place = Placement(gpu_model=A100, number_gpus=8)
    with_sp = estimate_memory(Job(model=LLAMA, batch_size=4, sequence_parallel=2), place)
    without = estimate_memory(Job(model=LLAMA, batch_size=8), place)
    assert with_sp.activations_bytes == pytest.approx(without.activations_bytes / 2)  # 4·s/8 vs 8·s/8 tokens per GPU
    with pytest.raises(InvalidInputError, match="sequence_parallel"):
        estimate_memory(Job(model=LLAMA, batch_size=8, sequence_parallel=3), place)


@pytest.mark.parametrize("framework", ["hf-trainer", "fms-hf-tuning", "torchtune", "unsloth", "litgpt", "axolotl"])
def test_vector_path_equals_scalar_path_for_every_peak(framework: str) -> None:
    jobs = [Job(model=LLAMA, method=m, framework=framework, batch_size=8, optimizer=o)
            for m in ("full", "lora", "qlora") for o in ("adamw", "paged-adamw-8bit")]
    places = [Placement(gpu_model=g, number_gpus=n) for g, n in ((A100, 1), (H100, 8))] * 3
    batch = theory_batch(jobs, places)
    for i, (job, place) in enumerate(zip(jobs, places, strict=True)):
        m = estimate_memory(job, place)
        assert (batch.allocated[i], batch.reserved[i], batch.peak[i]) == (
            m.allocated_bytes, m.reserved_bytes, m.peak_bytes)


def _row(**kw: object) -> dict[str, object]:
    base: dict[str, object] = dict(source="s", source_ref="r", model_name=LLAMA, method="lora", tokens_per_sample=1024,
                                   batch_size=1, gpu_model=A100, number_gpus=1, status="ok", duplicate_of="",
                                   framework="hf-trainer", memory_metric="")
    return {**base, **kw}


@pytest.mark.parametrize("metric, column, field", [
    ("torch_allocated", "torch_allocated_bytes", "allocated_bytes"),
    ("torch_reserved", "torch_reserved_bytes", "reserved_bytes"),
    ("nvidia_smi", "nvidia_smi_bytes", "peak_bytes"),
    ("stated", "peak_memory_bytes", "peak_bytes"),
])
def test_each_metric_is_compared_with_its_own_peak(metric: str, column: str, field: str) -> None:
    frame = pd.DataFrame([_row(**{column: 20 * GIB, "memory_metric": metric})])
    scored = score_memory("theory", frame)
    expected = getattr(_mem(), field)
    assert list(scored["metric"]) == [metric]
    assert scored["predicted"].iloc[0] == pytest.approx(expected)


@pytest.mark.parametrize("framework, field_value", [("torchtune", "torchtune"), ("ms-swift", "ms-swift")])
def test_data_rows_carry_their_framework(framework: str, field_value: str) -> None:
    job, _ = row_to_inputs(_row(framework=framework, optimizer="paged_adamw_8bit", double_quant=1))
    assert (job.framework, job.optimizer, job.double_quant) == (field_value, "paged-adamw-8bit", True)


def test_data_row_of_a_stack_without_profile_is_refused_by_name() -> None:
    with pytest.raises(InvalidInputError, match="framework"):
        row_to_inputs(_row(framework="megatron"))


@pytest.mark.parametrize("args, code", [(["--framework", "torchtune"], 0), (["--framework", "nope"], 2)])
def test_cli_framework_flag(args: list[str], code: int) -> None:
    cmd = [sys.executable, "-m", "autoconf.interfaces.cli", "estimate", "--model", LLAMA, "--lora", "--json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    if code == 0:
        assert '"framework": "torchtune"' in done.stdout
    else:
        assert "--framework" in done.stderr and "\n  File " not in done.stderr


def test_three_peaks_are_ordered_everywhere() -> None:
    rng = np.random.default_rng(7)
    for _ in range(40):
        fw = str(rng.choice(["hf-trainer", "fms-hf-tuning", "torchtune", "unsloth", "deepspeed"]))
        gpus = int(rng.choice([1, 2, 8]))
        m = _mem(gpu=str(rng.choice([A100, H100, L40S])), gpus=gpus, framework=fw,
                 batch_size=gpus * int(rng.integers(1, 4)), method=str(rng.choice(["full", "lora", "qlora"])))
        assert 0 < m.allocated_bytes <= m.reserved_bytes <= m.peak_bytes


def test_a_full_copy_per_rank_on_the_gpu_is_a_load_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack that moves each rank's unsharded checkpoint copy to the GPU before FSDP shards it peaks at load:
    Llama-3.1-8B has 8,030,261,248 parameters (HF model card) → 2 B each in bf16 on every rank."""
    import dataclasses

    from autoconf.estimators.theory import frameworks

    moving = dataclasses.replace(frameworks.PROFILES["hf-trainer"], full_copy_on_gpu=True)
    monkeypatch.setitem(frameworks.PROFILES, "hf-trainer", moving)
    job, place = Job(model=LLAMA, batch_size=8, tokens_per_sample=512), Placement(gpu_model=H100, number_gpus=8)
    m = estimate_memory(job, place)
    assert m.peak_phase == "load" and m.weights_bytes == pytest.approx(8_030_261_248 * 2, rel=1e-9)
    assert estimate_memory(job.model_copy(update={"fsdp_cpu_ram_efficient_loading": True}), place).peak_phase != "load"
    mixed = [job, job.model_copy(update={"fsdp_cpu_ram_efficient_loading": True})]
    batch = theory_batch(mixed, [place, place])
    assert batch.phase == ["load", estimate_memory(mixed[1], place).peak_phase]
    assert batch.peak[0] == m.peak_bytes


# --- torch FSDP side-stream pools (memory.side_stream_bytes): hand-made phases, hand-summed expectations ---
def _phases(loss: tuple[float, float, float], step: tuple[float, float, float]) -> dict[str, dict[str, float]]:
    """(weights, gradients, everything else) of the loss and optimizer phases, in GiB, as the phase dicts."""
    out: dict[str, dict[str, float]] = {}
    for name, (w, g, rest) in (("loss", loss), ("optimizer", step)):
        out[name] = {"weights": w * GIB, "gradients": g * GIB, "optimizer": rest * GIB, "activations": 0.0,
                     "logits": 0.0, "vision_weights": 0.0, "vision_gradients": 0.0, "vision_optimizer": 0.0,
                     "vision_activations": 0.0}
    return out


@pytest.mark.parametrize(
    "strategy, gpus, loss, step, expected_gib",
    [
        # loss peak 36 = 8 shard + 2 gathered + 26; compute pool max(36-2, 40-8) = 34, + grads 8 + gathered 2 - 40 = 4
        ("fsdp", 2, (10, 0, 26), (8, 8, 24), 4.0),
        # the loss phase is the peak (48): compute 46 + grads 8 + gathered 2 - 48 = the whole gradient shard, 8
        ("fsdp", 4, (10, 0, 38), (8, 8, 24), 8.0),
        ("fsdp-shard-grad-op", 2, (10, 0, 38), (8, 8, 24), 8.0),
        ("ddp", 2, (10, 0, 38), (8, 8, 24), 0.0),  # no side stream owns gradients or parameters
        ("zero3", 2, (10, 0, 38), (8, 8, 24), 0.0),  # DeepSpeed: persistent partitions, not modelled here
        ("fsdp", 1, (10, 0, 38), (8, 8, 24), 0.0),  # one GPU: nothing is sharded
    ],
)
def test_side_stream_pools_add_what_the_compute_peak_cannot_reuse(
        strategy: str, gpus: int, loss: tuple[float, float, float], step: tuple[float, float, float],
        expected_gib: float) -> None:
    st = States(weights=8 * GIB, gradients=8 * GIB, optimizer=16 * GIB, gathered=2 * GIB, grads_persist=False,
                optimizer_step_temp=0.0, buffers=0.0, trainable_params=1)
    placement = Placement(gpu_model=A100, number_gpus=gpus, strategy=strategy)
    assert side_stream_bytes(_phases(loss, step), st, placement) == pytest.approx(expected_gib * GIB)  # type: ignore[arg-type]


def test_fsdp_full_ft_reserves_its_gradient_shard_beside_a_loss_peak() -> None:
    """Llama-3.1-8B (8,030,261,248 parameters) bf16 full FT on 2 GPUs, long samples so the loss phase peaks:
    reserved = 1.08 × (allocated + the bf16 gradient shard, Ψ·2/2 bytes, + the two decoder units FSDP resharded
    after forward, 2 × 218,112,000 parameters × 2 B, still cached by the all-gather stream) + 2 cuBLAS workspaces."""
    m = estimate_memory(Job(model=LLAMA, method="full", batch_size=4, tokens_per_sample=8192),
                        Placement(gpu_model=A100, number_gpus=2, strategy="fsdp"))
    assert m.peak_phase == "loss"
    shard = 8_030_261_248 * 2 / 2
    units = 2 * 218_112_000 * 2  # q, k, v, o (4096 × 10,240), the SwiGLU (3 × 4096 × 14,336) and two norms
    assert m.reserved_bytes == pytest.approx(1.08 * (m.allocated_bytes + shard + units) + 2 * 4 * MIB, rel=1e-9)
    # those cached blocks (× 1.08, fragmented like the compute pool) are free: released before an allocation fails,
    # so they are releasable and the risk is that of the device peak without them
    assert m.releasable_bytes == pytest.approx(1.08 * (shard + units), rel=1e-9)
    assert m.oom_risk == pytest.approx(oom_probability(m.peak_bytes - 1.08 * (shard + units), m.capacity_bytes,
                                                       method="full"))


def test_fsdp_lora_side_pools_are_the_adapter_gradients_and_the_resharded_units() -> None:
    """LoRA's sharded gradients are the adapters' (a few MiB); the all-gather stream keeps the two bf16 decoder units
    it gathered (2 × 218,112,000 parameters × 2 B, Llama-3.1-8B) cached while the loss peaks."""
    m = _mem(gpus=2, tokens_per_sample=8192)
    units = 2 * 218_112_000 * 2
    assert 0 <= m.reserved_bytes - 1.08 * (m.allocated_bytes + units) - 2 * 4 * MIB < 0.05 * GIB


@pytest.mark.parametrize("method, dtype, per_hidden", [("full", "amp-bf16", 2), ("full", "bf16", 2), ("lora", "bf16", 4)])
def test_fsdp_checkpoint_bytes_by_method(method: str, dtype: str, per_hidden: int) -> None:
    """Under FSDP a checkpointed layer keeps its input: bf16 (2·h) for full FT, whose gathered bf16 units compute in
    bf16 even with an fp32 master copy; 4·h for PEFT (the fp32 figure of the fms-acceleration PEFT rows)."""
    arch = get_architecture(LLAMA)
    job = Job(model=LLAMA, method=method, dtype=dtype, batch_size=2, tokens_per_sample=1024)
    assert act.checkpoint_bytes_per_token(job, arch, fsdp=True) == per_hidden * 4096


@pytest.mark.parametrize(
    "framework, method, gpus, upcast",
    [("hf-trainer", "qlora", 1, True), ("peft", "qlora", 1, True), ("hf-trainer", "lora", 1, False),
     ("hf-trainer", "qlora", 2, False),  # sharded QLoRA: TRL skips prepare_model_for_kbit_training
     ("fms-hf-tuning", "qlora", 1, False)],  # fms-acceleration's own copy of the function does not upcast
)
def test_kbit_upcast_makes_non_4bit_weights_and_the_residual_stream_fp32(
        framework: str, method: str, gpus: int, upcast: bool) -> None:
    """Mistral-7B: 7,241,732,096 parameters, of which 32 × 218,103,808 sit in layer linears (4096 × (4096 + 1024 +
    1024 + 4096) + 3 × 4096 × 14336), so 262,410,240 (embeddings, head, norms) stay 16-bit or become fp32: +2 B each.
    The checkpointed layer input doubles from 2·h to 4·h bytes per token on one GPU."""
    model = "mistral-7b-v0.1"
    job = Job(model=model, method=method, framework=framework, batch_size=gpus, tokens_per_sample=1024)
    same = job.model_copy(update={"framework": "deepspeed"})  # an HF-like profile without the upcast
    place = Placement(gpu_model=A100, number_gpus=gpus)
    arch = get_architecture(model)
    extra = model_states(job, arch, place).weights - model_states(same, arch, place).weights
    assert extra == pytest.approx(2 * 262_410_240 if upcast else 0.0)
    if gpus == 1:
        assert act.checkpoint_bytes_per_token(job, arch) == (4 if upcast else 2) * 4096
