"""Time and host memory of a traced training step; writes section ``traced-speed`` of docs/benchmarks.md.

    python bench/traced_speed.py [--repeat 2]

Each row is a fresh worker process (``python -m autoconf.estimators.traced.step``: imports, meta build, fake
materialisation, optimizer warm-up, one traced step), as the estimator runs it on a cache miss. The
tiny catalogue model in the same run is the baseline: its time is almost all imports and start-up,
so the ratio shows what the 8B model itself costs on this machine, whatever its load. The last row is
a whole fit (the design shapes plus the check shape) as ``TracedEstimator`` makes it once per config.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.catalog import get_architecture
from autoconf.estimators.traced.fit import fit_trace, run_worker
from autoconf.estimators.traced.job_spec import trace_spec
from autoconf.schema import GIB, Job
from bench._report import update_section

BIG, TINY = "llama3.1-8b", "tiny-llama-test"
SHAPE = (1, 4096)
LIMIT_S, LIMIT_RSS = 15.0, 2 * GIB  # issue 6: ≤ 15 s and ≤ 2 GiB host memory for the 8B trace


def _job(model: str, checkpointing: bool) -> Job:
    # optimizer_impl fused = HF Trainer's adamw_torch_fused (no params-sized temporary)
    return Job(model=model, method="full", tokens_per_sample=SHAPE[1], batch_size=SHAPE[0],
               gradient_checkpointing=checkpointing, optimizer_impl="fused")


def one_trace(model: str, checkpointing: bool) -> dict[str, float]:
    """Wall time of a fresh worker process, its traced step, max RSS and the traced peak."""
    spec = {**trace_spec(_job(model, checkpointing), get_architecture(model)), "shapes": [list(SHAPE)]}
    cpu0 = _children_cpu()
    start = time.perf_counter()
    summary, arrays = run_worker([spec])
    wall = time.perf_counter() - start
    peak = float(arrays[0][0][:, :5].sum(axis=1).max())
    result = summary["specs"][0]["results"][0]
    return {"wall_s": wall, "cpu_s": _children_cpu() - cpu0, "step_s": result["step_seconds"],
            "rss": summary["max_rss_bytes"], "ops": result["num_ops"], "peak_gib": peak / GIB}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def best_of(model: str, checkpointing: bool, repeat: int) -> dict[str, float]:
    runs = [one_trace(model, checkpointing) for _ in range(repeat)]
    return min(runs, key=lambda r: r["wall_s"])


def fit_row(model: str) -> dict[str, float]:
    spec = trace_spec(_job(model, False), get_architecture(model))
    fit = fit_trace(spec, "single", verify=True)
    return {"wall_s": fit.meta["worker_wall_seconds"], "rss": fit.meta["max_rss_bytes"],
            "traces": len(fit.meta["step_seconds"]), "check_error": fit.meta["check_max_error_bytes"]}


def markdown(rows: list[tuple[str, dict[str, float]]], base: dict[str, float], fit: dict[str, float]) -> str:
    lines = [
        "## Traced estimator: one training step on fake tensors",
        "",
        "Regenerate: `python bench/traced_speed.py`. Machine: "
        f"{platform.machine()}, {os.cpu_count()} CPU cores shared with other jobs, Python {platform.python_version()}. "
        f"Each row is a fresh worker process (imports + meta build + fake materialisation + optimizer warm-up "
        f"(zero gradients, one `step()`) + traced step), best of the repeats; CPU s = user + system time of "
        f"that process (load-independent, unlike wall time); max RSS of that process. "
        "Full fine-tuning, bf16, SDPA (flash route), "
        f"fused AdamW, micro-batch {SHAPE[0]} × {SHAPE[1]} tokens. Ratio = wall time / the tiny model's wall time "
        "in the same run (the tiny model is all start-up).",
        "",
        "| model | checkpointing | ops traced | traced peak GiB | traced step s | process wall s | process CPU s | "
        "wall ratio vs tiny | max RSS MiB | within 15 s / 2 GiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows:
        ok = r["wall_s"] <= LIMIT_S and r["rss"] <= LIMIT_RSS
        lines.append(
            f"| {label} | {r['gc']} | {r['ops']:,} | {r['peak_gib']:.2f} | {r['step_s']:.2f} | {r['wall_s']:.2f} | "
            f"{r['cpu_s']:.2f} | {r['wall_s'] / base['wall_s']:.2f} | {r['rss'] / 2**20:.0f} | "
            f"{'yes' if ok else 'NO'} |"
        )
    lines += [
        "",
        f"A whole fit of {BIG} (full, no checkpointing: {fit['traces']} traced shapes in one worker, "
        f"as the estimator does once per configuration before caching it): {fit['wall_s']:.1f} s, "
        f"max RSS {fit['rss'] / 2**20:.0f} MiB; the check shape was predicted with a largest per-op error of "
        f"{fit['check_error']} bytes.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="runs per row; the fastest is reported")
    args = parser.parse_args(argv)
    rows = []
    base = {**best_of(TINY, False, args.repeat), "gc": "no"}
    rows.append((TINY, base))
    for checkpointing in (False, True):
        rows.append((BIG, {**best_of(BIG, checkpointing, args.repeat), "gc": "yes" if checkpointing else "no"}))
    fit = fit_row(BIG)
    text = markdown(rows, base, fit)
    path = update_section("docs/benchmarks.md", "traced-speed", text, title="Benchmarks")
    print(text)
    print(f"wrote section traced-speed of {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
