"""The VRAM-budget CLI's dialect on ``estimate``: its boolean words, its defaults (noted where ours differ),
its factor flags as calibration overrides, and its weight-storage dtypes fp8 / int8 / nf4.

Its booleans take a word (``--lora true``) or nothing (``--lora``); ``--no-lora`` also works. Its factors are
bytes per token per layer per hidden unit (attention, MLP), per token per vocabulary entry (logits), or GiB
(fragmentation, misc): the units of ``autoconf.schema.Calibration``, so a value means the same thing here.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from autoconf import defaults
from autoconf.catalog import get_architecture, get_gpu
from autoconf.errors import InvalidInputError
from autoconf.estimators.risk import oom_probability
from autoconf.estimators.theory import activations as act
from autoconf.estimators.theory import coefficients as coef
from autoconf.estimators.theory import cuda
from autoconf.estimators.theory import loss as ce
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.theory.states import model_states
from autoconf.estimators.theory.weights import NF4_BYTES, upcast_bytes
from autoconf.schema import FALSE_WORDS, GIB, TRUE_WORDS, Calibration, Estimate, Job, Placement

TRAINING_DTYPES = ("bf16", "fp16", "fp32", "amp-bf16", "amp-fp16")
STORAGE_DTYPES = ("fp8", "int8", "nf4")  # weight storage only: compute stays bf16
# fp8 (e4m3, one scale per tensor) and int8 (bitsandbytes LLM.int8, one fp32 scale per row) store a weight
# in 1 byte; the scales are < 0.1 % of the weights for h >= 1024, so they are left out.
EIGHT_BIT_BYTES = 1.0
BF16_BYTES = 2.0

# The VRAM-budget CLI's documented defaults (its "Parameters Reference" tables) where ours differ.
THEIR_DEFAULTS: dict[str, Any] = {
    "flashattn": False, "grad_checkpoint": False, "seq_len": 2048, "zero": 0,
    "grad_ckpt_reduction": 0.35, "attn_act_factor_no_fa": 4.0, "attn_act_factor_fa": 0.8,
    "mlp_act_factor": 6.0, "fragmentation_gib": 5.0, "misc_overhead_gib": 3.0,
}


class BoolWord(argparse.Action):
    """A boolean flag: bare means true; a word of schema.TRUE_WORDS / FALSE_WORDS sets it; ``--no-x`` means false."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:  # noqa: ANN401
        names = [*option_strings, *(f"--no-{o[2:]}" for o in option_strings if o.startswith("--"))]
        super().__init__(names, dest, nargs="?", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        negated = bool(option_string and option_string.startswith("--no-"))
        try:
            value = True if values is None else parse_bool(str(values), option_string or self.dest)
        except InvalidInputError as exc:
            parser.error(str(exc))  # one line, exit code 2
        setattr(namespace, self.dest, (not value) if negated else value)


def parse_bool(word: str, flag: str) -> bool:
    """A switch's word, read by the table every entry point uses (schema.TRUE_WORDS / FALSE_WORDS)."""
    low = word.strip().lower()
    if low in TRUE_WORDS or low in FALSE_WORDS:
        return low in TRUE_WORDS
    raise InvalidInputError(flag, f"must be one of {', '.join(TRUE_WORDS + FALSE_WORDS)} (or no word = true); "
                            f"got '{word}'")


def target_modules(values: Sequence[str] | None) -> tuple[str, ...]:
    """Space-separated (its spelling) and comma-separated (ours) module names, in one tuple."""
    if not values:
        return tuple(defaults_targets())
    names = [part.strip().strip("[]'\"") for value in values for part in value.split(",")]
    return tuple(n for n in names if n)


def defaults_targets() -> tuple[str, ...]:
    return tuple(Job.model_fields["lora_target_modules"].default)


def method_and_dtype(dtype: str, lora: bool, qlora: bool) -> tuple[str, str, str | None]:
    """(method, training dtype, storage) for ``--dtype`` and the LoRA flags.

    nf4 is QLoRA (4-bit NormalFloat base, bf16 compute); fp8 / int8 keep a frozen base in 1 byte per weight
    under LoRA adapters (bf16 compute). None of them can hold weights that full fine-tuning updates.
    """
    if lora and qlora:
        raise InvalidInputError("method", "choose one of --lora and --qlora")
    if dtype not in (*TRAINING_DTYPES, *STORAGE_DTYPES):
        accepted = ", ".join((*TRAINING_DTYPES, *STORAGE_DTYPES))
        raise InvalidInputError("dtype", f"must be one of {accepted}; got '{dtype}'")
    if dtype == "nf4" or qlora:
        if dtype not in ("nf4", "bf16", "fp16"):
            raise InvalidInputError("dtype", f"QLoRA computes in bf16 or fp16 over nf4 weights; got '{dtype}'")
        return "qlora", "fp16" if dtype == "fp16" else "bf16", "nf4" if dtype == "nf4" else None
    if dtype in STORAGE_DTYPES:
        if not lora:
            raise InvalidInputError("dtype", f"{dtype} stores frozen weights: add --lora true (full fine-tuning "
                                    "updates its weights, so use bf16, fp16 or fp32)")
        return "lora", "bf16", dtype
    return ("lora" if lora else "full"), dtype, None


def calibration(args: argparse.Namespace, flash: bool) -> Calibration:
    """Our Calibration from its factor flags: the attention factor is the one for the attention in use."""
    attention = args.attn_act_factor_fa if flash else args.attn_act_factor_no_fa
    if args.attn_act_factor_flash is not None:  # our own spelling wins where both are given
        attention = args.attn_act_factor_flash
    return Calibration(
        grad_ckpt_reduction=args.grad_ckpt_reduction, attn_act_factor_flash=attention,
        attn_act_factor_eager=args.attn_act_factor_eager, mlp_act_factor=args.mlp_act_factor,
        logits_factor=args.logits_factor, fragmentation_gib=args.fragmentation_gib,
        misc_overhead_gib=args.misc_overhead_gib,
    )


def default_notes(args: argparse.Namespace, job: Job, placement: Placement) -> list[str]:
    """One note per default of ours that differs from the VRAM-budget CLI's, for flags not given."""
    notes: list[str] = []

    def note(flag: str, ours: str, theirs: object) -> None:
        notes.append(f"{flag} not given: here {ours} (VRAM-budget CLI default: {theirs})")

    if args.flashattn is None:
        note("--flashattn", "true, as the measured stacks run", "false")
    if args.grad_checkpoint is None:
        note("--grad-checkpoint", "true, as the measured stacks run", "false")
    if args.seq_len is None:
        note("--seq-len", str(defaults.TOKENS_PER_SAMPLE), THEIR_DEFAULTS["seq_len"])
    if args.zero is None and args.strategy is None and placement.dp > 1:
        note("--zero", f"{placement.effective_strategy} (fms-hf-tuning's sharding)", "0")
    if job.method != "full" and not args.lora_target_modules:
        note("--lora-target-modules", " ".join(job.lora_target_modules), "the model's defaults")
    return notes + _factor_notes(args, job, placement)


def _factor_notes(args: argparse.Namespace, job: Job, placement: Placement) -> list[str]:
    """Its fixed factors vs ours, which are traced per architecture (estimators/theory/activations.py)."""
    arch = get_architecture(job.model)
    out = []
    flash = job.attention != "eager"
    attn_flag = "attn_act_factor_fa" if flash else "attn_act_factor_no_fa"
    if getattr(args, attn_flag) is None and args.attn_act_factor_flash is None:
        out.append((f"--{attn_flag.replace('_', '-')}", f"{coef.attention_coef(job, arch):.1f} (traced)"))
    if args.mlp_act_factor is None:
        out.append(("--mlp-act-factor", f"{coef.mlp_coef(job, arch):.1f} (traced)"))
    if args.grad_ckpt_reduction is None and job.gradient_checkpointing:
        kept = act.checkpoint_bytes_per_token(job, arch) / act.layer_bytes_per_token(job, arch)
        out.append(("--grad-ckpt-reduction", f"{kept:.3f} (each layer keeps only its input)"))
    if args.logits_factor is None:
        per_vocab = ce.loss_bytes_per_token(job, arch) / arch.vocab_size
        out.append(("--logits-factor", f"{per_vocab:.2f} ({job.effective_loss_kernel} cross-entropy)"))
    fit = resolve(job).profile.device_fit  # a stack's measured device line, else the modelled CUDA side
    if args.fragmentation_gib is None:
        share, how = (fit.fragmentation, "fitted") if fit else (cuda.FRAGMENTATION, "allocator cache, modelled")
        out.append(("--fragmentation-gib", f"{share:.0%} of the allocated peak ({how})"))
    if args.misc_overhead_gib is None:
        context = fit.context_bytes if fit else cuda.CONTEXT_BYTES.get(get_gpu(placement.gpu_model).architecture,
                                                                         cuda.DEFAULT_CONTEXT_BYTES)
        how = "CUDA context + workspaces, fitted" if fit else "CUDA context; workspaces and NCCL modelled apart"
        out.append(("--misc-overhead-gib", f"{context / GIB:.1f} ({how})"))
    key = {"--attn-act-factor-fa": "attn_act_factor_fa", "--attn-act-factor-no-fa": "attn_act_factor_no_fa"}
    return [f"{flag} not given: here {ours} (VRAM-budget CLI default: "
            f"{THEIR_DEFAULTS.get(key.get(flag, flag[2:].replace('-', '_')), 'not documented')})" for flag, ours in out]


def with_storage(est: Estimate, storage: str | None, calib: Calibration | None) -> tuple[Estimate, list[str]]:
    """Apply fp8 / int8 base-weight storage to a bf16-base LoRA estimate (nf4 is QLoRA, already exact).

    The base linears' bf16 bytes are the difference between the LoRA and the QLoRA weight states divided by
    (2 − NF4 bytes); storing them in 1 byte saves half of that, on the weights and on the fragmentation.
    """
    if storage == "nf4":
        return est, ["--dtype nf4: QLoRA, NF4 base weights (0.5 B + fp32 absmax per 64), bf16 compute, fp32 "
                     "adapters with fp32 AdamW states"]
    if storage is None:
        return est, []
    arch = get_architecture(est.job.model)
    lora = model_states(est.job, arch, est.placement)
    nf4_job = est.job.model_copy(update={"method": "qlora"})
    nf4 = model_states(nf4_job, arch, est.placement)  # without the fp32 upcast of its 16-bit parameters:
    nf4_saving = (lora.weights + lora.gathered) - (nf4.weights + nf4.gathered - upcast_bytes(nf4_job, arch, est.placement))
    linear_bf16 = nf4_saving / (BF16_BYTES - NF4_BYTES) * BF16_BYTES
    saved = linear_bf16 * (BF16_BYTES - EIGHT_BIT_BYTES) / BF16_BYTES
    frag = 0.0 if calib is not None and calib.fragmentation_gib is not None else cuda.FRAGMENTATION * saved
    mem = est.memory
    peak = mem.peak_bytes - saved - frag
    memory = mem.model_copy(update={
        "weights_bytes": mem.weights_bytes - saved, "overhead_bytes": mem.overhead_bytes - frag, "peak_bytes": peak,
        "fits": peak <= mem.capacity_bytes,
        # theory's risk (memory.py estimate_memory): of the device peak less the free cached blocks torch releases
        "oom_risk": oom_probability(peak - mem.releasable_bytes, mem.capacity_bytes, method=est.job.method)})
    note = (f"--dtype {storage}: frozen base linears stored in 1 byte per weight ({saved / GIB:.2f} GiB less than "
            "bf16), dequantised to bf16 for compute; adapters, their gradients and AdamW states as LoRA (fp32)")
    return est.model_copy(update={"memory": memory}), [note]
