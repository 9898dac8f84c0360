"""llm-foundry MPT training throughput tables -> measurement rows (source ``llm-foundry``).

What the source measures (shared/data/external/llm-foundry/SOURCE.md): MPT pre-training (all parameters
trained) with Composer + PyTorch FSDP1 on the MosaicML platform, ~12 steps per run, fixed-length sequences.
Columns as written: tokens/s for the whole job and per GPU, samples/s, MFU / HFU (%), model TFLOP/s per GPU.
No memory and no OOM; micro-batch sizes were hand-picked (they fit, but are not a stated maximum).
GPU variants are not stated ("h100_80gb", "a100_80gb", "a100_40gb": SXM assumed, see GPUS); the node count is
not stated either (8 GPUs per node assumed by the estimator's default).
``amp_bf16`` = fp32 weights with bf16 autocast (dtype fp32, amp bf16); ``bf16`` with MP mode PURE = bf16.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from common import EXTERNAL, judge, number

SOURCE = "llm-foundry"
FILE = "llmfoundry_mpt_train_benchmarks.csv"
UPSTREAM = "github.com/mosaicml/llm-foundry@8c8dd48f72168c5d51e2f7b151595892a8fba43d:scripts/train/benchmarking/README.md"
# The variant is not stated. The A100 sections run 8-GPU nodes with "1600 Gbps node-node interconnect (RoCE)"
# (8 x 200 Gbps, one NIC per GPU: the HGX/DGX baseboard layout, whose GPUs are SXM with NVLink), so the SXM
# parts are assumed; for H100 the catalogue's plain "H100" alias (the SXM part) is followed. gpu_variant_stated
# stays 0.
GPUS = {"h100_80gb": "NVIDIA-H100-80GB-HBM3", "a100_80gb": "NVIDIA-A100-SXM4-80GB", "a100_40gb": "NVIDIA-A100-SXM4-40GB"}
STRATEGY = {"FULL_SHARD": "fsdp", "SHARD_GRAD_OP": "fsdp-shard-grad-op"}
# The attention kernel (MPT ``attn_config.attn_impl``) each table ran, from the scripts that made the tables at
# 5e85bd62d: sweep.sh (every section but "Large Scale") passes no --attn_impl, so submit_benchmarks.py's default
# 'triton' applies (llm-foundry's FlashAttention-in-Triton kernel, llmfoundry/models/layers/flash_attn_triton.py);
# sweep.py (the "Large Scale" section) passes --attn_impl flash for 1b / 3b / 7b / 70b and triton for 13b / 30b.
LARGE_SCALE_FLASH = ("1b", "3b", "7b", "70b")


def attn_impl(section: str, model: str) -> str:
    """MPT's attn_impl for a table row (see LARGE_SCALE_FLASH)."""
    return "flash" if section.startswith("H100 80GB BF16 (Large Scale") and model in LARGE_SCALE_FLASH else "triton"


def convert(folder: Path = EXTERNAL / SOURCE) -> list[dict[str, Any]]:
    rows = []
    for i, src in pd.read_csv(folder / FILE, dtype=str, keep_default_na=False).iterrows():
        ngpu = int(src["# GPUs"])
        micro, accum = int(src.MicroBatchSize), int(src.GradAccum)
        precision = src.Precision
        row: dict[str, Any] = {
            "source": SOURCE, "source_ref": f"{FILE}#row={i}", "campaign": f"{SOURCE}/{FILE}:{src.section}",
            "upstream": UPSTREAM, "framework": "llm-foundry", "label_strength": "measured",
            "gpu_model": GPUS[src.GPU], "gpu_variant_stated": 0, "number_gpus": ngpu,
            "model_name": f"mpt-{src.Model}", "method": "full", "tokens_per_sample": int(src["SeqLen (T)"]),
            "variable_length": 0, "batch_size": int(src.GlobalBatchSize), "per_device_batch_size": micro,
            "gradient_accumulation_steps": accum,
            "dtype": {"amp_bf16": "fp32", "amp_fp8": "fp32", "bf16": "bf16"}.get(precision, ""),
            "amp": {"amp_bf16": "bf16", "amp_fp8": "fp8"}.get(precision, ""),
            "strategy": STRATEGY[src["Sharding Strategy"]],
            "gradient_checkpointing": int(src["Activation Checkpointing"] == "True"), "attention": "flash",
            "packing": 0, "optimizer": "decoupled-adamw", "status": "ok", "compute_precision": precision,
            "offload": "activations" if src["Activation CPUOffload"] == "True" else "none",
            "kernels": f"FSDP mixed precision {src['MP Mode']}; attn_impl {attn_impl(src.section, src.Model)}",
            "tokens_per_second": number(src["Throughput (T/s)"]),
            "tokens_per_second_per_device": number(src["Throughput (T/s/GPU)"]),
            "train_samples_per_second": number(src["Throughput (S/s)"]),
            "model_tflops_per_device": number(src["Model TFLOP"]),
            "mfu": number(src.MFU) / 100 if number(src.MFU) is not None else "",  # type: ignore[operator]
            "hfu": number(src.HFU) / 100 if number(src.HFU) is not None else "",  # type: ignore[operator]
            "framework_version": "image mosaicml/pytorch:2.1.0_cu121-python3.10-ubuntu20.04 (sweep.sh)",
            "notes": f"pre-training from scratch; NumParams {src.NumParams}; global batch {src['GlobalBatchSize (T)']}"
                     " tokens; micro-batch hand-picked (fits, not a stated maximum)",
        }
        judge(row, [])
        rows.append(row)
    return rows
