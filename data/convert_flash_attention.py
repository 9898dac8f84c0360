"""FlashAttention repository's GPT-3 training-speed table -> measurement rows (source ``flash-attention-training``).

What the source measures (shared/data/external/flash-attention-training/SOURCE.md): whole-node tokens/s of
GPT-3-shaped 125M-2.7B pre-training on one node of 8 x A100-SXM4-80GB (NVLink), sequence length 2,048, bf16,
no activation checkpointing, FlashAttention plus fused MLP / dropout-add-LayerNorm / cross-entropy / rotary
kernels, PyTorch Lightning DDP. Global batch 0.5M or 1M tokens (2^19 / 2^20: 256 / 512 sequences of 2,048);
the per-device micro-batch is only in the experiment configs (not read), so the rows are unscored.
The GPT-3 shapes are not catalogued: the rows keep the printed model name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
from common import EXTERNAL, judge

SOURCE = "flash-attention-training"
FILE = "flash_attention_gpt3_training_speed_8xA100.csv"


def _thousands(text: str) -> float:
    """ "1310k" -> 1310000."""
    found = re.fullmatch(r"([\d.]+)k", text.strip())
    return float(found.group(1)) * 1000 if found else float(text)


def _row(i: int, src: pd.Series) -> dict[str, Any]:
    tokens = re.search(r"global batch size \(tokens\) ([\d.]+)M", src.notes)
    batch = int(float(tokens.group(1)) * 2**20) // 2048 if tokens else ""
    row: dict[str, Any] = {
        "source": SOURCE, "source_ref": f"{FILE}#row={i}", "campaign": f"{SOURCE}/{src.source_path}",
        "upstream": f"github.com/{src.source_repo}@{src.source_commit.split(' ')[0]}:{src.source_path}",
        "framework": "flash-attention", "label_strength": "measured", "gpu_model": "NVIDIA-A100-SXM4-80GB",
        "gpu_variant_stated": 1, "number_gpus": 8, "number_nodes": 1,
        "model_name": "gpt3-" + src.model.split(" ")[0].split("-")[1].lower(), "method": "full",
        "tokens_per_sample": 2048, "variable_length": 0, "batch_size": batch, "dtype": "bf16", "strategy": "ddp",
        "gradient_checkpointing": 0, "attention": "flash", "status": "ok",
        "kernels": "FlashAttention; fused MLP, dropout-add-LayerNorm, cross-entropy, rotary",
        "tokens_per_second": _thousands(src.tokens_per_s),
        "notes": f"{src.source_table}; {src.other_throughput}; {src.notes}; global batch = tokens / 2048",
    }
    judge(row, [])
    return row


def convert(folder: Path = EXTERNAL / SOURCE) -> list[dict[str, Any]]:
    frame = pd.read_csv(folder / FILE, dtype=str, keep_default_na=False)
    return [_row(int(i), src) for i, src in frame.iterrows()]
