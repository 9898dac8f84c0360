"""One GPU of a job trained by a stack's own code (torchtune, torchtitan, DeepSpeed, TRL, LitGPT), from a trace of its
rank, cached on disk.

No torch here: the driver (``python -m autoconf.estimators.traced.stacks.<stack>_step``) runs in a
subprocess and returns dist.py's summary (peak per step and phase) with its allocation events; both are cached
next to the HF traces, keyed by the spec and the library versions. Reserved and device memory come from the
events replayed through the caching-allocator model on the job's GPU, as for the HF rank traces (ranks.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from autoconf.catalog import Architecture
from autoconf.catalog.families import REMOTE_CODE
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.traced.cache import cache_dir
from autoconf.estimators.traced.fit import TRACE_TIMEOUT_S, TraceFailed
from autoconf.estimators.traced.ranks import PHASE_TEXT, largest_rank, uneven
from autoconf.estimators.traced.stacks.litgpt_plan import litgpt_spec, litgpt_unsupported
from autoconf.estimators.traced.stacks.spec import arch_spec
from autoconf.schema import Job, MemoryEstimate, Placement

STACK_VERSION = 4  # part of the cache key: bump when a driver changes meaning
DRIVERS = {"torchtune": "autoconf.estimators.traced.stacks.torchtune_step",
           "torchtitan": "autoconf.estimators.traced.stacks.torchtitan_step",
           "deepspeed": "autoconf.estimators.traced.stacks.deepspeed_step",
           "trl": "autoconf.estimators.traced.stacks.trl_step",
           "litgpt": "autoconf.estimators.traced.stacks.litgpt_step"}
ZERO = {"zero0": 0, "zero1": 1, "zero2": 2, "zero3": 3}  # Strategy -> ZeRO stage
# what each driver runs of its stack, for the answer's note
RUNS = {"torchtune": "builders, LoRA modules, chunked loss, activation checkpointing, training.shard_model",
        "torchtitan": "Llama3Model, parallelize_llama (TP plan, FullAC, FSDP2 mixed precision), flex attention, "
                      "cross_entropy_loss, clip_grad_norm_",
        "deepspeed": "deepspeed.initialize with the HF Trainer's auto ZeRO config, engine forward, backward and step",
        "trl": "SFTTrainer.train(): peft, the Trainer's fused AdamW, accelerate's prepare, the fused LM head, clipping, "
               "checkpoint save",
        "litgpt": "finetune/full.py and lora.py under Lightning Fabric: GPT and its LoRA layers, FSDPStrategy or "
                  "ModelParallelStrategy, load_checkpoint, the sanity validate, chunked_cross_entropy, fabric.backward, "
                  "AdamW"}
# Stacks that cannot share the environment are installed into a directory of their own, named by STACK_PATH
# (os.pathsep-separated), which only the driver subprocesses see: torchtune 0.6.1 imports what torchao 0.16+ removed,
# and peft 0.21 refuses torchao < 0.16 once it is importable; torchtitan 0.3.0 depends on datasets<4.8 (which pins
# huggingface_hub below transformers 5's) and imports triton for its expert-parallel kernels; litgpt 0.5.13 pins
# huggingface_hub < 1.4 (docs/traced.md).
STACK_PATH = "AUTOCONF_STACK_PATH"
SHARED_ENVIRONMENT = ("deepspeed", "trl")  # stacks installed beside autoconf ([stacks] extra); the rest go in STACK_PATH
INSTALL = {"torchtune": f"pip install --no-deps --target $DIR torchtune==0.6.1 torchao==0.15.0; {STACK_PATH}=$DIR",
           "torchtitan": "pip install --no-deps --target $DIR torchtitan==0.3.0 spmd_types==0.2.3 einops tyro typeguard "
                         f"docstring_parser torch_checkpointing triton; {STACK_PATH}=$DIR",
           "deepspeed": "pip install 'autoconf-gpu[stacks]'", "trl": "pip install 'autoconf-gpu[stacks]'",
           "litgpt": "pip install --no-deps --target $DIR litgpt==0.5.13 lightning==2.6.6 lightning-utilities "
                     f"torchmetrics jsonargparse==4.41.0; {STACK_PATH}=$DIR"}
# what a driver imports besides its stack (torchtune refuses to import without torchao)
NEEDS = {"torchtune": ("torchtune", "torchao"), "torchtitan": ("torchtitan",), "deepspeed": ("deepspeed",),
         "trl": ("trl", "accelerate", "transformers", "peft"), "litgpt": ("litgpt", "lightning")}


def _stack_dirs() -> list[str]:
    return [d for d in os.environ.get(STACK_PATH, "").split(os.pathsep) if d]


def stack_version(name: str) -> str | None:
    """The installed version of ``name`` in this environment or the STACK_PATH directories (None: absent)."""
    found = next(iter(metadata.distributions(name=name, path=[*_stack_dirs(), *sys.path])), None)
    return None if found is None else found.version


def applies(job: Job, placement: Placement) -> bool:
    """Whether a stack driver is meant for the job (installed or not): torchtune, torchtitan and trl always,
    DeepSpeed for its ZeRO strategies on several GPUs."""
    if job.framework == "deepspeed":
        return placement.effective_strategy in ZERO and placement.dp > 1
    return job.framework in DRIVERS


def missing(job: Job, placement: Placement) -> str | None:
    """A note when the job's stack has a driver that applies but is not installed (its HF step answers instead)."""
    if not applies(job, placement):
        return None
    absent = [name for name in NEEDS[job.framework] if stack_version(name) is None]
    if not absent:
        return None
    return f"traced: {job.framework}'s own code not run: {', '.join(absent)} not installed ({INSTALL[job.framework]})"


# torchtune builders we map catalogue architectures onto (torchtune.models.<family>._component_builders)
TORCHTUNE_TYPES = {"llama": "llama3_2", "qwen2": "qwen2", "mistral": "mistral"}
LORA_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "all-linear")


def torchtune_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why torchtune's own code cannot be traced for this job (None: it can)."""
    if arch.model_type not in TORCHTUNE_TYPES:
        return f"no torchtune builder is mapped for {arch.model_type} (traced: {', '.join(TORCHTUNE_TYPES)})"
    if arch.head_dim * arch.num_heads != arch.hidden_size:
        return "torchtune's llama/qwen2/mistral builders derive head_dim = hidden / heads; this model's differs"
    if arch.mlp_bias or (arch.attention_bias and arch.model_type != "qwen2") or arch.num_experts > 1:
        return "torchtune's builder for this family has no biases or experts where this model has them"
    if job.method == "qlora" and placement.dp > 1:
        return "QLoRA on several GPUs: sharding torchao's NF4Tensor weights with FSDP2 was not traced"
    if job.dtype not in ("bf16", "fp32"):
        return f"torchtune recipes train in bf16 or fp32 (training.get_dtype), not {job.dtype}"
    if job.attention == "eager":
        return "torchtune's attention is SDPA or flex attention (_sdpa_or_flex_attention); it has no eager path"
    if job.optimizer != "adamw":
        return f"torchtune configs use torch.optim.AdamW; {job.optimizer} is not traced"
    if job.effective_loss_kernel not in ("chunked", "hf"):
        return (f"torchtune's recipes compute CEWithChunkedOutputLoss (chunked) or nn.CrossEntropyLoss (hf); "
                f"the {job.effective_loss_kernel} loss kernel is not theirs")
    if job.dora and job.method != "full":
        return "DoRA: torchtune's DoRALinear (use_dora) is not traced (the driver builds LoRALinear)"
    if job.method != "full" and not set(job.lora_target_modules) <= set(LORA_NAMES):
        return f"torchtune's LoRA builders adapt {', '.join(LORA_NAMES[:-1])}; got {', '.join(job.lora_target_modules)}"
    if placement.tp > 1 or placement.pp > 1 or placement.offload != "none":
        return "tensor/pipeline parallelism and offload are not traced for torchtune"
    if placement.dp > 1 and placement.effective_strategy not in ("fsdp", "fsdp-shard-grad-op"):
        return f"torchtune shards with FSDP2 (training.shard_model); strategy {placement.effective_strategy} is not its"
    if job.sequence_parallel > 1:
        return "sequence parallelism is not traced for torchtune"
    return None


def torchtitan_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why torchtitan's own code cannot be traced for this job (None: it can)."""
    if arch.model_type != "llama" or arch.attention_bias or arch.mlp_bias:
        return f"torchtitan's Llama3Model is traced for bias-free llama models, not {arch.model_type}"
    if job.method == "qlora":
        return "torchtitan has no QLoRA (no 4-bit base weights; its low precision is float8 training)"
    if job.method != "full":
        return "torchtitan is traced for full training; its LoRA converter (components/lora.py) is not traced"
    if arch.head_dim * arch.num_heads != arch.hidden_size:
        return "the driver builds torchtitan's Llama3 layers from dim and n_heads (head_dim = dim / heads); this model's differs"
    if job.dtype not in ("bf16", "amp-bf16", "fp32"):
        return f"torchtitan trains in training.dtype float32 or bfloat16 with bf16 or fp32 compute, not {job.dtype}"
    if job.attention == "eager":
        return "torchtitan's attention is SDPA or flex attention; it has no eager path"
    if job.optimizer != "adamw":
        return f"torchtitan's default optimizer is AdamW; {job.optimizer} is not traced"
    if job.effective_loss_kernel != "hf":
        return f"torchtitan's loss is cross_entropy_loss over fp32 logits; the {job.effective_loss_kernel} kernel is not its"
    if placement.pp > 1 or placement.offload != "none" or job.sequence_parallel > 1:
        return "pipeline and context parallelism and CPU offload are not traced for torchtitan"
    if placement.dp > 1 and placement.effective_strategy not in ("fsdp", "fsdp-shard-grad-op"):
        return f"torchtitan shards with FSDP2; strategy {placement.effective_strategy} is not its"
    return None


def stack_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why ``job.framework``'s own code cannot be traced (None: it can); only stacks in DRIVERS are asked."""
    if resolve(job).optimizer_in_backward or resolve(job).activation_offloading:
        return f"optimizer-in-backward and activation offloading are not traced for {job.framework}"
    low = job.dtype in ("bf16", "fp16") and (job.method == "full" or job.framework == "torchtune")
    if job.framework != "deepspeed" and job.optimizer_state_dtype == "fp32" and low:
        # torch optimizers keep states in the trained parameters' dtype: the base's, or for LoRA torchtune's adapters'
        # (peft's are fp32); DeepSpeed keeps fp32 master weights and states whatever the model dtype
        return f"{job.framework}'s torch AdamW keeps its states in the parameter dtype ({job.dtype}), not fp32"
    if job.framework == "torchtitan":
        return torchtitan_unsupported(job, placement, arch)
    if job.framework == "deepspeed":
        return deepspeed_unsupported(job, placement, arch)
    if job.framework == "trl":
        return trl_unsupported(job, placement, arch)
    if job.framework == "litgpt":
        return litgpt_unsupported(job, placement, arch)
    return torchtune_unsupported(job, placement, arch)


TRL_STRATEGIES = ("ddp", "fsdp", "fsdp-shard-grad-op")


def trl_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why TRL's SFTTrainer cannot be traced for this job (None: it can)."""
    if job.method == "qlora" and job.dora and placement.dp > 1 and placement.effective_strategy != "ddp":
        return ("DoRA QLoRA under FSDP2: TRL casts the adapters to bf16 but keeps DoRA's magnitudes fp32 "
                "(sft_trainer.py), and FSDP2 asserts one dtype for a unit's trained parameters (_init_mp_dtypes)")
    if job.optimizer != "adamw" or job.optimizer_impl != "fused":
        return (f"the Trainer's adamw_torch_fused is traced; {job.optimizer} ({job.optimizer_impl}) is not "
                "(adamw_torch picks foreach on CUDA but for-loop on CPU tensors)")
    if job.effective_loss_kernel != "fused-linear-ce":
        return (f"TRL 1.16's SFTTrainer computes its loss through its fused LM head (add_fused_lm_head), "
                f"not {job.effective_loss_kernel}")
    if placement.tp > 1 or placement.pp > 1 or placement.offload != "none" or job.sequence_parallel > 1:
        return "tensor/pipeline/sequence parallelism and offload are not traced for the SFTTrainer"
    if placement.dp > 1 and placement.effective_strategy not in TRL_STRATEGIES:
        return (f"strategy {placement.effective_strategy}: the SFTTrainer is traced under accelerate's "
                f"{', '.join(TRL_STRATEGIES)} (ZeRO: --framework deepspeed)")
    if arch.family in REMOTE_CODE:
        return f"{arch.family} is hub remote code (no transformers class to trace)"
    if arch.model_type == "granitemoe":  # its config asks for router logits by default
        return ("TRL 1.16's fused LM head adds the MoE aux loss with config.num_experts (trl/trainer/utils.py "
                "_fused_forward), which GraniteMoeConfig does not have: the SFTTrainer raises AttributeError")
    return None


def deepspeed_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why DeepSpeed's ZeRO engine cannot be traced for this job (None: it can)."""
    if job.method == "qlora":
        return "QLoRA (bitsandbytes' 4-bit Params4bit in ZeRO's flat partitions) is not traced"
    if job.optimizer != "adamw":
        return f"the engine is traced with the Trainer's torch AdamW; {job.optimizer} is not"
    if job.dora and job.method != "full":
        return "DoRA is not traced by the engine driver"
    if job.effective_loss_kernel != "hf":
        return f"the engine is traced with the model's own loss; the {job.effective_loss_kernel} kernel is not"
    if placement.tp > 1 or placement.pp > 1 or placement.offload != "none" or job.sequence_parallel > 1:
        return "ZeRO with tensor/pipeline/sequence parallelism or offload is not traced"
    if arch.family in REMOTE_CODE:
        return f"{arch.family} is hub remote code (no transformers class to trace)"
    return None


def hf_spec(job: Job, placement: Placement, arch: Architecture, batch: int) -> dict[str, Any]:
    """A DeepSpeed trace's spec: the transformers model's (traced/model.py) plus the ZeRO stage and the world."""
    fields = {k: v for k, v in dataclasses.asdict(arch).items() if k not in ("source", "verification", "aliases")}
    return {
        "stack": job.framework, "arch": fields, "method": job.method, "dtype": job.dtype,
        "attention": "eager" if job.attention == "eager" else "sdpa", "optimizer": job.optimizer,
        "optimizer_impl": job.optimizer_impl, "gradient_checkpointing": job.gradient_checkpointing,
        "lora_r": job.lora_r, "lora_alpha": job.lora_alpha, "lora_dropout": job.lora_dropout,
        "lora_target_modules": sorted(job.lora_target_modules) if job.method == "lora" else [],
        "world": placement.dp, "stage": ZERO.get(placement.effective_strategy), "shape": [batch, job.tokens_per_sample],
        "expandable_segments": resolve(job).expandable_segments,
    }


def trl_spec(job: Job, placement: Placement, arch: Architecture, batch: int) -> dict[str, Any]:
    """An SFTTrainer trace's spec: the transformers model's, accelerate's strategy and loading, DoRA."""
    strategy = placement.effective_strategy if placement.dp > 1 else "single"
    spec = {k: v for k, v in hf_spec(job, placement, arch, batch).items() if k != "stage"}
    return {**spec, "strategy": strategy, "dora": job.dora and job.method != "full", "fsdp_version": 2,
            "double_quant": resolve(job).double_quant,
            "lora_target_modules": sorted(job.lora_target_modules) if job.method != "full" else [],
            "cpu_ram_efficient_loading": strategy.startswith("fsdp") and resolve(job).efficient_loading}


def stack_spec(job: Job, placement: Placement, arch: Architecture, batch: int) -> dict[str, Any]:
    """Everything a stack's trace depends on (also its cache key)."""
    if job.framework == "deepspeed":
        return hf_spec(job, placement, arch, batch)
    if job.framework == "trl":
        return trl_spec(job, placement, arch, batch)
    if job.framework == "litgpt":
        return litgpt_spec(job, placement, arch, batch)
    mlp = ("gate_proj", "up_proj", "down_proj")
    targets = list(job.lora_target_modules)
    if job.method != "full" and "all-linear" not in targets and any(t in targets for t in mlp):
        targets = sorted(set(targets) | set(mlp))  # torchtune adapts the whole MLP or none of it
    return {
        "stack": job.framework,
        "arch": arch_spec(arch, tie_word_embeddings=arch.tie_word_embeddings),
        # the rotary cache is (max_seq_len, head_dim / 2, 2) fp32: torchtune's builders use the model's context
        "max_seq_len": arch.max_position_embeddings or job.tokens_per_sample,
        "method": job.method, "dtype": job.dtype, "gradient_checkpointing": job.gradient_checkpointing,
        "loss": job.effective_loss_kernel, "optimizer_impl": job.optimizer_impl,
        "lora_r": job.lora_r, "lora_alpha": job.lora_alpha, "lora_dropout": job.lora_dropout,
        "lora_target_modules": targets if job.method != "full" else [],
        "world": placement.dp * placement.tp, "tp": placement.tp,
        "strategy": placement.effective_strategy if placement.dp > 1 else "single",
        "shape": [batch, job.tokens_per_sample], "expandable_segments": resolve(job).expandable_segments,
    }


def _key(spec: dict[str, Any]) -> str:
    structure = {**spec, "arch": {k: v for k, v in spec["arch"].items() if k != "name"}}
    versions = {pkg: stack_version(pkg) for pkg in ("torch", *NEEDS[spec["stack"]])}
    payload = {"spec": structure, "version": STACK_VERSION, "versions": versions}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def trace_stack(spec: dict[str, Any], timeout_s: float = TRACE_TIMEOUT_S) -> dict[str, Any]:
    """The summary of ``spec``'s trace (from the cache or a driver subprocess), with ``events_path``."""
    path = cache_dir() / f"stack-{_key(spec)}.json"
    events = path.with_suffix(".npz")
    if path.is_file() and events.is_file():
        try:
            return {**json.loads(path.read_text(encoding="utf-8")), "events_path": str(events)}
        except (OSError, ValueError):
            pass
    path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    if _stack_dirs() and spec["stack"] not in SHARED_ENVIRONMENT:  # torchtune, torchtitan, litgpt: their own directory
        # only stacks installed into a directory of their own see it (after the caller's own path, this autoconf,
        # before the environment's packages): peft, which trl imports, refuses the torchao that torchtune needs there
        env["PYTHONPATH"] = os.pathsep.join([*filter(None, [os.environ.get("PYTHONPATH")]), *_stack_dirs()])
    with tempfile.TemporaryDirectory(prefix="autoconf-stack-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.npz"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        try:
            done = subprocess.run([sys.executable, "-m", DRIVERS[spec["stack"]], str(spec_path), str(out_path)],
                                  capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
        except subprocess.TimeoutExpired as exc:
            raise TraceFailed(f"{spec['stack']} trace took more than {timeout_s:.0f} s") from exc
        if done.returncode != 0 or not done.stdout.strip():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise TraceFailed(f"{spec['stack']} trace failed: {last}")
        summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        tmp_events = events.with_suffix(f".{os.getpid()}.tmp.npz")
        os.replace(out_path, tmp_events)
    os.replace(tmp_events, events)
    tmp_path = path.with_suffix(f".{os.getpid()}.tmp")
    tmp_path.write_text(json.dumps(summary), encoding="utf-8")
    os.replace(tmp_path, path)
    return {**summary, "events_path": str(events)}


def stack_memory(job: Job, placement: Placement, arch: Architecture, batch: int) -> MemoryEstimate:
    """Per-GPU memory of ``job`` from its stack's traced rank(s): rank 0 and, when shards are uneven, the last."""
    spec = stack_spec(job, placement, arch, batch)
    world = placement.dp
    # uneven shards: the last rank too (global rank world - 1 is the last data-parallel shard)
    sharded = spec.get("strategy") != "ddp"  # a DDP rank (trl) holds a replica: rank 0 answers for all
    ranks = [0, spec["world"] - 1] if world > 1 and sharded and uneven(spec, world) else [0]
    summaries = [trace_stack({**spec, "rank": r} if r else spec) for r in ranks]
    memory, summary = largest_rank(job, placement, ranks, summaries, spec["expandable_segments"])
    top, sim = summary["peak"], summary["replay"]
    phase = PHASE_TEXT.get(top["phase"], top["phase"])
    # step 0 is the load, and for LitGPT also fit's sanity validation before its first step
    where = f"step {top['step']} {phase}" if top["step"] or top["phase"] == "load" else f"the validation ({phase})"
    by_rank = ", ".join(f"rank {r}: {s['allocated_peak'] / 2**30:.3f} GiB" for r, s in zip(ranks, summaries, strict=True))
    stack = job.framework
    group = f"a fake process group of {spec['world']}" + (f" (TP {placement.tp})" if placement.tp > 1 else "")
    if stack == "trl" and spec["world"] > 1:  # accelerate's strategy as the SFTTrainer prepared it
        group += f" ({'FSDP2 ' + spec['strategy'] if spec['strategy'] != 'ddp' else 'DDP'}" + (
            ", cpu_ram_efficient_loading" if spec["cpu_ram_efficient_loading"] else "") + ")"
    notes = [
        f"traced: {stack} {summary['versions'].get(stack, '?')}'s own code ({RUNS[stack]}) on fake tensors, "
        f"{group if spec['world'] > 1 else 'single device'}; allocated peak {by_rank}; "
        f"peak in {where}",
        "reserved: the traced allocations replayed through a model of the CUDA caching allocator; device adds "
        "the CUDA context, cuBLAS workspaces and NCCL buffers",
    ]
    if stack == "litgpt" and job.gradient_checkpointing != (world > 1):
        notes.append("traced: LitGPT's finetune scripts checkpoint activations exactly when on several devices "
                     "(full.py activation_checkpointing_policy={Block}, lora.py parallelize_fn), whatever the job asks")
    if sim.out_of_memory:
        notes.append("traced: the allocator replay runs out of memory on this GPU even after releasing its cache")
    return memory.model_copy(update={"notes": tuple(notes)})
