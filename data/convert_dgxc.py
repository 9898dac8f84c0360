"""NVIDIA DGX Cloud benchmarking recipes' measured throughput -> measurement rows (source ``dgxc-benchmarking``).

What the source measures (shared/data/external/dgxc-benchmarking/SOURCE.md): the "Expected Performance" tables of
the recipes' READMEs: NeMo / Megatron-Core step time and job tokens/s with MFU (Llama 3 SFT and LoRA, Llama 3.1,
Nemotron 4, Grok-1 pre-training on 8-2,304 H100 and 128-512 GB200), and HF accelerate FSDP + PEFT LoRA samples/s
(Llama-2-70B, Mistral-7B on 8-512 H100). No memory, no OOM.
- NeMo rows: framework ``nemo``, strategy ``megatron`` (Megatron-Core's distributed optimizer: ZeRO-1-style
  sharding of the optimizer state over the data-parallel ranks) with the TP / PP / CP / EP degrees as printed;
  global batch from the README's own config table when exactly one config matches (``GBS=``), else MBS x GA x DP.
- HF rows: framework ``hf-trainer`` (TRL SFTTrainer under accelerate FSDP), LoRA r 8 / alpha 16 on all linear
  layers, 2,048-token packed samples, gradient checkpointing, flash-attn: the launch scripts' settings (SOURCE.md).
  The value is HF's ``train_samples_per_second`` of a 30-step run (max_steps 30): an average over the whole
  train() call, start-up included, so it stays in ``train_samples_per_second`` and is not turned into tokens/s
  (as for ms-swift's samples/s).
- PROXY rows (truncated layer count) keep the printed model text, so that no catalogued architecture answers them,
  and are unscored with that reason. FP8 rows carry ``compute_precision`` fp8.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
from common import EXTERNAL, judge, number

SOURCE = "dgxc-benchmarking"
FILE = "dgxc_benchmarking_h100_throughput.csv"
GPUS = {"H100": "NVIDIA-H100-80GB-HBM3", "GB200": "NVIDIA-GB200"}
# Printed model text -> catalogue name (only the architectures the catalogue has; others keep the printed text).
MODELS = [(r"^llama3 70b", "llama3-70b"), (r"^llama3 8b", "llama3-8b"), (r"^llama ?3\.1 405b", "llama3.1-405b"),
          (r"^llama ?3\.1 70b", "llama3.1-70b"), (r"^llama ?3\.1 8b", "llama3.1-8b"), (r"^llama2 70b", "llama2-70b"),
          (r"^mistral 7b", "mistral-7b-v0.1")]
# NeMo recipes: activation recompute is not restated. Full recompute is ruled out by the printed MFU (up to 62 %
# on H100 for Llama 3.1 8B would be a hardware-FLOPs utilisation above 80 % with a recomputed forward).
NO_RECOMPUTE = "no full activation recompute (printed MFU up to 62 % rules it out; recipe setting not restated)"
RECIPE = "Megatron-Core performance recipe (distributed optimizer, comm overlap, tuned layout)"
# ft_llama3/llama3_finetune.py builds NeMo's finetune_recipe(peft_scheme, performance_mode=True) on SquadDataModule;
# NeMo's recipes pack in performance mode (packed_sequence = performance_mode, 4,096 tokens) and their
# finetune_performance_optimizations put LoRA on linear_qkv only (dim 8, alpha 16: the recipe's LoRA settings)
FT_PACKED = "SQuAD v1.1 packed to 4096 tokens (NeMo finetune_recipe performance_mode: packed_sequence)"
FT_LORA = {"lora_r": 8, "lora_alpha": 16, "lora_target_modules": "q_proj,k_proj,v_proj"}  # Megatron's fused linear_qkv


def _lead_int(text: str) -> int | str:
    found = re.match(r"\s*(\d+)", text)
    return int(found.group(1)) if found else ""


def _degrees(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"\b(TP|PP|CP|EP|DP|VP)=(\d+)", text)}


def _model(text: str) -> str:
    if "[proxy" in text:
        return text
    for pattern, name in MODELS:
        if re.match(pattern, text, re.IGNORECASE):
            return name
    return text


def _batch(src: pd.Series, ngpu: int, micro: int | str, accum: int | str, deg: dict[str, int]) -> tuple[int | str, str]:
    """Global batch (samples) and where it came from."""
    single = re.search(r"config \(same README\):[^;]*?\bGBS=(\d+)", src.notes)
    if single:
        return int(single.group(1)), "GBS from the README's config table"
    if isinstance(micro, int) and isinstance(accum, int):
        split = deg.get("TP", 1) * deg.get("PP", 1) * deg.get("CP", 1)
        dp = deg.get("DP") or (ngpu // split if ngpu % split == 0 else 0)
        if dp < 1:  # a proxy config on fewer GPUs than its printed layout needs
            return "", "global batch not stated (the printed layout gives no whole DP)"
        return micro * accum * dp, "global batch = MBS x GA x DP"
    return "", "global batch not stated"


def _row(i: int, src: pd.Series) -> dict[str, Any]:
    ngpu, hf = int(src.num_gpus), src.metric == "train samples per second"
    micro, accum = _lead_int(src.per_device_batch), _lead_int(src.grad_accum)
    deg = _degrees(src.parallelism + " " + src.model)
    seq = _lead_int(src.seq_len)
    proxy = "[proxy" in src.model
    if hf:
        batch, how = micro * accum * ngpu, "global batch = per-device x GA x GPUs"  # type: ignore[operator]
    else:
        batch, how = _batch(src, ngpu, micro, accum, deg)
        split = deg.get("TP", 1) * deg.get("PP", 1) * deg.get("CP", 1)
        if accum == "" and isinstance(batch, int) and isinstance(micro, int) and ngpu % split == 0:
            dp = ngpu // split  # Megatron: GBS = MBS x GA x DP, DP = GPUs / (TP x PP x CP)
            if batch % (micro * dp) == 0:
                accum, how = batch // (micro * dp), how + "; GA = GBS / (MBS x DP)"
        step, total = number(src.value), number(src.tokens_per_s)
        if isinstance(batch, int) and isinstance(seq, int) and step and total and abs(batch * seq / step / total - 1) > 0.02:
            batch, how = "", f"global batch not stated ({how} = {batch} disagrees with tokens/s x step time / seq)"
    samples = number(src.value) if hf else None
    gpu = "GB200" if "GB200" in src.gpu else "H100"
    mfu = re.search(r"MFU ([\d.]+)%", src.other_throughput)
    row: dict[str, Any] = {
        "source": SOURCE, "source_ref": f"{FILE}#row={i}", "campaign": f"{SOURCE}/{src.source_path}",
        "upstream": f"github.com/{src.source_repo}@{src.source_commit}:{src.source_path}",
        "framework": "hf-trainer" if hf else "nemo", "label_strength": "measured", "gpu_model": GPUS[gpu],
        "gpu_variant_stated": 0, "number_gpus": ngpu, "number_nodes": ngpu // 8 if gpu == "H100" and ngpu % 8 == 0 else "",
        "model_name": _model(src.model), "model_hf_id": src.hf_id,
        "method": "lora" if src.method.startswith("lora") else "full", "tokens_per_sample": seq, "variable_length": 0,
        "batch_size": batch, "per_device_batch_size": micro, "gradient_accumulation_steps": accum,
        "dtype": "bf16", "compute_precision": src["dtype"].lower(), "strategy": "fsdp" if hf else "megatron",
        "status": "ok", "tensor_parallel": deg.get("TP", ""), "pipeline_parallel": deg.get("PP", ""),
        "context_parallel": deg.get("CP", ""),
        "expert_parallel": deg.get("EP", ""),
        "tokens_per_second": number(src.tokens_per_s) if not hf else "",
        "train_samples_per_second": samples if samples is not None else "",
        "seconds_per_step": number(src.value) if src.unit == "s/step" else "",
        "mfu": float(mfu.group(1)) / 100 if mfu else "",
        "kernels": f"{src.parallelism}" + (f"; VP {deg['VP']}" if "VP" in deg else ""),
        "notes": f"{src.source_table}; {how}" + ("; PROXY MODEL (truncated layer count)" if proxy else ""),
    }
    if hf:
        row |= {"gradient_checkpointing": 1, "attention": "flash", "packing": 1, "lora_r": _lead_int(src.lora_rank),
                "lora_alpha": 16, "lora_target_modules": src.lora_targets,
                "framework_version": "transformers 4.40.0, peft 0.10.0, trl 0.8.2, accelerate 0.29.0"}
    if not hf:  # see NO_RECOMPUTE
        row |= {"gradient_checkpointing": 0, "notes": row["notes"] + f"; gradient_checkpointing 0: {NO_RECOMPUTE}"}
    if src.source_path.startswith("ft_llama3/"):  # NeMo fine-tuning recipes: packed SQuAD, LoRA on linear_qkv
        row |= {"packing": 1, "notes": row["notes"] + f"; {FT_PACKED}"}
        row |= FT_LORA if row["method"] == "lora" else {}
    extra = ([] if hf else [RECIPE]) + (["PROXY config (truncated layer count)"] if proxy else [])
    judge(row, extra)
    return row


def convert(folder: Path = EXTERNAL / SOURCE) -> list[dict[str, Any]]:
    frame = pd.read_csv(folder / FILE, dtype=str, keep_default_na=False)
    return [_row(int(i), src) for i, src in frame.iterrows()]
