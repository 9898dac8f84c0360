"""The layout search before vs after a change: the memory of every layout, and the answers, against older code.

    python bench/layout_identity.py --against REV              # dump with `git archive REV autoconf`, compare here
    python bench/layout_identity.py --against REV --memory-only  # REV's throughput formulas differ: memory only
    python bench/layout_identity.py --write DUMP   # (run by --against in the old tree) the dump of this tree
    python bench/layout_identity.py --check DUMP [--memory-only]
    python bench/layout_identity.py --against 2732b7e --keep DUMP   # keep REV's dump, then:
    python bench/layout_identity.py --sample DUMP tests/fixtures/layout_identity_sample.json

The jobs: the 30 searches of bench/layout_speed.py and 200 random ones (seed 26) over catalogue models, methods,
dtypes, GPUs, global batches (a free one too), GPU counts (one, or every count of up to eight nodes), stacks,
network speeds, shardings and sequence parallelism. Model paths under this repository are written relative to it.

Per search the dump holds two records. ``memory``: theory's memory of every layout of the search space through the
estimator's general batch path (``memory_batch`` over each layout's own Job and Placement): how many layouts, how
many pass the gate (``oom_risk ≤ MAX_OOM_RISK``), a digest of the set that passes, the sums of device peaks and of
the bytes the risk is stated on, and those two figures of a few layouts (spread over the space, and the ones nearest
the gate). ``--check`` compares it with the search's own memory gate (recommend/layout_memory.py): a speed change
must keep it whatever the throughput formulas do. ``answer``: what ``fastest_layout`` (and, every fourth, the
throughput objective ``fastest``) answers: layouts evaluated and fitting, the reason text, the chosen layout and
runner-up (label, Job, Placement, tokens/s and its parts, memory, OOM risk); compared unless ``--memory-only``
(equal only between trees with the same throughput formulas). Numbers must agree to 1e-9 relative, text exactly.
Nothing here reads the code under test to make expected values: the dump is the old code's own output.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: `--write` may run an older tree

from autoconf.catalog import get_architecture, list_gpus, list_models
from autoconf.defaults import GPUS_PER_NODE, MAX_OOM_RISK
from autoconf.errors import AutoconfError
from autoconf.estimators import get_estimator
from autoconf.recommend.fastest import fastest
from autoconf.recommend.layout import (
    MODEL_PARALLEL_STACKS,
    SHARDINGS,
    Layout,
    fastest_layout,
    row_inputs,
    search_space,
)
from autoconf.recommend.search import candidate_gpus
from autoconf.schema import Job

ROOT = Path(__file__).resolve().parents[1]
RTOL = 1e-9
SEED = 26
RANDOM_JOBS = 200
SAMPLED = 8  # layouts spread over the space whose memory is recorded, and as many nearest the gate
ESTIMATOR = get_estimator("theory")
STACKS = (None, None, "megatron", "nanotron", "internevo", "nemo", "hf")
SHARDING_CHOICES = (None, None, None, ("ddp", "zero1"), ("fsdp",), ("zero3", "fsdp-hybrid"))


def _models() -> list[str]:
    found = []
    for name in list_models():
        try:
            get_architecture(name)
        except (AutoconfError, ValueError):
            continue
        found.append(name)
    return found


def portable(words: dict[str, Any]) -> dict[str, Any]:
    """Job words with a model path under this repository written relative to it (a dump holds no local paths)."""
    model = Path(words["model"])
    if model.is_absolute() and model.is_relative_to(ROOT):
        return {**words, "model": model.relative_to(ROOT).as_posix()}
    return words


def _job(words: dict[str, Any]) -> Job:
    """The Job of a case: a repository-relative model path read from this repository, wherever the process runs."""
    if (ROOT / words["model"]).is_file():
        words = {**words, "model": str(ROOT / words["model"])}
    return Job(**words)


def cases() -> list[dict[str, Any]]:
    """Inputs as plain words: the benchmark's searches, then the random ones."""
    from bench.layout_speed import cases as speed_cases

    out: list[dict[str, Any]] = [
        {"job": portable(c["job"]), "gpu": c["gpu"], "counts": c["counts"], "network": c["network"], "stack": c["stack"],
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
        out.append({"job": portable(job.model_dump(mode="json")), "gpu": rng.choice(gpus), "counts": counts,
                    "network": rng.choice((None, None, 100.0, 400.0)), "stack": rng.choice(STACKS),
                    "shardings": rng.choice(SHARDING_CHOICES), "free": free, "objective": i % 4 == 0})
    return out


def _layout(layout: Layout | None) -> dict[str, Any] | None:
    if layout is None:
        return None
    return {"label": layout.label, "job": portable(layout.job.model_dump(mode="json")),
            "placement": layout.placement.model_dump(mode="json"), "throughput": layout.throughput.model_dump(mode="json"),
            "peak_gib": layout.peak_gib, "oom_risk": layout.oom_risk}


def _setup(case: dict[str, Any]) -> tuple[Job, dict[str, Any], bool]:
    """The case's Job, the search's keyword arguments (shardings) and whether it searches TP and PP (as
    fastest_layout decides by default)."""
    job = _job(case["job"])
    if case["stack"] in MODEL_PARALLEL_STACKS:  # as fastest_layout sets it: their loss is vocabulary-parallel
        job = job.model_copy(update={"vocab_parallel_loss": True})
    extra: dict[str, Any] = {"shardings": tuple(case["shardings"])} if case["shardings"] else {}
    return job, extra, (case["stack"] or job.framework) in MODEL_PARALLEL_STACKS


def answer(case: dict[str, Any]) -> dict[str, Any]:
    """What the search answers for one case (or the error text it raises)."""
    job, extra, _ = _setup(case)
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
    return json.loads(json.dumps(out))


def keys(case: dict[str, Any]) -> list[str]:
    """Each layout of the case's search space as words: GPUs/tp/pp/sharding/global batch/accumulation/checkpointing."""
    job, extra, model_parallel = _setup(case)
    rows = search_space(job, case["counts"], GPUS_PER_NODE, extra.get("shardings", SHARDINGS), case["free"],
                        model_parallel).rows
    names = np.array(SHARDINGS)[rows.strategy] if len(rows.strategy) else np.array([], dtype=str)
    return [f"{n}/{t}/{p}/{s}/{b}/{a}/{c}" for n, t, p, s, b, a, c in zip(
        rows.gpus.tolist(), rows.tp.tolist(), rows.pp.tolist(), names.tolist(), rows.batch.tolist(),
        rows.accumulation.tolist(), rows.checkpointing.tolist(), strict=True)]


def record(names: list[str], peak: np.ndarray, need: np.ndarray, fits: np.ndarray) -> dict[str, Any]:
    """The memory record of a search space: counts, the digest of the fitting set, sums and a few layouts."""
    ok = np.isfinite(need)
    passing = sorted(k for k, f in zip(names, fits.tolist(), strict=True) if f)
    spread = sorted(np.flatnonzero(ok).tolist(), key=lambda r: names[r])
    spread = spread[:: max(1, len(spread) // SAMPLED)][:SAMPLED]
    by_need = np.argsort(np.where(ok, need, np.inf), kind="stable").tolist()
    fit_rows = [r for r in by_need if fits[r]]
    out_rows = [r for r in by_need if ok[r] and not fits[r]]
    near = fit_rows[-SAMPLED // 2:] + out_rows[: SAMPLED // 2]  # the largest that pass, the smallest that do not
    return {"layouts": len(names), "refused": int((~ok).sum()), "fitting": len(passing),
            "fitting_sha256": hashlib.sha256("\n".join(passing).encode()).hexdigest(),
            "peak_sum": math.fsum(peak[ok].tolist()), "need_sum": math.fsum(need[ok].tolist()),
            "sample": {names[r]: [float(peak[r]), float(need[r])] for r in sorted(set(spread + near))}}


def memory(case: dict[str, Any]) -> dict[str, Any]:
    """Theory's memory of every layout through ``memory_batch`` on each layout's own Job and Placement."""
    job, extra, model_parallel = _setup(case)
    space = search_space(job, case["counts"], GPUS_PER_NODE, extra.get("shardings", SHARDINGS), case["free"],
                         model_parallel)
    pairs = [row_inputs(job, case["gpu"], space, r, case["network"]) for r in range(len(space))]
    names = keys(case)
    if not pairs:
        return record(names, np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool))
    batch = ESTIMATOR.memory_batch([j for j, _ in pairs], [p for _, p in pairs])
    need = np.where(batch.ok, batch.peak - batch.releasable_or_zero(), np.nan)
    return record(names, batch.peak, need, batch.ok & (batch.oom_risk <= MAX_OOM_RISK))


def gate_memory(case: dict[str, Any]) -> dict[str, Any]:
    """The same record from the search's own memory gate (one theory call over every layout)."""
    from autoconf.recommend.layout_memory import theory_gate

    job, extra, model_parallel = _setup(case)
    space = search_space(job, case["counts"], GPUS_PER_NODE, extra.get("shardings", SHARDINGS), case["free"],
                         model_parallel)
    if not len(space):
        return record([], np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool))
    gate = theory_gate(job, case["gpu"], space, MAX_OOM_RISK)
    assert gate.peak is not None
    return record(keys(case), gate.peak, gate.need, gate.fits)


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


def write(path: Path) -> int:
    """The dump of this tree: every case's memory record and answer."""
    dump = [{"case": c, "memory": memory(c), "answer": answer(c)} for c in cases()]
    path.write_text(json.dumps(dump) + "\n", encoding="utf-8")
    print(f"{len(dump)} cases -> {path}")
    return 0


def check(path: Path, memory_only: bool) -> int:
    """This tree against a dump: the search's memory gate always, its answers unless ``memory_only``."""
    dump = json.loads(path.read_text(encoding="utf-8"))
    assert [d["case"] for d in dump] == json.loads(json.dumps(cases())), "the cases changed: rewrite the dump"
    differences = []
    for i, item in enumerate(dump):
        differences += [f"case {i} memory{d}" for d in same(item["memory"], gate_memory(item["case"]))]
        if not memory_only:
            differences += [f"case {i} answer{d}" for d in same(item["answer"], answer(item["case"]))]
    print("\n".join(differences[:40]))
    layouts = sum(d["memory"]["layouts"] for d in dump)
    print(f"{len(dump)} cases, {layouts:,} layouts ({'memory only' if memory_only else 'memory and answers'}): "
          f"{len(differences)} differences beyond {RTOL} relative")
    return 1 if differences else 0


def against(rev: str, memory_only: bool, keep: str | None = None) -> int:
    """Dump with ``git archive REV autoconf`` in a fresh process (to ``keep`` if given), then check this tree."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", rev, "autoconf"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        dump = Path(keep) if keep else Path(tmp) / "dump.json"
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--write", str(dump)], check=True,
                       env={**os.environ, "PYTHONPATH": tmp,  # the archive holds autoconf/ only: data from here
                            "AUTOCONF_DATA": str(ROOT / "data" / "measurements.csv")})
        return check(dump, memory_only)


def sample(path: Path, fixture: Path) -> int:
    """A few cases of a dump, with their memory records, for tests/test_layout_identity.py (one case a line)."""
    dump = json.loads(path.read_text(encoding="utf-8"))
    picked = [{"case": d["case"], "memory": d["memory"]} for d in dump[:30:5] + dump[30::12]]
    fixture.write_text("[\n" + ",\n".join(json.dumps(item) for item in picked) + "\n]\n", encoding="utf-8")
    print(f"{len(picked)} cases -> {fixture}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--against", metavar="REV", help="dump with `git archive REV autoconf`, then check")
    group.add_argument("--write", metavar="JSON")
    group.add_argument("--check", metavar="JSON")
    group.add_argument("--sample", nargs=2, metavar=("JSON", "FIXTURE"))
    parser.add_argument("--memory-only", action="store_true", help="compare the memory records only")
    parser.add_argument("--keep", metavar="JSON", help="with --against: keep REV's dump there")
    args = parser.parse_args(argv)
    if args.sample:
        return sample(Path(args.sample[0]), Path(args.sample[1]))
    if args.write:
        return write(Path(args.write))
    if args.against:
        return against(args.against, args.memory_only, args.keep)
    return check(Path(args.check), args.memory_only)


if __name__ == "__main__":
    raise SystemExit(main())
