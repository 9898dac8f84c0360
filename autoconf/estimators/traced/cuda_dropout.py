"""Dropout as a CUDA device runs it, for traces that run on CPU.

ATen's ``dropout`` takes the fused ``native_dropout`` only on CUDA-like devices (aten/src/ATen/native/Dropout.cpp
``is_fused_kernel_acceptable``: ``input.is_cuda()``, 0 < p < 1, a non-empty input); elsewhere it composes
``bernoulli_``, ``div_`` and ``mul`` (the same file's note under ``make_feature_noise``). The two keep different
tensors for backward: the fused kernel a bool mask, 1 byte per element (NativeDropoutBackward0 saves ``result1``),
the CPU composition a noise tensor of the input's dtype (MulBackward0), 2 or 4 bytes. A LoRA layer's dropout (peft,
torchtune, LitGPT, train.py's own layers) would then count 1–3 bytes per input element too many on each adapted
module. ``install`` makes ``torch.nn.functional.dropout`` take CUDA's route in the trace worker.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812

_INSTALLED = "_autoconf_cuda_dropout"


def _dropout(original: Any) -> Any:  # noqa: ANN401
    def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:  # noqa: A002
        if training and 0.0 < p < 1.0 and not inplace and input.numel() > 0:
            return torch.native_dropout(input, p, True)[0]
        return original(input, p, training, inplace)  # type: ignore[no-any-return]

    setattr(dropout, _INSTALLED, True)
    return dropout


def install() -> None:
    """Route ``F.dropout`` (``nn.Dropout`` calls it) through ``native_dropout``, once per process."""
    if not getattr(F.dropout, _INSTALLED, False):
        F.dropout = _dropout(F.dropout)
