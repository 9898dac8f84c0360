"""One GPU of a job trained by a stack's own code (torchtune, torchtitan, DeepSpeed, TRL, LitGPT), from a trace of its
rank, cached on disk.

No torch here: the driver (``python -m autoconf.estimators.traced.stacks.<stack>_step``) runs in a
subprocess and returns dist.py's summary (peak per step and phase) with its allocation events; both are cached
next to the HF traces, keyed by the spec and the library versions. Reserved and device memory come from the
events replayed through the caching-allocator model on the job's GPU, as for the HF rank traces (ranks.py).
Which jobs a driver can run is unsupported.py's (and litgpt_plan.py's).
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
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.traced.cache import cache_dir
from autoconf.estimators.traced.fit import TRACE_TIMEOUT_S, TraceFailed
from autoconf.estimators.traced.ranks import PHASE_TEXT, largest_rank, uneven
from autoconf.estimators.traced.stacks.litgpt_plan import litgpt_spec
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
