"""Layout search answers before vs after a speed change: dump them once from the old code, compare the new code.

    python bench/layout_identity.py --write /work/cache/layout_baseline.json   # with the code before the change
    python bench/layout_identity.py --check /work/cache/layout_baseline.json   # with the code after it
    python bench/layout_identity.py --sample /work/cache/layout_baseline.json tests/fixtures/layout_identity_sample.json

The jobs: the 30 searches of bench/layout_speed.py and 200 random ones (seed 26) over catalogue models, methods,
dtypes, GPUs, global batches (a free one too), GPU counts (one, or every count of up to eight nodes), stacks,
network speeds, shardings and sequence parallelism, each through ``fastest_layout`` (and the throughput objective,
``fastest``, for every fourth). Every figure of the answer is recorded: the layouts evaluated and fitting, the reason
text, and the chosen layout and runner-up (label, Job, Placement, tokens/s and its parts, memory, OOM risk).
Numbers must agree to 1e-9 relative, text exactly. Nothing here reads the code under test to make expected values:
the dump is the old code's own output.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: `--write` may run an older tree

from autoconf.catalog import get_architecture, list_gpus, list_models
from autoconf.errors import AutoconfError
from autoconf.estimators import get_estimator
from autoconf.recommend.fastest import fastest
from autoconf.recommend.layout import Layout, fastest_layout
from autoconf.recommend.search import candidate_gpus
from autoconf.schema import Job

RTOL = 1e-9
SEED = 26
RANDOM_JOBS = 200
ESTIMATOR = get_estimator("theory")
STACKS = (None, None, "megatron", "nanotron", "internevo", "nemo", "hf")
SHARDINGS = (None, None, None, ("ddp", "zero1"), ("fsdp",), ("zero3", "fsdp-hybrid"))


def _models() -> list[str]:
    found = []
    for name in list_models():
        try:
            get_architecture(name)
        except (AutoconfError, ValueError):
            continue
        found.append(name)
    return found


def cases() -> list[dict[str, Any]]:
    """Inputs as plain words: the benchmark's searches, then the random ones."""
    from bench.layout_speed import cases as speed_cases

    out: list[dict[str, Any]] = [
        {"job": c["job"], "gpu": c["gpu"], "counts": c["counts"], "network": c["network"], "stack": c["stack"],
         "shardings": None, "free": False, "objective": False} for c in speed_cases()]
    rng = random.Random(SEED)
    models, gpus = _models(), list_gpus()
    for i in range(RANDOM_JOBS):
        free = rng.random() < 0.15
        words: dict[str, Any] = {
            "model": rng.choice(models), "method": rng.choice(("full", "lora", "qlora")),
            "dtype": rng.choice(("bf16", "bf16", "amp-bf16", "fp16", "fp32")),
            "tokens_per_sample": rng.choice((256, 512, 1024, 2048, 4096, 8192)),
            "batch_size": rng.choice((1, 2, 8, 16, 32, 64, 96, 128, 256, 512)),
            "framework": rng.choice(("hf-trainer", "hf-trainer", "deepspeed", "torchtitan", "fms-hf-tuning")),
            "attention": rng.choice(("flash", "sdpa", "eager")), "fused_loss": rng.random() < 0.3,
            "sequence_parallel": rng.choice((1, 1, 1, 2)),
        }
        try:
            job = Job(**words)
        except ValueError:
            continue
        counts = rng.choice(([rng.choice((1, 2, 4, 8, 16, 32, 64))], list(candidate_gpus(64, 8)),
                             list(candidate_gpus(8, 8))))
        out.append({"job": job.model_dump(mode="json"), "gpu": rng.choice(gpus), "counts": counts,
                    "network": rng.choice((None, None, 100.0, 400.0)), "stack": rng.choice(STACKS),
                    "shardings": rng.choice(SHARDINGS), "free": free, "objective": i % 4 == 0})
    return out


def _layout(layout: Layout | None) -> dict[str, Any] | None:
    if layout is None:
        return None
    return {"label": layout.label, "job": layout.job.model_dump(mode="json"),
            "placement": layout.placement.model_dump(mode="json"), "throughput": layout.throughput.model_dump(mode="json"),
            "peak_gib": layout.peak_gib, "oom_risk": layout.oom_risk}


def answer(case: dict[str, Any]) -> dict[str, Any]:
    """What the search answers for one case (or the error text it raises)."""
    job = Job(**case["job"])
    shardings = tuple(case["shardings"]) if case["shardings"] else None
    extra: dict[str, Any] = {"shardings": shardings} if shardings else {}
    try:
        choice = fastest_layout(job, case["gpu"], case["counts"], ESTIMATOR, inter_node_gbps=case["network"],
                                stack=case["stack"], free_batch=case["free"], **extra)
    except AutoconfError as exc:
        out: dict[str, Any] = {"error": str(exc)}
    else:
        out = {"evaluated": choice.evaluated, "fitting": choice.fitting, "why": choice.why,
               "best": _layout(choice.best), "runner_up": _layout(choice.runner_up)}
    if case["objective"]:
        found = fastest(job, case["gpu"], ESTIMATOR, max_gpus=max(case["counts"]), free_batch=case["free"])
        out["objective"] = (found if isinstance(found, str) else
                            {"layout": _layout(found.layout), "runner_up": found.runner_up,
                             "estimate": found.estimate.model_dump(mode="json")})
    return out


def same(old: Any, new: Any, where: str = "") -> list[str]:  # noqa: ANN401
    """Where ``new`` differs from ``old`` (numbers beyond RTOL, anything else at all)."""
    if isinstance(old, dict) and isinstance(new, dict):
        if old.keys() != new.keys():
            return [f"{where}: keys {sorted(old)} != {sorted(new)}"]
        return [d for k in old for d in same(old[k], new[k], f"{where}.{k}")]
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{where}: length {len(old)} != {len(new)}"]
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in same(a, b, f"{where}[{i}]")]
    if isinstance(old, float) and isinstance(new, float):
        ok = old == new or (math.isnan(old) and math.isnan(new)) or math.isclose(old, new, rel_tol=RTOL)
        return [] if ok else [f"{where}: {old!r} != {new!r}"]
    return [] if old == new and type(old) is type(new) else [f"{where}: {old!r} != {new!r}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="JSON")
    group.add_argument("--check", metavar="JSON")
    group.add_argument("--sample", nargs=2, metavar=("JSON", "FIXTURE"))
    args = parser.parse_args(argv)
    if args.sample:
        dump = json.loads(Path(args.sample[0]).read_text(encoding="utf-8"))
        picked = dump[:30:5] + dump[30::12]
        lines = ",\n".join(json.dumps(item) for item in picked)  # one case a line
        Path(args.sample[1]).write_text(f"[\n{lines}\n]\n", encoding="utf-8")
        print(f"{len(picked)} cases -> {args.sample[1]}")
        return 0
    inputs = cases()
    if args.write:
        dump = [{"case": c, "answer": answer(c)} for c in inputs]
        Path(args.write).write_text(json.dumps(dump) + "\n", encoding="utf-8")
        print(f"{len(dump)} cases -> {args.write}")
        return 0
    dump = json.loads(Path(args.check).read_text(encoding="utf-8"))
    assert [d["case"] for d in dump] == json.loads(json.dumps(inputs)), "the cases changed: rewrite the dump"
    differences = [f"case {i}{d}" for i, item in enumerate(dump) for d in same(item["answer"],
                                                                                 json.loads(json.dumps(answer(item["case"]))))]
    print("\n".join(differences[:40]))
    answered = sum(1 for d in dump if d["answer"].get("best"))
    print(f"{len(dump)} cases ({answered} with a layout): {len(differences)} differences beyond {RTOL} relative")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
