"""IBM fms-fsdp pre-training throughput -> measurement rows (source ``fms-fsdp``).

What the source measures (shared/data/external/fms-fsdp/SOURCE.md): tokens/s per GPU of Llama-2-architecture
7B / 13B / 34B / 70B pre-training with PyTorch FSDP (HSDP for 7B, full shard otherwise) on 128 A100-80GB
(400 Gbps between nodes) and 96 H100 (800 Gbps), 4,096-token sequences, bf16 FSDP mixed precision (fp32
master weights: dtype fp32, amp bf16), no gradient accumulation, SDPA flash attention; README tables at several
commits (the newest with torch.compile). Whole-job tokens/s = per-GPU x GPUs. Selective activation
checkpointing (every other block) is recorded as gradient_checkpointing 1 with "selective" in ``kernels``.
Two cells that a later README version corrected are marked ``duplicate_of`` the corrected row.
The 34B has no catalogued architecture (IBM's own Llama-2-style 34B): it keeps the printed name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
from common import EXTERNAL, judge

SOURCE = "fms-fsdp"
FILE = "fms_fsdp_llama2_pretrain_throughput.csv"
MODELS = {"7b": "llama2-7b", "13b": "llama2-13b", "70b": "llama2-70b"}
# (row, the row that supersedes it): SOURCE.md "SUPERSEDED" / "corrected a day later" notes.
SUPERSEDED = {0: 1, 21: 20}


def _links(gpu: str) -> tuple[str, int]:
    """Catalogue GPU and the node-to-node link the README states for that cluster (Gbps)."""
    return ("NVIDIA-H100-80GB-HBM3", 800) if "H100" in gpu else ("NVIDIA-A100-SXM4-80GB", 400)


def _row(i: int, src: pd.Series) -> dict[str, Any]:
    ngpu = int(src.num_gpus)
    size = src.model.split()[-1]
    gpu, gbps = _links(src.gpu)
    micro = int(re.match(r"\d+", src.per_device_batch).group(0))  # type: ignore[union-attr]
    ac = src.grad_checkpointing
    compiled = "torch.compile: yes" in src.notes
    per_gpu = float(src.value)
    row: dict[str, Any] = {
        "source": SOURCE, "source_ref": f"{FILE}#row={i}",
        "campaign": f"{SOURCE}/README.md@{src.source_commit[:7]}; {gbps} Gbps node-node interconnect",
        "upstream": f"github.com/{src.source_repo}@{src.source_commit}:{src.source_path}", "framework": "fms-fsdp",
        "label_strength": "measured", "gpu_model": gpu, "gpu_variant_stated": 0, "number_gpus": ngpu,
        "number_nodes": ngpu // 8, "model_name": MODELS.get(size, f"llama2-architecture-{size}"),
        "model_hf_id": src.hf_id.split(" ")[0] if src.hf_id.startswith("meta-llama") else "",
        "method": "full", "tokens_per_sample": 4096, "variable_length": 0, "batch_size": micro * ngpu,
        "per_device_batch_size": micro, "gradient_accumulation_steps": 1, "dtype": "fp32", "amp": "bf16",
        "strategy": "fsdp-hybrid" if src.parallelism.startswith("HSDP") else "fsdp",
        "gradient_checkpointing": int(not ac.startswith("no")), "attention": "sdpa", "packing": 1,
        "optimizer": "adamw", "status": "ok", "compute_precision": "amp_bf16",
        "kernels": "; ".join(k for k in ("selective activation checkpointing" if ac.startswith("selective") else "",
                                         "torch.compile" if compiled else "") if k),
        "tokens_per_second_per_device": per_gpu, "tokens_per_second": per_gpu * ngpu,
        "duplicate_of": f"{FILE}#row={SUPERSEDED[i]}" if i in SUPERSEDED else "",
        "notes": f"{src.source_table}; pre-training from scratch; {src.notes}",
    }
    judge(row, ["copy of a later-corrected cell (duplicate_of)"] if i in SUPERSEDED else [])
    return row


def convert(folder: Path = EXTERNAL / SOURCE) -> list[dict[str, Any]]:
    frame = pd.read_csv(folder / FILE, dtype=str, keep_default_na=False)
    return [_row(int(i), src) for i, src in frame.iterrows()]
