"""Empirical probe: a few real training steps of a job's model (random weights), measured.

``run_probe(job, settings)`` builds the model from the catalogue, runs warmup then probe steps with
the job's settings and returns a :class:`ProbeResult` (status ok | oom | failed, peak memory by
metric, tokens/s). ``compare_estimates`` puts our estimators next to it, and ``data_row`` turns it
into a row of the ``data/`` table (design §7) with its provenance. torch, transformers and peft are
imported only inside ``run_probe`` (``autoconf.interfaces.probe.step``, optional extra ``[probe]``).
"""

from __future__ import annotations

import importlib.util
import logging
import platform
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from autoconf.catalog import canonical_gpu, canonical_name, model_row
from autoconf.errors import AutoconfError, InvalidInputError, NotBuiltError, UnknownNameError
from autoconf.evaluation.data import MEASUREMENT_COLUMNS
from autoconf.interfaces.probe.memory import cpu_name, gpu_facts
from autoconf.schema import Estimate, Job, Placement

log = logging.getLogger(__name__)

SOURCE = "autoconf-probe"  # `source` and `framework` of every row the probe writes
NOTES = "random weights; synthetic tokens, no padding"  # what every probe row is, before any per-run note
# A probe row has the measurement table's own columns, in its order (a probe table is one of its tables).
ROW_COLUMNS: tuple[str, ...] = MEASUREMENT_COLUMNS
VERSIONED = ("torch", "transformers", "peft", "bitsandbytes", "liger_kernel")  # packages named in every source_ref
PROBED_LOSS_KERNELS = ("hf", "chunked", "fused-linear-ce")  # Job.loss_kernel values probe/losses.py runs
# Job.loss_kernel -> the data table's loss_kernel cell (evaluation/data.py LOSS_KERNELS reads it back)
LOSS_KERNEL_CELLS = {"hf": "", "chunked": "chunked", "fused-linear-ce": "liger-flce"}


class ProbeSettings(BaseModel):
    """How to probe (not what is trained: that is the Job)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: Literal["auto", "cuda", "cpu"] = Field("auto", description="Where to run; auto = CUDA if present.")
    warmup_steps: int = Field(1, ge=0, le=100, description="Optimizer steps before measuring speed.")
    probe_steps: int = Field(2, ge=1, le=1000, description="Timed optimizer steps.")
    seed: int = Field(0, ge=0, description="torch seed for the random weights and tokens.")
    host_memory_limit_gib: float | None = Field(
        None, gt=0, description="CPU only: cap the process address space this far above its size after "
        "import, so that a too-large job fails as an OOM instead of swapping.")


class ProbeResult(BaseModel):
    """What one probe measured. Memory figures are peaks over the probe steps (after warmup), in bytes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["ok", "oom", "failed"]
    reason: str = Field("", description="Why the run is oom or failed (the exception's text).")
    notes: str = Field("", description="Why a memory figure of an ok run is missing, when one is.")
    device: Literal["cuda", "cpu"]
    device_name: str = Field(description="GPU name from nvidia-smi, or the CPU model.")
    gpu_model: str = Field(description="Catalogue GPU name when known, the raw GPU name otherwise, or 'cpu'.")
    memory_metric: Literal["torch_allocated", "host_rss"] | None = None
    peak_memory_bytes: float | None = Field(None, description="The figure of memory_metric.")
    torch_allocated_bytes: float | None = Field(None, description="torch.cuda.max_memory_allocated().")
    torch_reserved_bytes: float | None = Field(None, description="torch.cuda.max_memory_reserved().")
    nvidia_smi_bytes: float | None = Field(None, description="Peak device-wide memory.used (CUDA context included).")
    host_rss_bytes: float | None = Field(None,
                                         description="Peak process RSS during the steps minus RSS before the build.")
    tokens_per_second: float | None = Field(None, description="Tokens of the probe steps / their wall time.")
    step_seconds: float | None = Field(None, description="Mean wall time of one optimizer step.")
    loss: float | None = Field(None, description="Loss of the last step (random weights: about ln(vocab)).")
    parameters: int | None = Field(None, description="Parameters of the built model (with adapters).")
    trainable_parameters: int | None = None
    catalogue_parameters: int = Field(description="Our exact count for the architecture (no adapters).")
    attention_implementation: str = Field(description="transformers attn_implementation used.")
    build_seconds: float | None = None
    environment: dict[str, str] = Field(default_factory=dict, description="Host, device, driver, versions, date.")

    def measured(self) -> list[tuple[str, float]]:
        """(label, bytes) of every memory figure measured, in the order we report them."""
        labels = (("allocated", self.torch_allocated_bytes), ("reserved", self.torch_reserved_bytes),
                  ("nvidia-smi", self.nvidia_smi_bytes), ("host_rss", self.host_rss_bytes))
        return [(label, value) for label, value in labels if value is not None]


def run_probe(job: Job, settings: ProbeSettings | None = None) -> ProbeResult:
    """Run the job's model for warmup + probe steps on this machine; an OOM is a result, not an error."""
    settings = settings or ProbeSettings()
    try:
        from autoconf.interfaces.probe import step as probe_step  # torch, transformers, peft: only now
    except ModuleNotFoundError as exc:
        raise AutoconfError("probe", f"needs the optional extra: pip install 'autoconf-gpu[probe]'; got {exc}") from exc
    device = probe_step.resolve_device(settings.device)
    check_supported(job, device)
    if settings.host_memory_limit_gib is not None and device != "cpu":
        raise InvalidInputError("host_memory_limit_gib", f"applies to device cpu only; got device {device}")
    fields = probe_step.run(job, settings, device)
    env = environment(fields["device"])
    return ProbeResult(**fields, device_name=env["device"], gpu_model=env["gpu_model"], environment=env)


def check_supported(job: Job, device: str) -> None:
    """Refuse, with the reason, what cannot be probed here (typed errors: one line, exit code 2)."""
    needs = []  # (field, what it needs, is it here)
    if job.method == "qlora":
        needs.append(("method", "qlora needs CUDA and bitsandbytes", _has("bitsandbytes")))
    if job.optimizer == "adamw-8bit":
        needs.append(("optimizer", "adamw-8bit needs CUDA and bitsandbytes", _has("bitsandbytes")))
    if job.attention == "flash":
        needs.append(("attention", "flash needs CUDA and flash-attn (sdpa runs PyTorch's flash kernel)",
                      _has("flash_attn")))
    for field, what, present in needs:
        if device != "cuda" or not present:
            missing = "" if present else ", package missing"
            raise InvalidInputError(field, f"{what}; got device {device}{missing}")
    kernel = job.effective_loss_kernel
    if kernel not in PROBED_LOSS_KERNELS:
        raise InvalidInputError("loss_kernel", f"must be one of {', '.join(PROBED_LOSS_KERNELS)} (the kernels the "
                                f"probe runs, autoconf/interfaces/probe/losses.py); got {kernel}")
    if kernel == "fused-linear-ce" and (device != "cuda" or not _has("liger_kernel")):
        missing = "" if _has("liger_kernel") else ", package missing"
        raise InvalidInputError("loss_kernel", f"fused-linear-ce needs CUDA and liger-kernel; got device {device}{missing}")
    if job.method == "qlora" and job.dtype not in ("bf16", "fp16"):
        raise InvalidInputError("dtype", f"qlora must compute in bf16 or fp16; got {job.dtype}")


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def environment(device: str) -> dict[str, str]:
    """Provenance of a measurement: host, device, driver, package versions and the UTC date."""
    facts = gpu_facts() if device == "cuda" else None
    env = {
        "host": socket.gethostname(),
        "device": facts["name"] if facts else cpu_name(),
        "gpu_model": _catalogue_gpu(facts["name"]) if facts else "cpu",
        "driver": facts["driver"] if facts else "n/a",
        "python": platform.python_version(),
    }
    for package in VERSIONED:
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            env[package] = "absent"
    env["date"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return env


def _catalogue_gpu(name: str) -> str:
    try:
        return canonical_gpu(name)  # "NVIDIA H100 80GB HBM3" -> NVIDIA-H100-80GB-HBM3
    except UnknownNameError:
        return name


def source_ref(command: str, env: dict[str, str]) -> str:
    """The exact command plus the machine and software it ran on."""
    keys = ("host", "device", "driver", *VERSIONED, "python", "date")
    return " | ".join([command] + [f"{k}={env[k]}" for k in keys if k in env])


@dataclass(frozen=True)
class Comparison:
    """One estimator's answer for the probed job, or why there is none."""

    estimator: str
    estimate: Estimate | None
    note: str = ""

    def diffs(self, result: ProbeResult) -> list[tuple[str, float]]:
        """(metric label, estimate peak - measured) in bytes."""
        if self.estimate is None:
            return []
        return [(label, self.estimate.memory.peak_bytes - value) for label, value in result.measured()]


def compare_estimates(job: Job, placement: Placement,
                      names: tuple[str, ...] = ("theory", "hybrid")) -> list[Comparison]:
    """Ask each estimator about the probed (job, placement); a missing one is skipped with a note."""
    from autoconf.estimators.contract import get_estimator

    answers = []
    for name in names:
        try:
            answers.append(Comparison(name, get_estimator(name).estimate(job, placement)))
        except (ImportError, NotBuiltError, AutoconfError) as exc:  # absent, not built, or out of its domain
            log.info("estimator %s skipped: %s", name, exc)
            answers.append(Comparison(name, None, f"skipped: {type(exc).__name__}: {exc}"))
        except Exception as exc:  # a broken estimator must not hide the measurement; say so loudly
            log.warning("estimator %s failed", name, exc_info=True)
            answers.append(Comparison(name, None, f"failed: {type(exc).__name__}: {exc}"))
    return answers


def model_name(job: Job) -> str:
    """Catalogue name of the job's model, or the path/count as given."""
    try:
        return canonical_name(job.model)
    except UnknownNameError:
        return job.model


def data_row(job: Job, result: ProbeResult | None, gpu_model: str, ref: str,
             campaign: str = "", reason: str = "") -> dict[str, str]:
    """One row of the data/ table: the job's settings, then what was measured (empty when not).

    Only an ``ok`` run has a peak. An OOM keeps torch's message in ``reason`` but no memory figure:
    what was allocated before the failure is not a peak, and must not be learned as one.
    """
    name, lora = model_name(job), job.method != "full"
    row: dict[str, object] = {
        "source": SOURCE, "source_ref": ref, "campaign": campaign, "framework": SOURCE, "gpu_model": gpu_model,
        "gpu_variant_stated": True, "number_gpus": 1, "number_nodes": 1, "model_name": name,
        "model_hf_id": _hf_id(name), "method": job.method, "tokens_per_sample": job.tokens_per_sample,
        "variable_length": False, "batch_size": job.batch_size,
        "per_device_batch_size": job.batch_size // job.gradient_accumulation_steps,
        "gradient_accumulation_steps": job.gradient_accumulation_steps, "dtype": job.dtype,
        # one process, no wrapper: what Placement(number_gpus=1) calls ddp
        "strategy": "ddp", "gradient_checkpointing": job.gradient_checkpointing, "attention": job.attention,
        "fused_loss": job.effective_loss_kernel != "hf", "loss_kernel": LOSS_KERNEL_CELLS[job.effective_loss_kernel],
        "packing": False, "kernels": "none",
        "lora_r": job.lora_r if lora else None, "lora_alpha": job.lora_alpha if lora else None,
        "lora_target_modules": ",".join(job.lora_target_modules) if lora else None,
        "status": result.status if result else "failed", "optimizer": job.optimizer,
        "optimizer_impl": job.optimizer_impl, "reason": reason or (result.reason if result else ""),
        "notes": NOTES + (f"; {result.notes}" if result is not None and result.notes else ""),
    }
    if result is not None and result.status == "ok":
        row.update({c: getattr(result, c) for c in (
            "memory_metric", "peak_memory_bytes", "torch_allocated_bytes", "torch_reserved_bytes",
            "nvidia_smi_bytes", "tokens_per_second")})
        row["tokens_per_second_per_device"] = result.tokens_per_second
        if result.tokens_per_second is not None:
            row["train_samples_per_second"] = result.tokens_per_second / job.tokens_per_sample
    return {c: cell(row.get(c)) for c in ROW_COLUMNS}


def _hf_id(name: str) -> str:
    try:
        return model_row(name).get("hf_id", "")
    except UnknownNameError:
        return ""


def cell(value: object) -> str:
    """CSV text of a value: booleans 1/0 (as data/measurements.csv), floats without needless digits."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() else f"{value:.6g}"
    return str(value)
