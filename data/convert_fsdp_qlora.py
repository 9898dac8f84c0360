"""Answer.AI fsdp_qlora benchmarks and max-batch probe scripts -> measurement rows (source ``fsdp-qlora``).

What the source measures (shared/data/external/fsdp-qlora/SOURCE.md):
- ``fsdp_qlora_benchmarks_03_2024.csv``: fsdp_qlora's own ``train.py`` (FSDP1, HF model, custom LoRA/QLoRA
  wrapping, bnb 4-bit), gradient checkpointing on, bf16, AdamW, LoRA r 64 / alpha 16 on the six "all" targets,
  FSDP FULL_SHARD unless DDP=True (= FSDP NO_SHARD, a full replica per GPU like DDP). "Peak Memory (GiB)" is
  ``torch.cuda.max_memory_reserved`` per GPU. Time (s) is the wall time of the whole run (dataset size not
  stated per table, so no tokens/s). The cloud table has time only (runs that fit).
- ``fsdp_qlora_max_batch_probe_scripts.csv``: one ``train.py`` command per row, 1 fwd-bwd step at context 256,
  with the comment above it. Outcomes come from the comments only: "Fine." and remarks about a run = it ran
  (``ok``); "OOM" = GPU out of memory; "OOM on cpu" / SIGKILL = host RAM failure (``failed``). A command
  without an outcome comment gets no status. No memory numbers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
from common import EXTERNAL, judge, number, to_bytes

SOURCE = "fsdp-qlora"
UPSTREAM = "github.com/AnswerDotAI/fsdp_qlora@05ed9f2a60f96a0795cb082bceab70a9b19fd213:"
GPUS = {  # source spelling -> (ado-style name, variant stated)
    "3090": ("NVIDIA-GeForce-RTX-3090", 1), "4090": ("NVIDIA-GeForce-RTX-4090", 1),
    "A5000 24GB": ("NVIDIA-RTX-A5000", 1), "A6000 Ada 48GB": ("NVIDIA-RTX-6000-Ada", 1),
    "A100 40GB SMX": ("NVIDIA-A100-SXM4-40GB", 1), "H100 80GB SXM": ("NVIDIA-H100-80GB-HBM3", 1),
    "2xA5000": ("NVIDIA-RTX-A5000", 1), "4xA5000": ("NVIDIA-RTX-A5000", 1), "A6000 (48GB)": ("NVIDIA-RTX-A6000", 1),
}
# The blog tables name models in prose; train.py loads a hub id (the tables do not say which): the Llama-2 and
# Yi ids are train.py's / the model makers' own repositories; Mistral's v0.2 base has no mistralai/ repository,
# mistral-community/Mistral-7B-v0.2 is its hub conversion (autoconf/catalog/configs).
BLOG_MODELS = {
    "Llama-2 7B": "meta-llama/Llama-2-7b-hf", "Llama-2 70B": "meta-llama/Llama-2-70b-hf", "Yi 34B": "01-ai/Yi-34B",
    "Mistral 7B v0.2 Base": "mistral-community/Mistral-7B-v0.2",
}
# train.py's LoRA defaults at every revision the rows name (299f51a 2024-01-26 ... 05ed9f2 2024-06-13): lora_rank 64,
# lora_alpha 16, and lora_target_modules "all", which main() expands to these six (no o_proj); train.py's own
# custom_qlora / DoRA layers wrap the same names. The blog's "all linear layers" is this list.
LORA = {"lora_r": 64, "lora_alpha": 16,
        "lora_target_modules": "k_proj,q_proj,v_proj,up_proj,down_proj,gate_proj"}
METHOD = {"LoRA": "lora", "QLoRA": "qlora", "lora": "lora", "qlora": "qlora", "custom_qlora": "qlora"}


def _flag(value: Any) -> bool:
    return str(value).strip() == "True"


def benchmarks(folder: Path) -> list[dict[str, Any]]:
    file = "fsdp_qlora_benchmarks_03_2024.csv"
    rows = []
    for i, src in pd.read_csv(folder / file, dtype=str, keep_default_na=False).iterrows():
        cloud = src.Accelerator != ""
        key = src.Accelerator if cloud else ("3090" if "3090" in src.section else "4090")
        gpu, stated = GPUS[key]
        ngpu = int(src.GPUs) if cloud else 2
        caption = src.caption
        stated_context = re.search(r"Context Length of ([\d,]+)", caption)
        context = number(src["Context Length"]) or number(stated_context.group(1) if stated_context else None)
        if context is None:
            raise ValueError(f"{file} row {i}: no context length in the row or its caption")
        batch = int(number(src["Batch Size"]) or (1 if "batch size of one" in caption else 0)) or ""
        model = re.match(r"(Llama-2 7B|Llama-2 70B|Yi 34B|Mistral 7B v0.2 Base)", caption).group(1)  # type: ignore[union-attr]
        method = METHOD.get(src["Train Type"], "qlora" if "QLoRA" in caption else "")
        ddp = _flag(src.DDP)
        offload = _flag(src["CPU Offload"]) or (cloud and _flag(src["CPU+Activation Offload"]))
        row: dict[str, Any] = {
            "source": SOURCE, "source_ref": f"{file}#row={i}", "campaign": f"{SOURCE}/{file}",
            "upstream": UPSTREAM + "benchmarks_03_2024.md", "framework": "fsdp-qlora", "label_strength": "measured",
            "gpu_model": gpu, "gpu_variant_stated": stated, "number_gpus": ngpu, "number_nodes": 1,
            "model_name": BLOG_MODELS[model].split("/")[-1], "model_hf_id": BLOG_MODELS[model], "method": method,
            "tokens_per_sample": int(context), "variable_length": 0,
            "per_device_batch_size": batch, "gradient_accumulation_steps": 1 if batch else "",
            "batch_size": batch * ngpu if batch else "", "dtype": "bf16", "strategy": "ddp" if ddp else "fsdp",
            "gradient_checkpointing": 1, "fused_loss": 0, "packing": 0, **LORA, "optimizer": "adamw", "status": "ok",
            "quantization": "bnb-4bit" if method == "qlora" else "none",
            "offload": ("params+activations" if cloud and _flag(src["CPU+Activation Offload"])
                        else "optimizer+params" if offload else "none"),
            "train_runtime_s": number(src["Time (s)"]),
            "kernels": f"{src.section} / {src.subsection} / {caption}".replace(" /  / ", " / "),
            "notes": f"model '{model}' in the blog (hub id inferred, not stated);"
                     + ("DDP=True is FSDP NO_SHARD (full replica per GPU);" if ddp else "")
                     + "gradient_accumulation_steps=1 assumed from train.py defaults;"
                     + "train_runtime_s = wall time of the whole run (dataset size not stated)",
        }
        if src["Peak Memory (GiB)"]:
            bytes_ = to_bytes(src["Peak Memory (GiB)"], "GiB")
            row |= {"peak_memory_bytes": bytes_, "torch_reserved_bytes": bytes_, "memory_metric": "torch_reserved",
                    "memory_source_text": src["Peak Memory (GiB)"] + " GiB"}
        judge(row, [])
        rows.append(row)
    return rows


def outcome(comment: str, commented_out: bool, search_block: bool) -> tuple[str, str]:
    """(status, label_strength) from the comment lines above a probe command.

    ``search_block``: the 2x A5000 block whose header says each command finds the max batch size; a bare
    command there ran (weakly ``ok``). Elsewhere a bare command has no stated outcome.
    """
    text = comment.lower()
    if "oom on cpu" in text or "sigkil" in text:
        return "failed", "measured"
    if "oom" in text:
        return "oom", "measured"
    if commented_out or any(k in text for k in ("not possible", "ignore now", "not needed", "# 4 x a6000",
                                                 "# try with")):
        return "", "stated"
    if text in ("", "nan"):
        return ("ok" if search_block else ""), "stated"
    return "ok", "measured"  # "# Fine." and remarks about a run that went through


def probes(folder: Path) -> list[dict[str, Any]]:
    file = "fsdp_qlora_max_batch_probe_scripts.csv"
    rows = []
    for i, src in pd.read_csv(folder / file, dtype=str, keep_default_na=False).iterrows():
        hardware = src.hardware_context
        key = "A6000 (48GB)" if "A6000" in hardware else ("4xA5000" if "4xA5000" in hardware else "2xA5000")
        gpu, stated = GPUS[key]
        ngpu = int(re.search(r"(\d+)\s*x\s*A\d", hardware).group(1))  # type: ignore[union-attr]
        status, strength = outcome(src.preceding_comments, _flag(src.command_commented_out),
                                   hardware.startswith("# Run for 1 fwd-bwd step"))
        method = METHOD[src.train_type]
        batch = int(src.batch_size)
        row: dict[str, Any] = {
            "source": SOURCE, "source_ref": f"{file}#row={i}", "campaign": f"{SOURCE}/{file}",
            "upstream": UPSTREAM + f"{src.script} line {src.line}", "framework": "fsdp-qlora",
            "label_strength": strength, "gpu_model": gpu, "gpu_variant_stated": stated, "number_gpus": ngpu,
            "number_nodes": 1, "model_name": src.model_name.split("/")[-1], "model_hf_id": src.model_name,
            "method": method, "tokens_per_sample": int(src.context_length), "variable_length": 0,
            "per_device_batch_size": batch, "batch_size": batch * ngpu, "gradient_accumulation_steps": 1,
            "dtype": "bf16", "strategy": "ddp" if _flag(src.use_ddp) else "fsdp",
            "gradient_checkpointing": int(_flag(src.use_gradient_checkpointing)), "fused_loss": 0, "packing": 0,
            **LORA, "quantization": "bnb-4bit" if method == "qlora" else "none",
            "offload": "optimizer+params" if _flag(src.use_cpu_offload) else "none", "status": status,
            "reason": src.preceding_comments if status in ("oom", "failed") else "",
            "kernels": f"train_type={src.train_type}" + (";low_memory" if _flag(src.low_memory) else ""),
            "notes": ";".join(p for p in (f"comment: {src.preceding_comments}" if src.preceding_comments else "",
                                          "command commented out" if _flag(src.command_commented_out) else "",
                                          "1 fwd-bwd step; LoRA rank, alpha and targets = train.py defaults (not stated)")
                              if p),
        }
        extra = []
        if status == "failed":
            extra.append("host RAM failure, not GPU memory")
        if status == "oom" and "extra memory in gpu" in src.preceding_comments.lower():
            # the author puts the OOM on memory that is not the job's ("There is some extra memory in gpu:0");
            # the same command as custom_qlora (small_gpu_benchmarking.sh line 76) is "Fine"
            extra.append("OOM its author attributes to memory outside the job (extra memory on a GPU)")
        if status == "" and strength == "stated":
            extra.append("run outcome not stated")
        judge(row, extra)
        rows.append(row)
    return rows


def convert(folder: Path = EXTERNAL / SOURCE) -> list[dict[str, Any]]:
    return benchmarks(folder) + probes(folder)
