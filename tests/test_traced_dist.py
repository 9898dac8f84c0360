"""Rank traces of multi-GPU jobs (FSDP2, DDP on a fake process group) against per-rank sums derived by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from autoconf.catalog import get_architecture
from autoconf.estimators.contract import get_estimator
from autoconf.estimators.traced.job_spec import trace_spec
from autoconf.estimators.traced.rank_cache import trace_ranks
from autoconf.schema import Job, Placement
from tests._cache import fresh_cache  # noqa: F401 (an autouse fixture: a fresh cache per module)

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

TINY = "tiny-llama-test"
GPU = "NVIDIA-A100-80GB-PCIe"
SHAPE = (1, 256)


def _job(method: str) -> Job:
    return Job(model=TINY, method=method, tokens_per_sample=SHAPE[1], batch_size=SHAPE[0],
               gradient_checkpointing=False, optimizer_impl="fused")


def _single_gpu_backward_peak(job: Job) -> np.ndarray:
    """The one-GPU trace's breakdown at its backward peak (the trace a real CPU step matches to the byte,
    tests/test_traced.py): what a replica's activations and logits are, whatever the sharding."""
    from autoconf.estimators.traced.step import trace

    samples = trace({**trace_spec(job, get_architecture(TINY)), "shapes": [list(SHAPE)]})["results"][0]["samples"]
    rows = np.flatnonzero(samples[:, 5] == 2)
    return samples[rows[np.argmax(samples[rows, :5].sum(axis=1))], :5]


def _phase(summary: dict, step: int, phase: str) -> dict:
    return next(p for p in summary["phases"] if p["step"] == step and p["phase"] == phase)


@pytest.mark.slow
def test_fsdp2_rank_peak_is_the_sum_of_what_the_rank_holds() -> None:
    """World of 4, full fine-tuning, bf16, fused AdamW: rank 0's peak, phase by phase, by hand."""
    job = _job("full")
    arch = get_architecture(TINY)
    spec = {**trace_spec(job, arch), "world": 4, "strategy": "fsdp", "shape": list(SHAPE),
            "expandable_segments": False}  # the estimator's spec for this job: its test below reuses the trace
    summary = trace_ranks(spec)
    h, v, world = arch.hidden_size, arch.vocab_size, 4
    psi = summary["total_params"]
    assert psi == arch.total_params
    buffers = 2 * 4 * arch.head_dim // 2  # two fp32 rotary inv_freq buffers, never sharded
    shard = 2 * psi // world  # bf16 parameters / 4 (every dimension of this model divides by 4: no padding)
    tensors = 2 + 1 + arch.num_layers * 9  # parameter tensors: embed, lm_head, final norm; 7 linears + 2 norms
    adam = 2 * 2 * psi // world + 4 * tensors  # m and v in bf16, sharded; one fp32 step per tensor
    # load: only the rank's shards are materialised
    assert _phase(summary, 0, "load")["peak"] == shard + buffers
    # optimizer step: weights, gradients (bf16, reduce-scattered) and AdamW states, all sharded
    assert _phase(summary, 2, "optimizer")["peak"] == shard + buffers + shard + adam
    # steady backward peak (inside the loss backward): the shards and states, plus the [final norm, lm_head]
    # unit that accelerate keeps gathered (reshard_after_forward=False), plus one replica's activations and
    # logits at that op (no gradient exists yet)
    tail = 2 * (v * h + h)
    act = _single_gpu_backward_peak(job)
    backward = _phase(summary, 2, "backward")
    assert backward["parts"] == [shard + buffers + tail, 0, adam, int(act[3]), int(act[4])]
    assert backward["peak"] == summary["allocated_peak"]
    # the replay of the same allocations: rounded blocks >= tensors; reserved in whole segments
    assert summary["replayed_allocated_peak"] >= summary["allocated_peak"]
    assert summary["reserved_peak"] % (2 << 20) == 0 and summary["reserved_peak"] >= summary["replayed_allocated_peak"]


@pytest.mark.slow
def test_hybrid_sharding_holds_what_full_sharding_over_one_node_holds() -> None:
    """8 GPUs as 2 nodes of 4, fsdp-hybrid: shards over the 4 GPUs of a node, replicas across nodes; rank 0
    allocates what a 4-GPU full-shard rank does (same shards, same activations; the cross-node all-reduce
    works in place)."""
    job = _job("full")
    spec = {**trace_spec(job, get_architecture(TINY)), "world": 4, "strategy": "fsdp", "shape": list(SHAPE),
            "expandable_segments": False}
    four = trace_ranks(spec)
    hybrid = get_estimator("traced").estimate(
        job.model_copy(update={"batch_size": 8}),
        Placement(gpu_model=GPU, number_gpus=8, gpus_per_worker=4, strategy="fsdp-hybrid")).memory
    assert any("rank 0 of 8" in n for n in hybrid.notes)
    assert hybrid.peak_allocated_bytes == four["allocated_peak"]


@pytest.mark.slow
def test_ddp_rank_holds_a_replica_plus_gradient_buckets() -> None:
    """DDP, LoRA: the replica's single-GPU backward peak plus the reducer's buckets (one fp32 copy of the
    trainable adapters, allocated when DDP wraps the model)."""
    job = _job("lora")
    arch = get_architecture(TINY)
    spec = {**trace_spec(job, arch), "world": 4, "strategy": "ddp", "shape": list(SHAPE)}
    summary = trace_ranks(spec)
    layers, h, kv = arch.num_layers, arch.hidden_size, arch.num_kv_heads * arch.head_dim
    r = job.lora_r
    trainable = layers * (r * (h + h) + r * (h + kv))  # q_proj and v_proj adapters: A (r × in) + B (out × r)
    buckets = 4 * trainable
    assert _phase(summary, 0, "load")["parts"][1] == buckets
    single = _single_gpu_backward_peak(job)
    assert _phase(summary, 2, "backward")["peak"] == int(single.sum()) + buckets


@pytest.mark.slow
def test_estimator_uses_the_rank_trace_for_fsdp() -> None:
    est = get_estimator("traced")
    job = _job("full").model_copy(update={"batch_size": 4})  # global batch: micro-batch 1 on each of 4 GPUs
    answer = est.estimate(job, Placement(gpu_model=GPU, number_gpus=4, strategy="fsdp")).memory
    assert answer.estimator == "traced" and any("rank 0 of 4" in n for n in answer.notes)
    assert answer.peak_allocated_bytes is not None and answer.peak_reserved_bytes is not None
    assert answer.peak_allocated_bytes <= answer.peak_reserved_bytes < answer.peak_bytes
    other = est.estimate(job, Placement(gpu_model=GPU, number_gpus=4, strategy="zero3")).memory
    assert any("ranks are not traced for strategy zero3" in n for n in other.notes)


@pytest.mark.slow
def test_last_rank_of_an_uneven_world() -> None:
    """World of 3 over dimensions of 64, 176 and 512 rows: FSDP2 pads every shard to ceil(rows / 3) rows,
    but AdamW's states follow the last rank's unpadded shard (fewer rows), so its steady peak is lower by
    exactly those missing rows' states; the estimator traces both and reports the larger."""
    arch = get_architecture(TINY)
    spec = {**trace_spec(_job("full"), arch), "world": 3, "strategy": "fsdp", "shape": list(SHAPE),
            "expandable_segments": False}
    first, last = trace_ranks(spec), trace_ranks({**spec, "rank": 2})
    h, f, v, kv = arch.hidden_size, arch.intermediate_size, arch.vocab_size, arch.num_kv_heads * arch.head_dim

    def rows_short(rows: int) -> int:  # rows the last of 3 ranks lacks against a padded shard
        return -(-rows // 3) * 3 - rows

    # elements missing on the last rank, per parameter: (rows short) × columns
    per_layer = (2 * rows_short(h) * h + 2 * rows_short(kv) * h  # q, o (h × h); k, v (kv × h)
                 + 2 * rows_short(f) * h + rows_short(h) * f  # gate, up (f × h); down (h × f)
                 + 2 * rows_short(h))  # two norms (h)
    missing = arch.num_layers * per_layer + 2 * rows_short(v) * h + rows_short(h)  # embed, lm_head, final norm
    steady = _phase(first, 2, "backward")["peak"] - _phase(last, 2, "backward")["peak"]
    assert steady == 2 * 2 * missing  # AdamW m and v in bf16
    est = get_estimator("traced").estimate(_job("full").model_copy(update={"batch_size": 3}),
                                           Placement(gpu_model=GPU, number_gpus=3, strategy="fsdp")).memory
    assert any("ranks traced: 0, 2" in n for n in est.notes)
    assert est.peak_allocated_bytes == max(first["allocated_peak"], last["allocated_peak"])


@pytest.mark.slow
def test_cli_estimate_on_four_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI reaches the rank trace through the estimator contract (the same job as above: cached)."""
    from autoconf.interfaces.cli import main

    assert main(["estimate", "--model", TINY, "--seq-len", str(SHAPE[1]), "--per-device-batch", "1",
                 "--no-grad-checkpoint", "--estimator", "traced", "--dp", "4", "--strategy", "fsdp"]) == 0
    out = capsys.readouterr().out
    assert "rank 0 of 4 on a fake process group" in out and "caching allocator" in out


@pytest.mark.slow
def test_a_job_too_large_for_the_gpu_is_out_of_memory_in_the_replay() -> None:
    """Micro-batch 64 × 65,536 tokens of the tiny model on 4 L4s: ~26 GB of activations pass the 24 GB."""
    job = _job("full").model_copy(update={"tokens_per_sample": 65536, "batch_size": 256})
    mem = get_estimator("traced").estimate(job, Placement(gpu_model="NVIDIA-L4", number_gpus=4, strategy="fsdp")).memory
    assert not mem.fits and any("runs out of memory" in n for n in mem.notes)
    assert mem.peak_allocated_bytes is not None and mem.peak_reserved_bytes is not None
    assert mem.peak_allocated_bytes <= mem.peak_reserved_bytes < mem.peak_bytes


@pytest.mark.slow
def test_tensor_parallel_rank_holds_its_shards_by_hand() -> None:
    """Tensor parallel over 2 ranks with transformers' own plan (q/k/v, gate/up colwise; o/down rowwise; the
    embedding's and the head's vocabulary rows split): rank 0 holds half of every planned weight and the whole
    norms; steady step's AdamW states (bf16, fused: one fp32 step counter per tensor) are twice its weights."""
    job = _job("full")
    arch = get_architecture(TINY)
    h, inter, layers, kv, v, tp = 64, 176, 2, 32, 512, 2
    sharded = 2 * v * h + layers * (h * h + 2 * h * kv + h * h + 3 * h * inter)
    whole = (2 * layers + 1) * h  # input / post-attention norms per layer, final norm
    local = sharded // tp + whole
    tensors = 2 + layers * 9 + 1  # embedding, head, 7 linears + 2 norms per layer, final norm
    summary = trace_ranks({**trace_spec(job, arch), "world": tp, "strategy": "tp", "shape": list(SHAPE),
                           "expandable_segments": False})
    rotary = 2 * (16 // 2) * 4  # inv_freq, original_inv_freq (fp32)
    assert _phase(summary, 0, "load")["parts"][0] == 2 * local + rotary
    assert _phase(summary, 2, "forward")["parts"][2] == 2 * 2 * local + 4 * tensors


@pytest.mark.slow
def test_tensor_parallel_estimate_is_a_rank_trace() -> None:
    placement = Placement(gpu_model=GPU, number_gpus=2, tp=2)
    memory = get_estimator("traced").estimate(_job("full"), placement).memory
    assert memory.estimator == "traced" and any("2-way tensor parallel" in n for n in memory.notes)
    one = get_estimator("traced").estimate(_job("full"), Placement(gpu_model=GPU)).memory
    assert memory.allocated_bytes < one.allocated_bytes



@pytest.mark.slow
def test_tensor_parallel_tied_head_shares_the_embedding_shard() -> None:
    """A tied head (llama3.2-1b's tie_word_embeddings) under tp 2: the rank trace used to fail (KeyError
    'lm_head.weight': the head's plan entry names a parameter listed once, under the embedding). transformers shards
    an untied model and ties the head after loading, so the head is the embedding's vocabulary shard: the rank holds
    one v/tp × h table, not two, and one tensor fewer of AdamW states."""
    arch = dataclasses.replace(get_architecture(TINY), tie_word_embeddings=True)
    h, f, v, layers = arch.hidden_size, arch.intermediate_size, arch.vocab_size, arch.num_layers
    kv = arch.num_kv_heads * arch.head_dim
    local = (v * h + layers * (2 * h * h + 2 * kv * h + 3 * h * f)) // 2 + (2 * layers + 1) * h
    tensors = 1 + layers * 9 + 1  # the shared embedding, 7 linears + 2 norms per layer, final norm
    summary = trace_ranks({**trace_spec(_job("full"), arch), "world": 2, "strategy": "tp", "shape": list(SHAPE),
                           "expandable_segments": False})
    rotary = 2 * (arch.head_dim // 2) * 4  # inv_freq, original_inv_freq (fp32)
    assert _phase(summary, 2, "optimizer")["parts"][:3] == [2 * local + rotary, 2 * local, 2 * 2 * local + 4 * tensors]


def test_tensor_parallel_inside_fsdp_with_a_tied_head_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """transformers FSDP2-shards the untied head in the root group and ties it after loading: not traced, one
    line naming why (CLI exit 2)."""
    from autoconf.interfaces.cli import main

    code = main(["estimate", "--model", "llama3.2-1b", "--estimator", "traced", "--gpu", "h100", "--dp", "2",
                 "--tp", "2", "--strategy", "fsdp", "--seq-len", "512"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "tied embeddings" in err[0]

def _tp_lora_static(arch_name: str, tp: int, fsdp: int, r: int) -> tuple[int, int, int]:
    """Hand-derived bytes one rank of tp × fsdp holds for a LoRA job (q_proj, v_proj adapters): bf16 base weights,
    fp32 adapters (= their gradients), fused AdamW's two fp32 moments and one fp32 step per adapter tensor.
    transformers splits q/k/v/gate/up by output rows, o/down by input columns, the embedding and head by
    vocabulary rows (each over tp); the norms stay whole. peft shards lora_B of a colwise layer by rows over tp
    and keeps lora_A whole. FSDP2 then splits every tensor's rows over fsdp."""
    arch = get_architecture(arch_name)
    h, f, v, layers = arch.hidden_size, arch.intermediate_size, arch.vocab_size, arch.num_layers
    kv = arch.num_kv_heads * arch.head_dim
    split = 2 * v * h + layers * (2 * h * h + 2 * kv * h + 3 * h * f)
    whole = (2 * layers + 1) * h
    base = split // (tp * fsdp) + whole // fsdp
    adapters = layers * (r * h + h * r // tp + r * h + kv * r // tp) // fsdp  # q: A r×h, B h×r; v: A r×h, B kv×r
    rotary = 2 * (arch.head_dim // 2) * 4  # inv_freq, original_inv_freq (fp32)
    weights = 2 * base + 4 * adapters + rotary
    return weights, 4 * adapters, 2 * 4 * adapters + 4 * 4 * layers


def _tp_spec(tp: int, dp: int = 1, strategy: str = "fsdp") -> dict:
    """The estimator's rank spec for the tiny LoRA job (its tests below reuse the traces)."""
    spec = {**trace_spec(_job("lora"), get_architecture(TINY)), "world": tp, "strategy": "tp", "shape": list(SHAPE),
            "expandable_segments": False}
    return {**spec, "dp": dp, "dp_strategy": strategy} if dp > 1 else spec


@pytest.mark.slow
@pytest.mark.parametrize(("dp", "strategy", "fsdp"), [(1, "fsdp", 1), (2, "fsdp", 2), (2, "ddp", 1)])
def test_tensor_parallel_lora_rank_holds_its_shards_by_hand(dp: int, strategy: str, fsdp: int) -> None:
    """LoRA on 2-way tensor parallel, alone and inside 2-way data parallel (FSDP2 shards every tensor of the rank
    again over dp; DDP-like replicas hold what tensor parallel alone holds): weights at load, and weights,
    gradients and AdamW states at the steady optimizer step, by hand."""
    summary = trace_ranks(_tp_spec(2, dp, strategy))
    weights, grads, states = _tp_lora_static(TINY, 2, fsdp, _job("lora").lora_r)
    assert _phase(summary, 0, "load")["parts"] == [weights, 0, 0, 0, 0]
    assert _phase(summary, 2, "optimizer")["parts"][:3] == [weights, grads, states]


@pytest.mark.slow
def test_tensor_parallel_by_fsdp_full_fine_tuning_by_hand() -> None:
    """Full fine-tuning, tp 2 × fsdp 2: every bf16 parameter split by tp (norms whole) then by FSDP2 over fsdp;
    gradients the same; AdamW's two bf16 moments and one fp32 step per tensor, at the steady optimizer step."""
    arch = get_architecture(TINY)
    h, f, v, layers = arch.hidden_size, arch.intermediate_size, arch.vocab_size, arch.num_layers
    kv = arch.num_kv_heads * arch.head_dim
    local = (2 * v * h + layers * (2 * h * h + 2 * kv * h + 3 * h * f)) // 4 + (2 * layers + 1) * h // 2
    tensors = 2 + layers * 9 + 1  # embedding, head, 7 linears + 2 norms per layer, final norm
    spec = {**trace_spec(_job("full"), arch), "world": 2, "strategy": "tp", "shape": list(SHAPE),
            "expandable_segments": False, "dp": 2, "dp_strategy": "fsdp"}
    summary = trace_ranks(spec)
    rotary = 2 * (arch.head_dim // 2) * 4
    assert _phase(summary, 0, "load")["parts"] == [2 * local + rotary, 0, 0, 0, 0]
    assert _phase(summary, 2, "optimizer")["parts"][:3] == [2 * local + rotary, 2 * local, 2 * 2 * local + 4 * tensors]


@pytest.mark.slow
def test_tensor_parallel_by_fsdp_estimate_reports_the_rank_trace() -> None:
    """tp 2 × fsdp 2 on 4 GPUs (global batch 2: micro-batch 1): the estimator answers from the same rank trace."""
    job = _job("lora").model_copy(update={"batch_size": 2})
    memory = get_estimator("traced").estimate(job, Placement(gpu_model=GPU, number_gpus=4, tp=2, strategy="fsdp")).memory
    assert any("rank 0 of 4" in n and "2-way tensor parallel × 2-way fsdp" in n for n in memory.notes)
    assert memory.peak_allocated_bytes == trace_ranks(_tp_spec(2, 2))["allocated_peak"]


@pytest.mark.slow
def test_tensor_parallel_by_uneven_fsdp_traces_the_last_rank() -> None:
    """tp 2 × fsdp 3: FSDP2 splits each rank's tensor-parallel shard in ceil(rows / 3)-row chunks, so the last rank
    (5) keeps shorter adapter shards and AdamW states (fp32 m and v) for fewer rows: lora_A (8 rows, whole over tp)
    chunks 3, 3, 2; q's lora_B (32 local rows) 11, 11, 10; v's lora_B (16 local rows) 6, 6, 4. The estimator
    traces ranks 0 and 5 and reports the larger."""
    arch = get_architecture(TINY)
    h, r = arch.hidden_size, _job("lora").lora_r
    first, last = trace_ranks(_tp_spec(2, 3)), trace_ranks({**_tp_spec(2, 3), "rank": 5})
    missing = arch.num_layers * (2 * 1 * h + 1 * r + 2 * r)  # elements: two lora_A rows, q's and v's lora_B rows
    states = _phase(first, 2, "optimizer")["parts"][2] - _phase(last, 2, "optimizer")["parts"][2]
    assert states == 2 * 4 * missing
    job = _job("lora").model_copy(update={"batch_size": 3})
    memory = get_estimator("traced").estimate(job, Placement(gpu_model=GPU, number_gpus=6, tp=2, strategy="fsdp")).memory
    assert any("ranks traced: 0, 5" in n for n in memory.notes)
    assert memory.peak_allocated_bytes == max(first["allocated_peak"], last["allocated_peak"])
