"""Loss kernels and GPU-only kernels as the trace runs them: what each allocates and keeps, on fake tensors.

Runs inside the trace workers (torch only). Each stand-in allocates, in the same order and dtype, the tensors
the real kernel allocates and keeps for backward; values are not computed (the trace only counts bytes).

* ``chunked``: torchtune's ``CEWithChunkedOutputLoss`` algorithm is plain torch and runs as it is (8 chunks
  along the sequence, the head per chunk, each chunk's logits upcast to fp32, summed, / scored tokens).
* ``fused-linear-ce``: Liger-Kernel's ``LigerFusedLinearCrossEntropyFunction`` (Triton; no CPU or meta
  implementation), from liger_kernel/ops/fused_linear_cross_entropy.py ``fused_linear_cross_entropy_forward``:
  ``grad_input = torch.zeros_like(_input)``; ``grad_weight = torch.zeros_like(weight)`` only when the head is
  trained; ``loss_1d = torch.zeros(BT, float32)``; ``target_mask = target != ignore_index``; one logits buffer
  of ``chunk_size × V`` in the input dtype (``logits_storage``: ``torch.mm(..., out=)`` when input and head
  share a dtype, as under ``no_grad`` inside the Function on CUDA; mixed dtypes, Liger's autocast path, are
  not traced), with ``inc_factor = cdiv(V, H)`` and
  ``chunk_size = min(next_power_of_2(cdiv(BT, inc_factor)), BT)``; the gradients are computed in forward and
  saved (``ctx.save_for_backward(grad_input, grad_weight)``), backward returns them (the ``element_mul``
  rescale is in place).
* transformers' causal-LM loss of an older release (``release_loss``; spec ``hf_loss``), set as the 5.x model's
  ``loss_function``, which its forward calls on the head's logits (kept by the output, as 4.x kept them):
  ``4.46-4.48`` is loss/loss_utils.py ``ForCausalLMLoss`` of 4.46–4.48 (``logits = logits.float()``,
  ``shift_logits = logits[..., :-1, :].contiguous()``, ``fixed_cross_entropy``); ``bf16-4.x`` is gpt_bigcode's
  loss before 4.49 (modeling_gpt_bigcode.py ``GPTBigCodeForCausalLM.forward``: the same shifted copy of the
  bf16 ``lm_logits``, ``CrossEntropyLoss()``, no upcast). 4.39–4.45 upcast inside the model's forward and drop the
  bf16 logits, which a loss function cannot; their peak is the installed release's (theory/loss.py HF_LOSS_LINES).
* bitsandbytes ``gemm_4bit`` (QLoRA's forward matmul): its fake allocates only the output, but the CUDA
  kernel for training-sized inputs (M = tokens > 4 on every GPU's heuristic here) is
  bitsandbytes/backends/cuda/ops.py ``_dequant_linear_fallback``: ``B_dq = torch.empty(shapeB, dtype=A.dtype)``
  (the whole weight dequantised, freed on return), with double quantisation first ``absmax_dq`` (fp32, one
  per block) and ``absmax_dq + absmax_offset``. ``transients`` returns these for the tracker.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

CHUNKS = 8  # torchtune CEWithChunkedOutputLoss num_output_chunks default
IGNORE = -100  # ignore_index of HF's, torchtune's and Liger's losses
GEMM_4BIT_CUSTOM_FLOOR_M = 4  # bitsandbytes/backends/cuda/ops.py _GEMM_4BIT_CUSTOM_FLOOR_M: fused kernel at M <= 4


def shifted_labels(ids: torch.Tensor) -> torch.Tensor:
    """Next-token labels as transformers builds them: pad the end with IGNORE, drop the first column."""
    return F.pad(ids, (0, 1), value=IGNORE)[:, 1:]


def chunked_cross_entropy(hidden: torch.Tensor, head: torch.nn.Module, labels: torch.Tensor) -> torch.Tensor:
    """torchtune's chunked-output CE: per-chunk head, fp32 upcast per chunk, summed, / scored tokens."""
    total = hidden.new_zeros((), dtype=torch.float32)
    for h_chunk, y_chunk in zip(hidden.chunk(CHUNKS, dim=1), labels.chunk(CHUNKS, dim=1), strict=True):
        logits = head(h_chunk)
        total = total + F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y_chunk.reshape(-1),
                                        reduction="sum", ignore_index=IGNORE)
    return total / (labels != IGNORE).sum().clamp(min=1)


def liger_chunk_size(tokens: int, hidden: int, vocab: int) -> int:
    """Liger's chunk of tokens per logits block (fused_linear_cross_entropy_forward, chunk_mem_const = 1)."""
    inc_factor = -(-vocab // hidden)
    per = -(-tokens // inc_factor)
    return min(1 << max(0, math.ceil(math.log2(per))), tokens)


class FusedLinearCrossEntropy(torch.autograd.Function):
    """Liger's fused linear cross-entropy, allocation for allocation (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        tokens, width = hidden.shape
        vocab = weight.shape[0]
        chunk = liger_chunk_size(tokens, width, vocab)
        grad_input = torch.zeros_like(hidden)
        grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
        loss_1d = torch.zeros(tokens, dtype=torch.float32, device=hidden.device)
        target_mask = target != IGNORE
        if hidden.dtype != weight.dtype:  # Liger's autocast fallback path is not modelled
            raise ValueError(f"fused linear CE traced for one dtype; hidden {hidden.dtype}, head {weight.dtype}")
        storage = torch.empty((chunk, vocab), dtype=hidden.dtype, device=hidden.device)
        for start in range(0, tokens, chunk):
            end = min(start + chunk, tokens)
            piece = hidden[start:end]
            logits = storage[: end - start]
            torch.mm(piece, weight.t(), out=logits)  # the CE kernel then writes the logits' gradient in place
            torch.mm(logits, weight, out=grad_input[start:end])
            if grad_weight is not None:
                torch.addmm(grad_weight, logits.t(), piece, out=grad_weight)
            del logits, piece
        del storage, target_mask
        loss = loss_1d.sum()
        ctx.save_for_backward(grad_input, grad_weight)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_input, grad_weight = ctx.saved_tensors
        return grad_input, grad_weight, None


def liger_cross_entropy(hidden: torch.Tensor, head: torch.nn.Module, labels: torch.Tensor) -> torch.Tensor:
    """The loss over ``hidden`` (b, s, h) and the head weight as LigerFusedLinearCrossEntropyLoss computes it."""
    weight = head.weight
    assert isinstance(weight, torch.Tensor)
    out: torch.Tensor = FusedLinearCrossEntropy.apply(  # type: ignore[no-untyped-call]  # torch: unannotated
        hidden.reshape(-1, hidden.shape[-1]), weight, labels.reshape(-1))
    return out


RELEASE_LOSSES = ("4.46-4.48", "bf16-4.x")


def release_loss(line: str) -> Any:
    """transformers' causal-LM loss of release line ``line`` (RELEASE_LOSSES), as a 5.x ``loss_function``."""
    if line not in RELEASE_LOSSES:
        raise ValueError(f"traced release losses: {', '.join(RELEASE_LOSSES)}; got {line}")
    upcast = line == "4.46-4.48"

    def loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int, num_items_in_batch: Any = None,
             ignore_index: int = IGNORE, **kwargs: Any) -> torch.Tensor:
        if upcast:
            logits = logits.float()
        shift_logits = logits[..., :-1, :].contiguous().view(-1, vocab_size)
        shift_labels = labels[..., 1:].contiguous().view(-1)
        reduction = "sum" if num_items_in_batch is not None else "mean"
        out = F.cross_entropy(shift_logits, shift_labels, ignore_index=ignore_index, reduction=reduction)
        return out / num_items_in_batch if num_items_in_batch is not None else out

    return loss


def causal_lm(model: torch.nn.Module) -> Any:
    """The transformers *ForCausalLM under a peft wrapper (or the model itself)."""
    base = getattr(model, "get_base_model", None)
    return base() if callable(base) else model


def kernel_loss(model: torch.nn.Module, ids: torch.Tensor, kernel: str, on_hidden: Any) -> torch.Tensor:
    """The training loss with loss kernel ``kernel`` (chunked or fused-linear-ce); ``on_hidden(hidden)`` is
    called on the final hidden states before the loss (the tracker's phase switch)."""
    lm = causal_lm(model)
    # the decoder under its own name (transformers' base_model_prefix: "model" for llama, "transformer" for gpt_bigcode)
    hidden = getattr(lm, lm.base_model_prefix)(input_ids=ids).last_hidden_state
    on_hidden(hidden)
    head = lm.get_output_embeddings()
    labels = shifted_labels(ids)
    if kernel == "chunked":
        return chunked_cross_entropy(hidden, head, labels)
    if kernel == "fused-linear-ce":
        return liger_cross_entropy(hidden, head, labels)
    raise ValueError(f"traced loss kernels: hf, chunked, fused-linear-ce; got {kernel}")


def transients(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """Tensors a GPU kernel allocates and frees inside one op that its fake does not (made here, on the
    current fake mode): bitsandbytes ``gemm_4bit``'s dequantised weight (module docstring)."""
    if getattr(func, "_schema", None) is None or func._schema.name != "bitsandbytes::gemm_4bit":
        return []
    a, shape_b = args[0], args[2]
    absmax_8bit = kwargs.get("absmax_8bit")
    if a.numel() // a.shape[-1] <= GEMM_4BIT_CUSTOM_FLOOR_M:
        return []
    made = []
    if absmax_8bit is not None:
        dq = torch.empty_like(absmax_8bit, dtype=torch.float32)
        made += [dq, torch.empty_like(dq)]  # absmax_dq and absmax_dq + absmax_offset
    made.append(torch.empty(tuple(shape_b), dtype=a.dtype, device=a.device))
    return made


def _fused_sgd_meta() -> Any:
    """A Meta kernel for ``aten::_fused_sgd_`` (``torch.optim.SGD(fused=True)``), which has none: FakeTensorMode would
    run the CPU kernel on real zero tensors of the parameters' size, so an SGD trace of an 8B model exhausted host
    memory (3.2 GB resident per 500M bf16 parameters). The CUDA kernel (ATen native/cuda/FusedSgdKernel.cu) updates
    the parameters and momentum buffers in place and allocates nothing; the buffers are allocated in Python
    (torch/optim/sgd.py ``_fused_sgd``: ``torch.empty_like`` on the first step). Kept alive with the module."""
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_sgd_", "Meta"):
        return None
    library = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]  # torch's is unannotated
    for overload in ("_fused_sgd_", "_fused_sgd_.tensor_lr"):
        library.impl(overload, lambda *args, **kwargs: None, "Meta")  # type: ignore[no-untyped-call]
    return library


_FUSED_SGD_META = _fused_sgd_meta()
