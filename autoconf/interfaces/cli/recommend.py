"""``autoconf-gpu recommend``: the placement an objective picks for a job (design §5).

``--objective min-gpus`` (default): the fewest GPUs (per worker × workers) on which the job fits;
``avoid-oom``: keep ``--number-gpus`` if the job fits there, else the fewest more (per-device batch kept);
``throughput``: the fastest GPU count × gradient accumulation at the global batch; with ``--layouts``, the fastest
parallel layout (DP × TP × PP × sharding × micro-batch × accumulation × checkpointing) on ``--number-gpus``
(recommend/layout.py), with the runner-up and why it lost.
"""

from __future__ import annotations

import argparse
import json

from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MAX_OOM_RISK
from autoconf.errors import InvalidInputError
from autoconf.estimators.contract import DEFAULT_ESTIMATOR, ESTIMATORS, get_estimator
from autoconf.interfaces.cli.fromfile import RECOMMEND_FLAGS, add_from_argument, describe, load
from autoconf.interfaces.cli.stack import add_job_arguments, stack_fields
from autoconf.interfaces.configs import FromFile
from autoconf.recommend.by_objective import OBJECTIVES
from autoconf.recommend.layout import LayoutChoice
from autoconf.schema import GIB, Answer, Job, Recommendation, Strategy


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("recommend", help="minimum GPUs and workers for a fine-tuning job")
    p.add_argument("--model", help="catalogue name or alias, a config.json path, or a parameter count (7e9); "
                   "required unless --from names it")
    add_from_argument(p)
    p.add_argument("--method", default="full", help="full | lora | qlora (default %(default)s)")
    p.add_argument("--gpu", required=True, help="GPU name or alias, e.g. NVIDIA-A100-80GB-PCIe")
    p.add_argument("--tokens-per-sample", "--seq-len", type=int, default=4096,
                   help="sequence length per sample (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=16, help="global batch per optimizer step (default %(default)s)")
    p.add_argument("--gradient-accumulation-steps", "--grad-accum", type=int, default=1)
    p.add_argument("--dtype", default="bf16", help="bf16 | fp16 | fp32 | amp-bf16 | amp-fp16")
    p.add_argument("--lora-r", "--lora-rank", type=int, default=8)
    p.add_argument("--objective", default="min-gpus", choices=OBJECTIVES,
                   help="min-gpus (fewest GPUs) | avoid-oom (keep --number-gpus if it fits) | throughput (fastest)")
    p.add_argument("--number-gpus", type=int, default=1,
                   help="avoid-oom: the GPUs requested; per-device batch = batch size / this; throughput --layouts: "
                        "the GPUs to lay out (default %(default)s)")
    p.add_argument("--layouts", action="store_true",
                   help="throughput: search DP × TP × PP × sharding × micro-batch × checkpointing on --number-gpus "
                        "(TP and PP whatever the framework; without --layouts only stacks that run them get them)")
    add_search_arguments(p)
    p.add_argument("--json", action="store_true", help="print the Recommendation as JSON")
    p.add_argument("--plot", metavar="FILE", help="also draw peak memory and risk vs GPU count to FILE.png or .svg")
    add_job_arguments(p)  # last: a flag per Job field not spelled above


def add_search_arguments(p: argparse.ArgumentParser) -> None:
    """Estimator and placement-search options shared by `recommend` and `sweep`."""
    p.add_argument("--estimator", default=DEFAULT_ESTIMATOR, help=f"{' | '.join(ESTIMATORS)} (default %(default)s)")
    p.add_argument("--model-version", help="learned-model version (learned/hybrid; default: newest installed)")
    p.add_argument("--max-gpus", type=int, default=MAX_GPUS, help="largest total GPU count to consider (default %(default)s)")
    p.add_argument("--gpus-per-node", type=int, default=GPUS_PER_NODE, help="GPUs per worker (default %(default)s)")
    p.add_argument("--max-oom-risk", type=float, default=MAX_OOM_RISK, help="highest accepted OOM risk (default %(default)s)")
    p.add_argument("--strict", action="store_true", help="can_recommend = 0 outside the version's training domain")


def format_text(rec: Recommendation) -> str:
    answered = f"estimator {rec.estimator}" + (f" {rec.model_version}" if rec.model_version else "")
    if not rec.can_recommend or rec.estimate is None:
        return f"cannot recommend ({answered}): {rec.reason}"
    mem = Answer.of(rec.estimate)
    job, place = mem.inputs()
    lines = [
        f"{job.model} · {job.method} · {job.tokens_per_sample} tokens × batch {job.batch_size} on "
        f"{place.gpu_model} · {answered}",
        f"recommended: {rec.number_gpus} GPU{'s' if rec.number_gpus > 1 else ''} "
        f"({rec.workers} worker{'s' if rec.workers > 1 else ''} × {rec.gpus} GPU{'s' if rec.gpus > 1 else ''})",
        f"peak memory per GPU: {mem.peak_bytes / GIB:.1f} GiB of {mem.capacity_bytes / GIB:.1f} GiB   "
        f"oom_risk {mem.oom_risk:.3f}",
    ]
    place = rec.estimate.placement
    if place.tp > 1 or place.pp > 1 or rec.reason.startswith("layout: "):  # the throughput objective's layout
        lines.append(f"layout: dp {place.dp} × tp {place.tp} × pp {place.pp}, {place.effective_strategy}, "
                     f"checkpointing {'on' if job.gradient_checkpointing else 'off'}")
    if job.gradient_accumulation_steps > 1:
        micro = job.batch_size // (place.dp * job.gradient_accumulation_steps)
        lines.append(f"gradient accumulation: {job.gradient_accumulation_steps} steps of {micro} samples per GPU")
    if mem.tokens_per_second is not None:
        lines.append(f"tokens/s: {mem.tokens_per_second:,.0f}")
    lines += [f"note: {n}" for n in mem.notes]
    if rec.reason.startswith("layout: "):
        lines.append(f"why: {rec.reason.split('; ', 1)[1]}")
    return "\n".join(lines)


def format_layout(choice: LayoutChoice) -> str:
    if choice.best is None:
        return f"cannot recommend: {choice.why}"
    best, speed = choice.best, choice.best.throughput
    return "\n".join([
        f"fastest layout: {best.label}",
        f"tokens/s: {speed.tokens_per_second:,.0f} ({speed.tokens_per_second_per_gpu:,.0f} per GPU)   MFU {speed.mfu:.2f}   "
        f"step {speed.step_seconds:.2f} s (compute {speed.compute_seconds:.2f} s, exposed communication "
        f"{speed.communication_seconds:.2f} s)",
        f"peak memory per GPU: {best.peak_gib:.1f} GiB   oom_risk {best.oom_risk:.3f}",
        f"why: {choice.why}",
    ])


def _layouts(args: argparse.Namespace, job: Job) -> int:
    from autoconf.recommend.layout import fastest_layout

    choice = fastest_layout(job, args.gpu, args.number_gpus, get_estimator(args.estimator, args.model_version),
                            gpus_per_node=args.gpus_per_node, max_oom_risk=args.max_oom_risk, model_parallel=True)
    if args.json:
        best = choice.best
        print(json.dumps({"can_recommend": best is not None, "why": choice.why, "evaluated": choice.evaluated,
                          "fitting": choice.fitting, "job": best.job.model_dump(mode="json") if best else None,
                          "placement": best.placement.model_dump(mode="json") if best else None,
                          "throughput": best.throughput.model_dump(mode="json") if best else None}, indent=2))
    else:
        print(format_layout(choice))
    return 0


def run(args: argparse.Namespace) -> int:
    from autoconf.recommend.by_objective import recommend_for_objective

    found, overridden = load(args, RECOMMEND_FLAGS)
    strategy = None
    if found is not None:
        job, requested, strategy = _job_from_file(args, found, overridden)
    elif args.model is None:
        raise InvalidInputError("--model", "give --model or --from FILE")
    else:
        job = Job(model=args.model, method=args.method, tokens_per_sample=args.tokens_per_sample,
                  batch_size=args.batch_size,
                  gradient_accumulation_steps=args.gradient_accumulation_steps, dtype=args.dtype, lora_r=args.lora_r,
                  **stack_fields(args))
        requested = args.number_gpus
    if args.layouts:
        if args.objective != "throughput":
            raise InvalidInputError("layouts", f"needs --objective throughput; got {args.objective}")
        return _layouts(args, job)
    estimator = get_estimator(args.estimator, args.model_version)
    rec = recommend_for_objective(job, args.gpu, estimator, args.objective, requested_gpus=requested,
                                  max_gpus=args.max_gpus, gpus_per_node=args.gpus_per_node,
                                  max_oom_risk=args.max_oom_risk, strict=args.strict, strategy=strategy)
    if args.json:
        origin = {"from": found.report(overridden)} if found else {}
        answer = Answer.of(rec.estimate).cli() if rec.estimate else None
        print(json.dumps({**rec.model_dump(mode="json"), "estimate": answer, **origin}, indent=2))
    else:
        print("\n".join([format_text(rec), *(describe(found, overridden) if found else [])]))
    if args.plot:
        from autoconf.interfaces.cli.plots import plot_recommend

        plot_recommend(rec, job, args.gpu, estimator, args.plot, max_gpus=args.max_gpus,
                       gpus_per_node=args.gpus_per_node)
    return 0


def _job_from_file(args: argparse.Namespace, found: FromFile, overridden: set[str]) -> tuple[Job, int, Strategy | None]:
    """The job of --from with the typed flags on top, the GPUs requested (the file's launch unless
    --number-gpus is typed) and the file's sharding. avoid-oom keeps the file's micro-batch per GPU (its
    per-device batch is batch_size / requested GPUs, without accumulation)."""
    from autoconf.interfaces.cli.fromfile import typed
    from autoconf.interfaces.configs import build_inputs

    given = typed(args)
    flags = {"model": "model", "method": "method", "dtype": "dtype", "tokens_per_sample": "seq_len",
             "gradient_accumulation_steps": "grad_accum", "lora_r": "lora_r"}
    overrides = {knob: getattr(args, dest) for dest, knob in flags.items() if dest in given}
    overrides |= {k: v for k, v in stack_fields(args).items() if k in given}
    job, placement = build_inputs(found, overrides, args.gpu)
    requested = args.number_gpus if "number_gpus" in given else placement.number_gpus
    if "batch_size" in given:
        job = job.model_copy(update={"batch_size": args.batch_size})
    elif args.objective == "avoid-oom":
        micro = job.batch_size // (placement.dp * job.gradient_accumulation_steps)
        job = job.model_copy(update={"batch_size": micro * requested, "gradient_accumulation_steps": 1})
    return job, requested, placement.strategy
