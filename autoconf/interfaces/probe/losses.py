"""The probe's cross-entropy kernels: HF's own, torchtune's chunked loss, and Liger's fused linear CE.

``Job.loss_kernel`` decides which one a probe step runs (docs/probe.md):

* ``hf``: ``model(input_ids, labels=...)``, transformers' ``ForCausalLMLoss`` (the whole ``b·s·V`` logits,
  upcast to fp32 inside ``cross_entropy``).
* ``chunked``: the algorithm of torchtune's ``CEWithChunkedOutputLoss`` (8 chunks along the sequence):
  the head runs per chunk, each chunk's logits are upcast to fp32 and scored with ``reduction="sum"``,
  and the sum is divided by the number of scored tokens. What the theory counts for ``chunked``.
* ``fused-linear-ce``: Liger-Kernel's ``LigerFusedLinearCrossEntropyLoss`` over the final hidden states
  and the head weight (logits never materialised); CUDA and the liger-kernel package only.

Labels are shifted as transformers shifts them (pad with -100, drop the first), so every kernel scores
the same tokens: on the same weights and batch the three return the same loss (tests/test_probe_campaign.py).
"""

from __future__ import annotations

import torch

from autoconf.estimators.traced.kernels import (  # the same code the traced estimator runs
    IGNORE,
    causal_lm,
    chunked_cross_entropy,
    shifted_labels,
)
from autoconf.schema import Job

__all__ = ["IGNORE", "causal_lm", "chunked_cross_entropy", "liger_cross_entropy", "loss_of", "shifted_labels"]


def loss_of(model: torch.nn.Module, batch: torch.Tensor, job: Job) -> torch.Tensor:
    """The job's training loss on ``batch`` (inputs = labels, as the probe trains), mean over scored tokens."""
    kernel = job.effective_loss_kernel
    if kernel == "hf":
        output = model(input_ids=batch, labels=batch)
        loss: torch.Tensor = output.loss
        del output  # the Trainer keeps only the loss; the logits must not live through backward
        return loss
    lm = causal_lm(model)
    hidden = lm.model(input_ids=batch).last_hidden_state
    head = lm.get_output_embeddings()
    labels = shifted_labels(batch)
    if kernel == "chunked":
        return chunked_cross_entropy(hidden, head, labels)
    if kernel == "fused-linear-ce":
        return liger_cross_entropy(hidden, head, labels)
    raise ValueError(f"the probe runs loss kernels hf, chunked and fused-linear-ce; got {kernel}")


def liger_cross_entropy(hidden: torch.Tensor, head: torch.nn.Module, labels: torch.Tensor) -> torch.Tensor:
    """Liger's fused linear cross-entropy (chunked head + CE in Triton; gradients computed in forward)."""
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss  # optional, CUDA only

    weight = head.weight
    loss: torch.Tensor = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE)(
        weight, hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1))
    return loss
