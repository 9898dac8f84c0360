"""Every entry point's output for a fixed-seed sample of random jobs, dumped and compared (issue 26 "one way out").

    python bench/entry_identity.py dump DIR [--jobs 500] [--seed 26]
    python bench/entry_identity.py compare BASELINE_DIR NEW_DIR

``dump`` sends the same random jobs through each entry point, in this process, and writes one JSON-lines file per
entry point to DIR: the CLI (``estimate --json``, the ``estimate`` table and ``--format budget``, ``recommend --json`` and its
text), the REST
API through FastAPI's TestClient (``/api/estimate`` and ``/api/recommend`` with the flat body, ``/api/estimate`` with
the nested EstimateInput body), ado's experiments as the tests call them (``resource_estimate`` and
``min_gpu_recommender``), ``autoconf-gpu sweep`` (a CSV of all the jobs; half give ``number_gpus``; and the
3,960-point seed space) and the estimators' ``estimate_frame``.
Most jobs use theory; every fifth the hybrid estimator (learned + theory), where the learned models are installed.

``compare`` reads two dumps and reports each difference: a number whose relative difference exceeds 1e-9, any
other value (text, the CLI table, a CSV cell that is not a number) that is not identical. Exit 1 on any difference.
``--ignore KEY`` leaves a key out of both sides' JSON objects: a Job field added since the baseline, which the CLI's
and the REST API's echo of the job then shows.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REL = 1e-9
IGNORED: set[str] = set()  # keys added after the baseline (compare --ignore), left out of both sides
TEXT_MODELS = (
    "llama3.1-8b", "llama-7b", "granite-3.1-8b-instruct", "granite-3.1-2b", "mistral-7b-v0.1", "qwen2.5-7b",
    "qwen2.5-0.5b", "llama3.2-1b", "llama3.2-3b", "gemma-2-9b", "phi-3-mini-4k", "mixtral-8x7b-instruct-v0.1",
    "llama3.1-70b", "granite-20b-v2", "qwen3-30b-a3b", "deepseek-v2-lite", "granite-4.0-h-micro", "gpt2",
    "falcon-7b", "qwen3-8b", "7e9",
)
VISION_MODELS = ("qwen2-vl-7b", "llava-1.5-7b", "llama3.2-11b-vision")
GPUS = ("NVIDIA-A100-80GB-PCIe", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3", "L40S",
        "NVIDIA-L4", "NVIDIA-H200", "Tesla-V100-SXM2-32GB", "NVIDIA-GeForce-RTX-4090")
FRAMEWORKS = ("hf-trainer", "fms-hf-tuning", "peft", "litgpt", "torchtune", "unsloth", "axolotl", "llama-factory",
              "ms-swift", "deepspeed", "fsdp-qlora", "llm-foundry")


def random_jobs(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` jobs as word mappings (Job + Placement fields; batch_size = per-device × GPUs × accumulation)."""
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        vision = rng.random() < 0.08
        gpus = rng.choice((1, 1, 2, 4, 8))
        per_device, accum = rng.choice((1, 2, 4, 8)), rng.choice((1, 1, 2, 4))
        job: dict[str, Any] = {
            "model": rng.choice(VISION_MODELS if vision else TEXT_MODELS), "gpu_model": rng.choice(GPUS),
            "method": rng.choice(("full", "lora", "lora", "qlora")), "dtype": rng.choice(("bf16", "bf16", "fp16",
                                                                                         "fp32", "amp-bf16")),
            "tokens_per_sample": rng.choice((512, 1024, 2048, 4096, 8192)), "number_gpus": gpus,
            "batch_size": per_device * gpus * accum, "gradient_accumulation_steps": accum,
            "framework": rng.choice(FRAMEWORKS), "gradient_checkpointing": rng.random() < 0.7,
            "attention": rng.choice(("flash", "flash", "sdpa", "eager")), "fused_loss": rng.random() < 0.2,
            "lora_r": rng.choice((8, 16, 64)), "optimizer": rng.choice(("adamw", "adamw", "adamw-8bit", "sgd")),
            "strategy": rng.choice((None, None, "ddp", "fsdp", "zero2", "zero3")),
            "estimator": "hybrid" if i % 5 == 4 else "theory",
        }
        if rng.random() < 0.1:
            job["samples_vary_in_length"] = True
        if rng.random() < 0.1:
            job["packing"] = True
        if vision:
            job["images_per_sample"] = rng.choice((0, 1, 2))
        jobs.append({k: v for k, v in job.items() if v is not None})
    return jobs


# --- entry points --------------------------------------------------------------------------------------------

def _cli(argv: list[str]) -> dict[str, Any]:
    from autoconf.interfaces.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = int(exc.code or 0)
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _estimate_argv(job: dict[str, Any]) -> list[str]:
    gpus = job["number_gpus"]
    argv = ["estimate", "--params" if job["model"][0].isdigit() else "--model", job["model"], "--gpu", job["gpu_model"],
            "--dtype", job["dtype"], "--seq-len", str(job["tokens_per_sample"]),
            "--per-device-batch", str(job["batch_size"] // gpus // job["gradient_accumulation_steps"]),
            "--grad-accum", str(job["gradient_accumulation_steps"]), "--dp", str(gpus), "--method", job["method"],
            "--framework", job["framework"], "--grad-checkpoint", str(job["gradient_checkpointing"]).lower(),
            "--attention", job["attention"], "--fused-loss", str(job["fused_loss"]).lower(),
            "--lora-rank", str(job["lora_r"]), "--optimizer", job["optimizer"], "--estimator", job["estimator"]]
    if "strategy" in job:
        argv += ["--strategy", job["strategy"]]
    if job.get("samples_vary_in_length"):
        argv.append("--samples-vary-in-length")
    if job.get("images_per_sample"):
        argv += ["--images-per-sample", str(job["images_per_sample"])]
    return argv


def _recommend_argv(job: dict[str, Any]) -> list[str]:
    argv = ["recommend", "--model", job["model"], "--gpu", job["gpu_model"], "--method", job["method"],
            "--tokens-per-sample", str(job["tokens_per_sample"]), "--batch-size", str(job["batch_size"]),
            "--estimator", job["estimator"], "--max-gpus", "16"]
    return argv


def cli_rows(jobs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for i, job in enumerate(jobs):
        argv = _estimate_argv(job)
        yield {"entry": "cli-estimate-json", "id": i, "argv": argv, **_cli([*argv, "--json"])}
        yield {"entry": "cli-estimate-table", "id": i, "argv": argv, **_cli(argv)}
        if i % 5 == 0:
            yield {"entry": "cli-estimate-budget", "id": i, "argv": argv, **_cli([*argv, "--format", "budget"])}
        if i % 4 == 0:
            argv = _recommend_argv(job)
            yield {"entry": "cli-recommend-json", "id": i, "argv": argv, **_cli([*argv, "--json"])}
            yield {"entry": "cli-recommend-text", "id": i, "argv": argv, **_cli(argv)}


def _nested(job: dict[str, Any]) -> dict[str, Any]:
    dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "amp-bf16": "bfloat16"}[job["dtype"]]
    gpus = job["number_gpus"]
    return {"estimator": {"method": job["estimator"]}, "configs": [{
        "hf_training": {"per_device_train_batch_size": job["batch_size"] // gpus // job["gradient_accumulation_steps"],
                        "gradient_accumulation_steps": job["gradient_accumulation_steps"],
                        "gradient_checkpointing": job["gradient_checkpointing"], "max_steps": 100},
        "fm": {"base_model_path": job["model"], "max_seq_length": job["tokens_per_sample"], "torch_dtype": dtype,
               "technique": job["method"], "flash_attention_v2": job["attention"] == "flash",
               "packing": job.get("packing", False)},
        "infra": {"numGpusPerPod": min(gpus, 8), "numPods": 1, "gpuModel": job["gpu_model"]},
        "peft_lora": {"r": job["lora_r"]},
    }]}


def rest_rows(jobs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    from fastapi.testclient import TestClient

    from autoconf.interfaces.api.app import app

    with TestClient(app) as client:
        for i, job in enumerate(jobs):
            flat = {**job, "num_samples": 10_000, "price_per_gpu_hour_usd": 2.5}
            res = client.post("/api/estimate", json=flat)
            yield {"entry": "rest-flat-estimate", "id": i, "body": flat, "status": res.status_code, "out": res.json()}
            nested = _nested(job)
            res = client.post("/api/estimate", json=nested)
            yield {"entry": "rest-nested-estimate", "id": i, "body": nested, "status": res.status_code,
                   "out": res.json()}
            if i % 10 == 0:  # the one-part routes
                for route in ("memory", "time", "tokens", "cost"):
                    res = client.post(f"/api/{route}", json=flat)
                    yield {"entry": f"rest-flat-{route}", "id": i, "body": flat, "status": res.status_code,
                           "out": res.json()}
            if i % 4 == 0:
                body = {k: v for k, v in job.items() if k != "number_gpus"} | {"max_gpus": 16}
                res = client.post("/api/recommend", json=body)
                yield {"entry": "rest-flat-recommend", "id": i, "body": body, "status": res.status_code,
                       "out": res.json()}


def _ado_point(job: dict[str, Any]) -> dict[str, Any]:
    return {"model_name": job["model"], "method": job["method"], "gpu_model": job["gpu_model"],
            "tokens_per_sample": job["tokens_per_sample"], "batch_size": job["batch_size"],
            "estimator": job["estimator"], "dtype": job["dtype"], "framework": job["framework"],
            "gradient_accumulation_steps": job["gradient_accumulation_steps"],
            "gradient_checkpointing": job["gradient_checkpointing"], "attention": job["attention"],
            "fused_loss": job["fused_loss"], "lora_r": job["lora_r"]}


def _call(function: Any, point: dict[str, Any]) -> dict[str, Any]:  # noqa: ANN401 - an ado experiment
    try:
        return {"out": function(**point)}
    except ValueError as exc:  # ado's validation of the point (before our code)
        return {"refused": str(exc)}


def ado_rows(jobs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    from autoconf.interfaces.ado import experiments

    for i, job in enumerate(jobs):
        point = _ado_point(job)
        estimate = {**point, "number_gpus": job["number_gpus"]}
        yield {"entry": "ado-resource-estimate", "id": i, "point": estimate,
               **_call(experiments.resource_estimate, estimate)}
        if i % 2 == 0:
            yield {"entry": "ado-min-gpu", "id": i, "point": point, **_call(experiments.min_gpu_recommender, point)}


SWEEP_COLUMNS = ("model", "method", "gpu_model", "tokens_per_sample", "batch_size", "gradient_accumulation_steps",
                 "dtype", "framework", "gradient_checkpointing", "attention", "fused_loss", "lora_r", "optimizer",
                 "strategy", "number_gpus")


def sweep_rows(jobs: list[dict[str, Any]], folder: Path) -> Iterator[dict[str, Any]]:
    for estimator in ("theory", "hybrid"):
        source, target = folder / f"sweep-in-{estimator}.csv", folder / f"sweep-out-{estimator}.csv"
        with source.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(SWEEP_COLUMNS)
            for i, job in enumerate(jobs):
                row = {**job, "number_gpus": job["number_gpus"] if i % 2 else ""}
                writer.writerow([row.get(c, "") for c in SWEEP_COLUMNS])
        result = _cli(["sweep", "--input", str(source), "--output", str(target), "--estimator", estimator,
                       "--max-gpus", "16"])
        text = target.read_text(encoding="utf-8") if target.exists() else ""
        stderr = result["stderr"].replace(str(folder), "DIR")
        yield {"entry": f"sweep-{estimator}", "id": 0, "rc": result["rc"], "stderr": stderr, "csv": text}


def frame_rows(jobs: list[dict[str, Any]], folder: Path) -> Iterator[dict[str, Any]]:
    """estimate_frame (each row at its own placement) and sweep over the 3,960-point seed space."""
    import pandas as pd

    from autoconf.estimators.contract import get_estimator
    from autoconf.evaluation.space import space_frame

    frame = pd.DataFrame([{c: job.get(c) for c in SWEEP_COLUMNS} for job in jobs])
    for name in ("theory", "hybrid"):
        text = get_estimator(name).estimate_frame(frame).to_csv(index=False, lineterminator="\n")
        yield {"entry": f"estimate-frame-{name}", "id": 0, "csv": text}
    source, target = folder / "space.csv", folder / "space-out.csv"
    space_frame().to_csv(source, index=False)
    result = _cli(["sweep", "--input", str(source), "--output", str(target), "--estimator", "hybrid"])
    yield {"entry": "sweep-seed-space", "id": 0, "rc": result["rc"], "stderr": result["stderr"].replace(str(folder), "DIR"),
           "csv": target.read_text(encoding="utf-8") if target.exists() else ""}


def dump(folder: Path, n: int, seed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    jobs = random_jobs(n, seed)
    (folder / "jobs.json").write_text(json.dumps(jobs, indent=1))
    for name, rows in (("cli", cli_rows(jobs)), ("rest", rest_rows(jobs)), ("ado", ado_rows(jobs)),
                       ("sweep", sweep_rows(jobs, folder)), ("frame", frame_rows(jobs, folder))):
        with (folder / f"{name}.jsonl").open("w", encoding="utf-8") as handle:
            count = 0
            for row in rows:
                handle.write(json.dumps(row, sort_keys=True) + "\n")
                count += 1
        print(f"{name}: {count} outputs", file=sys.stderr)


# --- comparison ----------------------------------------------------------------------------------------------

def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= REL * max(abs(a), abs(b))


def diff(a: Any, b: Any, where: str) -> Iterator[str]:  # noqa: ANN401 - any JSON value
    """Each difference between two JSON values: numbers within REL, everything else identical."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        if a != b or type(a) is not type(b):
            yield f"{where}: {a!r} != {b!r}"
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if type(a) is not type(b) or not _close(float(a), float(b)):
            yield f"{where}: {a!r} != {b!r}"
    elif isinstance(a, dict) and isinstance(b, dict):
        a, b = ({k: v for k, v in d.items() if k not in IGNORED} for d in (a, b))
        if list(a) != list(b):
            yield f"{where}: keys {sorted(set(a) ^ set(b))} differ (or their order)"
        for key in a.keys() & b.keys():
            yield from diff(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{where}: {len(a)} items != {len(b)}"
        for k, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from diff(x, y, f"{where}[{k}]")
    elif isinstance(a, str) and isinstance(b, str) and where.endswith("stdout") and a.startswith("{"):
        yield from diff(json.loads(a), json.loads(b), where + "(json)")
    elif a != b:
        yield f"{where}: {str(a)[:200]!r} != {str(b)[:200]!r}"


def diff_csv(a: str, b: str, where: str) -> Iterator[str]:
    """Cells of two CSV texts: numbers within REL, other cells identical (the text itself is reported apart)."""
    rows_a, rows_b = list(csv.reader(io.StringIO(a))), list(csv.reader(io.StringIO(b)))
    if len(rows_a) != len(rows_b):
        yield f"{where}: {len(rows_a)} rows != {len(rows_b)}"
    for r, (x, y) in enumerate(zip(rows_a, rows_b, strict=False)):
        if len(x) != len(y):
            yield f"{where} row {r}: {len(x)} cells != {len(y)}"
        for c, (p, q) in enumerate(zip(x, y, strict=False)):
            fp, fq = _number(p), _number(q)
            if p != q and (fp is None or fq is None or not _close(fp, fq)):
                yield f"{where} row {r} col {rows_a[0][c] if rows_a else c}: {p!r} != {q!r}"


def _rows(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out[(row["entry"], row["id"])] = row
    return out


def compare(base: Path, new: Path) -> int:
    problems: list[str] = []
    counts: dict[str, int] = {}
    text_identical = True
    for name in ("cli", "rest", "ado", "sweep", "frame"):
        a, b = _rows(base / f"{name}.jsonl"), _rows(new / f"{name}.jsonl")
        if a.keys() != b.keys():
            problems.append(f"{name}: outputs {sorted(a.keys() ^ b.keys())[:5]} present on one side only")
        for key in sorted(a.keys() & b.keys()):
            counts[key[0]] = counts.get(key[0], 0) + 1
            x, y = dict(a[key]), dict(b[key])
            if "csv" in x:
                text_identical &= x["csv"] == y["csv"]
                problems += list(diff_csv(x.pop("csv"), y.pop("csv"), f"{key[0]}"))
            problems += list(diff(x, y, f"{key[0]}#{key[1]}"))
    for entry, count in sorted(counts.items()):
        print(f"{entry:<24}{count:>5} outputs compared")
    print(f"sweep CSV text byte-identical: {text_identical}")
    for line in problems[:100]:
        print("DIFF", line)
    print(f"{len(problems)} differences (relative tolerance {REL:g} on numbers; text identical)")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    d = sub.add_parser("dump")
    d.add_argument("folder", type=Path)
    d.add_argument("--jobs", type=int, default=500)
    d.add_argument("--seed", type=int, default=26)
    c = sub.add_parser("compare")
    c.add_argument("baseline", type=Path)
    c.add_argument("new", type=Path)
    c.add_argument("--ignore", action="append", default=[], metavar="KEY",
                   help="a key added since the baseline (a new Job field echoed in `job`), left out of both sides")
    args = parser.parse_args()
    if args.verb == "dump":
        dump(args.folder, args.jobs, args.seed)
        return 0
    IGNORED.update(args.ignore)
    return compare(args.baseline, args.new)


if __name__ == "__main__":
    raise SystemExit(main())
