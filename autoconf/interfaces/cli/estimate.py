"""``autoconf-gpu estimate``: per-GPU memory by component; every flag of the VRAM-budget CLI, with its
spelling and meaning (see ``dialect.py`` and docs/dialects.md), beside our own.

    autoconf-gpu estimate --model meta-llama/Llama-2-7b-hf --dtype bf16 --seq-len 4096 --per-device-batch 2 \\
        --grad-accum 128 --zero 2 --dp 8 --flashattn true --grad-checkpoint true --format budget
"""

from __future__ import annotations

import argparse
import json

from autoconf import defaults
from autoconf.errors import InvalidInputError
from autoconf.estimators.contract import ESTIMATORS, Estimator, get_estimator
from autoconf.interfaces.cli.budget import format_budget, probe_block
from autoconf.interfaces.cli.dialect import (
    BoolWord,
    calibration,
    default_notes,
    method_and_dtype,
    target_modules,
    with_storage,
)
from autoconf.interfaces.cli.fromfile import ESTIMATE_FLAGS, add_from_argument, apply_to_estimate_args, describe, load
from autoconf.interfaces.cli.stack import add_job_arguments, stack_fields
from autoconf.schema import GIB, Answer, Calibration, Job, Placement, job_and_placement

ZERO_STAGES = (0, 1, 2, 3)
BOOLEANS = {  # flag -> help; None (not given) = our default, noted where the VRAM-budget CLI's differs
    "--flashattn": "flash attention (default true; false = eager, scores materialised)",
    "--grad-checkpoint": "full activation checkpointing (default true)",
    "--lora": "LoRA fine-tuning",
    "--qlora": "QLoRA (4-bit NF4 base) fine-tuning",
    "--cpu-offload-optimizer": "optimizer states in CPU RAM",
    "--cpu-offload-params": "parameters in CPU RAM too",
    "--probe": "after the estimate, run a few real steps on this machine's GPU and compare",
    "--estimate-only": "skip the probe even if --probe is set",
}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("estimate", help="per-GPU memory breakdown (and tokens/s) of one configuration")
    src = p.add_argument_group("model (one of)")
    src.add_argument("--model", help="catalogue name or alias (see `autoconf-gpu models list`)")
    src.add_argument("--config", help="path to a local Hugging Face config.json")
    src.add_argument("--params", help="bare parameter count, e.g. 7e9 or 8B (Llama-shaped stand-in)")
    add_from_argument(p)
    p.add_argument("--method", choices=("full", "lora", "qlora"), help="= --lora / --qlora (as on recommend)")
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="also note where our defaults differ from the VRAM-budget CLI's (as --format budget does)")
    p.add_argument("--gpu", default=defaults.GPU_MODEL, help="GPU name or alias (default %(default)s)")
    p.add_argument("--dtype", default=defaults.DTYPE, help="bf16 | fp16 | fp32 | amp-bf16 | amp-fp16, or the "
                   "weight-storage dtypes fp8 | int8 (LoRA over a 1-byte base) | nf4 (QLoRA)")
    p.add_argument("--seq-len", "--tokens-per-sample", type=int, help=f"tokens per sample (default {defaults.TOKENS_PER_SAMPLE})")
    p.add_argument("--per-device-batch", type=int, default=1, help="micro-batch per GPU")
    p.add_argument("--grad-accum", "--gradient-accumulation-steps", type=int, default=defaults.GRADIENT_ACCUMULATION_STEPS,
                   help="gradient accumulation steps")
    p.add_argument("--dp", type=int, default=1, help="data-parallel degree (GPUs = dp × tp × pp)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
    p.add_argument("--zero", type=int, help="DeepSpeed ZeRO stage 0-3 (default: FSDP full shard when dp > 1)")
    p.add_argument("--strategy", help="ddp | fsdp | fsdp-shard-grad-op | fsdp-hybrid | zero0..zero3")
    flags = p.add_argument_group("switches (bare, or with true/false/yes/no/on/off/1/0; --no-X = false)")
    for flag, text in BOOLEANS.items():
        flags.add_argument(flag, action=BoolWord, help=text)
    p.add_argument("--attention", help="flash | sdpa | eager (overrides --flashattn)")
    p.add_argument("--lora-rank", "--lora-r", type=int, default=defaults.LORA_R)
    p.add_argument("--lora-alpha", type=float, default=defaults.LORA_ALPHA)
    p.add_argument("--lora-dropout", type=float, default=0.0)
    p.add_argument("--lora-target-modules", nargs="+", metavar="MODULE",
                   help="space- or comma-separated names, or all-linear (default q_proj v_proj)")
    p.add_argument("--optimizer", default=defaults.OPTIMIZER, help="adamw | adamw-8bit | sgd")
    p.add_argument("--optimizer-impl", help="fused | foreach | for-loop (default: the framework's)")
    p.add_argument("--optimizer-state-dtype", default="param", help="param | fp32")
    cal = p.add_argument_group("calibration overrides (units of the VRAM-budget CLI; default: traced per model)")
    cal.add_argument("--grad-ckpt-reduction", type=float, help="activation retention ratio under checkpointing")
    cal.add_argument("--attn-act-factor-fa", type=float, help="attention bytes per token·layer·hidden, flash/sdpa")
    cal.add_argument("--attn-act-factor-no-fa", type=float, help="the same without flash attention (eager)")
    cal.add_argument("--attn-act-factor-flash", type=float, help="ours: = --attn-act-factor-fa for any attention")
    cal.add_argument("--attn-act-factor-eager", type=float, help="ours: eager s² bytes per head per key")
    cal.add_argument("--mlp-act-factor", type=float, help="MLP bytes per token·layer·hidden")
    cal.add_argument("--logits-factor", type=float, help="loss bytes per token·vocab entry (× 0.2 with fused loss)")
    cal.add_argument("--fragmentation-gib", type=float, help="allocator fragmentation, GiB")
    cal.add_argument("--misc-overhead-gib", type=float, help="CUDA context, workspaces and the rest, GiB")
    probe = p.add_argument_group("probe (needs a CUDA GPU)")
    probe.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first (default %(default)s)")
    probe.add_argument("--probe-steps", type=int, default=6, help="measured steps (default %(default)s)")
    p.add_argument("--estimator", default="theory", help=f"{' | '.join(ESTIMATORS)} (default %(default)s)")
    p.add_argument("--model-version", help="learned-model version (learned/hybrid)")
    p.add_argument("--format", choices=("table", "budget", "json"), default="table",
                   help="table (ours), budget (the VRAM-budget CLI's lines) or json")
    p.add_argument("--json", action="store_true", help="= --format json")
    p.add_argument("--plot", metavar="FILE", help="also draw the breakdown against capacity to FILE.png or .svg")
    # last: a flag per Job field not spelled above (batch and checkpointing have the VRAM-budget CLI's spellings)
    add_job_arguments(p, skip=("batch_size", "gradient_checkpointing"))


def _model(args: argparse.Namespace) -> str:
    given = [v for v in (args.model, args.config, args.params) if v]
    if len(given) != 1:
        raise InvalidInputError("model", "give exactly one of --model, --config, --params")
    return str(given[0])


def _strategy(args: argparse.Namespace) -> str | None:
    if args.zero is not None:
        if args.zero not in ZERO_STAGES:
            raise InvalidInputError("zero", f"must be one of 0, 1, 2, 3; got {args.zero}")
        return f"zero{args.zero}"
    return None if args.strategy is None else str(args.strategy)


def _attention(args: argparse.Namespace) -> str:
    if args.attention:
        return str(args.attention)
    return "eager" if args.flashattn is False else defaults.ATTENTION


def inputs_from_args(args: argparse.Namespace) -> tuple[Job, Placement, Calibration, str | None]:
    """Job, placement, calibration and the weight-storage dtype (fp8/int8/nf4, else None)."""
    method, dtype, storage = method_and_dtype(args.dtype, bool(args.lora), bool(args.qlora))
    seq_len = defaults.TOKENS_PER_SAMPLE if args.seq_len is None else args.seq_len
    for name, value in (("dp", args.dp), ("tp", args.tp), ("pp", args.pp), ("per_device_batch", args.per_device_batch),
                        ("grad_accum", args.grad_accum), ("seq_len", seq_len)):
        if value < 1:
            raise InvalidInputError(name.replace("_", "-"), f"must be a positive integer; got {value}")
    attention = _attention(args)
    checkpoint = defaults.GRADIENT_CHECKPOINTING if args.grad_checkpoint is None else args.grad_checkpoint
    offload = "optimizer+params" if args.cpu_offload_params else "optimizer" if args.cpu_offload_optimizer else "none"
    job, placement = job_and_placement({  # the one way in, from the flags' words
        "model": _model(args), "method": method, "dtype": dtype, "tokens_per_sample": seq_len,
        "batch_size": args.per_device_batch * args.dp * args.grad_accum, "gradient_accumulation_steps": args.grad_accum,
        "lora_r": args.lora_rank, "lora_alpha": args.lora_alpha, "lora_dropout": args.lora_dropout,
        "lora_target_modules": target_modules(args.lora_target_modules), "optimizer": args.optimizer,
        "optimizer_impl": args.optimizer_impl, "optimizer_state_dtype": args.optimizer_state_dtype,
        "gradient_checkpointing": checkpoint, "attention": attention,
        **stack_fields(args),
        "gpu_model": args.gpu, "number_gpus": args.dp * args.tp * args.pp, "tp": args.tp, "pp": args.pp,
        "strategy": _strategy(args), "offload": offload,
    })
    return job, placement, calibration(args, flash=attention != "eager"), storage


def format_table(answer: Answer) -> str:
    job, place = answer.inputs()
    rows = [(name, getattr(answer, f"{name}_bytes") / GIB) for name in defaults.MEMORY_PARTS]
    lines = [f"{job.model} · {job.method} · {place.number_gpus}× {place.gpu_model} "
             f"({place.effective_strategy}) · estimator {answer.estimator}"
             + (f" {answer.model_version}" if answer.model_version else ""), f"{'component':<14}{'GiB':>10}"]
    lines += [f"{name:<14}{gib:>10.2f}" for name, gib in rows]
    vision = (("vision weights", answer.vision_weights_bytes), ("vision grads", answer.vision_gradients_bytes),
              ("vision optim.", answer.vision_optimizer_bytes), ("vision activ.", answer.vision_activations_bytes))
    lines += [f"{name:<14}{part / GIB:>10.2f}" for name, part in vision if part]  # VLMs only
    lines += [f"{'total (peak)':<14}{answer.peak_bytes / GIB:>10.2f}   at phase: {answer.peak_phase} (device; torch "
              f"allocated {answer.allocated_bytes / GIB:.2f}, reserved {answer.reserved_bytes / GIB:.2f}; {job.framework})",
              f"{'capacity':<14}{answer.capacity_bytes / GIB:>10.2f}",
              f"fits: {'yes' if answer.fits else 'NO'}   oom_risk: {answer.oom_risk:.3f}"
              + (f" (of the peak less {answer.releasable_bytes / GIB:.2f} GiB of free cached blocks, released before an "
                 "allocation fails)" if answer.releasable_bytes >= 0.005 * GIB else "")]
    if answer.tokens_per_second is not None:
        lines.append(f"tokens/s: {answer.tokens_per_second:,.0f}   MFU: {answer.mfu:.2f}")
    lines += [f"note: {n}" for n in answer.notes]
    return "\n".join(lines)


def _estimator(args: argparse.Namespace, calib: Calibration) -> Estimator:
    if args.estimator == "theory":
        from autoconf.estimators.theory.estimator import TheoryEstimator

        return TheoryEstimator(calibration=calib)
    return get_estimator(args.estimator, args.model_version)


def _method_flag(args: argparse.Namespace) -> None:
    """--method is --lora / --qlora spelled as recommend spells it."""
    if args.method is None:
        return
    if (args.lora and args.method != "lora") or (args.qlora and args.method != "qlora"):
        raise InvalidInputError("method", f"--method {args.method} contradicts --lora/--qlora")
    args.lora, args.qlora = args.method == "lora", args.method == "qlora"


def run(args: argparse.Namespace) -> int:
    found, overridden = load(args, ESTIMATE_FLAGS)
    extra = apply_to_estimate_args(args, found, overridden) if found else {}
    _method_flag(args)
    job, placement, calib, storage = inputs_from_args(args)
    if extra.get("packing") is not None:
        job = Job(**{**job.model_dump(), "packing": extra["packing"]})
    if extra.get("gpus_per_worker"):
        placement = Placement(**{**placement.model_dump(), "gpus_per_worker": extra["gpus_per_worker"]})
    estimator = _estimator(args, calib)
    est, notes = with_storage(estimator.estimate(job, placement), storage, calib)
    fmt = "json" if args.json else args.format
    if getattr(args, "verbose", False) or fmt == "budget":  # how our defaults differ from another tool's
        notes += default_notes(args, job, placement)
    answer = Answer.of(est)
    if args.plot:
        from autoconf.interfaces.cli.plots import plot_estimate

        plot_estimate(answer, args.plot)
    if fmt == "json":
        origin = {"from": found.report(overridden)} if found else {}
        print(json.dumps({**answer.cli(), "notes": notes, **origin}, indent=2))
        return 0
    print(format_budget(answer, calib) if fmt == "budget" else format_table(answer))
    if notes:
        print("\n".join(f"note: {n}" for n in notes))
    if found:
        print("\n".join(describe(found, overridden)))
    if args.probe:
        if args.estimate_only:
            print("--- Empirical Probe ---\nprobe skipped: --estimate-only")
        else:
            print(probe_block(estimator, job, placement, args.warmup_steps, args.probe_steps))
    return 0
