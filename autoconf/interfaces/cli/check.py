"""``autoconf-gpu check``: a launch guard. Will this job fit on the placement it is about to get?

    autoconf-gpu check --from train.yaml --gpu H100 --gpus 8 --nodes 2 [--max-oom-risk 0.05] [--json]

Exit 0: it fits with oom_risk <= the gate. Exit 1: it does not; the answer names the fewest GPUs on which it
would (same micro-batch, accumulation and sharding) and the largest micro-batch that fits on the GPUs asked
for. Exit 2: bad input (one line). For CI steps, SLURM prologs, Kubernetes init containers and agents;
docs/guard.md has the three examples.
"""

from __future__ import annotations

import argparse
import json
import typing
from typing import Any

from autoconf import defaults
from autoconf.estimators.contract import DEFAULT_ESTIMATOR, ESTIMATORS, Estimator, get_estimator
from autoconf.interfaces.cli.fromfile import add_from_argument, typed
from autoconf.interfaces.configs import FromFile, build_inputs, read_configs
from autoconf.schema import GIB, Answer, Framework, Job, Placement

NOT_FIT_EXIT = 1
MAX_MICRO_BATCH = 1024  # the largest micro-batch tried when looking for the one that fits
# flag dest -> knob it sets (flags override the file)
FLAG_KNOBS = {"model": "model", "method": "method", "dtype": "dtype", "seq_len": "seq_len",
              "per_device_batch": "micro_batch", "grad_accum": "grad_accum", "strategy": "strategy",
              "framework": "framework", "gpus": "gpus_per_node", "nodes": "nodes", "lora_r": "lora_r",
              "grad_checkpoint": "gradient_checkpointing", "attention": "attention"}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("check", help="guard a launch: exit 0 if the job fits the placement, 1 if not, 2 on bad "
                              "input")
    add_from_argument(p)
    job = p.add_argument_group("job (override the file, or give the job without --from)")
    job.add_argument("--model", help="catalogue name, hub id, config.json path or parameter count")
    job.add_argument("--method", choices=("full", "lora", "qlora"))
    job.add_argument("--dtype", choices=("bf16", "fp16", "fp32", "amp-bf16", "amp-fp16"))
    job.add_argument("--seq-len", "--tokens-per-sample", type=int, help="tokens per sample")
    job.add_argument("--per-device-batch", type=int, help="micro-batch per GPU")
    job.add_argument("--grad-accum", "--gradient-accumulation-steps", type=int)
    job.add_argument("--lora-r", "--lora-rank", type=int)
    job.add_argument("--grad-checkpoint", action=argparse.BooleanOptionalAction, default=None)
    job.add_argument("--attention", choices=("flash", "sdpa", "eager"))
    job.add_argument("--strategy", help="ddp | fsdp | fsdp-shard-grad-op | fsdp-hybrid | zero0..zero3")
    job.add_argument("--framework", choices=typing.get_args(Framework))
    place = p.add_argument_group("placement the job will get")
    place.add_argument("--gpu", default=defaults.GPU_MODEL, help="GPU name or alias (default %(default)s)")
    place.add_argument("--gpus", type=int, help="GPUs per node (default: the file's launch, else 1)")
    place.add_argument("--nodes", type=int, help="nodes (default: the file's launch, else 1)")
    p.add_argument("--max-oom-risk", type=float, default=defaults.MAX_OOM_RISK,
                   help="the gate: highest accepted OOM risk (default %(default)s)")
    p.add_argument("--max-gpus", type=int, default=defaults.MAX_GPUS,
                   help="largest GPU count tried for the fewest that fit (default %(default)s)")
    p.add_argument("--estimator", default=DEFAULT_ESTIMATOR, help=f"{' | '.join(ESTIMATORS)} (default %(default)s)")
    p.add_argument("--model-version", help="learned-model version (learned/hybrid)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def inputs(args: argparse.Namespace) -> tuple[FromFile | None, set[str], Job, Placement]:
    found = read_configs(args.from_files) if args.from_files else None
    given = typed(args)
    overrides = {knob: getattr(args, dest) for dest, knob in FLAG_KNOBS.items() if getattr(args, dest) is not None}
    if args.nodes is not None and args.gpus is None and found is None:
        overrides["gpus_per_node"] = 1
    job, placement = build_inputs(found, overrides, args.gpu)
    return found, {FLAG_KNOBS[d] for d in given if d in FLAG_KNOBS}, job, placement


def passes(estimator: Estimator, job: Job, placement: Placement, gate: float) -> tuple[bool, float, float]:
    """(fits under the gate, oom_risk, peak GiB)."""
    mem = Answer.of(estimator.estimate(job, placement))
    return mem.fits and mem.oom_risk <= gate, mem.oom_risk, mem.peak_bytes / GIB


def with_gpus(job: Job, placement: Placement, gpus: int) -> tuple[Job, Placement]:
    """The same micro-batch, accumulation and sharding on ``gpus`` GPUs (8 per node at most)."""
    micro = job.batch_size // (placement.dp * job.gradient_accumulation_steps)
    place = placement.model_copy(update={"number_gpus": gpus, "gpus_per_worker": min(gpus, defaults.GPUS_PER_NODE)})
    dp = gpus // (placement.tp * placement.pp)
    return job.model_copy(update={"batch_size": micro * dp * job.gradient_accumulation_steps}), place


def fewest_gpus(estimator: Estimator, job: Job, placement: Placement, gate: float, max_gpus: int) -> int | None:
    step = placement.tp * placement.pp
    counts = [n for n in range(step, max_gpus + 1, step) if n <= defaults.GPUS_PER_NODE or n % defaults.GPUS_PER_NODE == 0]
    for n in counts:
        if n != placement.number_gpus and passes(estimator, *with_gpus(job, placement, n), gate)[0]:
            return n
    return None


def largest_micro_batch(estimator: Estimator, job: Job, placement: Placement, gate: float) -> int:
    """The largest micro-batch per GPU that fits on the placement asked for (0: not even 1); binary search,
    memory growing with the micro-batch."""
    accum, dp = job.gradient_accumulation_steps, placement.dp

    def ok(micro: int) -> bool:
        return passes(estimator, job.model_copy(update={"batch_size": micro * dp * accum}), placement, gate)[0]

    low, high = 0, job.batch_size // (dp * accum)
    if ok(high):
        high = min(high * 2, MAX_MICRO_BATCH)
        while high < MAX_MICRO_BATCH and ok(high):
            low, high = high, min(high * 2, MAX_MICRO_BATCH)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    return high if ok(high) else low


def answer(estimator: Estimator, job: Job, placement: Placement, gate: float, max_gpus: int) -> dict[str, Any]:
    """The guard's answer (the --json object, less ``from``); the MCP tool ``check`` returns the same."""
    fits, risk, peak = passes(estimator, job, placement, gate)
    out: dict[str, Any] = {
        "fits": fits, "oom_risk": round(risk, 4), "gate": gate, "peak_gib": round(peak, 2),
        "gpu": placement.gpu_model, "number_gpus": placement.number_gpus, "nodes": placement.workers,
        "micro_batch": job.batch_size // (placement.dp * job.gradient_accumulation_steps),
        "estimator": estimator.name, "job": job.model_dump(mode="json"), "placement": placement.model_dump(mode="json"),
    }
    if not fits:
        out["fewest_gpus"] = fewest_gpus(estimator, job, placement, gate, max_gpus)
        out["largest_micro_batch"] = largest_micro_batch(estimator, job, placement, gate)
    return out


def run(args: argparse.Namespace) -> int:
    found, overridden, job, placement = inputs(args)
    estimator = get_estimator(args.estimator, args.model_version)
    result = answer(estimator, job, placement, args.max_oom_risk, args.max_gpus)
    if found is not None:
        result["from"] = found.report(overridden)
    print(json.dumps(result, indent=2) if args.json else _text(result))
    return 0 if result["fits"] else NOT_FIT_EXIT


def _text(a: dict[str, Any]) -> str:
    head = (f"{a['job']['model']} · {a['job']['method']} · micro-batch {a['micro_batch']} × {a['job']['tokens_per_sample']}"
            f" tokens on {a['number_gpus']}× {a['gpu']}: peak {a['peak_gib']:.1f} GiB per GPU, oom_risk "
            f"{a['oom_risk']:.3f} (gate {a['gate']})")
    if a["fits"]:
        return f"FITS: {head}"
    fewest = a["fewest_gpus"]
    more = f"{fewest} GPUs would fit" if fewest else "no GPU count up to the search limit fits"
    micro = a["largest_micro_batch"]
    smaller = f"micro-batch {micro} fits on the GPUs asked for" if micro else "not even micro-batch 1 fits there"
    return f"DOES NOT FIT: {head}\n  {more} (same micro-batch and sharding); {smaller}"
