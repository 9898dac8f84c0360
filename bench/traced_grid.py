"""The traced grid: theory against traces over families, methods, strategies, world sizes and stacks.

    python bench/traced_grid.py [--part single|ranks|stacks|all] [--limit N]

Writes docs/traced_grid.md. Every configuration is answered twice, by the theory and by the traced
estimator (a real training step on fake CPU tensors: the HF Trainer step, a rank on a fake process group,
or a stack's own code). Single-GPU configurations share exact per-op fits (one trace per micro-batch regime
gives every sequence length, autoconf/estimators/traced/fit.py); ranks and stacks are one trace each.
Results are kept in ``$AUTOCONF_CACHE/grid.json`` (with the traces in ``$AUTOCONF_CACHE/traced``), so an
interrupted run resumes and a finished one only re-renders. A configuration the trace refuses or fails on
is listed with its reason: that is a finding too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.catalog import get_architecture  # noqa: E402
from autoconf.errors import AutoconfError  # noqa: E402
from autoconf.estimators.contract import get_estimator  # noqa: E402
from autoconf.estimators.theory.memory import micro_batch  # noqa: E402
from autoconf.estimators.traced.cache import cache_dir  # noqa: E402
from autoconf.schema import GIB, Job, MemoryEstimate, Placement  # noqa: E402
from bench._report import ROOT  # noqa: E402
from bench.grid_report import render  # noqa: E402

REPORT = ROOT / "docs" / "traced_grid.md"
GPU = "NVIDIA-H100-80GB-HBM3"
# One or two small members per model type (trace time grows with layers × ops, not with parameter count),
# covering dense decoders, MoE, MLA, hybrid Mamba and vision-language models.
SINGLE_MODELS = (
    "llama3.2-1b", "llama3.1-8b", "qwen2.5-0.5b", "qwen3-0.6b", "mistral-7b-v0.1", "granite-3.1-2b",
    "gemma-2b", "gemma-3-1b", "phi-2", "phi-3-mini-4k", "olmo-2-7b", "stablelm-2-1.6b", "starcoder2-3b",
    "aya-23-8b", "falcon-7b", "pythia-160m", "gpt2", "mpt-125m", "santacoder", "gpt-j-6b",
    "granite-3.0-1b-a400m", "qwen1.5-moe-a2.7b", "qwen3-30b-a3b", "deepseek-v2-lite", "granite-4.0-h-350m",
    "llava-1.5-7b", "qwen2-vl-2b", "llama3.2-11b-vision",
)
QLORA_MODELS = ("llama3.2-1b", "llama3.1-8b", "qwen2.5-0.5b", "mistral-7b-v0.1", "granite-3.1-2b", "qwen3-0.6b")
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
BATCHES = (1, 2, 4)
RANK_MODELS = ("llama3.2-1b", "llama3.1-8b", "qwen2.5-7b")
WORLDS = (2, 4, 8, 16, 32, 64)
STACK_MODEL = "llama3.2-1b"


def single_grid() -> Iterator[tuple[Job, Placement]]:
    placement = Placement(gpu_model=GPU)
    methods = [(m, "full") for m in SINGLE_MODELS] + [(m, "lora") for m in SINGLE_MODELS]
    methods += [(m, "qlora") for m in QLORA_MODELS]
    for (model, method), gc, batch, seq in itertools.product(methods, (False, True), BATCHES, SEQS):
        yield Job(model=model, method=method, tokens_per_sample=seq, batch_size=batch,
                  gradient_checkpointing=gc, optimizer_impl="fused"), placement


def rank_grid() -> Iterator[tuple[Job, Placement]]:
    for model, method, world in itertools.product(RANK_MODELS, ("full", "lora"), WORLDS):
        job = Job(model=model, method=method, tokens_per_sample=2048, batch_size=world, gradient_checkpointing=True,
                  optimizer_impl="fused")
        yield job, Placement(gpu_model=GPU, number_gpus=world, strategy="fsdp")
    for model, world in itertools.product(RANK_MODELS, (2, 4, 8)):
        job = Job(model=model, method="lora", tokens_per_sample=2048, batch_size=world, gradient_checkpointing=True,
                  optimizer_impl="fused")
        yield job, Placement(gpu_model=GPU, number_gpus=world, strategy="ddp")
        yield job, Placement(gpu_model=GPU, number_gpus=world, tp=2 if world > 2 else world, strategy="fsdp")


def stack_grid() -> Iterator[tuple[Job, Placement]]:
    one, four = Placement(gpu_model=GPU), Placement(gpu_model=GPU, number_gpus=4, strategy="fsdp")
    for framework, method in itertools.product(("torchtune", "trl"), ("full", "lora", "qlora")):
        for placement in (one, four):
            yield Job(model=STACK_MODEL, method=method, framework=framework, tokens_per_sample=2048, batch_size=4,
                      gradient_checkpointing=True), placement
    for stage in ("zero1", "zero2", "zero3"):
        yield Job(model=STACK_MODEL, method="full", framework="deepspeed", tokens_per_sample=2048, batch_size=4,
                  gradient_checkpointing=True), Placement(gpu_model=GPU, number_gpus=4, strategy=stage)
    for placement in (one, four):
        yield Job(model=STACK_MODEL, method="full", framework="torchtitan", tokens_per_sample=2048, batch_size=4,
                  gradient_checkpointing=True), placement


PARTS = {"single": single_grid, "ranks": rank_grid, "stacks": stack_grid}
FIELDS = ("weights", "gradients", "optimizer", "activations", "logits")


def summary(memory: MemoryEstimate) -> dict[str, object]:
    out: dict[str, object] = {f: getattr(memory, f"{f}_bytes") / GIB for f in FIELDS}
    out.update(allocated=memory.allocated_bytes / GIB, reserved=memory.reserved_bytes / GIB,
               device=memory.peak_bytes / GIB, phase=memory.peak_phase)
    return out


def key(part: str, job: Job, placement: Placement) -> str:
    return f"{part}|{job.model_dump_json()}|{placement.model_dump_json()}"


FAILED: dict[tuple[object, ...], str] = {}  # a single-GPU fit that failed fails every shape of its regime


def answer(part: str, job: Job, placement: Placement) -> dict[str, object]:
    arch = get_architecture(job.model)
    row: dict[str, object] = {
        "part": part, "model": job.model, "model_type": arch.model_type, "moe": arch.is_moe,
        "vision": arch.vision is not None, "method": job.method, "gc": job.gradient_checkpointing,
        "batch": micro_batch(job, placement), "seq": job.tokens_per_sample, "framework": job.framework,
        "gpus": placement.number_gpus, "tp": placement.tp, "strategy": placement.effective_strategy,
    }
    row["theory"] = summary(get_estimator("theory").estimate(job, placement).memory)
    fit = (job.model, job.method, job.gradient_checkpointing, int(str(row["batch"])) > 1)
    if part == "single" and fit in FAILED:
        row["failed"] = FAILED[fit]
        return row
    try:
        traced = get_estimator("traced").estimate(job, placement).memory
    except AutoconfError as exc:
        row["refused"] = str(exc)
        return row
    fallback = [n for n in traced.notes if "theory estimate" in n or "own code not run" in n]
    if fallback:
        row["failed"] = FAILED[fit] = fallback[0]
        return row
    row["traced"] = summary(traced)
    row["notes"] = [n for n in traced.notes if n.startswith("traced")][:2]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=(*PARTS, "all"), default="all")
    parser.add_argument("--limit", type=int, default=0, help="answer at most N new configurations, then render")
    parser.add_argument("--render", action="store_true", help="only re-render docs/traced_grid.md from grid.json")
    parser.add_argument("--retry", action="store_true", help="answer again what was refused or failed")
    parser.add_argument("--also", nargs="*", default=[], help="other grid.json files to render with this one (parts "
                        "run in parallel under another AUTOCONF_CACHE)")
    args = parser.parse_args(argv)
    store = cache_dir().parent / "grid.json"
    results: dict[str, dict[str, object]] = json.loads(store.read_text()) if store.exists() else {}
    if args.retry:
        results = {k: row for k, row in results.items() if "traced" in row}
    start, new = time.perf_counter(), 0
    parts = PARTS if args.part == "all" else {args.part: PARTS[args.part]}
    for part, grid in ([] if args.render else parts.items()):
        for job, placement in grid():
            k = key(part, job, placement)
            if k in results:
                continue
            results[k] = answer(part, job, placement)
            new += 1
            if new % 20 == 0 or part != "single":
                store.write_text(json.dumps(results))
                print(f"{len(results)} answered ({new} new, {time.perf_counter() - start:.0f} s)", flush=True)
            if args.limit and new >= args.limit:
                break
    store.write_text(json.dumps(results))
    for other in args.also:
        results.update({k: v for k, v in json.loads(Path(other).read_text()).items() if k not in results})
    for k, row in results.items():  # the theory of the code as it is now (a trace is kept until its inputs change)
        _, job_json, placement_json = k.split("|")
        row["theory"] = summary(get_estimator("theory").estimate(Job.model_validate_json(job_json),
                                                                 Placement.model_validate_json(placement_json)).memory)
    REPORT.write_text(render(list(results.values())), encoding="utf-8")
    print(f"wrote {REPORT}: {len(results)} configurations ({new} new in {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
