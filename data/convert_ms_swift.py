"""ms-swift measured tables -> measurement rows (source folder ``ms-swift``).

What the source measures (shared/data/external/ms-swift/SOURCE.md):
- ``ms_swift_v2_benchmark_A100_memory_speed.csv``: swift 1.x/2.x benchmark on A100 (80 GB implied, variant not
  stated), ``torch.cuda.max_memory_reserved()`` of the process in GiB, samples/s over a 1000-sample run.
  "a+b" = two GPUs with ``device_map='auto'`` (naive layer split): per-GPU values, the peak is the larger one.
  run_single.py sets no truncation_strategy, so swift's default 'delete' applies (swift/llm/utils/argument.py,
  SftArguments.truncation_strategy = 'delete'; the template drops a sample longer than max_length): SOURCE.md's
  "truncation_left" is not what the script ran. Of the lengths 91..19548 (mean 3234) only samples <= max_length are
  kept, batches padded to the longest, so the memory peak is taken at max_length x batch (variable_length 0: the
  peak batch's length is known); the samples/s are of variable-length samples (no tokens/s derived).
- ``ms_swift_v2_tuner_experiments.csv``: same memory metric (swift's ``memory(GiB)`` log), qwen-7b-chat on
  ms-agent, max_length 2048: the actual sample lengths are not stated, so these rows are not scored.
- ``ms_swift_v2_sequence_parallel_chatglm3.csv``: "27G*2" = GiB per GPU x GPUs; GPU type not stated.
- ``ms_swift_megatron_vs_deepspeed_A800.csv``: s/it and memory cells ("8*64GB"); metric not stated.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
from common import EXTERNAL, judge, number, to_bytes

SOURCE = "ms-swift"
BENCH_DOC = "github.com/modelscope/ms-swift@d2b45ec8c:docs/source_en/LLM/Benchmark.md"
MEGATRON_DOC = "github.com/modelscope/ms-swift@3602360a562313afbf2ef6065fdf61f271a2c5b9:docs/source_en/Megatron-SWIFT/Quick-start.md"
VERSION = "swift 1.x/2.x; torch 2.1.1; flash_attn 2.3.4; auto_gptq 0.5.1; bitsandbytes 0.41.3.post2"
QUANT = {"bf16": ("none", ""), "bf16 (no quantization)": ("none", ""), "int4 (gptq)": ("gptq-int4", "qlora"),
         "int8 (gptq)": ("gptq-int8", "lora"), "int4 (bnb)": ("bnb-4bit", "qlora")}
TRUNCATION_NOTE = ("tokens_per_sample = max_length (swift's default truncation_strategy 'delete' drops samples longer "
                   "than max_length from the lengths 91..19548; the kept ones are padded to the longest in the batch): "
                   "the longest batch, which sets the memory peak, is at most max_length and taken at it (variable_length 0)")
TARGETS = {"DEFAULT (c_attn)": "c_attn", "ALL (all linear)": "all-linear"}
# swift's model_type -> (hub id, swift's DEFAULT LoRA targets) from its model registry at the benchmark's time
# (swift/llm/utils/model.py, swift 1.x: register_model(ModelType.x, model_id, LoRATM.y); LoRATM.qwen = c_attn,
# LoRATM.llama2 = q_proj, k_proj, v_proj, LoRATM.chatglm = query_key_value, LoRATM.baichuan = W_pack).
SWIFT_MODELS = {
    "qwen-1_8b-chat": ("Qwen/Qwen-1_8B-Chat", "c_attn"), "qwen-7b-chat": ("Qwen/Qwen-7B-Chat", "c_attn"),
    "qwen-14b-chat": ("Qwen/Qwen-14B-Chat", "c_attn"), "qwen-72b-chat": ("Qwen/Qwen-72B-Chat", "c_attn"),
    "yi-6b-chat": ("01-ai/Yi-6B-Chat", "q_proj,k_proj,v_proj"), "yi-34b-chat": ("01-ai/Yi-34B-Chat", "q_proj,k_proj,v_proj"),
    "openbuddy-zephyr-7b-chat": ("OpenBuddy/openbuddy-zephyr-7b-v14.1", "q_proj,k_proj,v_proj"),
    "chatglm3-6b": ("THUDM/chatglm3-6b", "query_key_value"),
    "baichuan2-7b-chat": ("baichuan-inc/Baichuan2-7B-Chat", "W_pack"),
    "baichuan2-13b-chat": ("baichuan-inc/Baichuan2-13B-Chat", "W_pack"),
}


def _base(file: str, index: int, upstream: str) -> dict[str, Any]:
    return {"source": SOURCE, "source_ref": f"{file}#row={index}", "campaign": f"{SOURCE}/{file}",
            "framework": "ms-swift", "upstream": upstream, "label_strength": "measured"}


def _memory(row: dict[str, Any], cell: str, unit: str, metric: str) -> None:
    """Per-GPU memory cell ("27.74", "73.71+78.54", "35.65GiB*2") -> peak bytes (largest GPU)."""
    row["memory_source_text"] = cell
    if cell.strip().upper() == "OOM":
        row["status"], row["reason"] = "oom", "OOM written in the benchmark table"
        return
    values = [to_bytes(v, unit) for v in re.findall(r"\d+(?:\.\d+)?(?=\s*(?:GiB|GB|G)?\s*(?:\+|\*|$))", cell)]
    if "*" in cell:  # "35.65GiB*2": the number after * is the GPU count
        values = [to_bytes(re.match(r"\s*(\d+(?:\.\d+)?)", cell.split("*")[0]).group(1), unit)]  # type: ignore[union-attr]
    row["peak_memory_bytes"] = max(values)
    row["memory_metric"] = metric
    if metric == "torch_reserved":
        row["torch_reserved_bytes"] = max(values)


def benchmark(folder: Path) -> list[dict[str, Any]]:
    file = "ms_swift_v2_benchmark_A100_memory_speed.csv"
    rows = []
    first_of: dict[tuple[str, ...], str] = {}  # the doc repeats its default run in several tables
    for i, src in pd.read_csv(folder / file, dtype=str).iterrows():
        memory_cell = src["GPU Memory (GiB)"]
        same_run = (src.model_type_cell.replace("(2*A100)", "").strip(), src.sft_type, QUANT[src.eff_quantization][0],
                    str(number(src["Training Speed (samples/s)"])), memory_cell,
                    *src.filter(like="eff_").drop("eff_quantization").fillna("").astype(str))
        duplicate_of = first_of.setdefault(same_run, f"{file}#row={i}")
        two_gpus = "+" in memory_cell or "2*A100" in src["model_type_cell"] + src["Training Speed (samples/s)"]
        quant, qmethod = QUANT[src.eff_quantization]
        method = src.sft_type if src.sft_type == "full" else (qmethod or "lora")
        model = src.model_type_cell.replace("(2*A100)", "").strip()
        batch, accum = int(src.eff_batch_size), int(src.eff_gradient_accumulation_steps)
        row = _base(file, int(i), BENCH_DOC) | {
            "gpu_model": "A100-80GB", "gpu_variant_stated": 0, "number_gpus": 2 if two_gpus else 1, "number_nodes": 1,
            "model_name": model, "model_hf_id": SWIFT_MODELS.get(model, ("", ""))[0],
            "method": method, "tokens_per_sample": int(src.eff_max_length), "variable_length": 0,
            "batch_size": batch * accum, "per_device_batch_size": batch, "gradient_accumulation_steps": accum,
            "dtype": "bf16", "amp": "bf16", "strategy": "device-map" if two_gpus else "ddp",
            "gradient_checkpointing": int(src.eff_gradient_checkpointing == "true"),
            "attention": "flash" if src.eff_use_flash_attn == "true" else "eager", "fused_loss": 0, "packing": 0,
            "status": "ok", "optimizer": "adamw", "quantization": quant, "framework_version": VERSION,
            "train_samples_per_second": number(src["Training Speed (samples/s)"]),
            "kernels": src.section + ": " + src.varied_cells,
        }
        notes = [TRUNCATION_NOTE, "samples/s of variable-length samples"]
        if method != "full":
            row["lora_r"], row["lora_alpha"] = int(src.eff_lora_rank), 32
            target = src.eff_lora_target_modules
            row["lora_target_modules"] = TARGETS.get(target) or SWIFT_MODELS.get(model, ("", ""))[1]
            if target not in TARGETS:
                notes.append(f"lora targets = swift's DEFAULT for {model} (its model registry, not the table)"
                             if row["lora_target_modules"] else f"lora targets = swift DEFAULT for {model} (not known)")
        _memory(row, memory_cell, "GiB", "torch_reserved")
        row["notes"] = ";".join(notes)
        extra = ["device_map='auto' layer split over 2 GPUs (naive model parallel)"] if two_gpus else []
        if duplicate_of != row["source_ref"]:
            row["duplicate_of"] = duplicate_of
            extra.append("same run repeated in another table of the doc (duplicate_of)")
        if quant == "gptq-int8":
            extra.append("8-bit GPTQ base not in the job schema")
        judge(row, extra)
        rows.append(row)
    return rows


def tuners(folder: Path) -> list[dict[str, Any]]:
    file = "ms_swift_v2_tuner_experiments.csv"
    rows = []
    for i, src in pd.read_csv(folder / file, dtype=str, keep_default_na=False).iterrows():
        params = dict(p.split("=", 1) for p in src.tuner_params.split("/") if "=" in p)
        name = src.exp_name
        ngpu = 2 if "ddp" in name or "*2" in src.memory else 1
        method = {"full": "full", "lora": "lora"}.get(src.tuner, src.tuner or "none")
        if src.section == "unsloth":
            method = "qlora"
        if "galore" in name or "lisa" in name:
            method = "full+" + ("galore" if "galore" in name else "lisa")
        quant = {"unsloth": "bnb-4bit", "AWQ": "awq-int4", "AQLM": "aqlm-2bit"}.get(src.section, "none")
        speed = number(src["train speed(samples/s)"])
        row = _base(file, int(i), BENCH_DOC) | {
            "gpu_model": "A100-80GB", "gpu_variant_stated": 0, "number_gpus": ngpu, "number_nodes": 1,
            "model_name": src.model_type, "method": method, "variable_length": 1,
            "per_device_batch_size": 1, "gradient_accumulation_steps": 16, "batch_size": 16 * ngpu,
            "dtype": "bf16", "amp": "bf16", "strategy": "ddp", "packing": int(params.get("packing") == "True"),
            "gradient_checkpointing": int(src.gradient_checkpointing == "True"),
            "attention": "flash" if src.flash_attn == "True" else "", "fused_loss": 0,
            "kernels": f"{src.section}: {name}; {src.tuner_params}".rstrip("; "),
            "lora_r": params.get("rank", ""), "lora_alpha": params.get("alpha", ""),
            "lora_target_modules": "all-linear" if params.get("target") == "ALL" else "",
            "dora": int(params.get("use_dora") == "True") if params else "", "quantization": quant,
            "status": "ok" if src.memory not in ("", "None") else "", "train_samples_per_second": speed,
            "notes": "max_length 2048 on ms-agent (variable length, longest sample not stated); "
                     "speed = samples / seconds of the whole 2-epoch run",
        }
        if src.memory not in ("", "None"):
            _memory(row, src.memory.replace("GiB", ""), "GiB", "torch_reserved")
        judge(row, [] if src.memory not in ("", "None") else ["evaluation-only row (no training)"])
        rows.append(row)
    return rows


def sequence_parallel(folder: Path) -> list[dict[str, Any]]:
    file = "ms_swift_v2_sequence_parallel_chatglm3.csv"
    rows = []
    for i, src in pd.read_csv(folder / file, dtype=str).iterrows():
        gpus, sp = (int(x) for x in re.findall(r"gpu=(\d+)/sequence_parallel_size=(\d+)", src["Hyper params"])[0])
        row = _base(file, int(i), BENCH_DOC) | {
            "gpu_model": "", "number_gpus": gpus, "number_nodes": 1, "model_name": src.Model,
            "variable_length": 1, "status": "ok", "sequence_parallel": sp, "kernels": src["Hyper params"],
            "notes": f"dataset {src.Dataset}; speed {src['Train speed']}; total steps {src['Total steps']}",
        }
        _memory(row, src["Gpu memory"].replace("G", ""), "GiB", "torch_reserved")
        judge(row, ["tuning method, batch size and sequence length of the runs not stated"])
        rows.append(row)
    return rows


def megatron_vs_deepspeed(folder: Path) -> list[dict[str, Any]]:
    file = "ms_swift_megatron_vs_deepspeed_A800.csv"
    table = pd.read_csv(folder / file, dtype=str)
    rows = []
    for i, src in table.iterrows():
        if src.metric != "GPU Memory Usage":
            continue
        speed = table[(table.model == src.model) & (table.metric == "Training Speed")].iloc[0]
        dense = "14B" in src.model
        ngpu = 8 if dense else 16
        for stack in ("Megatron-LM", "Deepspeed-ZeRO2", "Deepspeed-ZeRO3"):
            mega = stack == "Megatron-LM"
            cell = src[stack].replace("\\", "")
            row = _base(file, int(i), MEGATRON_DOC) | {
                "source_ref": f"{file}#row={i}&column={stack}", "gpu_model": "A800-80GB", "gpu_variant_stated": 0,
                "number_gpus": ngpu, "number_nodes": 1 if dense else 2,
                "model_name": src.model.split(" (")[0], "model_hf_id": "Qwen/" + src.model.split(" (")[0],
                "method": "full", "tokens_per_sample": 8192, "packing": 1, "dtype": "bf16",
                "strategy": "megatron" if mega else "zero" + stack[-1],
                "tensor_parallel": 4 if mega and dense else "", "sequence_parallel": "",
                "pipeline_parallel": 2 if mega and not dense else "", "expert_parallel": 8 if mega and not dense else "",
                "status": "ok", "seconds_per_step": number(speed[stack].replace("s/it", "")),
                "kernels": ("megatron-core " if mega else "deepspeed ") + stack, "notes": src.setup,
            }
            if dense:
                row |= {"per_device_batch_size": 1, "gradient_accumulation_steps": "" if mega else 2,
                        "batch_size": 16}
            if cell.strip() == "OOM":
                row["status"], row["memory_source_text"] = "oom", cell
                row["reason"] = "OOM written in the benchmark table"
            elif cell.strip() != "-":
                unit = "GiB" if "GiB" in cell else "GB"
                row["memory_source_text"] = cell
                row["peak_memory_bytes"] = to_bytes(re.search(r"\*\s*(\d+(?:\.\d+)?)", cell).group(1), unit)  # type: ignore[union-attr]
                row["memory_metric"] = "stated"
            extra = ["Megatron TP/PP/EP layout"] if mega else []
            if not dense:
                extra.append("MoE setup (batch and layout in examples/megatron/moe/qwen3_moe.sh, not copied)")
            judge(row, extra)
            rows.append(row)
    return rows


def convert(folder: Path = EXTERNAL / SOURCE) -> list[dict[str, Any]]:
    return benchmark(folder) + tuners(folder) + sequence_parallel(folder) + megatron_vs_deepspeed(folder)
