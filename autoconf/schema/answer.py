"""The one way out: ``Answer`` carries every figure of one (job, placement), and each output is generated from it.

Each figure is a field in its base unit (bytes, seconds, USD). Its metadata says where it appears:

* ``group``: what the figure is of (memory, throughput, time, cost, recommendation, placement); the CLI's
  ``--json`` shows the memory and throughput groups under the fields' own names (``weights_bytes``), and ado's
  ``resource_estimate`` declares the ado names of those two groups;
* ``rest``: the REST section, name (``weights_gib``: a ``*_bytes`` figure whose name ends in ``_gib`` is in GiB) and
  position in the section;
* ``ado``: the ado measured property's name (ado answers are flat);
* ``sweep``: the sweep column's name, its position and the decimals it is rounded to.

A new figure is one field here; every output that names it in its metadata shows it. ``oom_risk`` is the
estimator's, bounded to [0, 1] here once: no output computes it again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import Field, field_validator

from autoconf import __version__
from autoconf.schema.estimates import (
    CostEstimate,
    Estimate,
    PeakViews,
    ThroughputEstimate,
    TimeEstimate,
)
from autoconf.schema.job import Job
from autoconf.schema.kinds import GIB, EstimatorName, Phase
from autoconf.schema.placement import Placement
from autoconf.schema.words import _Strict

Rounder = Callable[[Any, int], Any]


def figure(description: str, group: str | None, *, default: Any = None, cli: bool = True,  # noqa: ANN401
           rest: tuple[str, str, int] | None = None, ado: str | None = None,
           sweep: tuple[str, int, int | None] | None = None, ge: float | None = 0,
           fallback: str | None = None, as_int: bool = False) -> Any:  # noqa: ANN401
    """A field of Answer with where it appears (see the module's docstring); ``cli``: in the CLI's --json;
    ``fallback``: the property that outputs other than the CLI's --json show where the field is None; ``as_int``:
    ado stores it as 0/1."""
    views: dict[str, Any] = {"group": group, "cli": cli, "rest": rest, "ado": ado, "sweep": sweep,
                             "fallback": fallback, "as_int": as_int}
    return Field(default, ge=ge, description=description, json_schema_extra={"views": views})


class Answer(_Strict, PeakViews):
    """Everything autoconf says about one job at one placement: what the CLI, REST API, ado and sweep show."""

    job: Job | None = Field(None, description="The job answered.")
    placement: Placement | None = Field(None, description="The placement answered.")
    number_gpus: int = figure("GPUs of the placement answered (all workers).", "placement", default=1, cli=False,
                              rest=("memory", "num_gpus", 16), ado="number_gpus")
    # --- memory per GPU, by component, at the phase of the peak ---------------------------------------------------
    weights_bytes: float = figure("Parameters resident on the GPU.", "memory", default=0.0,
                                  rest=("memory", "weights_gib", 1), ado="weights_gib", sweep=("weights_gib", 2, 4))
    gradients_bytes: float = figure("Gradients resident at the end of backward.", "memory", default=0.0,
                                    rest=("memory", "gradients_gib", 2), ado="gradients_gib", sweep=("gradients_gib", 3, 4))
    optimizer_bytes: float = figure("Optimizer states (and fp32 master weights).", "memory", default=0.0,
                                    rest=("memory", "optimizer_gib", 3), ado="optimizer_gib", sweep=("optimizer_gib", 4, 4))
    activations_bytes: float = figure("Saved activations at the peak phase.", "memory", default=0.0,
                                      rest=("memory", "activations_gib", 4), ado="activations_gib",
                                      sweep=("activations_gib", 5, 4))
    logits_bytes: float = figure("Logits / loss tensors at the peak phase.", "memory", default=0.0,
                                 rest=("memory", "logits_gib", 5), ado="logits_gib", sweep=("logits_gib", 6, 4))
    vision_weights_bytes: float = figure("Vision tower + projector weights (VLMs; 0 otherwise).", "memory",
                                         default=0.0, rest=("memory", "vision_weights_gib", 7),
                                         sweep=("vision_weights_gib", 20, 4))
    vision_gradients_bytes: float = figure("Gradients of the unfrozen vision parts.", "memory", default=0.0,
                                           rest=("memory", "vision_gradients_gib", 8))
    vision_optimizer_bytes: float = figure("Optimizer states of the unfrozen vision parts.", "memory", default=0.0,
                                           rest=("memory", "vision_optimizer_gib", 9))
    vision_activations_bytes: float = figure("Vision tower / projector saved activations.", "memory", default=0.0,
                                             rest=("memory", "vision_activations_gib", 10),
                                             sweep=("vision_activations_gib", 21, 4))
    overhead_bytes: float = figure("CUDA context, workspaces, buffers, fragmentation.", "memory", default=0.0,
                                   rest=("memory", "overhead_gib", 6), ado="overhead_gib", sweep=("overhead_gib", 7, 4))
    # --- the three peaks, what torch releases before failing, the GPU, the verdict --------------------------------
    peak_bytes: float = figure("Peak per-GPU device memory (nvidia-smi scale; the max over phases).", "memory",
                               default=0.0, rest=("memory", "total_memory_gib", 0), ado="peak_memory_gib",
                               sweep=("peak_memory_gib", 8, 4))
    peak_allocated_bytes: float | None = figure("Peak of torch.cuda.max_memory_allocated (tensors only); null where "
                                                "the estimator does not split it.", "memory",
                                                sweep=("peak_allocated_gib", 18, 4), fallback="allocated_bytes")
    peak_reserved_bytes: float | None = figure("Peak of torch.cuda.max_memory_reserved (allocator segments).",
                                               "memory", sweep=("peak_reserved_gib", 19, 4),
                                               fallback="reserved_bytes")
    releasable_bytes: float = figure("Free blocks torch keeps cached at the reserved and device peaks, released "
                                     "before an allocation fails.", "memory", default=0.0)
    peak_phase: Phase | None = figure("Phase of the training step at which the peak happens.", "memory",
                                      rest=("memory", "peak_phase", 14), ge=None)
    capacity_bytes: float = figure("Usable memory of one GPU.", "memory", default=0.0, rest=("memory", "capacity_gib", 11),
                                   ado="capacity_gib", sweep=("capacity_gib", 9, 4))
    fits: bool = figure("peak_bytes (device peak) <= capacity_bytes.", "memory", default=False, rest=("memory", "fits", 12),
                        ado="fits", sweep=("fits", 10, None), ge=None, as_int=True)
    oom_risk: float = figure("Probability of out-of-memory, 0-1 (of the device peak less releasable_bytes "
                             "exceeding capacity_bytes), as the estimator gives it.", "memory", default=0.0,
                             rest=("memory", "oom_risk", 13), ado="oom_risk", sweep=("oom_risk", 11, 4), ge=None)
    # --- speed ----------------------------------------------------------------------------------------------------
    tokens_per_second: float | None = figure("Training tokens per second, whole job (all GPUs).", "throughput",
                                             rest=("throughput", "tokens_per_second", 0), ado="tokens_per_second",
                                             sweep=("tokens_per_second", 12, 2))
    tokens_per_second_per_gpu: float | None = figure("tokens_per_second / number_gpus.", "throughput",
                                                     rest=("throughput", "tokens_per_second_per_gpu", 1))
    flops_per_token: float | None = figure("Training FLOPs per token (forward + backward [+ recompute]).",
                                           "throughput", rest=("throughput", "flops_per_token", 3))
    mfu: float | None = figure("Model FLOPs utilisation assumed.", "throughput", rest=("throughput", "mfu", 2))
    step_seconds: float | None = figure("Seconds per optimizer step.", "throughput", rest=("throughput", "step_seconds", 4))
    compute_seconds: float | None = figure("Compute part of a step.", "throughput", rest=("throughput", "compute_seconds", 5))
    communication_seconds: float | None = figure("Exposed communication part of a step.", "throughput",
                                                 rest=("throughput", "communication_seconds", 6))
    # --- time and cost (where a token count and a price are known) --------------------------------------------------
    total_seconds: float | None = figure("Wall time of the job.", "time", rest=("time", "time_seconds", 0))
    train_seconds: float | None = figure("Time spent in training steps.", "time", rest=("time", "train_seconds", 1))
    load_seconds: float | None = figure("Model load / start-up time.", "time", rest=("time", "load_seconds", 2))
    checkpoint_seconds: float | None = figure("Time spent writing checkpoints.", "time",
                                              rest=("time", "checkpoint_seconds", 3))
    tokens: float | None = figure("Tokens processed (after padding/packing, × epochs).", "time", rest=("time", "tokens", 4))
    cost_usd: float | None = figure("GPU-hours × price per GPU-hour.", "cost", rest=("cost", "cost_usd", 0))
    gpu_hours: float | None = figure("GPU-hours of the job.", "cost", rest=("cost", "gpu_hours", 1))
    price_per_gpu_hour_usd: float | None = figure("Price per GPU-hour, USD.", "cost",
                                                  rest=("cost", "price_per_gpu_hour_usd", 2))
    price_source: str | None = figure("Where the price comes from, with its date, or 'user'.", "cost",
                                      rest=("cost", "price_source", 3), ge=None)
    # --- the recommendation, where one was asked for ---------------------------------------------------------------
    can_recommend: bool | None = figure("A placement was found (recommendations only).", "recommendation",
                                        ado="can_recommend", sweep=("can_recommend", 13, None), ge=None)
    gpus: int | None = figure("GPUs per worker at the recommended placement (0 if none).", "recommendation",
                              ado="gpus", sweep=("gpus", 14, None))
    workers: int | None = figure("Workers (nodes) at the recommended placement (0 if none).", "recommendation",
                                 ado="workers", sweep=("workers", 15, None))
    reason: str | None = figure("Why nothing could be recommended, or notes on the recommendation.",
                                "recommendation", sweep=("reason", 16, None), ge=None)
    error: str | None = figure("Why this input has no answer (its first error).", None, cli=False,
                               sweep=("error", 17, None), ge=None)
    # --- provenance ------------------------------------------------------------------------------------------------
    estimator: EstimatorName = figure("Which estimator produced the memory figures.", "memory", default="theory",
                                      rest=("memory", "estimator", 17), sweep=("estimator", 0, None), ge=None)
    notes: tuple[str, ...] = figure("The estimator's assumptions and fall-backs worth knowing.", "memory",
                                    default=(), rest=("memory", "notes", 18), ge=None)
    model_version: str | None = figure("Learned-model version used, if any.", None, cli=False,
                                       sweep=("model_version", 1, None), ge=None)
    version: str = Field(__version__, description="autoconf's version that answered.")

    @field_validator("oom_risk", mode="before")
    @classmethod
    def _bounded(cls, value: float) -> float:
        """The one place a risk is bounded: batch paths carry it as a float array that may stray past 0 or 1."""
        return min(max(value, 0.0), 1.0)

    @classmethod
    def of(cls, estimate: Estimate | None = None, *, throughput: ThroughputEstimate | None = None,
           time: TimeEstimate | None = None, cost: CostEstimate | None = None, **given: Any) -> Answer:  # noqa: ANN401
        """The Answer of an estimator's Estimate, with the throughput (default: the estimate's), time and cost of the
        planning formulas where known; ``given``: other fields (number_gpus defaults to the placement's)."""
        figures: dict[str, Any] = {}
        speed = throughput or (estimate.throughput if estimate else None)
        for part in (estimate.memory if estimate else None, speed, time, cost):
            figures |= {k: v for k, v in part or () if k in cls.model_fields and k != "estimator"}
        if estimate is not None:
            figures |= {"job": estimate.job, "placement": estimate.placement, "estimator": estimate.estimator,
                        "model_version": estimate.model_version, "number_gpus": estimate.placement.number_gpus}
        return cls(**(figures | given))

    def inputs(self) -> tuple[Job, Placement]:
        """The job and placement answered (an Answer built from an Estimate always has them)."""
        if self.job is None or self.placement is None:
            raise ValueError("this Answer was built without its job and placement")
        return self.job, self.placement


    def section(self, group: str) -> dict[str, Any] | None:
        """One section of the REST results (memory, throughput, time, cost), or None where it has no figures."""
        fields = sorted((at, key, name) for name, (part, key, at) in _views("rest") if part == group)
        if group != "memory" and all(getattr(self, name) is None for _, _, name in fields):
            return None
        return {key: _value(self, name, key) for _, key, name in fields}

    def cli(self) -> dict[str, Any]:
        """The CLI's --json: the job, the placement, memory and throughput (null without one) by field name, the
        estimator and its model version."""
        job, placement = self.inputs()
        out: dict[str, Any] = {"job": job.model_dump(mode="json"), "placement": placement.model_dump(mode="json")}
        for group in ("memory", "throughput"):
            names = [n for n in Answer.model_fields if _spec(n).get("cli") and _group(n) == group]
            if group == "throughput" and self.tokens_per_second is None:
                out[group] = None
                continue
            out[group] = {n: list(v) if isinstance(v := getattr(self, n), tuple) else v for n in names}
            out[group]["estimator"] = self.estimator
        return out | {"estimator": self.estimator, "model_version": self.model_version}

    def ado(self, keep: Sequence[str]) -> dict[str, Any]:
        """The ado measured properties among ``keep`` (an experiment's outputs); a figure not known is left out."""
        out: dict[str, Any] = {}
        for name, key in _views("ado"):
            value = _value(self, name, key)
            if key in keep and value is not None:
                out[key] = int(value) if _spec(name)["as_int"] else value
        return out

    def columns(self, rounded: Rounder = round) -> dict[str, Any]:
        """The sweep columns of this answer, each rounded as its metadata says."""
        return {key: _rounded(_value(self, name, key), digits, rounded) for name, (key, _, digits) in _views("sweep")}


@functools.cache
def _spec(name: str) -> dict[str, Any]:
    extra = Answer.model_fields[name].json_schema_extra
    views = extra.get("views") if isinstance(extra, dict) else None
    return dict(views) if isinstance(views, dict) else {}


def _group(name: str) -> str | None:
    group = _spec(name).get("group")
    return str(group) if group else None


@functools.cache
def _views(view: str) -> list[tuple[str, Any]]:
    """(field name, that view's spec) of every field the view shows, in field order."""
    return [(name, spec) for name in Answer.model_fields if (spec := _spec(name).get(view)) is not None]


def _value(answer: Answer, name: str, key: str) -> Any:  # noqa: ANN401 - any figure
    """A field as an output names it: a ``*_bytes`` figure named ``*_gib`` in GiB; notes as a list."""
    value = getattr(answer, name)
    if value is None and _spec(name).get("fallback"):
        value = getattr(answer, _spec(name)["fallback"])
    if name.endswith("_bytes") and key.endswith("_gib") and value is not None:
        return value / GIB
    return list(value) if isinstance(value, tuple) else value


def _rounded(value: Any, digits: int | None, rounded: Rounder) -> Any:  # noqa: ANN401
    return value if digits is None or value is None else rounded(value, digits)


def sweep_columns() -> tuple[str, ...]:
    """The sweep's output columns in their order: the figures' (metadata ``sweep``) and the search's own."""
    return tuple(key for _, (key, _, _) in sorted(_views("sweep"), key=lambda view: view[1][1]))


def sweep_arrays(arrays: Mapping[str, Any], rounded: Rounder) -> dict[str, Any]:
    """Sweep columns from arrays of figures (field name -> array, bytes in bytes): the batch form of columns()."""
    out: dict[str, Any] = {}
    for name, (key, _, digits) in _views("sweep"):
        if name in arrays:
            value = arrays[name]
            out[key] = _rounded(value / GIB if name.endswith("_bytes") else value, digits, rounded)
    return out


def ado_figures(*groups: str) -> list[str]:
    """The ado names of the figures of ``groups``, in field order: the measured properties an experiment declares."""
    return [key for name, key in _views("ado") if _group(name) in groups]
