"""Theory vs traced ranks, per memory component, for multi-GPU placements; writes docs/traced_ranks_vs_theory.md.

    python bench/traced_ranks_vs_theory.py [--models llama3.1-8b] [--seq 2048]

Each row is one job on N GPUs answered twice: by the theory (autoconf/estimators/theory/) and by the traced
estimator, which traces rank 0 on a fake process group (autoconf/estimators/traced/dist.py: accelerate's
FSDP2 wrapping or DDP, load, two steps with clipping, full-state-dict save, caching-allocator replay).
Components are each estimator's breakdown at its own peak; allocated, reserved and device are the three
peaks. The traced values are counted bytes of the real HF + torch step; the theory's are its formulas. Rank
traces are cached (``$AUTOCONF_CACHE/traced/rank-*.json``), so a re-run only re-renders.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoconf.estimators.contract import get_estimator  # noqa: E402
from autoconf.schema import GIB, Job, MemoryEstimate, Placement  # noqa: E402

REPORT = ROOT / "docs" / "traced_ranks_vs_theory.md"
GPU = "NVIDIA-H100-80GB-HBM3"
PARTS = ("weights", "gradients", "optimizer", "activations", "logits")


def grid(models: list[str], seq: int) -> list[tuple[Job, Placement]]:
    rows = []
    for model, method, (strategy, gpus) in itertools.product(
            models, ("full", "lora"), (("fsdp", 2), ("fsdp", 4), ("fsdp", 8), ("ddp", 4))):
        if strategy == "ddp" and method == "full":
            continue  # an 8B full fine-tune replica with AdamW does not fit one 80 GB GPU
        job = Job(model=model, method=method, tokens_per_sample=seq, batch_size=gpus, gradient_checkpointing=True,
                  optimizer_impl="fused")
        rows.append((job, Placement(gpu_model=GPU, number_gpus=gpus, strategy=strategy)))
    return rows


def _gib(x: float | None) -> str:
    return "–" if x is None else f"{x / GIB:.2f}"


def _pair(traced: float, theory: float) -> str:
    return f"{traced / GIB:.2f} / {theory / GIB:.2f}"


def row(job: Job, placement: Placement, traced: MemoryEstimate, theory: MemoryEstimate) -> str:
    cells = [_pair(getattr(traced, f"{p}_bytes"), getattr(theory, f"{p}_bytes")) for p in PARTS]
    cells += [_pair(traced.allocated_bytes, theory.allocated_bytes), _pair(traced.reserved_bytes, theory.reserved_bytes),
              _pair(traced.peak_bytes, theory.peak_bytes), f"{traced.peak_phase} / {theory.peak_phase}"]
    return f"| {job.model} | {job.method} | {placement.number_gpus}× {placement.effective_strategy} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama3.1-8b")
    parser.add_argument("--seq", type=int, default=2048)
    args = parser.parse_args(argv)
    traced_est, theory_est = get_estimator("traced"), get_estimator("theory")
    start = time.perf_counter()
    lines = []
    for job, placement in grid(args.models.split(","), args.seq):
        traced = traced_est.estimate(job, placement).memory
        theory = theory_est.estimate(job, placement).memory
        if not any("rank 0 of" in n for n in traced.notes):
            raise SystemExit(f"{job.model} {placement}: not a rank trace: {traced.notes}")
        lines.append(row(job, placement, traced, theory))
        print(lines[-1], flush=True)
    text = "\n".join([
        "# Traced ranks vs theory, multi-GPU", "",
        "Regenerate: `python bench/traced_ranks_vs_theory.py`. Each cell is **traced / theory** in GiB, per GPU, "
        f"on {GPU}; bf16, SDPA, fused AdamW, gradient checkpointing, micro-batch 1 × {args.seq} per GPU, the "
        "hf-trainer stack. Components are each estimator's breakdown at its own peak (so they differ where the "
        "peaks fall in different phases); allocated = torch's max_memory_allocated, reserved = "
        "max_memory_reserved, device = nvidia-smi scale. Traced: rank 0 traced on a fake process group (FSDP2 as "
        "accelerate wraps it, or DDP), reserved from the caching-allocator replay plus cuBLAS workspaces, device "
        "adding the CUDA context and NCCL (docs/traced.md). No GPU measurement is in this table.", "",
        "| model | method | GPUs | weights | gradients | optimizer | activations | logits | allocated | reserved | "
        "device | peak phase |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *lines, "",
        f"{len(lines)} rows in {time.perf_counter() - start:.0f} s (cold traces included where the cache was empty) on "
        f"{platform.machine()}, {os.cpu_count()} shared CPU cores, Python {platform.python_version()}.",
    ])
    REPORT.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {REPORT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
