"""Theory outputs before vs after a refactor: dump them once from the old code, compare the new code with them.

    python bench/theory_identity.py --write /work/cache/array_baseline    # with the code before the change
    python bench/theory_identity.py --check /work/cache/array_baseline    # with the code after it

Three sets, every figure of each answer (relative difference ≤ 1e-9; text, phases and errors exactly):

* every row of ``data/measurements.csv``: all fields of ``estimate_memory``'s ``MemoryEstimate`` (or the error it
  raises), the theory tokens/s, and the same rows through ``theory_batch``;
* the 3,960-point seed sweep: ``autoconf-gpu sweep --estimator theory`` over ``space_frame()`` (a fresh CLI process;
  the CSV is compared cell by cell, numbers to 1e-9 relative);
* 500 random jobs (seed 26) over models, methods, dtypes, GPUs, GPU counts, strategies, tp/pp, attention, framework
  profiles, loss kernels and more: ``estimate_memory``, ``theory_batch``, and ``recommend_frame`` with and without
  ``number_gpus``, and ``recommend()`` of each (the object path).

The dump is a pickle outside the repository; nothing here reads the code under test to make expected values.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: `--write` may run an older tree

from autoconf.catalog import get_architecture, list_gpus, list_models
from autoconf.errors import describe
from autoconf.estimators.contract import get_estimator
from autoconf.estimators.theory.memory import estimate_memory
from autoconf.estimators.theory.throughput import throughput_or_none
from autoconf.estimators.theory.vector import theory_batch
from autoconf.evaluation.data import load_measurements, row_to_inputs
from autoconf.evaluation.space import space_frame
from autoconf.recommend.frame import recommend_frame
from autoconf.recommend.search import recommend
from autoconf.schema import FRAMEWORKS, job_and_placement

RTOL = 1e-9
SEED = 26
RANDOM_JOBS = 500
ERRORS = (ValueError, TypeError, ArithmeticError)


def _answer(job: Any, place: Any) -> dict[str, Any] | str:  # noqa: ANN401
    try:
        mem = estimate_memory(job, place)
    except ERRORS as exc:
        return "error: " + describe(exc, with_input=False)
    out = mem.model_dump()
    tput = throughput_or_none(job, place)
    out["tokens_per_second"] = None if tput is None else tput.tokens_per_second
    return out


def _batch(jobs: list[Any], places: list[Any]) -> dict[str, Any]:
    b = theory_batch(jobs, places)
    return {"parts": {k: v.tolist() for k, v in b.parts.items()}, "allocated": b.allocated.tolist(),
            "reserved": b.reserved.tolist(), "peak": b.peak.tolist(), "phase": list(b.phase),
            "capacity": b.capacity.tolist(), "oom_risk": b.oom_risk.tolist(), "micro_batch": b.micro_batch.tolist(),
            "errors": list(b.errors), "releasable": b.releasable_or_zero().tolist()}


def vision_models() -> list[str]:
    """Catalogue models with a vision tower (read from the catalogue, not from the code under test)."""
    found = []
    for name in list_models():
        try:
            if get_architecture(name).vision is not None:
                found.append(name)
        except ERRORS:
            continue
    return found


def random_words(rng: random.Random) -> dict[str, Any]:
    """One random mapping of user words (some invalid on purpose: the refusals must stay the same too)."""
    n = rng.choice([1, 1, 2, 4, 8, 16, 32])
    words: dict[str, Any] = {
        "model": rng.choice(list_models()), "gpu_model": rng.choice(list_gpus()),
        "method": rng.choice(["full", "lora", "qlora"]), "number_gpus": n,
        "dtype": rng.choice(["bf16", "bf16", "fp16", "fp32", "amp-bf16", "amp-fp16"]),
        "tokens_per_sample": rng.choice([256, 512, 1024, 2048, 4096, 8192, 32768]),
        "batch_size": n * rng.choice([1, 2, 4, 8]), "framework": rng.choice(FRAMEWORKS),
        "attention": rng.choice(["flash", "sdpa", "eager"]), "gradient_checkpointing": rng.random() < 0.6,
        "strategy": rng.choice([None, "ddp", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid", "zero0", "zero1", "zero2",
                                "zero3"]),
        "optimizer": rng.choice(["adamw", "adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit", "sgd"]),
        "optimizer_impl": rng.choice(["fused", "foreach", "for-loop"]),
        "lora_r": rng.choice([4, 8, 16, 64]), "lora_dropout": rng.choice([0.0, 0.0, 0.05]),
        "lora_target_modules": rng.choice(["q_proj,v_proj", "all-linear", "q_proj,k_proj,v_proj,o_proj,down_proj"]),
        "fused_loss": rng.random() < 0.2,
        "loss_kernel": rng.choice([None, None, "hf", "chunked", "fused-ce", "fused-linear-ce"]),
        "packing": rng.random() < 0.3, "samples_vary_in_length": rng.random() < 0.3,
        "dora": rng.random() < 0.1, "optimizer_state_dtype": rng.choice(["param", "fp32"]),
        "offload": rng.choice(["none", "none", "none", "optimizer", "optimizer+params"]),
        "gradient_accumulation_steps": rng.choice([1, 1, 2]),
    }
    if rng.random() < 0.2:
        words["tp"] = rng.choice([1, 2, 4])
    if rng.random() < 0.1:
        words["pp"] = rng.choice([1, 2])
    if rng.random() < 0.1:
        words["sequence_parallel"] = rng.choice([1, 2])
    if rng.random() < 0.15:
        words["model"] = rng.choice(vision_models())
        words["images_per_sample"] = rng.choice([1, 2])
        words["image_resolution"] = rng.choice([None, 336, 448, 672, 1024])
        words["freeze_vision"] = rng.random() < 0.7
    for flag in ("double_quant", "quantize_lm_head", "optimizer_in_backward", "activation_offloading",
                 "expandable_segments", "fsdp_cpu_ram_efficient_loading"):
        if rng.random() < 0.1:
            words[flag] = rng.random() < 0.5
    return words


def random_set() -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    return [random_words(rng) for _ in range(RANDOM_JOBS)]


def _sweep_csv(frame: pd.DataFrame) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.csv", Path(tmp) / "out.csv"
        frame.to_csv(src, index=False)
        subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "sweep", "--input", str(src), "--output",
                        str(dst), "--estimator", "theory"], check=True, capture_output=True)
        return dst.read_text(encoding="utf-8")


def _inputs(items: list[Any], read: Any) -> list[tuple[Any, Any] | str]:  # noqa: ANN401
    """(Job, Placement) of each item by ``read``, or the input error's text."""
    pairs: list[tuple[Any, Any] | str] = []
    for item in items:
        try:
            pairs.append(read(item))
        except ERRORS as exc:
            pairs.append("input: " + describe(exc, with_input=False))
    return pairs


def dump() -> dict[str, Any]:
    out: dict[str, Any] = {}
    pairs = _inputs(load_measurements().to_dict(orient="records"), row_to_inputs)
    out["measurements"] = [p if isinstance(p, str) else _answer(*p) for p in pairs]
    ok = [p for p in pairs if not isinstance(p, str)]
    out["measurements_batch"] = _batch([j for j, _ in ok], [p for _, p in ok])
    out["sweep_csv"] = _sweep_csv(space_frame())
    words = random_set()
    inputs = _inputs(words, job_and_placement)
    out["random"] = [p if isinstance(p, str) else _answer(*p) for p in inputs]
    good = [p for p in inputs if not isinstance(p, str)]
    out["random_batch"] = _batch([j for j, _ in good], [p for _, p in good])
    frame = pd.DataFrame(words)
    theory = get_estimator("theory")
    out["random_frame_given"] = recommend_frame(frame, theory).to_csv(index=False)
    out["random_frame_search"] = recommend_frame(frame.drop(columns=["number_gpus"]), theory).to_csv(index=False)
    out["random_recommend"] = [recommend(j, p.gpu_model, theory, strategy=p.strategy).model_dump(mode="json")
                               for j, p in good]
    return out


def _close(a: Any, b: Any, where: str, bad: list[str]) -> None:  # noqa: ANN401
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            bad.append(f"{where}: keys {sorted(set(a) ^ set(b))}")
        for k in a.keys() & b.keys():
            _close(a[k], b[k], f"{where}.{k}", bad)
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            bad.append(f"{where}: length {len(a)} vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            _close(x, y, f"{where}[{i}]", bad)
    elif isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        if not (a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= RTOL * max(abs(a), abs(b))):
            bad.append(f"{where}: {a!r} vs {b!r}")
    elif a != b:
        bad.append(f"{where}: {a!r} vs {b!r}")


def _csv_cells(text: str) -> list[list[Any]]:
    frame = pd.read_csv(pd.io.common.StringIO(text), keep_default_na=False, dtype=str)
    def cell(v: str) -> Any:  # noqa: ANN401
        try:
            return float(v)
        except ValueError:
            return v
    return [list(frame.columns)] + [[cell(v) for v in row] for row in frame.itertuples(index=False)]


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    bad: list[str] = []
    for key in old:
        if key.endswith("csv") or key.startswith("random_frame"):
            if old[key] != new[key]:
                _close(_csv_cells(old[key]), _csv_cells(new[key]), key, bad)
        else:
            _close(old[key], new[key], key, bad)
    return bad


def write_sample(dump_dir: Path, target: Path) -> int:
    """Every 10th random job, every 60th measured row and every 99th seed-sweep row of a dump, inputs and outputs."""
    old = pickle.loads((dump_dir / "theory_outputs.pkl").read_bytes())  # noqa: S301 - our own dump
    words = random_set()
    header, *rows = old["sweep_csv"].splitlines()
    space = space_frame()
    sample = {
        "source": f"outputs of the code before the array theory, dumped by bench/theory_identity.py --write {dump_dir}",
        "random": [{"words": words[i], "answer": old["random"][i]} for i in range(0, len(words), 10)],
        "measurements": [{"row": i, "answer": old["measurements"][i]} for i in range(0, len(old["measurements"]), 60)],
        "sweep_header": header,
        "sweep": [{"words": space.iloc[i].to_dict(), "line": rows[i]} for i in range(0, len(rows), 99)],
    }
    target.write_text(json.dumps(sample, indent=1, default=lambda v: v.item()) + "\n", encoding="utf-8")
    print(f"wrote {target}: {len(sample['random'])} random jobs, {len(sample['measurements'])} measured rows, "
          f"{len(sample['sweep'])} sweep rows")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="folder to dump the current code's outputs into")
    group.add_argument("--check", type=Path, help="folder of a previous dump to compare the current code with")
    group.add_argument("--sample", type=Path, nargs=2, metavar=("DUMP_DIR", "JSON"),
                       help="write a small sample of a previous dump (inputs and outputs) for tests/test_theory_identity.py")
    args = parser.parse_args(argv)
    if args.sample:
        return write_sample(args.sample[0], args.sample[1])
    new = dump()
    if args.write:
        args.write.mkdir(parents=True, exist_ok=True)
        (args.write / "theory_outputs.pkl").write_bytes(pickle.dumps(new))
        counts = {k: len(v) if isinstance(v, list) else len(v.splitlines()) if isinstance(v, str) else len(v["errors"])
                  for k, v in new.items()}
        print(f"wrote {args.write / 'theory_outputs.pkl'}: {counts}")
        return 0
    old = pickle.loads((args.check / "theory_outputs.pkl").read_bytes())  # noqa: S301 - our own dump
    bad = compare(old, new)
    exact = sum(old[k] == new[k] for k in old)
    print(f"{len(old)} sets, {exact} identical as dumped; {len(bad)} differences beyond {RTOL:g} relative")
    for line in bad[:40]:
        print("  ", line)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
