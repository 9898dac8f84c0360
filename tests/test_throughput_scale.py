"""Throughput at scale: the DGX Cloud / InternEvo / fms-fsdp rows, stack profiles, pipelines and links.

Expected values are copied by hand from shared/data/external/<source>/*.csv or computed here from the
formulas' definitions (Megatron GBS = MBS x GA x DP; 1F1B bubble (p - 1) / (v m)), never from the code.
"""

from __future__ import annotations

import pandas as pd
import pytest

from autoconf.catalog import get_architecture, get_gpu
from autoconf.estimators.theory import communication
from autoconf.estimators.theory import throughput as tp
from autoconf.estimators.theory.collectives import latency_seconds
from autoconf.estimators.theory.stacks import stack_for
from autoconf.evaluation import throughput_fit as tf
from autoconf.evaluation.data import load_measurements
from autoconf.schema import Job, Placement


@pytest.fixture()
def no_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bandwidth volumes only: every collective call's latency α set to 0 (collectives.py is tested on its own)."""
    monkeypatch.setattr(communication, "latency_seconds", lambda *args: 0.0)



@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return load_measurements()


def _row(table: pd.DataFrame, ref: str) -> pd.Series:
    return table[table["source_ref"] == ref].iloc[0]


@pytest.mark.parametrize("ref, expected", [
    # dgxc row 0: "Llama3 70b Finetuning SFT BF16", 32 H100, TP=4 PP=4 DP=2 VP=5, MBS 1, GBS 32, 39009 tokens/s,
    # MFU 51.1 %: GA = 32 / (1 x 2) = 16
    ("dgxc_benchmarking_h100_throughput.csv#row=0",
     {"model_name": "llama3-70b", "number_gpus": 32, "tensor_parallel": 4, "pipeline_parallel": 4, "batch_size": 32,
      "gradient_accumulation_steps": 16, "tokens_per_second": 39009.0, "mfu": 0.511, "framework": "nemo"}),
    # dgxc row 134: HF FSDP LoRA Llama-2-70B on 8 H100, 1.247 train samples/s of a 30-step run: not turned into tokens/s
    ("dgxc_benchmarking_h100_throughput.csv#row=134",
     {"model_name": "llama2-70b", "train_samples_per_second": 1.247, "batch_size": 8 * 4 * 8, "lora_r": 8}),
    # InternEvo row 0: 8 A100, tp=1, micro_bsz 2, micro_num 4, TGS 4062 -> 32,496 tokens/s, global batch 2 x 4 x 8
    ("internevo_train_performance_A100_A800.csv#row=0",
     {"model_name": "internlm-7b", "tokens_per_second": 4062.0 * 8, "batch_size": 64, "strategy": "zero1"}),
    # fms-fsdp row 9: Llama-2 7B HSDP, 128 A100, 4550 tokens/s/GPU (compiled)
    ("fms_fsdp_llama2_pretrain_throughput.csv#row=9",
     {"model_name": "llama2-7b", "tokens_per_second": 4550.0 * 128, "strategy": "fsdp-hybrid", "batch_size": 256}),
])
def test_converted_rows_match_the_source(table: pd.DataFrame, ref: str, expected: dict[str, object]) -> None:
    row = _row(table, ref)
    for key, value in expected.items():
        assert row[key] == pytest.approx(value) if isinstance(value, float) else row[key] == value, key
    if ref.endswith("row=134"):
        assert pd.isna(row["tokens_per_second"])


def test_superseded_cell_is_a_duplicate(table: pd.DataFrame) -> None:
    row = _row(table, "fms_fsdp_llama2_pretrain_throughput.csv#row=0")
    assert row["duplicate_of"] == "fms_fsdp_llama2_pretrain_throughput.csv#row=1" and row["scored"] == 0


def test_proxy_configs_are_flagged_and_unanswered(table: pd.DataFrame) -> None:
    proxies = table[(table["source"] == "dgxc-benchmarking") & table["notes"].str.contains("PROXY")]
    assert len(proxies) == 38 and (proxies["scored"] == 0).all()
    assert proxies["model_name"].str.contains(r"\[proxy").all()


def test_internlm_7b_parameter_count() -> None:
    """InternLM-7B: 103,168-token untied embeddings, 32 LLaMA blocks with q/k/v/o biases, MLP 11,008."""
    h, v, inter, layers = 4096, 103168, 11008, 32
    block = 4 * h * h + 4 * h + 3 * h * inter + 2 * h
    assert get_architecture("internlm-7b").total_params == 2 * v * h + layers * block + h


def test_interleaved_pipeline_bubble() -> None:
    job = Job(model="llama3.1-8b", tokens_per_sample=4096, batch_size=8, gradient_accumulation_steps=4)
    arch, gpu = get_architecture("llama3.1-8b"), get_gpu("H100")
    flat = tp.compute_seconds(job, arch, Placement(gpu_model="H100", number_gpus=4), gpu, 0.5)
    piped = tp.compute_seconds(job, arch, Placement(gpu_model="H100", number_gpus=4, pp=4, virtual_pp=2), gpu, 0.5)
    assert piped / flat == pytest.approx(1 + 3 / (2 * 4))


def test_stacks_decide_what_is_exposed(no_latency: None) -> None:
    job = Job(model="llama3.1-8b", tokens_per_sample=4096, batch_size=16, gradient_accumulation_steps=2)
    arch, gpu = get_architecture("llama3.1-8b"), get_gpu("H100")
    place = Placement(gpu_model="H100", number_gpus=16, tp=2, strategy="zero1")
    hf = tp.communication(job, arch, place, gpu, stack=stack_for("hf-trainer"))
    megatron = tp.communication(job, arch, place, gpu, stack=stack_for("nemo"))
    assert hf.exposed > 0 and megatron.exposed == 0  # TP collectives and the ZeRO-1 gather overlap in Megatron
    assert megatron.overlappable == pytest.approx(hf.overlappable + hf.exposed)


def test_nemo_lora_runs_its_tensor_parallel_collectives_exposed(no_latency: None) -> None:
    # NeMo's LoRA performance recipe sets tp_comm_overlap=False (llama3_70b finetune_performance_optimizations);
    # full fine-tuning keeps it on. TP 2, 16 GPUs: dp 8, micro-batch 16 / (8 x 2) = 1 sample of 4,096 tokens; per
    # layer 2 all-reduces forward + 2 backward of 4,096 x 4,096 x 2 bytes, each a 2-rank ring sending 2 x 1/2 of it
    # at 0.8 x 450 GB/s (H100 NVLink per direction), 32 layers, 2 micro-batches
    lora = Job(model="llama3.1-8b", method="lora", tokens_per_sample=4096, batch_size=16, gradient_accumulation_steps=2,
               gradient_checkpointing=False)
    arch, gpu = get_architecture("llama3.1-8b"), get_gpu("H100")
    place = Placement(gpu_model="H100", number_gpus=16, tp=2, strategy="zero1")
    exposed = tp.communication(lora, arch, place, gpu, stack=stack_for("nemo", "lora")).exposed
    assert exposed == pytest.approx(4 * 32 * 2 * 4096 * 4096 * 2 / (450e9 * 0.8))
    full = lora.model_copy(update={"method": "full"})
    assert tp.communication(full, arch, place, gpu, stack=stack_for("nemo", "full")).exposed == 0
    assert stack_for("hf", "lora").name == "hf"  # stacks without a PEFT recipe of their own keep their profile


@pytest.mark.parametrize("ref, profile", [
    ("dgxc_benchmarking_h100_throughput.csv#row=7", "nemo-peft"),  # DGX Cloud ft_llama3: NeMo 2.0 LoRA recipe
    ("nemo_24.07_finetune_sft_lora_DGX-H100_fp8.csv#row=5", "nemo-launcher"),  # NeMo 24.07: the NeMo 1.0 launcher
    ("dgxc_benchmarking_h100_throughput.csv#row=0", "nemo"),  # DGX Cloud 70B SFT: TP overlap on
])
def test_which_nemo_profile_a_row_runs(table: pd.DataFrame, ref: str, profile: str) -> None:
    row = _row(table, ref)
    assert tf._profile(row, "nemo", str(row["method"])).name == profile


def test_placement_network_overrides_the_default(no_latency: None) -> None:
    job = Job(model="llama3.1-8b", tokens_per_sample=4096, batch_size=16)
    arch, gpu = get_architecture("llama3.1-8b"), get_gpu("H100")
    slow = tp.communication(job, arch, Placement(gpu_model="H100", number_gpus=16), gpu)
    fast = tp.communication(job, arch, Placement(gpu_model="H100", number_gpus=16, inter_node_gbps=400), gpu)
    assert fast.overlappable == pytest.approx(slow.overlappable * tp.INTER_NODE_BANDWIDTH_GBPS / 400)


@pytest.mark.parametrize("campaign, source, gbps", [
    ("internevo/Throughput; 400 Gbps node-node interconnect (4 x 100 Gb RoCE per node, SOURCE.md)", "internevo", 50.0),
    ("dgxc-benchmarking/llama3.1/README.md", "dgxc-benchmarking", 400.0),
])
def test_links_by_source(campaign: str, source: str, gbps: float) -> None:
    assert tf.inter_node_gbps(campaign, source) == gbps


@pytest.mark.parametrize("name", ["H100", "H200", "GB200", "H100-NVL", "B200"])
def test_fp8_peak_doubles_bf16(name: str) -> None:
    """Hopper and Blackwell tensor cores run FP8 at twice the BF16 rate (NVIDIA datasheets)."""
    gpu = get_gpu(name)
    assert gpu.fp8_tflops == pytest.approx(2 * gpu.bf16_tflops, rel=0.01)  # type: ignore[operator]


# NCCL 2.8 tuning.cc, Simple protocol: ring base 8.4 µs, ring hop 3.4 (NVLink) / 5.7 (PCIe) / 9.6 (network) µs,
# tree hop 28 (NVLink) / 50 (network) µs; a multi-node ring all-reduce is 1.9 × its sum. Worked by hand:
@pytest.mark.parametrize("kind, ranks, nodes, link, micros", [
    ("all-gather", 1, 1, "nvlink", 0.0),
    ("all-gather", 8, 1, "nvlink", 8.4 + 7 * 3.4),
    ("reduce-scatter", 8, 1, "pcie", 8.4 + 7 * 5.7),
    ("all-gather", 16, 2, "nvlink", 8.4 + 14 * 3.4 + 1 * 9.6),
    ("all-reduce", 8, 1, "nvlink", 8.4 + 14 * 3.4),  # ring 56 µs beats the tree's 2 · 7 · 28 = 392 µs
    ("all-reduce", 1024, 128, "nvlink", 2 * (7 * 28 + 7 * 50)),  # tree 1,092 µs; ring (8.4 + 1792·3.4 + 254·9.6)·1.9
    ("broadcast", 64, 8, "nvlink", 8.4 + 64 * 9.6),  # nRanks steps, each a network hop once the ring spans nodes
    ("broadcast", 8, 1, "nvlink", 8.4 + 8 * 3.4),
    ("send", 2, 2, "nvlink", 8.4 + 9.6),
])
def test_collective_latency_follows_nccl_tuning(kind: str, ranks: int, nodes: int, link: str, micros: float) -> None:
    assert latency_seconds(kind, ranks, nodes, link) == pytest.approx(micros * 1e-6)


@pytest.mark.parametrize("ranks", [128, 512])
def test_latency_grows_with_ranks_in_a_zero_step(ranks: int) -> None:
    """InternEvo broadcasts the updated shards once per ZeRO rank that owns a tensor: min(ranks, 291) broadcasts
    (InternLM-7B: 32 layers × 9 tensors + embedding, norm, head), each 8.4 + ranks × 9.6 µs over the nodes."""
    job = Job(model="internlm-7b", tokens_per_sample=2048, batch_size=8 * 8, gradient_accumulation_steps=4)
    arch, gpu = get_architecture("internlm-7b"), get_gpu("NVIDIA-A100-SXM4-80GB")
    exposed = [tp.communication(job.model_copy(update={"batch_size": 8 * n}), arch,
                                Placement(gpu_model=gpu.name, number_gpus=n, strategy="zero1"), gpu, 50.0,
                                stack_for("internevo")).exposed for n in (64, ranks)]
    alpha = min(ranks, 291) * (8.4 + ranks * 9.6) - 64 * (8.4 + 64 * 9.6)
    # the ring's parameter bytes per GPU change only through (n-1)/n
    ring = ((ranks - 1) / ranks - 63 / 64) * arch.total_params * 2 / (50e9 * 0.8)
    assert exposed[1] - exposed[0] == pytest.approx(alpha * 1e-6 + ring, rel=1e-6)


@pytest.mark.parametrize("model, stack, tensors", [
    ("internlm-7b", "internevo", 32 * 9 + 3),  # Wqkv, out_proj (+ biases), w1, w2, w3, 2 norms; embedding, norm, head
    ("llama3.1-8b", "hf", 32 * 9 + 3),  # q, k, v, o, gate, up, down, 2 norms; embedding, norm, head
    ("llama3.2-1b", "hf", 16 * 9 + 2),  # tied: no separate head
])
def test_parameter_tensors_as_the_stack_builds_the_model(model: str, stack: str, tensors: int) -> None:
    assert communication.parameter_tensors(get_architecture(model), stack_for(stack)) == tensors


def test_selective_checkpointing_recomputes_a_share_of_the_layers() -> None:
    """Llama-3.1-8B, 4,096 tokens: 7,504,658,432 matmul weights (32 · 218,103,808 + the 128,256 · 4096 head),
    attention 4 · 32 · 4096 · 4096 / 2 per token forward, backward 2.5 ×. Half the layers recomputed: 6N + N_layers
    (the LM head's forward is not re-run), attention × (3.5 + 0.5)."""
    job = Job(model="llama3.1-8b", tokens_per_sample=4096, batch_size=8)
    n, layers, attention = 7_504_658_432, 32 * 218_103_808, 4 * 32 * 4096 * 4096 / 2
    assert tp.flops_parts(job, recompute=0.5) == pytest.approx((6 * n + layers, 4 * attention), rel=1e-9)
    assert tp.flops_parts(job) == pytest.approx((6 * n + 2 * layers, 4.5 * attention), rel=1e-9)  # all layers
    full = tp.estimate_throughput(job, Placement(gpu_model="H100"))
    half = tp.estimate_throughput(job, Placement(gpu_model="H100"), recompute=0.5)
    assert half.tokens_per_second > full.tokens_per_second


@pytest.mark.parametrize("notes, expected", [
    # 5e522b4, 13B: 3 · (0.59 / 0.51 − 1) = 0.4706 (A100) and 3 · (0.40 / 0.35 − 1) = 0.4286 (H100)
    ("MFU (A100 80G)=0.51, HFU (A100 80G)=0.59, MFU (H100 80G)=0.35, HFU (H100 80G)=0.40", (0.4706 + 0.4286) / 2),
    # ed74fd5 (compiled), 13B: 0.3934 (A100) and 0.2093 (H100) for the same configuration
    ("MFU (A100 80G)=0.61, HFU (A100 80G)=0.69, MFU (H100 80G)=0.43, HFU (H100 80G)=0.46", (0.3934 + 0.2093) / 2),
    ("MFU (A100 80G)=0.51, HFU (A100 80G)=0.59", 0.4706),  # one GPU stated: its share
])
@pytest.mark.parametrize("gpu", ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"])
def test_recompute_share_from_the_stated_mfu_and_hfu(notes: str, expected: float, gpu: str) -> None:
    """fms-fsdp 13B with selective checkpointing: one configuration on both GPUs (README: "the exact same scripts
    and configurations"), so both rows take the mean of the shares each GPU's MFU / HFU pair gives."""
    row = pd.Series({"kernels": "selective activation checkpointing", "gpu_model": gpu, "notes": notes})
    assert tf.stated_recompute(row) == pytest.approx(expected, abs=1e-4)
    assert pd.isna(tf.stated_recompute(row.drop("kernels")))


def test_zero_inside_the_node_syncs_parameters_over_nvlink() -> None:
    """InternEvo zero1=8 on 64 A100 (8 nodes, 50 GB/s each): the exposed parameter sync is a ring inside the node
    at NVLink's 300 GB/s × 0.8 over 8 ranks, plus 8 broadcasts of (8.4 + 8 × 3.4) µs; zero1=-1 rings over all 64 at
    the NIC's 50 GB/s × 0.8 (and 64 broadcasts of (8.4 + 64 × 9.6) µs)."""
    job = Job(model="internlm-7b", tokens_per_sample=2048, batch_size=8 * 64, gradient_accumulation_steps=4)
    arch, gpu = get_architecture("internlm-7b"), get_gpu("NVIDIA-A100-SXM4-80GB")
    place = Placement(gpu_model=gpu.name, number_gpus=64, strategy="zero1")
    shard = arch.total_params * 2
    node = tp.communication(job, arch, place, gpu, 50.0, stack_for("internevo"), zero_group=8)
    everyone = tp.communication(job, arch, place, gpu, 50.0, stack_for("internevo"))
    assert node.exposed == pytest.approx(7 / 8 * shard / 240e9 + 8 * (8.4 + 8 * 3.4) * 1e-6, rel=1e-6)
    assert everyone.exposed == pytest.approx(63 / 64 * shard / 40e9 + 64 * (8.4 + 64 * 9.6) * 1e-6, rel=1e-6)


@pytest.mark.parametrize("span", [220.0, 1024.0])
def test_packed_samples_attend_within_themselves(span: float) -> None:
    """Llama-3.1-8B, 4,096-token packs: attention forward is 4 · 32 · span · 4096 / 2 per token (each packed sample
    attends only within itself), backward 2.5 ×; the weight matmuls (6N) do not change."""
    job = Job(model="llama3.1-8b", tokens_per_sample=4096, batch_size=8, gradient_checkpointing=False)
    n = 7_504_658_432
    assert tp.flops_parts(job, span=span) == pytest.approx((6 * n, 3.5 * 4 * 32 * span * 4096 / 2), rel=1e-9)
    assert tp.flops_parts(job, span=8192.0) == tp.flops_parts(job)  # a span beyond the pack is the pack
    place = Placement(gpu_model="H100", number_gpus=8)
    packed = tp.estimate_throughput(job, place, span=span)
    assert packed.tokens_per_second > tp.estimate_throughput(job, place).tokens_per_second


@pytest.mark.parametrize("notes, packing, expected", [
    ("Llama3 8b Finetuning LORA BF16; SQuAD v1.1 packed to 4096 tokens (NeMo finetune_recipe)", 1, 220.0),
    ("Llama3 8b Finetuning LORA BF16; SQuAD v1.1 packed to 4096 tokens", 0, None),  # not packed
    ("LLAMA2-7B; some other dataset packed to 4096 tokens", 1, None),  # lengths unknown: left out
])
def test_packed_span_of_nemo_squad_rows(notes: str, packing: int, expected: float | None) -> None:
    row = pd.Series({"framework": "nemo", "packing": packing, "notes": notes})
    assert tf.packed_span(row) == expected


def test_dgx_cloud_finetuning_rows_are_packed_squad_with_lora_on_qkv() -> None:
    """dgxc-benchmarking ft_llama3 runs NeMo's finetune_recipe in performance mode: SQuAD packed to 4,096 tokens,
    LoRA dim 8 / alpha 16 on linear_qkv."""
    data = load_measurements()
    ft = data[data["campaign"].astype(str).str.contains("ft_llama3/")]
    assert len(ft) > 0 and (ft["packing"] == 1).all()
    lora = ft[ft["method"] == "lora"]
    assert set(lora["lora_target_modules"]) == {"q_proj,k_proj,v_proj"} and (lora["lora_r"] == 8).all()
    rows = tf.throughput_rows(ft)
    assert (rows["span"] == tf.SQUAD_SAMPLE_TOKENS).all()


def test_lora_shares_full_fine_tuning_base_efficiency() -> None:
    assert tp.FITTED.by_method["lora"] == tp.FITTED.by_method["full"]
    assert tf.BASE_METHOD == {"full": "full", "lora": "full", "qlora": "qlora"}


def test_fused_stack_keeps_its_own_share_of_the_micro_batch_cost() -> None:
    """φ_X scales X0 on a fused-kernel stack, φ the memory-bound term; unset, φ_X is φ. InternLM-7B (dense: total =
    active weights): X0 · φ_X tokens per micro-batch on InternEvo, X0 on the HF Trainer."""
    arch = get_architecture("internlm-7b")
    fit = tp.EfficiencyFit({}, {"full": 0.8, "lora": 0.8, "qlora": 0.7}, 2000.0, 1.0, 1.0,
                           fused_memory_share=0.0, fused_microbatch_share=0.2)
    assert tp.microbatch_overhead_tokens(arch, fit, stack_for("internevo")) == pytest.approx(400.0)
    assert tp.microbatch_overhead_tokens(arch, fit, stack_for("hf")) == pytest.approx(2000.0)
    same = tp.EfficiencyFit({}, {"full": 0.8, "lora": 0.8, "qlora": 0.7}, 2000.0, 1.0, 1.0, fused_memory_share=0.3)
    assert tp.microbatch_overhead_tokens(arch, same, stack_for("internevo")) == pytest.approx(600.0)
