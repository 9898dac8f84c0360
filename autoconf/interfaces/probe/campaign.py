"""One process, many points: a GPU campaign sized to one short lease (``measure --in-process``, docs/probe.md).

Points are grouped by everything but their tokens and micro-batch. A group builds its model once (random
weights on the device) with its optimizer, then runs its points smallest first: empty the cache, 1 warm-up
+ N timed steps, read torch's allocated / reserved peaks, the device-wide peak (NVML thread) and tokens/s,
hand the result on at once. An OOM frees what the failed step held and becomes a result; points with at
least as many tokens and as large a micro-batch are then skipped (memory grows with both). A deadline
bounds the whole run: each group gets a share of the time left, and a point whose steps would outlast
the group's share at the speed measured so far is not started.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from autoconf.catalog import get_architecture
from autoconf.errors import AutoconfError
from autoconf.interfaces.probe import step
from autoconf.interfaces.probe.memory import NvidiaSmiPeak, cap_address_space
from autoconf.interfaces.probe.nvml import DevicePeak, open_device_peak
from autoconf.interfaces.probe.runner import ProbeResult, ProbeSettings, check_supported, environment
from autoconf.schema import Job

log = logging.getLogger(__name__)

GROUP_SHARE_SLACK = 1.5  # a group may use 1.5x its even share of the time left; unused time flows onward
MIN_GROUP_S = 5.0  # a group with less time than this is not built (a build alone takes seconds)
Emit = Callable[[Job, ProbeResult], None]


@dataclass
class Counts:
    """What the campaign did with its points."""

    ok: int = 0
    oom: int = 0
    failed: int = 0
    above_oom: int = 0
    out_of_time: int = 0
    unbuilt: int = 0  # points of a group whose model could not be built (its smallest point has the row)
    skipped: list[str] = field(default_factory=list)  # one line per point not run, with why


def per_device_batch(job: Job) -> int:
    return job.batch_size // job.gradient_accumulation_steps


def group_key(job: Job) -> str:
    """Everything that decides the built model and optimizer: the job less its tokens and batch."""
    return job.model_copy(update={"tokens_per_sample": 1, "batch_size": job.gradient_accumulation_steps}).model_dump_json()


def dominated(job: Job, ooms: list[Job]) -> bool:
    """An OOM of the group had no more tokens and no larger micro-batch than this point."""
    return any(o.tokens_per_sample <= job.tokens_per_sample and per_device_batch(o) <= per_device_batch(job)
               for o in ooms)


def run_campaign(jobs: list[Job], settings: ProbeSettings, budget_s: float | None, emit: Emit) -> Counts:
    """Run every point that fits the budget, in groups; ``emit`` gets each result as soon as it exists."""
    device = step.resolve_device(settings.device)
    deadline = time.monotonic() + (budget_s if budget_s is not None else float("inf"))
    if settings.host_memory_limit_gib is not None and device == "cpu":
        cap_address_space(settings.host_memory_limit_gib)
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(group_key(job), []).append(job)
    counts = Counts()
    env = environment(device)
    meter: DevicePeak = open_device_peak() if device == "cuda" else NvidiaSmiPeak(None)
    with meter:
        for index, members in enumerate(groups.values()):
            left = deadline - time.monotonic()
            share = left / (len(groups) - index) * GROUP_SHARE_SLACK
            members.sort(key=lambda j: (j.tokens_per_sample * per_device_batch(j), j.tokens_per_sample))
            group = _Group(members, settings, device, meter, env, emit, counts)
            group_deadline = min(deadline, time.monotonic() + share)
            if group_deadline - time.monotonic() < MIN_GROUP_S:
                group._skip(members, "out_of_time", "out of time")
                continue
            group.run(group_deadline)
    return counts


class _Group:
    """One built model and optimizer, and the points that share them."""

    def __init__(self, jobs: list[Job], settings: ProbeSettings, device: str, meter: DevicePeak,
                 env: dict[str, str], emit: Emit, counts: Counts) -> None:
        self.jobs, self.settings, self.device, self.meter = jobs, settings, device, meter
        self.env, self.emit, self.counts = env, emit, counts
        self.arch = get_architecture(jobs[0].model)

    def result(self, status: str, reason: str = "", **fields: Any) -> ProbeResult:
        return ProbeResult(status=status, reason=reason[:500], device=self.device, device_name=self.env["device"],
                           gpu_model=self.env["gpu_model"], catalogue_parameters=self.arch.total_params,
                           attention_implementation=step.ATTENTION[self.jobs[0].attention], environment=self.env,
                           **fields)

    def record(self, job: Job, result: ProbeResult) -> None:
        self.emit(job, result)
        setattr(self.counts, result.status, getattr(self.counts, result.status) + 1)

    def run(self, group_deadline: float) -> None:
        first = self.jobs[0]
        try:
            check_supported(first, self.device)
        except AutoconfError as exc:
            for job in self.jobs:
                self.record(job, self.result("failed", f"not probed here: {exc}"))
            return
        torch.manual_seed(self.settings.seed)
        start = time.perf_counter()
        try:
            model = step.build_model(first, self.arch, self.device)
            optimizer = step.make_optimizer(first, model)
        except Exception as exc:  # an OOM while building is the answer for the group's smallest point
            self.record(first, self.result("oom" if step._is_oom(exc) else "failed", f"build: {type(exc).__name__}: {exc}"))
            self._skip(self.jobs[1:], "unbuilt", "the model could not be built")
            _release(self.device)
            return
        built = {"build_seconds": time.perf_counter() - start,
                 "parameters": sum(p.numel() for p in model.parameters()),
                 "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)}
        self._points(model, optimizer, built, group_deadline)
        del model, optimizer
        _release(self.device)

    def _points(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, built: dict[str, Any],
                group_deadline: float) -> None:
        ooms: list[Job] = []
        seconds_per_token: float | None = None
        steps = self.settings.warmup_steps + self.settings.probe_steps
        for position, job in enumerate(self.jobs):
            if dominated(job, ooms):
                self._skip([job], "above_oom", "above an OOM of the same settings")
                continue
            tokens = per_device_batch(job) * job.tokens_per_sample * job.gradient_accumulation_steps
            needed = seconds_per_token * tokens * steps if seconds_per_token else 0.0
            if time.monotonic() + needed > group_deadline:
                self._skip(self.jobs[position:], "out_of_time", "out of time")
                return
            result = self._point(model, optimizer, job, built)
            self.record(job, result)
            if result.status == "oom":
                ooms.append(job)
            elif result.tokens_per_second:
                seconds_per_token = 1 / result.tokens_per_second

    def _point(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, job: Job,
               built: dict[str, Any]) -> ProbeResult:
        cuda = self.device == "cuda"
        try:
            _release(self.device)  # start from the weights and optimizer states alone, as a new process would
            batch = torch.randint(0, self.arch.vocab_size, (per_device_batch(job), job.tokens_per_sample),
                                  device=self.device)
            for _ in range(self.settings.warmup_steps):
                step.train_step(model, optimizer, batch, job)
            step._sync(self.device)
            self.meter.reset()
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            loss = float("nan")
            for _ in range(self.settings.probe_steps):
                loss = step.train_step(model, optimizer, batch, job)
            step._sync(self.device)
            elapsed = time.perf_counter() - start
        except Exception as exc:  # OOM or failure: free the failed step's gradients, keep the campaign going
            status = "oom" if step._is_oom(exc) else "failed"
            reason = f"{type(exc).__name__}: {exc}"
            log.debug("point failed", exc_info=True)
            optimizer.zero_grad(set_to_none=True)
            return self.result(status, reason, **built)
        tokens = per_device_batch(job) * job.tokens_per_sample * job.gradient_accumulation_steps
        fields: dict[str, Any] = {**built, "tokens_per_second": tokens * self.settings.probe_steps / elapsed,
                                  "step_seconds": elapsed / self.settings.probe_steps, "loss": loss}
        if cuda:
            allocated = float(torch.cuda.max_memory_allocated())
            device_peak, why = self.meter.reading()
            fields.update(memory_metric="torch_allocated", peak_memory_bytes=allocated, torch_allocated_bytes=allocated,
                          torch_reserved_bytes=float(torch.cuda.max_memory_reserved()), nvidia_smi_bytes=device_peak,
                          notes=f"no device figure: {why}" if why else "")
        else:
            fields["notes"] = "in-process campaign on CPU: speed only (the host RSS peak needs a process per point)"
        return self.result("ok", **fields)

    def _skip(self, jobs: list[Job], counter: str, why: str) -> None:
        for job in jobs:
            setattr(self.counts, counter, getattr(self.counts, counter) + 1)
            self.counts.skipped.append(f"{job.model} {job.method} {job.tokens_per_sample}x{per_device_batch(job)}: {why}")


def _release(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
