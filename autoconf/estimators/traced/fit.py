"""Fit the traced live bytes of every op as an affine function of the micro-batch shape; cache on disk.

With flash/SDPA attention every tensor of a training step has b·s, s or no token dimension, so the
live bytes after op i are exactly ``c_i + α_i·b·s + γ_i·s`` (shared/theory_notes.md: activation and
loss memory are exactly linear in tokens). Eager attention adds ``b·s²`` and ``s²`` terms (scores and
masks). The op sequence does not depend on the shape within a regime (b = 1 differs from b ≥ 2: HF
expands position ids and copies shifted labels only for b ≥ 2), so a few traces of one regime give the
per-op coefficients by an exact linear solve, checked on one more shape. The peak at any (b, s) is then
the maximum over ops, with its phase and breakdown: no re-trace for other batch sizes or lengths.

Only numpy here; the trace itself runs in a subprocess (``python -m autoconf.estimators.traced.step``), so a
crash inside a dispatch mode (theory_notes pitfall 8) cannot take the caller down.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

FIT_VERSION = 2  # part of the cache key: bump when the trace or the fit changes meaning
NUM_CATEGORIES = 5  # weights, gradients, optimizer, activations, logits (autoconf/estimators/traced/live_bytes.py)
PHASE_NAMES = ("forward", "loss", "backward", "optimizer")
TRACE_TIMEOUT_S = 900  # a 405B-shaped trace takes ~1 min on a loaded core; anything slower is stuck
# Fit shapes (batch, seq) and one check shape per regime. Trace cost grows with the number of ops,
# not with tensor sizes, so small shapes are as exact as large ones and just as fast.
DESIGNS: dict[tuple[str, bool], tuple[list[tuple[int, int]], tuple[int, int]]] = {
    ("single", False): ([(1, 256), (1, 512)], (1, 384)),
    ("batched", False): ([(2, 256), (2, 512), (3, 256), (3, 512)], (4, 384)),
    ("single", True): ([(1, 128), (1, 256), (1, 384)], (1, 512)),
    ("batched", True): ([(2, 128), (2, 256), (3, 128), (3, 256), (2, 384), (4, 384)], (4, 192)),
}


class TraceFailed(RuntimeError):
    """The trace worker failed or its traces cannot be fitted; the message says why."""


def features(batch: int, seq: int, regime: str, eager: bool) -> np.ndarray:
    """Basis of the per-op affine model: 1, b·s, s, b (+ b·s², s² for eager); b = 1 folds b into 1 and b·s into s.

    The b term is real: HF pads the labels to (b, s + 1) before shifting them.
    """
    if regime.startswith("at "):  # one traced shape: the constant alone (regime_of(..., exact=True))
        return np.asarray([1.0])
    if regime == "single":
        terms = [1.0, float(seq)] + ([float(seq * seq)] if eager else [])
    else:
        terms = [1.0, float(batch * seq), float(seq), float(batch)]
        terms += [float(batch * seq * seq), float(seq * seq)] if eager else []
    return np.asarray(terms)


def regime_of(batch: int, seq: int = 0, exact: bool = False) -> str:
    """The fit regime of a micro-batch; ``exact``: a trace of this very shape (``at BxS``), for steps whose
    op sequence changes with the shape (Liger's chunk count and power-of-two chunk size)."""
    if exact:
        return f"at {batch}x{seq}"
    return "single" if batch == 1 else "batched"


@dataclass
class Fit:
    """Per-op coefficients (ops × categories × features), phases and phase-boundary landmarks."""

    coef: np.ndarray
    phase: np.ndarray
    landmarks: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)

    def _phi(self, batch: int, seq: int) -> np.ndarray:
        return features(batch, seq, self.meta["regime"], self.meta["eager"])

    def categories(self, batch: int, seq: int) -> np.ndarray:
        """Live bytes per op and category at (batch, seq): ops × 5."""
        live: np.ndarray = self.coef.astype(np.float64) @ self._phi(batch, seq)
        return live

    def landmark(self, name: str, batch: int, seq: int) -> np.ndarray:
        """Bytes per category at a phase boundary (end_forward, end_loss, end_backward, end_step)."""
        mark: np.ndarray = self.landmarks[name].astype(np.float64) @ self._phi(batch, seq)
        return mark

    def peak(self, batch: int, seq: int, scale: np.ndarray | None = None,
             add: np.ndarray | None = None) -> tuple[float, str, np.ndarray]:
        """Peak bytes, its phase and its breakdown at (batch, seq).

        ``scale`` and ``add`` (phases × categories) turn one replica into one GPU: categories scaled by
        sharding, plus bytes the trace cannot see (gathered FSDP units, persistent gradient buckets).
        """
        values = self.categories(batch, seq)
        if scale is not None:
            values = values * scale[self.phase]
        if add is not None:
            values = values + add[self.phase]
        totals = values.sum(axis=1)
        i = int(np.argmax(totals))
        return float(totals[i]), PHASE_NAMES[int(self.phase[i])], values[i]


def _prune(coef: np.ndarray, phase: np.ndarray, max_rounds: int = 64) -> np.ndarray:
    """Indices of ops not dominated (every coefficient ≤) by a same-phase neighbour.

    A dominated op can never be the peak for any non-negative shape and category scaling, so the
    pruned set gives the same peaks, per phase too.
    """
    keep = np.arange(len(phase))
    flat = coef.reshape(len(phase), -1)
    for _ in range(max_rounds):
        f, ph = flat[keep], phase[keep]
        same = ph[:-1] == ph[1:]
        ge_next = (f[1:] >= f[:-1]).all(axis=1)  # op i dominated by op i+1 (ties: drop the earlier)
        le_prev = (f[1:] <= f[:-1]).all(axis=1) & (f[1:] != f[:-1]).any(axis=1)  # op i+1 strictly by op i
        drop = np.zeros(len(keep), dtype=bool)
        drop[:-1] |= same & ge_next
        drop[1:] |= same & le_prev & ~ge_next
        if not drop.any():
            break
        keep = keep[~drop]
    return keep


def _landmarks(coef: np.ndarray, phase: np.ndarray) -> dict[str, np.ndarray]:
    """Last op of each phase (the tracker samples once more as it leaves a phase) and the step start;
    the worker adds its named marks (decoder layer entries)."""
    marks = {"start": coef[0]}
    for code, name in enumerate(("end_forward", "end_loss", "end_backward", "end_step")):
        where = np.flatnonzero(phase == code)
        if len(where):
            marks[name] = coef[where[-1]]
    return marks


def solve(shapes: list[tuple[int, int]], samples: list[np.ndarray], regime: str,
          eager: bool) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-op coefficients from as many traces as features: (ops × 5 × F) int64, phases.

    Bytes are integers and every coefficient (bytes per token, per position, per sample) is too: the
    token terms are solved from differences to the first trace (small numbers, no rounding trouble
    next to hundreds of GiB of weights), the constant follows in integer arithmetic, and the result
    must reproduce every fit trace to the byte.
    """
    design = np.stack([features(b, s, regime, eager) for b, s in shapes]).astype(np.int64)
    if np.linalg.matrix_rank(design.astype(np.float64)) < design.shape[1]:
        raise TraceFailed(f"fit shapes {shapes} do not determine the {design.shape[1]} coefficients")
    values = np.stack([s[:, :NUM_CATEGORIES] for s in samples]).reshape(len(shapes), -1)  # K × (ops·5)
    diff = (design[1:, 1:] - design[0, 1:]).astype(np.float64)
    rest = (np.rint(np.linalg.solve(diff, (values[1:] - values[0]).astype(np.float64))).astype(np.int64)
            if len(shapes) > 1 else np.zeros((0, values.shape[1]), dtype=np.int64))
    const = values[0] - design[0, 1:] @ rest
    coef = np.vstack([const[None, :], rest])
    if not np.array_equal(design @ coef, values):
        raise TraceFailed("live bytes are not affine in the shape features; cannot fit them exactly")
    coef = coef.reshape(design.shape[1], -1, NUM_CATEGORIES).transpose(1, 2, 0)
    return coef, samples[0][:, NUM_CATEGORIES].astype(np.int8)


def run_worker(specs: list[dict[str, Any]], timeout_s: float = TRACE_TIMEOUT_S) -> tuple[dict[str, Any],
                                                                                         list[list[np.ndarray]]]:
    """Run ``python -m autoconf.estimators.traced.step`` on ``specs`` (one start-up for all); its JSON summary and
    the per-shape samples of each spec."""
    with tempfile.TemporaryDirectory(prefix="autoconf-trace-") as tmp:
        spec_path, out_path = Path(tmp) / "specs.json", Path(tmp) / "samples.npz"
        spec_path.write_text(json.dumps(specs), encoding="utf-8")
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        names = ", ".join(sorted({s["arch"]["name"] for s in specs}))
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "autoconf.estimators.traced.step", str(spec_path), str(out_path)],
                capture_output=True, text=True, timeout=timeout_s * len(specs), env=env, check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise TraceFailed(f"trace of {names} took more than {timeout_s * len(specs):.0f} s") from exc
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise TraceFailed(f"trace worker for {names} exited with {proc.returncode}: {tail}")
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        with np.load(out_path) as data:
            arrays = [[data[f"samples_{j}_{i}"] for i in range(len(one["results"]))]
                      for j, one in enumerate(summary["specs"])]
    return summary, arrays


def quadratic(spec: dict[str, Any]) -> bool:
    """Bytes with b·s² and s² terms: eager attention's scores, or SDPA with a materialised mask or on the math
    kernel (job_spec: Falcon under SDPA)."""
    return spec["attention"] == "eager" or bool(spec.get("quadratic"))


def _design(spec: dict[str, Any], regime: str, verify: bool) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    if regime.startswith("at "):
        batch, seq = (int(v) for v in regime[3:].split("x"))
        return [(batch, seq)], [(batch, seq)]
    shapes, check = DESIGNS[(regime, quadratic(spec))]
    return shapes, shapes + ([check] if verify else [])


def _fit_one(spec: dict[str, Any], regime: str, one: dict[str, Any], arrays: list[np.ndarray], verify: bool) -> Fit:
    """Solve one spec's traces; check the extra shape if it was traced."""
    eager = quadratic(spec)
    shapes, _ = _design(spec, regime, verify)
    results = one["results"]
    if len({r["ops_digest"] for r in results}) > 1 or len({len(a) for a in arrays}) > 1:
        raise TraceFailed(f"the op sequence of {spec['arch']['name']} changes with the shape; cannot fit it")
    coef, phase = solve(shapes, arrays[: len(shapes)], regime, eager)
    meta: dict[str, Any] = {
        "regime": regime, "eager": eager, "shapes": shapes, "num_ops": results[0]["num_ops"],
        "step_seconds": [round(r["step_seconds"], 3) for r in results], "build_seconds": round(one["build_seconds"], 3),
        "total_params": one["total_params"], "trainable_params": one["trainable_params"], "versions": one["versions"],
    }
    if verify and not regime.startswith("at "):
        check = DESIGNS[(regime, eager)][1]
        predicted = coef @ features(*check, regime, eager).astype(np.int64)
        actual = arrays[-1][:, :NUM_CATEGORIES]
        meta["check_shape"] = check
        meta["check_max_error_bytes"] = int(np.abs(predicted - actual).max())
        meta["check_peak_error_bytes"] = int(abs(predicted.sum(axis=1).max() - actual.sum(axis=1).max()))
    marks = _landmarks(coef, phase)
    marks.update({name: coef[index] for name, index in results[0]["marks"].items()})
    keep = _prune(coef, phase)
    meta["kept_ops"] = int(len(keep))
    return Fit(coef[keep], phase[keep], marks, meta)


def fit_many(items: list[tuple[dict[str, Any], str]], verify: bool = True) -> list[Fit]:
    """Trace the design shapes of every (spec, regime) in one worker process and fit each."""
    specs = [{**spec, "shapes": [list(s) for s in _design(spec, regime, verify)[1]]} for spec, regime in items]
    start = time.perf_counter()
    summary, arrays = run_worker(specs)
    wall = time.perf_counter() - start
    fits = []
    for (spec, regime), one, samples in zip(items, summary["specs"], arrays, strict=True):
        fit = _fit_one(spec, regime, one, samples, verify)
        fit.meta.update(worker_wall_seconds=round(wall, 2), worker_specs=len(items),
                        max_rss_bytes=summary["max_rss_bytes"])
        fits.append(fit)
    return fits


def fit_trace(spec: dict[str, Any], regime: str, verify: bool = True) -> Fit:
    """Trace and fit one spec in its own worker."""
    return fit_many([(spec, regime)], verify)[0]
