"""The ``--plot FILE`` of ``estimate``, ``sweep`` and ``recommend``: matplotlib (Agg) figures written to PNG or SVG.

The only module that imports matplotlib (optional extra ``plot``); where it is missing, the verb stops with one
line and exit code 2. ``plot_estimate``: per-GPU memory components stacked against the GPU's capacity, peak phase
marked. ``plot_sweep``: fewest GPUs per model × GPU of a sweep's output, cells with ``can_recommend = 0`` marked.
``plot_recommend``: peak memory and OOM risk against the GPU count, the recommended count marked.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MEMORY_PARTS
from autoconf.errors import AutoconfError, InvalidInputError
from autoconf.estimators.contract import Estimator
from autoconf.recommend.search import candidate_gpus
from autoconf.schema import GIB, Answer, Job, Placement, Recommendation

FORMATS = (".png", ".svg")
PARTS = MEMORY_PARTS
COLOURS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#bab0ac")  # Tableau 10, as on the web page
DPI = 110  # a 7-inch-wide figure is ~770 px: readable in a README, under 100 KB as PNG


def _pyplot(path: str) -> Any:
    """matplotlib.pyplot on the Agg backend, after checking the file name; one-line errors otherwise."""
    if Path(path).suffix.lower() not in FORMATS:
        raise InvalidInputError("plot", f"must end in {' or '.join(FORMATS)}; got '{path}'")
    try:
        import matplotlib
    except ImportError:
        raise InvalidInputError("plot", "needs matplotlib: pip install 'autoconf-gpu[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    import matplotlib.pyplot as plt

    plt.close(fig)


def plot_estimate(mem: Answer, path: str) -> None:
    """One horizontal bar of the per-GPU memory components, the capacity as a dashed line, the peak marked."""
    plt = _pyplot(path)
    job, place = mem.inputs()
    fig, ax = plt.subplots(figsize=(7.5, 2.6))
    left = 0.0
    for part, colour in zip(PARTS, COLOURS, strict=True):
        gib = getattr(mem, f"{part}_bytes") / GIB
        ax.barh(0, gib, left=left, color=colour, height=0.5, label=f"{part} {gib:.1f}")
        left += gib
    peak, cap = mem.peak_bytes / GIB, mem.capacity_bytes / GIB
    ax.axvline(cap, color="black", linestyle="--", linewidth=1.5)
    ax.annotate(f"capacity {cap:.1f} GiB", (cap, 0.42), ha="right", va="bottom", fontsize=9, xytext=(-4, 0),
                textcoords="offset points")
    ax.plot([peak], [-0.3], marker="^", color="#c0392b" if peak > cap else "black", markersize=9)
    ax.annotate(f"peak {peak:.1f} GiB at {mem.peak_phase} · oom_risk {mem.oom_risk:.3f}", (peak, -0.42),
                ha="right" if peak > 0.6 * max(peak, cap) else "left", va="top", fontsize=9)
    ax.set_xlim(0, max(peak, cap) * 1.08)
    ax.set_ylim(-0.75, 0.75)
    ax.set_yticks([])
    ax.set_xlabel("GiB per GPU")
    ax.set_title(f"{job.model} · {job.method} · {job.tokens_per_sample} tokens × batch {job.batch_size}"
                 f" · {place.number_gpus}× {place.gpu_model} ({place.effective_strategy})", fontsize=10)
    ax.legend(ncol=6, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.32), frameon=False)
    _save(fig, path)


def _sweep_cells(frame: pd.DataFrame) -> tuple[list[str], list[str], dict[tuple[str, str], tuple[int, int, int]]]:
    """Models, GPUs and per cell (largest fewest-GPU count over its rows, rows with nothing, rows in all)."""
    model = frame["model"] if "model" in frame else frame["model_name"]
    gpus = (frame["gpus"].fillna(0) * frame["workers"].fillna(0)).astype(int)
    ok = frame["can_recommend"].fillna(0).astype(int) == 1
    cells: dict[tuple[str, str], tuple[int, int, int]] = {}
    for m, g, n, good in zip(model.astype(str), frame["gpu_model"].astype(str), gpus, ok, strict=True):
        worst, refused, rows = cells.get((m, g), (0, 0, 0))
        cells[(m, g)] = (max(worst, int(n)) if good else worst, refused + (not good), rows + 1)
    return list(dict.fromkeys(model.astype(str))), list(dict.fromkeys(frame["gpu_model"].astype(str))), cells


def plot_sweep(frame: pd.DataFrame, path: str) -> None:
    """Heat map, model × GPU: the fewest GPUs that fit (the largest over the cell's rows); × where some row can't."""
    plt = _pyplot(path)
    if not {"gpu_model", "can_recommend", "gpus", "workers"} <= set(frame.columns) or not (
            "model" in frame or "model_name" in frame):
        raise InvalidInputError("plot", "a sweep plot needs the columns model, gpu_model, can_recommend, gpus, workers")
    models, gpus, cells = _sweep_cells(frame)
    grid = [[float(cells.get((m, g), (0, 0, 0))[0] or math.nan) for g in gpus] for m in models]
    fig, ax = plt.subplots(figsize=(3.0 + 1.3 * len(gpus), 1.6 + 0.45 * len(models)))
    cmap = plt.get_cmap("YlOrRd").with_extremes(bad="#d0d0d0")  # grey: nothing fits in any row of the cell
    norm = _log_norm(grid)
    image = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
    for i, m in enumerate(models):
        for j, g in enumerate(gpus):
            worst, refused, rows = cells.get((m, g), (0, 0, 0))
            text = "" if not rows else (f"{worst}" if worst else "") + (f" ×{refused}" if refused else "")
            colour = "white" if worst and norm(worst) > 0.6 else "black" if worst else "#7b1010"
            ax.text(j, i, text.strip() or "×", ha="center", va="center", fontsize=9, color=colour, fontweight="bold")
    ax.set_xticks(range(len(gpus)), [g.replace("NVIDIA-", "") for g in gpus], rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(models)), models, fontsize=8)
    bar = fig.colorbar(image, ax=ax, label="fewest GPUs")
    ticks = [2**k for k in range(int(math.log2(norm.vmax)) + 1)]
    bar.set_ticks(ticks, labels=[str(t) for t in ticks])
    bar.minorticks_off()
    ax.set_title("Fewest GPUs per model × GPU (largest over the cell's rows)\n×n: n rows with can_recommend = 0",
                 fontsize=9.5)
    _save(fig, path)


def _log_norm(grid: list[list[float]]) -> Any:
    from matplotlib.colors import LogNorm

    values = [v for row in grid for v in row if not math.isnan(v)]
    top = max(values, default=2.0)
    return LogNorm(vmin=1, vmax=max(top, 2.0))


Point = tuple[int, float, float, float]


def _curve(job: Job, gpu: str, estimator: Estimator, max_gpus: int, per_node: int) -> list[Point]:
    """(GPUs, peak GiB, capacity GiB, oom_risk) at every count the recommender tries (counts that can't run skipped)."""
    points = []
    for n in candidate_gpus(max_gpus, per_node):
        try:
            place = Placement(gpu_model=gpu, number_gpus=n, gpus_per_worker=min(n, per_node))
            mem = estimator.estimate(job, place).memory
        except AutoconfError:
            continue
        points.append((n, mem.peak_bytes / GIB, mem.capacity_bytes / GIB, mem.oom_risk))
    return points


def plot_recommend(rec: Recommendation, job: Job, gpu: str, estimator: Estimator, path: str, *,
                   max_gpus: int = MAX_GPUS, gpus_per_node: int = GPUS_PER_NODE) -> None:
    """Peak memory per GPU (bars) and OOM risk (line) against the GPU count; the recommended count marked."""
    plt = _pyplot(path)
    points = _curve(job, gpu, estimator, max_gpus, gpus_per_node)
    if not points:
        raise InvalidInputError("plot", "no GPU count up to --max-gpus could be estimated")
    labels = [str(n) for n, *_ in points]
    cap = points[0][2]
    top = min(max(p for _, p, _, _ in points), 2.5 * cap) * 1.15  # bars far above capacity are clipped and labelled
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    colours = ["#59a14f" if n == rec.number_gpus else "#4e79a7" for n, *_ in points]
    ax.bar(labels, [min(p, top) for _, p, _, _ in points], color=colours)
    for i, (_, peak, _, _) in enumerate(points):
        if peak > top:
            ax.text(i, top * 0.8, f"{peak:.0f} GiB", ha="center", va="top", fontsize=8, color="white")
    ax.axhline(cap, color="black", linestyle="--", linewidth=1.2, label=f"capacity {cap:.1f} GiB")
    ax.set_ylim(0, top)
    ax.set_xlabel("GPUs (counts that cannot split the batch are left out)")
    ax.set_ylabel("peak GiB per GPU")
    risk = ax.twinx()
    risk.plot(labels, [r for *_, r in points], color="#e15759", marker="o", label="oom_risk")
    risk.set_ylim(0, 1.05)
    risk.set_ylabel("oom_risk", color="#e15759")
    title = f"{job.model} · {job.method} · {job.tokens_per_sample} tokens × batch {job.batch_size} on {gpu}"
    if rec.can_recommend:
        title += f"\nrecommended (green): {rec.number_gpus} GPUs = {rec.workers} worker(s) × {rec.gpus}"
    else:
        title += f"\ncannot recommend: {rec.reason}"
    ax.set_title(title, fontsize=9.5)
    ax.legend(loc="upper right", fontsize=8)
    _save(fig, path)
