"""``estimate --format budget``: the VRAM-budget CLI's breakdown lines and its "Empirical Probe" block.

Its lines are Base weights, Trainable state, Attention activ., MLP activ., Output logits, the overheads and
Total (peak). Ours are the components of ``MemoryEstimate`` at the peak phase: trainable state = gradients
+ optimizer states; the activations are split between attention and MLP in the proportion of a decoder
layer's attention and MLP bytes per token (``estimators/theory/activations.py``); the overhead is split
into the CUDA context (or ``--misc-overhead-gib``), NCCL buffers (more than one GPU) and the rest,
fragmentation.
"""

from __future__ import annotations

from autoconf.catalog import get_architecture
from autoconf.errors import AutoconfError
from autoconf.estimators.contract import Estimator
from autoconf.estimators.theory import activations as act
from autoconf.estimators.theory import coefficients as coef
from autoconf.estimators.theory.memory import CUDA_CONTEXT_BYTES, NCCL_BYTES
from autoconf.interfaces.probe.memory import gpu_facts
from autoconf.schema import GIB, Answer, Calibration, Job, Placement

NO_GPU = "probe not run: no CUDA GPU on this machine (nvidia-smi finds none); the estimate above needs none"
LABEL = 20  # width of the VRAM-budget CLI's label column ("Base weights        : ")


def _line(label: str, value: float) -> str:
    return f"{label:<{LABEL}}: {value / GIB:6.2f} GiB"


def attention_share(job: Job, calib: Calibration | None) -> float:
    """Attention's share of one decoder layer's saved bytes per token (eager adds its s² scores)."""
    arch = get_architecture(job.model)
    attention = coef.attention_coef(job, arch, calib) * arch.hidden_size
    if job.attention == "eager":
        factor = calib.attn_act_factor_eager if calib and calib.attn_act_factor_eager is not None \
            else act.EAGER_BYTES_PER_SCORE
        attention += factor * arch.num_heads * job.tokens_per_sample
    mlp = coef.mlp_coef(job, arch, calib) * arch.hidden_size
    return attention / (attention + mlp) if attention + mlp > 0 else 0.0


def header(answer: Answer) -> list[str]:
    job, place = answer.inputs()
    strategy = place.effective_strategy
    zero = strategy[4:] if strategy.startswith("zero") else f"none ({strategy})"
    micro = job.batch_size // (place.dp * job.gradient_accumulation_steps)
    return [
        "=== Memory Estimate (per GPU) ===",
        f"Model: {job.model}",
        f"dtype={job.dtype}, seq_len={job.tokens_per_sample}, micro_batch={micro}, "
        f"GA={job.gradient_accumulation_steps}",
        f"DP={place.dp}, TP={place.tp}, PP={place.pp}, ZeRO={zero}, LoRA={job.method == 'lora'}, "
        f"QLoRA={job.method == 'qlora'}",
        f"GPU={place.gpu_model}, attention={job.attention}, grad_checkpoint={job.gradient_checkpointing}, "
        f"estimator={answer.estimator}" + (f" {answer.model_version}" if answer.model_version else ""),
        "",
    ]


def format_budget(mem: Answer, calib: Calibration | None) -> str:
    job, place = mem.inputs()
    share = attention_share(job, calib)
    misc = CUDA_CONTEXT_BYTES if calib is None or calib.misc_overhead_gib is None else calib.misc_overhead_gib * GIB
    comm = NCCL_BYTES if place.number_gpus > 1 else 0.0
    fragmentation = max(mem.overhead_bytes - misc - comm, 0.0)
    lines = header(mem) + [
        _line("Base weights", mem.weights_bytes),
        _line("Trainable state", mem.gradients_bytes + mem.optimizer_bytes),
        _line("Attention activ.", mem.activations_bytes * share),
        _line("MLP activ.", mem.activations_bytes * (1 - share)),
        _line("Output logits", mem.logits_bytes),
        _line("CUDA/cuBLAS + misc", min(misc, mem.overhead_bytes)),
        _line("NCCL buffers", comm),
        _line("Fragmentation", fragmentation),
        _line("Total (peak)", mem.peak_bytes),
        f"{'Capacity':<{LABEL}}: {mem.capacity_bytes / GIB:6.2f} GiB ({'fits' if mem.fits else 'DOES NOT FIT'}, "
        f"oom_risk {mem.oom_risk:.3f}, peak at {mem.peak_phase})",
    ]
    return "\n".join(lines)


def probe_block(est: Estimator, job: Job, placement: Placement, warmup: int, steps: int) -> str:
    """Run the probe on this machine's GPU (one device) and compare; one line when there is no GPU."""
    title = "--- Empirical Probe ---"
    if gpu_facts() is None:
        return f"{title}\n{NO_GPU}"
    from autoconf.interfaces.probe.runner import ProbeSettings, run_probe  # torch only now
    from autoconf.interfaces.probe.step import resolve_device

    one = job.model_copy(update={"batch_size": job.batch_size // placement.dp})
    notes = []
    if one.attention == "flash" and not _has_flash_attn():
        one = one.model_copy(update={"attention": "sdpa"})
        notes.append("flash-attn is not installed: probed with sdpa (PyTorch's flash kernel)")
    single = placement.model_copy(update={"number_gpus": 1, "tp": 1, "pp": 1, "strategy": None})
    if placement.number_gpus > 1:
        notes.append(f"the probe runs one GPU: compared with the estimate for 1 GPU, not {placement.number_gpus}")
    try:
        result = run_probe(one, ProbeSettings(device=resolve_device("cuda"), warmup_steps=warmup, probe_steps=steps))
    except AutoconfError as exc:  # what this machine cannot probe (qlora without bitsandbytes, a fused loss, ...)
        return f"{title}\nprobe not run: {exc}"
    if result.status != "ok":
        return "\n".join([title, f"probe {result.status}: {result.reason}", *notes])
    estimate = est.estimate(one, single).memory.peak_bytes
    reserved = result.torch_reserved_bytes or 0.0
    return "\n".join([
        title,
        f"max_memory_allocated : {(result.torch_allocated_bytes or 0.0) / GIB:.2f} GiB",
        f"max_memory_reserved  : {reserved / GIB:.2f} GiB",
        f"Diff (estimate - reserved): {(estimate - reserved) / GIB:+.2f} GiB",
        *[f"note: {n}" for n in notes],
    ])


def _has_flash_attn() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is not None
