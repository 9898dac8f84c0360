"""nanotron's best layout per (model size, node count) -> measurement rows (source ``nanotron-benchmarks``).

What the source measures (shared/data/external/nanotron-benchmarks/SOURCE.md): for each cell of a sweep over
model size (1.34B-80B Llama-style) and 1-64 nodes of 8 GPUs, the fastest configuration found: DP / TP / PP, ZeRO
stage, micro-batch (MBS) and accumulation (GAS), with its MFU and per-GPU memory (GB as printed, method not
stated). No tokens/s, no GPU type, no sequence length: rows are unscored; they record which layout won
(``tensor_parallel`` / ``pipeline_parallel`` / ``strategy`` / micro-batch / accumulation) and its MFU.
ZeRO-0 is plain data parallelism (strategy ``ddp``), ZeRO-1 shards the optimizer state (``zero1``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
from common import EXTERNAL, judge, to_bytes

SOURCE = "nanotron-benchmarks"
FILE = "nanotron_best_config_mfu_memory.csv"


def _row(i: int, src: pd.Series) -> dict[str, Any]:
    deg = {k: int(v) for k, v in re.findall(r"(DP|TP|PP|ZeRO)[=-](\d+)", src.parallelism)}
    micro, accum = int(src.per_device_batch.split()[0]), int(src.grad_accum.split()[0])
    ngpu = int(src.num_gpus.split()[0])
    mfu = re.search(r"MFU ([\d.]+)", src.other_throughput)
    row: dict[str, Any] = {
        "source": SOURCE, "source_ref": f"{FILE}#row={i}", "campaign": f"{SOURCE}/{src.source_path.split(' ')[0]}",
        "upstream": f"github.com/{src.source_repo}@{src.source_commit}:docs/benchmark_summary.svg",
        "framework": "nanotron", "label_strength": "measured", "gpu_model": "", "gpu_variant_stated": 0,
        "number_gpus": ngpu, "number_nodes": ngpu // 8, "model_name": "nanotron-" + src.model.split("-")[0].lower(),
        "method": "full", "batch_size": micro * accum * deg["DP"], "per_device_batch_size": micro,
        "gradient_accumulation_steps": accum, "dtype": "bf16", "strategy": "zero1" if deg.get("ZeRO") else "ddp",
        "status": "ok", "tensor_parallel": deg["TP"], "pipeline_parallel": deg["PP"],
        "peak_memory_bytes": to_bytes(src.value, "GB"), "memory_metric": "stated",
        "mfu": float(mfu.group(1)) / 100 if mfu else "",
        "kernels": f"best configuration of the sweep: {src.parallelism}",
        "notes": f"{src.source_table[:80]}; {src.notes}",
    }
    judge(row, ["best-of-sweep layout (MFU only, no tokens/s)"])
    return row


def convert(folder: Path = EXTERNAL / SOURCE) -> list[dict[str, Any]]:
    frame = pd.read_csv(folder / FILE, dtype=str, keep_default_na=False)
    return [_row(int(i), src) for i, src in frame.iterrows()]
