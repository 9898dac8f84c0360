"""Why the traced estimator refuses a job: one rule for every stack (docs/traced.md, "What it cannot trace").

A combination is refused when the code that would answer it cannot run it on fake tensors or does not run it: the
stack's own driver (torchtune, torchtitan, trl; stacks/unsupported.py ``stack_unsupported``) or the HF step (everything
else, and DeepSpeed outside its engine). The refusal reads the job only, so it does not depend on what is installed.
What is not a refusal: a trace that fails at run time (theory answers, noted), a driver not installed here (the HF
step answers, noted with the install line), a partial trace (one replica traced, sharding from theory, noted).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoconf.catalog import Architecture, get_architecture
from autoconf.catalog.families import REMOTE_CODE
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.traced.ranks import rank_unsupported
from autoconf.estimators.traced.stacks.memory import applies, missing
from autoconf.estimators.traced.stacks.unsupported import stack_unsupported
from autoconf.schema import Job, Placement

# Loss kernels and optimizers the trace runs (autoconf/estimators/traced/kernels.py, model.py).
TRACED_LOSS_KERNELS = ("hf", "chunked", "fused-linear-ce")
TRACED_OPTIMIZERS = ("adamw", "sgd", "adamw-8bit")
# Model types transformers refuses to run with SDPA (Gemma2ForCausalLM, MptForCausalLM: "does not support an attention
# implementation through torch.nn.functional.scaled_dot_product_attention"), with what their attention needs.
NO_SDPA = {"gemma2": "attention (logit soft-capping)", "mpt": "ALiBi attention"}
# Stacks whose QLoRA is not transformers' bitsandbytes path (theory/frameworks.py profiles' sources).
OWN_QUANT_KERNELS = {"fms-hf-tuning": "fms-acceleration's AutoGPTQ / fused 4-bit Triton kernels with their own autograd"}


def arch_experts(job: Job) -> bool:
    """The job's model routes tokens to experts (MoE)."""
    return get_architecture(job.model).num_experts > 1


def untraceable_reason(job: Job, placement: Placement) -> str | None:
    """Why this job cannot be traced on fake CPU tensors, or None."""
    kernel = job.effective_loss_kernel
    if kernel not in TRACED_LOSS_KERNELS:
        return (f"the {kernel} loss kernel ({job.framework}'s fused Triton cross-entropy) has no traced stand-in "
                f"(traced: {', '.join(TRACED_LOSS_KERNELS)})")
    if kernel == "fused-linear-ce" and job.dtype.startswith("amp"):
        return "Liger's fused linear CE under amp (its autocast path) is not traced"
    if job.method == "qlora" and job.framework in OWN_QUANT_KERNELS:
        return (f"{job.framework}'s QLoRA runs its own quantised kernels ({OWN_QUANT_KERNELS[job.framework]}); "
                "traced QLoRA is transformers' bitsandbytes path")
    if job.method == "qlora" and resolve(job).quantize_lm_head:
        return "QLoRA with a 4-bit lm_head: transformers' bitsandbytes loader keeps the head unquantised"
    if job.method == "qlora" and arch_experts(job):
        # transformers/integrations/bitsandbytes.py replace_with_bnb_linear: `type(module) is nn.Linear` only; the
        # experts are 3-D parameters (e.g. MixtralExperts.gate_up_proj), so they would stay bf16 (then fp32 under
        # peft's kbit upcast, which grouped_mm refuses), where the stacks that measured MoE QLoRA quantised each
        # expert's nn.Linear
        return ("QLoRA of MoE experts: transformers 5 keeps them as 3-D parameters, which its bitsandbytes conversion "
                "(nn.Linear only) leaves unquantised")
    if arch_experts(job) and job.dtype != "bf16":
        # amp keeps fp32 weights and CPU autocast does not cast _grouped_mm: it refuses fp32 inputs too
        return (f"MoE experts in {job.dtype}: torch's grouped_mm (the traced experts) takes bf16 inputs only on CPU "
                "(CPU autocast does not cast it)")
    if resolve(job).optimizer_in_backward or resolve(job).activation_offloading:
        return "optimizer-in-backward and activation offloading are not traced (the traced step keeps both on the GPU)"
    if job.dora and job.method != "full":
        return "DoRA: the HF step traces peft's plain LoRA layers (DoRA is traced with --framework trl)"
    if job.optimizer not in TRACED_OPTIMIZERS:
        return f"optimizer {job.optimizer} is not traced (traced: {', '.join(TRACED_OPTIMIZERS)})"
    if job.optimizer_state_dtype == "fp32" and job.method == "full" and job.dtype in ("bf16", "fp16"):
        return "torch optimizers keep states in the parameter dtype; fp32 states with bf16/fp16 weights are not traced"
    if placement.tp > 1 or placement.pp > 1:
        why = rank_unsupported(job, placement)
        if why is not None:
            return f"tensor/pipeline parallel ranks of this job are not traced: {why}"
    return None


@dataclass(frozen=True)
class Decision:
    """What traced does with a job: refuse it, or answer it from the stack's own driver or from the HF step."""

    refusal: str | None  # why traced refuses the job (None: it answers)
    stack: bool = False  # the stack's own training code answers (traced/stacks/)
    note: str | None = None  # the HF step answers a job whose stack has a driver: why that driver does not run


def decide(job: Job, placement: Placement, arch: Architecture) -> Decision:
    """Whether traced refuses ``job`` (by one rule for every stack) and, if not, which code answers it.

    A stack with a driver (torchtune, torchtitan, trl; DeepSpeed's ZeRO on several GPUs) is refused where its code
    cannot run the job, whether or not the driver is installed here; DeepSpeed then goes to one HF replica
    (frameworks.Profile ``hf_replica_fallback``). Everything the HF step answers is refused where it cannot trace the
    job. A trace that fails at run time, a driver not installed and a partial trace are answers with a note, not
    refusals.
    """
    engine = None
    if applies(job, placement):
        engine = stack_unsupported(job, placement, arch)
        # a stack whose model and step are the HF Trainer's (``hf_replica_fallback``: DeepSpeed) goes to one HF
        # replica, sharded by theory, as --framework hf-trainer with a ZeRO strategy (a partial trace, noted); every
        # other stack with a driver is refused outside it: the HF step is not its code (docs/traced.md)
        if engine is not None and not resolve(job).profile.hf_replica_fallback:
            return Decision(engine)
        if engine is None and missing(job, placement) is None:
            return Decision(None, stack=True)  # the stack's own code runs it
    reason = untraceable_reason(job, placement)
    if reason is None and arch.model_type in NO_SDPA and job.attention != "eager":
        reason = (f"{arch.model_type}'s {NO_SDPA[arch.model_type]} has no SDPA path in transformers, and flash-"
                  f"attention does not run on CPU; traced runs it with --attention eager only")
    if reason is None and arch.family in REMOTE_CODE:
        reason = f"{arch.family} is hub remote code (no transformers class to trace)"
    if reason is None and arch.tie_word_embeddings and placement.tp > 1 and placement.dp > 1:
        # transformers FSDP2-shards the untied head in the root group, then ties it to the embedding after loading
        # (distributed/fsdp.py, modeling_utils._finalize_model_loading): a head shard the fake load never
        # materialises beside the embedding's; tensor parallel alone is traced
        reason = ("tensor parallel inside data parallel with tied embeddings: transformers shards the head apart "
                  "from the embedding under FSDP2 and ties them after loading, which the rank trace does not follow")
    if reason is not None:
        return Decision(reason)
    if engine is not None:  # hf_replica_fallback: the stack's driver does not run this job
        return Decision(None, note=f"traced: {job.framework}'s own code not run: {engine}; the HF step answers")
    return Decision(None, note=missing(job, placement))  # a stack driver that would apply is not installed
