"""The torch side of the probe: build the job's model with random weights and run real training steps.

Imported only by ``autoconf.interfaces.probe.runner.run_probe`` (optional extra ``[probe]``: torch, transformers, peft;
bitsandbytes for QLoRA and 8-bit Adam). Nothing is downloaded: the model is built from the
catalogue's architecture through a transformers config, with transformers' own random init.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForCausalLM

from autoconf.catalog import Architecture, get_architecture
from autoconf.errors import InvalidInputError
from autoconf.estimators.traced.hf_config import DTYPES, hf_config
from autoconf.interfaces.probe.losses import loss_of
from autoconf.interfaces.probe.memory import (
    HostPeak,
    NvidiaSmiPeak,
    cap_address_space,
    nvidia_smi_id,
    pin_mmap_threshold,
)
from autoconf.schema import Job

if TYPE_CHECKING:
    from autoconf.interfaces.probe.runner import ProbeSettings

log = logging.getLogger(__name__)

# Job.attention -> transformers attn_implementation. "flash" is the flash-attn 2 package;
# "sdpa" is PyTorch's scaled_dot_product_attention (its flash backend on CUDA for an unmasked bf16 batch).
ATTENTION = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}
LEARNING_RATE = 1e-5  # any value: memory and speed do not depend on it


def resolve_device(requested: str) -> str:
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError("device", "must be cpu or auto on a machine without CUDA; got cuda")
    return requested


def build_model(job: Job, arch: Architecture, device: str) -> torch.nn.Module:
    """The model on ``device`` with random weights; LoRA/QLoRA adapters applied with peft."""
    weight_dtype, _ = DTYPES[job.dtype]
    config = hf_config(arch, ATTENTION[job.attention], sliding_mask=True)  # the real model: its window kept
    if job.method == "qlora":
        model = _build_4bit(config, weight_dtype, device)
    else:
        with torch.device(device):
            model = _from_config(config, weight_dtype)
    if job.gradient_checkpointing:
        # non-reentrant: what HF recommends and what lets frozen (LoRA) inputs work without hooks
        enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x name
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            # nn.Module.__getattr__ is typed Tensor | Module; HF models define gradient_checkpointing_enable()
            model.gradient_checkpointing_enable(  # type: ignore[operator]
                gradient_checkpointing_kwargs={"use_reentrant": False})
    if job.method in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model

        targets: str | list[str] = list(job.lora_target_modules)
        if "all-linear" in targets:
            targets = "all-linear"
        # peft annotates lora_alpha as int but only divides by it (alpha / r): the job's float is passed as given
        lora = LoraConfig(r=job.lora_r, lora_alpha=job.lora_alpha,  # type: ignore[arg-type]
                          lora_dropout=job.lora_dropout,
                          target_modules=targets, task_type="CAUSAL_LM")
        with warnings.catch_warnings():  # peft 0.21 asks transformers 5 for a renamed property
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            model = get_peft_model(model, lora)  # adapters in fp32 (peft's autocast_adapter_dtype default)
    model.train()
    return model


def _from_config(config: Any, dtype: torch.dtype) -> torch.nn.Module:
    """The causal LM of a config; a vision-language config (no *ForCausalLM) as its image-text-to-text model,
    trained on text alone (Job.images_per_sample = 0)."""
    try:
        model: torch.nn.Module = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            config, dtype=dtype)
    except ValueError:  # "Unrecognized configuration class ... for AutoModelForCausalLM": a VLM
        from transformers import AutoModelForImageTextToText

        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)  # type: ignore[no-untyped-call]
    return model


def _build_4bit(config: Any, compute_dtype: torch.dtype, device: str) -> torch.nn.Module:
    """QLoRA base: random bf16 weights saved to a temporary folder, reloaded 4-bit NF4 by transformers.

    Quantisation happens in from_pretrained, so the random model is written once (no download).
    NF4 without double quantisation, as states.py assumes; norms, embeddings and head stay bf16
    (no prepare_model_for_kbit_training upcast).
    """
    from transformers import BitsAndBytesConfig

    with tempfile.TemporaryDirectory(prefix="autoconf-probe-") as folder:
        with torch.device(device):
            AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]  # transformers: no annotations
                config, dtype=compute_dtype).save_pretrained(folder)
        gc.collect()
        torch.cuda.empty_cache()
        quant = BitsAndBytesConfig(  # type: ignore[no-untyped-call]  # transformers: no annotations
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute_dtype,
            bnb_4bit_use_double_quant=False)
        return AutoModelForCausalLM.from_pretrained(
            folder, quantization_config=quant, dtype=compute_dtype, device_map={"": torch.cuda.current_device()},
            attn_implementation=config._attn_implementation)


def make_optimizer(job: Job, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The job's optimizer over trainable parameters, with its torch implementation (fused/foreach/for-loop)."""
    params = [p for p in model.parameters() if p.requires_grad]
    # (fused, foreach); None is torch's own default
    fused, foreach = {"fused": (True, None), "foreach": (None, True), "for-loop": (None, False)}[job.optimizer_impl]
    if job.optimizer == "adamw-8bit":
        import bitsandbytes as bnb

        # looked up by name: typed the same whether or not bitsandbytes (untyped) is installed
        make = getattr(bnb.optim, "AdamW8bit")  # noqa: B009
        eight_bit: torch.optim.Optimizer = make(params, lr=LEARNING_RATE)
        return eight_bit
    if job.optimizer == "sgd":
        return torch.optim.SGD(params, lr=LEARNING_RATE, momentum=0.9, foreach=foreach, fused=fused)
    return torch.optim.AdamW(params, lr=LEARNING_RATE, foreach=foreach, fused=fused)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor, job: Job) -> float:
    """One optimizer step: gradient_accumulation_steps × (forward -> the job's loss, backward), then step."""
    _, autocast_dtype = DTYPES[job.dtype]
    loss_value = math.nan
    for _ in range(job.gradient_accumulation_steps):
        with _autocast(batch.device.type, autocast_dtype):
            loss = loss_of(model, batch, job)  # HF's loss, or the chunked / fused kernel the job names
        (loss / job.gradient_accumulation_steps).backward()  # type: ignore[no-untyped-call]
        loss_value = float(loss.detach())
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_value


@contextlib.contextmanager
def _autocast(device_type: str, dtype: torch.dtype | None) -> Iterator[None]:
    if dtype is None:
        yield
    else:
        with torch.autocast(device_type=device_type, dtype=dtype):
            yield


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return "can't allocate memory" in text or "out of memory" in text.lower()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@dataclass
class _Meters:
    """The probe's memory meters; the host one starts after the primer, just before the build."""

    smi: NvidiaSmiPeak
    host: HostPeak | None = None

    def reset(self) -> None:
        self.smi.reset()
        if self.host is not None:
            self.host.reset()


def run(job: Job, settings: ProbeSettings, device: str) -> dict[str, Any]:
    """Build, warm up, probe on a resolved device; every field of ProbeResult but the device facts.

    The job was checked (``autoconf.interfaces.probe.runner.check_supported``); an OOM or any failure while building or
    stepping is caught and becomes the status, so one bad point never crashes a campaign.
    """
    arch = get_architecture(job.model)
    if settings.host_memory_limit_gib is not None:
        cap_address_space(settings.host_memory_limit_gib)
    torch.manual_seed(settings.seed)
    out: dict[str, Any] = {"device": device, "status": "ok", "reason": "", "catalogue_parameters": arch.total_params,
                           "attention_implementation": ATTENTION[job.attention]}
    meters = _Meters(NvidiaSmiPeak(nvidia_smi_id() if device == "cuda" else None))
    with meters.smi:
        try:
            _build_and_step(job, arch, device, settings, meters, out)
        except Exception as exc:  # an OOM or a failure is the answer, not a crash
            out.update(status="oom" if _is_oom(exc) else "failed", reason=f"{type(exc).__name__}: {exc}"[:500])
            log.debug("probe failed", exc_info=True)
    out.update(_memory(device, meters))  # after the nvidia-smi poller has stopped
    gc.collect()  # the model and optimizer died with _build_and_step's frame
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def _build_and_step(job: Job, arch: Architecture, device: str, settings: ProbeSettings, meters: _Meters,
                    out: dict[str, Any]) -> None:
    if device == "cpu":
        pin_mmap_threshold()
        _prime_host(job, arch)
    meters.host = HostPeak()
    start = time.perf_counter()
    model = build_model(job, arch, device)
    optimizer = make_optimizer(job, model)
    out["build_seconds"] = time.perf_counter() - start
    out["parameters"] = sum(p.numel() for p in model.parameters())
    out["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    out.update(_steps(model, optimizer, job, arch, device, settings, meters))


def _prime_host(job: Job, arch: Architecture) -> None:
    """One step of a miniature of the model before the host baseline is taken.

    The first training step of a process grows its RSS by ~0.2 GB that is not the model's (measured
    here on torch 2.13 CPU: a 158k-parameter model's first probe read 206 MB, a second one in the same
    process 12 MB): lazily loaded kernels, thread pools and allocator arenas. A miniature of the same
    family, dtype, attention and method (hidden 64, 2 layers, vocabulary 512) loads them first.
    """
    kv = 1 if arch.num_kv_heads == 1 else (4 if arch.num_kv_heads == arch.num_heads else 2)
    mini = replace(arch, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=kv,
                   head_dim=16, vocab_size=512, num_experts=min(arch.num_experts, 4),
                   experts_per_token=min(arch.experts_per_token, 2))
    mini_job = job.model_copy(update={"tokens_per_sample": min(job.tokens_per_sample, 256),
                                      "batch_size": job.gradient_accumulation_steps})
    model = build_model(mini_job, mini, "cpu")
    optimizer = make_optimizer(mini_job, model)
    batch = torch.randint(0, mini.vocab_size, (1, mini_job.tokens_per_sample))
    train_step(model, optimizer, batch, mini_job)
    del model, optimizer, batch
    gc.collect()


def _steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer, job: Job, arch: Architecture,
           device: str, settings: ProbeSettings, meters: _Meters) -> dict[str, Any]:
    """Warmup then timed probe steps on one random batch; peaks restart once the model is built."""
    per_device_batch = job.batch_size // job.gradient_accumulation_steps
    batch = torch.randint(0, arch.vocab_size, (per_device_batch, job.tokens_per_sample), device=device)
    for _ in range(settings.warmup_steps):
        train_step(model, optimizer, batch, job)
    _sync(device)
    # Peaks count from here: steady state (optimizer states exist; the first step peaks lower, see
    # theory_notes), without the first step's one-off costs (lazy kernel/library loading on the host,
    # the QLoRA build's bf16 copy). Host RSS still counts from before the build, so weights are in.
    meters.reset()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    loss = math.nan
    for _ in range(settings.probe_steps):
        loss = train_step(model, optimizer, batch, job)
    _sync(device)
    elapsed = time.perf_counter() - start
    tokens = per_device_batch * job.tokens_per_sample * job.gradient_accumulation_steps * settings.probe_steps
    return {"tokens_per_second": tokens / elapsed, "step_seconds": elapsed / settings.probe_steps, "loss": loss}


def _memory(device: str, meters: _Meters) -> dict[str, Any]:
    """Peak figures over the probe steps. On CUDA the headline is torch's max allocated, the
    metric of data/measurements.csv; reserved (allocator cache) and nvidia-smi come with it."""
    if device == "cuda":
        allocated = float(torch.cuda.max_memory_allocated())
        smi, why = meters.smi.reading()
        return {"memory_metric": "torch_allocated", "peak_memory_bytes": allocated,
                "torch_allocated_bytes": allocated, "torch_reserved_bytes": float(torch.cuda.max_memory_reserved()),
                "nvidia_smi_bytes": smi, "notes": f"no nvidia_smi figure: {why}" if why else ""}
    if meters.host is None:  # the build failed before the meter started: the status says why
        return {"memory_metric": "host_rss", "peak_memory_bytes": None, "host_rss_bytes": None}
    rss, why = meters.host.reading()
    return {"memory_metric": "host_rss", "peak_memory_bytes": rss, "host_rss_bytes": rss,
            "notes": f"no host_rss figure: {why}" if why else ""}
