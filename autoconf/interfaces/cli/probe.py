"""``autoconf-gpu probe``: run a few real training steps of a job (random weights) and compare estimates.

Every flag of this verb is also a key of ``autoconf-gpu measure``'s grid files (``--per-device-batch``
= ``per_device_batch``); ``add_arguments`` is the one table both use.
"""

from __future__ import annotations

import argparse
import json
import sys
import typing

from autoconf.interfaces.cli.dialect import BoolWord
from autoconf.interfaces.probe.runner import (
    PROBED_LOSS_KERNELS,
    Comparison,
    ProbeResult,
    ProbeSettings,
    compare_estimates,
    run_probe,
)
from autoconf.schema import (
    DEFAULT_LORA_TARGETS,
    GIB,
    Attention,
    DType,
    Job,
    Method,
    Optimizer,
    OptimizerImpl,
    Placement,
)

# The estimators need a GPU; on CPU the probed job is estimated for this one. Only its capacity and
# the CUDA overheads depend on the choice, and the report also shows the estimate without overheads.
CPU_REFERENCE_GPU = "NVIDIA-A100-80GB-PCIe"
MIB = 2**20
JOB_DEFAULTS = Job.model_fields  # defaults come from the schema, so probe and estimate agree


def _default(name: str) -> object:
    return JOB_DEFAULTS[name].default


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The probe's flags (= measure's grid keys, with '_' for '-')."""
    p.add_argument("--model", required=True, help="catalogue name/alias or a config.json path")
    p.add_argument("--method", choices=typing.get_args(Method), default="full")
    p.add_argument("--tokens-per-sample", type=int, required=True, help="sequence length (tokens, no padding)")
    p.add_argument("--per-device-batch", type=int, required=True, help="micro-batch of the one device")
    p.add_argument("--gradient-accumulation-steps", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--dtype", choices=typing.get_args(DType), default=_default("dtype"))
    p.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction,
                   default=_default("gradient_checkpointing"), help="full recomputation per decoder layer")
    p.add_argument("--attention", choices=typing.get_args(Attention), default="sdpa",
                   help="sdpa (default: PyTorch's flash/efficient kernels), eager, or flash (flash-attn package)")
    p.add_argument("--lora-r", type=int, default=_default("lora_r"))
    p.add_argument("--lora-alpha", type=float, default=_default("lora_alpha"))
    p.add_argument("--lora-dropout", type=float, default=_default("lora_dropout"))
    p.add_argument("--lora-target-modules", default=",".join(DEFAULT_LORA_TARGETS),
                   help="comma list or all-linear (default %(default)s)")
    p.add_argument("--optimizer", choices=typing.get_args(Optimizer), default=_default("optimizer"))
    p.add_argument("--optimizer-impl", choices=typing.get_args(OptimizerImpl), default=_default("optimizer_impl"))
    p.add_argument("--loss-kernel", choices=PROBED_LOSS_KERNELS, default="hf",
                   help="hf (transformers' loss), chunked (torchtune's algorithm) or fused-linear-ce (Liger, CUDA)")
    p.add_argument("--warmup-steps", type=int, default=1, help="untimed steps first (default %(default)s)")
    p.add_argument("--probe-steps", type=int, default=2, help="timed, measured steps (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--host-memory-limit-gib", type=float,
                   help="CPU only: fail as an OOM past this much more address space")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("probe", help="measure a few real training steps (random weights) vs the estimates")
    add_arguments(p)
    p.add_argument("--gpu-model",
                   help=f"GPU the estimators assume (default: the detected one; on CPU {CPU_REFERENCE_GPU})")
    p.add_argument("--estimators", default="theory,hybrid", help="comma list to compare (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object (job, result, estimates)")
    # the VRAM-budget CLI's `--probe true` (else argparse reads it as an abbreviation of --probe-steps)
    p.add_argument("--probe", action=BoolWord, help="accepted as the VRAM-budget CLI writes it; always probes")


def job_from_args(args: argparse.Namespace) -> Job:
    return Job(
        model=args.model, method=args.method, dtype=args.dtype, tokens_per_sample=args.tokens_per_sample,
        batch_size=args.per_device_batch * args.gradient_accumulation_steps,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        gradient_checkpointing=args.gradient_checkpointing, attention=args.attention, lora_r=args.lora_r,
        lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout, lora_target_modules=args.lora_target_modules,
        optimizer=args.optimizer, optimizer_impl=args.optimizer_impl, loss_kernel=args.loss_kernel,
    )


def settings_from_args(args: argparse.Namespace) -> ProbeSettings:
    return ProbeSettings(device=args.device, warmup_steps=args.warmup_steps, probe_steps=args.probe_steps,
                         seed=args.seed, host_memory_limit_gib=args.host_memory_limit_gib)


def run(args: argparse.Namespace) -> int:
    job, settings = job_from_args(args), settings_from_args(args)
    result = run_probe(job, settings)
    gpu = args.gpu_model or (result.gpu_model if result.device == "cuda" else CPU_REFERENCE_GPU)
    placement = Placement(gpu_model=gpu, number_gpus=1)
    names = tuple(n.strip() for n in args.estimators.split(",") if n.strip())
    comparisons = compare_estimates(job, placement, names) if names else []
    if args.json:
        payload = {"job": job.model_dump(mode="json"), "settings": settings.model_dump(mode="json"),
                   "result": result.model_dump(mode="json"),
                   "estimates": [_comparison_json(c, result) for c in comparisons]}
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        sys.stdout.write(report(job, settings, result, placement, comparisons))
    return 0 if result.status == "ok" else 1


def _comparison_json(c: Comparison, result: ProbeResult) -> dict[str, object]:
    memory = c.estimate.memory if c.estimate else None
    return {"estimator": c.estimator, "note": c.note,
            "peak_bytes": memory.peak_bytes if memory else None,
            "overhead_bytes": memory.overhead_bytes if memory else None,
            "diff_bytes": {label: diff for label, diff in c.diffs(result)}}


def _gib(value: float, signed: bool = False) -> str:
    """GiB with two decimals; MiB below 0.1 GiB, where two GiB decimals would read 0.00 (tiny CPU models)."""
    sign = "+" if signed else ""
    if abs(value) < 0.1 * GIB:
        return f"{value / MIB:{sign}.1f} MiB"
    return f"{value / GIB:{sign}.2f} GiB"


def report(job: Job, settings: ProbeSettings, result: ProbeResult, placement: Placement,
           comparisons: list[Comparison]) -> str:
    """The human report: what ran, what was measured, each estimate and its difference."""
    env = result.environment
    lines = [
        f"probe: {job.model} {job.method}, {job.dtype}, {job.tokens_per_sample} tokens x batch "
        f"{job.batch_size // job.gradient_accumulation_steps} (accumulation {job.gradient_accumulation_steps}), "
        f"gradient checkpointing {'on' if job.gradient_checkpointing else 'off'}, {result.attention_implementation}, "
        f"{job.optimizer} ({job.optimizer_impl})",
        f"device: {result.device} ({result.device_name}), torch {env.get('torch')}, "
        f"transformers {env.get('transformers')}",
        f"status: {result.status}" + (f" ({result.reason})" if result.reason else ""),
    ]
    if result.parameters is not None:
        lines.append(f"parameters: {result.parameters:,} built (catalogue {result.catalogue_parameters:,}), "
                     f"trainable {result.trainable_parameters:,}")
    if result.tokens_per_second is not None:
        lines.append(f"speed: {result.tokens_per_second:,.0f} tokens/s ({result.step_seconds:.3f} s/step, "
                     f"{settings.probe_steps} steps after {settings.warmup_steps} warmup)")
    lines.append("measured peak memory:")
    lines += [f"  {label:<12} {_gib(value)}" for label, value in result.measured()] or ["  (none)"]
    if result.notes:
        lines.append(f"  ({result.notes})")
    lines.append(f"estimates for 1 x {placement.gpu_model}:")
    for c in comparisons:
        lines += _comparison_lines(c, result)
    return "\n".join(lines) + "\n"


def _comparison_lines(c: Comparison, result: ProbeResult) -> list[str]:
    if c.estimate is None:
        return [f"  {c.estimator}: {c.note}"]
    memory = c.estimate.memory
    bare = memory.peak_bytes - memory.overhead_bytes
    lines = [f"  {c.estimator}: peak {_gib(memory.peak_bytes)} at {memory.peak_phase} "
             f"(overhead {_gib(memory.overhead_bytes)}, without it {_gib(bare)})"]
    for label, diff in c.diffs(result):
        lines.append(f"    Diff (estimate - {label}): {_gib(diff, signed=True)}")
        if label == "host_rss":  # a CPU process has no CUDA context or allocator cache
            value = dict(result.measured())[label]
            lines.append(f"    Diff (estimate without overhead - {label}): {_gib(bare - value, signed=True)}")
    throughput = c.estimate.throughput
    if throughput is not None and result.device == "cuda" and result.tokens_per_second:
        ratio = throughput.tokens_per_second / result.tokens_per_second - 1
        lines.append(f"    tokens/s: estimate {throughput.tokens_per_second:,.0f} vs measured "
                     f"{result.tokens_per_second:,.0f} ({ratio:+.1%})")
    return lines
