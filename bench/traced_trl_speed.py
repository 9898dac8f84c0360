"""Time of a cold SFTTrainer trace (autoconf/estimators/traced/stacks/trl_step.py); writes section
``traced-trl-speed`` of docs/benchmarks.md.

    python bench/traced_trl_speed.py

Each row is a fresh driver process, as the estimator runs it on a cache miss: imports (TRL, transformers,
accelerate, peft, datasets), fake process group, the SFTTrainer's construction (dataset preparation, peft), two
steps of ``trainer.train()`` (accelerate's prepare, fused LM head, backward, clipping, AdamW), the Trainer's
checkpoint save, and the caching-allocator replay.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoconf.catalog import get_architecture  # noqa: E402
from autoconf.estimators.traced.stacks.memory import DRIVERS, stack_spec  # noqa: E402
from autoconf.schema import GIB, Job, Placement  # noqa: E402
from bench._report import update_section  # noqa: E402

MODEL, SEQ, GPU = "llama3.1-8b", 2048, "NVIDIA-H100-80GB-HBM3"
# (method, DoRA, GPUs, strategy, fsdp_cpu_ram_efficient_loading)
ROWS = [("lora", False, 1, "ddp", False), ("qlora", False, 1, "ddp", False), ("lora", True, 1, "ddp", False),
        ("lora", False, 8, "ddp", False), ("lora", False, 8, "fsdp", False), ("lora", False, 8, "fsdp", True),
        ("full", False, 8, "fsdp", False), ("qlora", False, 8, "fsdp", True)]


def run(method: str, dora: bool, gpus: int, strategy: str, efficient: bool) -> dict[str, float | str]:
    job = Job(model=MODEL, method=method, dora=dora, tokens_per_sample=SEQ, batch_size=gpus, framework="trl",
              fsdp_cpu_ram_efficient_loading=efficient)
    spec = stack_spec(job, Placement(gpu_model=GPU, number_gpus=gpus, strategy=strategy), get_architecture(MODEL), 1)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", DRIVERS["trl"], f"{tmp}/spec.json", f"{tmp}/out.npz"],
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    top = max(summary["phases"], key=lambda p: p["peak"])
    load = next(p["peak"] for p in summary["phases"] if p["phase"] == "load")
    return {"wall": wall, "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            "ops": summary["num_ops"], "allocated": summary["allocated_peak"] / GIB,
            "reserved": summary["reserved_peak"] / GIB, "load": load / GIB, "phase": f"{top['phase']} (step {top['step']})"}


def main() -> int:
    load = os.getloadavg()[0]
    lines = [
        "## Traced TRL SFTTrainer: one rank, cold", "",
        f"Command: `python bench/traced_trl_speed.py` on {platform.machine()}, {os.cpu_count()} CPU cores shared with "
        f"other jobs (load average {load:.1f} at start), Python {platform.python_version()}. {MODEL}, bf16, SDPA, "
        f"the Trainer's fused AdamW, gradient checkpointing, micro-batch 1 × {SEQ} per GPU, LoRA r 8 on q_proj and "
        "v_proj. wall = the fresh driver process; CPU = its user + system seconds; allocated and reserved = the "
        "rank's traced peak and the replay of its allocations without a capacity; load = the peak while loading.", "",
        "| method | GPUs | strategy | efficient loading | ops traced | load GiB | allocated GiB | reserved GiB | "
        "peak phase | wall s | CPU s |",
        "|---|---:|---|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for method, dora, gpus, strategy, efficient in ROWS:
        r = run(method, dora, gpus, strategy, efficient)
        lines.append(f"| {method}{' (DoRA)' if dora else ''} | {gpus} | {strategy if gpus > 1 else 'one GPU'} | "
                     f"{'on' if efficient else 'off'} | {r['ops']:,} | {r['load']:.2f} | {r['allocated']:.2f} | "
                     f"{r['reserved']:.2f} | {r['phase']} | {r['wall']:.1f} | {r['cpu']:.1f} |")
        print(lines[-1], flush=True)
    lines += ["", f"Load average at the end: {os.getloadavg()[0]:.1f}."]
    text = "\n".join(lines)
    update_section("docs/benchmarks.md", "traced-trl-speed", text, title="Benchmarks")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
