"""The layout recommender against nanotron's published best layouts (section ``layout-nanotron`` of
docs/accuracy.md).

nanotron's benchmark figure (data/measurements.csv, source ``nanotron-benchmarks``) gives, per model size and
node count, the fastest layout its sweep found (DP × TP × PP, ZeRO stage, micro-batch, accumulation) and its MFU.
For each cell ``autoconf.recommend.layout.fastest_layout`` searches the same space for the same job and GPU
count and nanotron's sharding options (ZeRO-0 / ZeRO-1); a cell agrees when the choice is nanotron's layout, or
when nanotron's layout is within 5 % of the choice's tokens/s by our model (equivalently MFU: same FLOPs).

Not stated by the source and assumed here: H100 80GB SXM nodes of 8 GPUs (the Ultrascale Playbook's cluster),
4,096-token sequences, full pre-training in bf16 with fp32 master weights (amp-bf16), no activation
checkpointing in nanotron's runs, a 3,200 Gb/s (400 GB/s) node network. The nanotron models are Llama-shaped;
the nearest catalogued Llama 3 shapes stand in (1.34B: llama3.2-1b, 3.57B: llama3.2-3b, 8.86B: llama3.1-8b,
80B: llama3.1-70b), so the comparison is of layouts for those shapes, not of nanotron's exact models.

    python bench/layout_vs_nanotron.py [--output docs/accuracy.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.estimators import get_estimator
from autoconf.estimators.theory import throughput as tp
from autoconf.evaluation.data import load_measurements
from autoconf.recommend.layout import fastest_layout
from autoconf.schema import Job, Placement, Strategy
from bench._report import update_section

STAND_IN = {"nanotron-1.34b": "llama3.2-1b", "nanotron-3.57b": "llama3.2-3b", "nanotron-8.86b": "llama3.1-8b",
            "nanotron-80.0b": "llama3.1-70b"}
GPU, SEQ, LINK, TOLERANCE = "H100", 4096, 400.0, 0.05
NANOTRON_SHARDINGS: tuple[Strategy, ...] = ("ddp", "zero1")  # nanotron's space: ZeRO-0 (plain DP) and ZeRO-1


def compare(row: pd.Series) -> dict[str, object]:
    """One nanotron cell: our choice, nanotron's layout under our model, and whether they agree."""
    model, n = STAND_IN[row["model_name"]], int(row["number_gpus"])
    job = Job(model=model, method="full", dtype="amp-bf16", tokens_per_sample=SEQ, batch_size=int(row["batch_size"]),
              gradient_checkpointing=False)
    start = time.perf_counter()
    choice = fastest_layout(job, GPU, n, get_estimator("theory"), inter_node_gbps=LINK, shardings=NANOTRON_SHARDINGS)
    seconds = time.perf_counter() - start
    theirs_job = job.model_copy(update={"gradient_accumulation_steps": int(row["gradient_accumulation_steps"])})
    theirs = tp.estimate_throughput(theirs_job, Placement(
        gpu_model=GPU, number_gpus=n, tp=int(row["tensor_parallel"]), pp=int(row["pipeline_parallel"]),
        strategy=row["strategy"], inter_node_gbps=LINK))
    best = choice.best
    ours = best.throughput.tokens_per_second if best else float("nan")
    same = best is not None and (best.placement.tp, best.placement.pp, best.placement.effective_strategy,
                                 best.job.gradient_accumulation_steps) == (
        int(row["tensor_parallel"]), int(row["pipeline_parallel"]), row["strategy"],
        int(row["gradient_accumulation_steps"]))
    ratio = theirs.tokens_per_second / ours if best else float("nan")
    return {"cell": f"{row['model_name'].split('-')[1]} × {n // 8} node(s)",
            "nanotron": f"{row['kernels'].split(': ')[-1]}, MBS {row['per_device_batch_size']}, "
                        f"GAS {row['gradient_accumulation_steps']} (MFU {row['mfu']:.3f})",
            "ours": best.label if best else choice.why, "ratio": ratio, "same": same,
            "agree": bool(same or ratio >= 1 - TOLERANCE), "ms": seconds * 1000, "evaluated": choice.evaluated}


def report(frame: pd.DataFrame) -> str:
    rows = [compare(r) for _, r in frame.iterrows()]
    agree = sum(r["agree"] for r in rows)
    ms = sorted(float(r["ms"]) for r in rows)  # type: ignore[arg-type]
    lines = [
        f"nanotron's best layout per (model size, nodes) against `recommend.layout.fastest_layout` on the same "
        f"job (bench/layout_vs_nanotron.py; assumptions in its docstring: {GPU}, {SEQ}-token sequences, Llama 3 "
        "stand-in shapes, 400 GB/s between nodes). *Theirs / ours*: nanotron's layout's tokens/s by our model over "
        f"our choice's. Agree: same layout, or theirs within {TOLERANCE:.0%} by our model.",
        "",
        "| cell | nanotron's layout | our choice | theirs / ours | agree |",
        "|---|---|---|---|---|",
        *[f"| {r['cell']} | {r['nanotron']} | {r['ours']} | {float(r['ratio']):.2f} | "  # type: ignore[arg-type]
          f"{'same' if r['same'] else 'yes' if r['agree'] else '**no**'} |" for r in rows],
        "",
        f"Agreement: {agree} of {len(rows)} cells ({agree / len(rows):.0%}; target ≥ 70 %). Search time per cell "
        "(one theory memory_batch over all layouts, scalar tokens/s for those that fit): "
        f"median {ms[len(ms) // 2]:.0f} ms, max {ms[-1]:.0f} ms "
        f"(target ≤ 50 ms: {'met' if ms[-1] <= 50 else 'not met'}).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="docs/accuracy.md")
    args = parser.parse_args(argv)
    table = load_measurements()
    text = report(table[table["source"] == "nanotron-benchmarks"])
    print(text)
    update_section(Path(args.output), "layout-nanotron", "## Layout recommender vs nanotron\n\n" + text,
                   title="Accuracy")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
