"""What a peft LoRA step saves unlike the full fine-tuning layer it is derived from, per token (traced).

Each adapted linear keeps its input cast to the fp32 adapters; frozen norms and linears keep no input for their
weights; the first layer, fed by the frozen embedding, records nothing that depends on frozen weights alone
(activations.py's docstring has the closed forms).
"""

from __future__ import annotations

from autoconf.catalog.architecture import Architecture
from autoconf.catalog.families import FAMILIES, qk_norm_kind
from autoconf.estimators.theory.coefficients import (
    PER_LAYER_ROTARY_BYTES,
    ROTARY_CAT_FAMILIES,
    adapts_down,
    attention_layout_bytes,
    mlp_coef,
    mlp_compute_bytes,
    rotary_dim,
    sdpa_math,
)
from autoconf.estimators.theory.norms import (
    NORM_STAT_BYTES,
    PARALLEL_FAMILIES,
    bf16_norms,
    final_norm_bytes,
    lora_norm_bytes,
    norm_bytes,
    norm_stat_bytes,
)
from autoconf.estimators.theory.rows import AnyJob, Flag, Num, per_value, settings_of, where
from autoconf.estimators.theory.weights import kbit_upcast

POST_NORM_FAMILIES = frozenset({"olmo2"})  # no norm before attention: the projections read the residual stream
FROZEN_FIRST_LAYER = 1  # 0: LoRA's first layer counted like the others (frozen_input_bytes)
LORA_INPUT_BYTES = 4  # an adapted linear's input cast to fp32 adapters, per unit (lora_inputs_delta)
QLORA_INPUTS = 1  # peft's QLoRA layers keep LoRA's (traced bitsandbytes 0.50.2); 0: QLoRA without lora_inputs_delta
# QLoRA under peft's kbit upcast keeps an fp32 residual stream but fp32 only where bf16 LoRA keeps bf16
# (kbit_stream_delta); 0: every saved byte of the bf16 LoRA layer doubled (the fp32 precision factor)
KBIT_FP32_STREAM = 1


def frozen_input_bytes(job: AnyJob, arch: Architecture) -> Num:
    """What a peft LoRA step keeps less than the full fine-tuning terms, outside the per-layer figure.

    The frozen final norm keeps no normalized input for its weight (norm_bytes' trained term). Without
    checkpointing, the first layer's input comes from the frozen embedding and needs no gradient, so autograd
    records nothing that depends on it and frozen weights alone: the norms that read it (its input norm, a parallel
    block's norms), a parallel block's frozen MLP, a frozen k_proj's k_norm (gptj: its sin / cos). Traced: llama3.2-1b
    2·h + 4·head_dim + 16
    outside the layers (12,572 with checkpointing, −2·h), phi-2 4·h + 4 · 32 + 20 − (2·h + 4 + 8·I) = −76,656; the
    first layer (saved-tensor lists): qwen3 −(4·h + 4) − (4·kv + 4 · 8), pythia −(2·h + 8 + 2·I), olmo2 −(4·kv + 4),
    gpt-j −(2·h + 4 + 8·I + 4 · 64), santacoder −(2·h + 4).
    """
    h, count = arch.hidden_size, max(arch.norms_per_layer, 1)
    trained = final_norm_bytes(job, arch) - lora_norm_bytes(job, arch) / count - 2 * h
    if arch.mla is not None or arch.mamba is not None or FROZEN_FIRST_LAYER == 0:
        return trained
    parallel = arch.family in PARALLEL_FAMILIES
    if arch.family in POST_NORM_FAMILIES:
        norms: Num = 0.0
    else:
        norms = lora_norm_bytes(job, arch) * (1 if parallel else 1 / count) + NORM_STAT_BYTES * (count if parallel else 1)
    mlp_names = set(FAMILIES[arch.family].mlp)
    mlp_trains = per_value(job.lora_target_modules, lambda t: _adapts(arch, t, mlp_names)) > 0
    mlp = where(mlp_trains, 0.0, mlp_coef(job, arch) * h) if parallel else 0.0
    kind = qk_norm_kind(arch)
    k_norm: Num = 0.0
    if kind in ("head", "full"):
        k_trains = per_value(job.lora_target_modules, lambda t: _adapts(arch, t, {"k_proj"})) > 0
        rows = arch.kv_width // max(arch.head_dim, 1) if kind == "head" else 1
        k_norm = where(k_trains, 0.0, 4.0 * arch.kv_width + 4.0 * rows)
    if arch.family in PER_LAYER_ROTARY_BYTES:  # a frozen k_proj's k keeps no sin / cos of its own (gptj)
        k_trains = per_value(job.lora_target_modules, lambda t: _adapts(arch, t, {"k_proj"})) > 0
        k_norm = k_norm + where(k_trains, 0.0, PER_LAYER_ROTARY_BYTES[arch.family] / 2 * rotary_dim(arch))
    return trained + where(job.gradient_checkpointing, 0.0, norms + mlp + k_norm)


def _adapts(arch: Architecture, targets: tuple[str, ...], names: set[str]) -> float:
    """1 where the targets adapt one of these linears (0 for a batch's full fine-tuning rows: targets_or_zero)."""
    try:
        return 1.0 if {lin.name for lin in arch.lora_targets(targets)} & names else 0.0
    except ValueError:
        return 0.0


def adapted_inputs(job: AnyJob, arch: Architecture, lora: Flag) -> Num:
    """Input units of the adapted linears of one layer (q, k, v, gate, up: h; o_proj: q; down: I; experts skipped)."""
    def width(targets: tuple[str, ...]) -> int:
        try:
            linears = arch.lora_targets(targets)
        except ValueError:
            if lora is True:
                raise
            return 0  # a full fine-tuning row of a batch (targets_or_zero)
        return sum(lin.in_features for lin in linears if lin.per_layer == 1)
    return per_value(job.lora_target_modules, width)


def lora_inputs_delta(job: AnyJob, arch: Architecture, inputs: Num) -> Num:
    """What a peft LoRA layer keeps unlike the full fine-tuning layer it is derived from (bf16 LoRA, fp32 adapters).

    Each adapted linear keeps its input cast to the adapters' fp32 (peft lora Linear.forward: ``x =
    self._cast_input_dtype(x, lora_A.weight.dtype)``, lora_A's saved input: 4 per input unit), while the frozen
    norm weights keep no normalized input and the frozen linears keep no bf16 input (norm_bytes' outputs, the
    copied out-projection input of ROTARY_CAT_FAMILIES, or of eager attention). For llama's q_proj, v_proj the two
    cancel (+8·h − 8·h; eager −2·q);
    traced: phi-2 +6·h − 2·q, starcoder2 +4·h, stablelm +6·h − 2·q, phi-3-mini −6·h, cohere +2·h.
    """
    kept = norm_bytes(job, arch) - lora_norm_bytes(job, arch)
    # the out projection's copied input: eager attention's for every family, flash's after a rotary cat
    copy = where((job.attention == "eager") | sdpa_math(job, arch), 2.0 * arch.q_width,
                 2.0 * arch.q_width if arch.family in ROTARY_CAT_FAMILIES else 0.0)
    # an adapted down projection's frozen base keeps no bf16 input either (mlp_coef keeps it for an adapted one)
    down = 0.0 if arch.is_moe else where(per_value(job.lora_target_modules, adapts_down) > 0,
                                         2.0 * arch.intermediate_size, 0.0)
    # adapters in the model dtype cast nothing: lora_A keeps the tensor it reads, once per distinct input
    saved = where(model_dtype_adapters(job), settings_of(job).adapter_bytes * distinct_inputs(job, arch),
                  LORA_INPUT_BYTES * inputs)
    delta = saved - kept - copy - down
    return where(peft_adapters(job), delta, 0.0)


def peft_adapters(job: AnyJob) -> Flag:
    """The traced HF / peft path: LoRA or QLoRA (QLORA_INPUTS) with fp32 adapters, or with adapters in the model
    dtype (peft before 0.12); a QLoRA layer keeps what the LoRA layer keeps (traced llama3.2-1b, bf16 QLoRA and
    LoRA: the same saved tensors, inside and outside the layers)."""
    adapters = (settings_of(job).adapter_bytes == 4) | model_dtype_adapters(job)
    return ((job.method == "lora") | ((job.method == "qlora") & bool(QLORA_INPUTS))) & adapters


def model_dtype_adapters(job: AnyJob) -> Flag:
    """peft's LoRA layer with adapters in the model dtype (frameworks.Profile.peft_model_dtype_adapters)."""
    return settings_of(job).profile.peft_model_dtype_adapters


def distinct_inputs(job: AnyJob, arch: Architecture) -> Num:
    """Input units of one layer's adapted linears counted once per tensor they read: q / k / v one h, the MLP's
    input linears one h (a parallel block's attention and MLP one together), o_proj q, down I."""
    out = {FAMILIES[arch.family].out}
    return per_value(job.lora_target_modules,
                     lambda t: _shared_inputs(arch, t, None) + arch.q_width * _adapts(arch, t, out))


def kbit_stream_delta(job: AnyJob, arch: Architecture, inputs: Num, fsdp: Flag = False,
                      moe: bool | None = None) -> Num:
    """What one layer of a QLoRA under peft's kbit upcast keeps beyond the bf16 LoRA layer (bytes per token).

    prepare_model_for_kbit_training makes the embeddings and norm weights fp32 (peft utils/other.py), so the
    residual stream and every norm output are fp32 (LlamaRMSNorm.forward: ``self.weight * hidden.to(input_dtype)``,
    input_dtype fp32). bitsandbytes casts a 4-bit linear's input to the compute dtype and its output back to the
    input's (nn/modules.py Linear4bit.forward: ``x.to(self.compute_dtype)`` ... ``.to(inp_dtype)``), so q, k, v,
    attention's output and the MLP's activations are fp32: the compute-dtype tensors (4·q + 4·kv, the layout
    copies, mlp_compute_bytes; a LayerNorm's input and statistics) double. The fp32 tensors do not: an RMSNorm's
    input (already fp32, no copy) and rsqrt, logsumexp, lora_A outputs, QK-norm inputs. Without dropout, peft's
    ``_cast_input_dtype`` to the fp32 adapters is a no-op, so the adapted linears that read one tensor share it: the
    attention input (h) for q, k, v, the MLP input (h) for gate and up (one h in a parallel block), the product (I)
    for down; o_proj's input is attention's saved output (0) unless copied (q: eager, ROTARY_CAT_FAMILIES), instead
    of one cast per adapted linear (4 · inputs). With dropout each keeps its own dropout output, as in bf16. Traced
    llama3.2-1b, one layer: 143,560 B per token (q, v), 184,680 (all-linear) against bf16 LoRA's 92,360 and 158,056;
    exact also for mistral, granite, qwen2.5,
    qwen3, gemma, starcoder2, phi-2, stablelm-2, both target sets, with and without the upcast.
    """
    kbit = kbit_stream(job, arch, fsdp, moe)
    # the out projection's input is a copy of attention's output (lora_inputs_delta's copy): its own fp32 tensor
    copied = where((job.attention == "eager") | sdpa_math(job, arch), 1.0,
                   1.0 if arch.family in ROTARY_CAT_FAMILIES else 0.0)
    out = per_value(job.lora_target_modules, lambda t: _adapts(arch, t, {FAMILIES[arch.family].out}))
    shared = per_value(job.lora_target_modules, lambda t: _shared_inputs(arch, t, moe)) + copied * out * arch.q_width
    inputs_kept = where(job.lora_dropout > 0, 0.0, LORA_INPUT_BYTES * (shared - inputs))
    layout = attention_layout_bytes(job, arch) - where(job.attention == "eager", 0.0, 2.0 * arch.q_width) * (
        arch.family in ROTARY_CAT_FAMILIES)  # the copy is kept only as an adapted out projection's input
    compute = 4.0 * arch.q_width + 4.0 * arch.kv_width + layout + mlp_compute_bytes(arch, moe)
    # a LayerNorm family's norms run in the stream's dtype: their input, mean and rstd double (starcoder2)
    compute = compute + bf16_norms(job, arch) * (lora_norm_bytes(job, arch) + norm_stat_bytes(arch))
    return where(kbit, compute + inputs_kept, 0.0)


def kbit_stream(job: AnyJob, arch: Architecture, fsdp: Flag, moe: bool | None = None) -> Flag:
    """Whether kbit_stream_delta counts this layer: a dense layer of a peft QLoRA under the kbit upcast. A MoE layer
    keeps the fp32 factor on all its bytes: its QLoRA under the upcast was not traced (grouped_mm refuses fp32), and
    the fms-acceleration Mixtral rows (peft, checkpointed) sit 5 points lower with the dense form."""
    dense = not (arch.is_moe if moe is None else moe)
    return kbit_upcast(job, fsdp) & (settings_of(job).adapter_bytes == 4) & bool(KBIT_FP32_STREAM) & dense


def _shared_inputs(arch: Architecture, targets: tuple[str, ...], moe: bool | None) -> float:
    """Distinct input units of the adapted q / k / v, MLP-in and down linears of one layer (kbit_stream_delta): a
    parallel block's attention and MLP read one tensor; 0 for a full fine-tuning row."""
    try:
        names = {lin.name for lin in arch.lora_targets(targets) if lin.per_layer == 1}
    except ValueError:
        return 0.0
    fam = FAMILIES[arch.family]
    down = 0 if (arch.is_moe if moe is None else moe) else arch.intermediate_size
    attention, mlp_in = bool(names & set(fam.qkv)), bool(names & set(fam.mlp[:-1]))
    reads = (attention or mlp_in) if arch.family in PARALLEL_FAMILIES else attention + mlp_in
    return float(arch.hidden_size * reads + down * (fam.mlp[-1] in names))


def targets_or_zero(arch: Architecture, targets: tuple[str, ...]) -> int:
    """Adapted modules of ``targets`` in a batch that may hold full fine-tuning rows (whose targets are never read:
    the rows that adapt them were checked first, see vector.py)."""
    try:
        return len(arch.lora_targets(targets))
    except ValueError:
        return 0
