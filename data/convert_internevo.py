"""InternEvo's training-performance document -> measurement rows (source ``internevo``).

What the source measures (shared/data/external/internevo/SOURCE.md), InternLM-7B pre-training with InternEvo:
- "Throughput Measurement" and "FLOPS Testing": tokens per GPU per second (TGS) on 8-1,024 A100-SXM4-80GB
  (8 per node, 4 x 100 Gb RoCE between nodes), tp 1/2 with ZeRO-1 sharding of the optimizer state
  (``zero1=-1``: over all data-parallel ranks; ``zero1=8`` / ``4``: within groups of 8 / 4, noted in ``kernels``).
  micro_bsz sequences of 2,048 tokens per micro-batch (packed into one buffer, attention per sequence), micro_num
  micro-batches per step: per-device batch = micro_bsz, gradient accumulation = micro_num, global batch =
  micro_bsz x micro_num x DP. Whole-job tokens/s = TGS x GPUs.
- "GPU Memory Usage Test": GB per GPU of 7B / 20B on A800 with TP / PP / FSDP; the memory metric and sequence
  length are not stated, so those rows are ``stated`` memory and unscored.
Framework ``internevo`` (no job-schema profile); flash attention is the framework default (use_flash_attn=True).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
from common import EXTERNAL, judge, to_bytes

SOURCE = "internevo"
FILE = "internevo_train_performance_A100_A800.csv"
# The campaign states the link so that autoconf.evaluation.throughput_fit.inter_node_gbps reads it.
LINK = "400 Gbps node-node interconnect (4 x 100 Gb RoCE per node, SOURCE.md)"


def _lead_int(text: str) -> int | str:
    found = re.match(r"\s*(\d+)", text)
    return int(found.group(1)) if found else ""


def _layout(text: str) -> dict[str, str]:
    return dict(re.findall(r"(zero1|tp|pp|fsdp)=(-?\w+)", text))


def _row(i: int, src: pd.Series) -> dict[str, Any]:
    ngpu, lay = int(src.num_gpus), _layout(src.parallelism)
    tp, pp = int(lay.get("tp", 1)), int(lay.get("pp", 1))
    micro, accum = _lead_int(src.per_device_batch), _lead_int(src.grad_accum)
    memory = src.unit.startswith("GB") or "Memory" in src.metric
    row: dict[str, Any] = {
        "source": SOURCE, "source_ref": f"{FILE}#row={i}",
        "campaign": f"{SOURCE}/{src.source_table}" + ("" if memory else f"; {LINK}"),
        "upstream": f"github.com/{src.source_repo}@{src.source_commit}:{src.source_path}", "framework": "internevo",
        "label_strength": "measured", "gpu_model": "A800" if "A800" in src.gpu else "NVIDIA-A100-SXM4-80GB",
        "gpu_variant_stated": 0 if "A800" in src.gpu else 1, "number_gpus": ngpu,
        "number_nodes": ngpu // 8 if not memory and ngpu % 8 == 0 else "",
        "model_name": "internlm-7b" if src.model.startswith("InternLM 7B") else "internlm-20b",
        "model_hf_id": "internlm/internlm-7b" if src.model.startswith("InternLM 7B") else "internlm/internlm-20b",
        "method": "full", "tokens_per_sample": _lead_int(src.seq_len), "variable_length": 0,
        "per_device_batch_size": micro, "gradient_accumulation_steps": accum, "dtype": "bf16",
        "strategy": "fsdp" if lay.get("fsdp") == "True" else "zero1",
        "gradient_checkpointing": int(src.grad_checkpointing.startswith("yes")), "attention": "flash",
        "packing": 1, "status": "ok", "tensor_parallel": tp, "pipeline_parallel": pp,
        "kernels": f"{src.parallelism.split(' (')[0]}; HybridZeroOptimizer",
        "notes": f"{src.source_table}; {src.notes}",
    }
    if memory:
        row |= {"peak_memory_bytes": to_bytes(src.value, "GB"), "memory_metric": "stated",
                "gpu_model": "A800", "gpu_variant_stated": 0}
    else:
        dp = ngpu // (tp * pp)
        per_gpu = float(src.value)
        row |= {"batch_size": micro * accum * dp if isinstance(micro, int) and isinstance(accum, int) else "",
                "tokens_per_second_per_device": per_gpu, "tokens_per_second": per_gpu * ngpu}
    judge(row, ["InternEvo HybridZeroOptimizer (ZeRO-1 groups) recipe"])
    return row


def convert(folder: Path = EXTERNAL / SOURCE) -> list[dict[str, Any]]:
    frame = pd.read_csv(folder / FILE, dtype=str, keep_default_na=False)
    return [_row(int(i), src) for i, src in frame.iterrows()]
