"""Falcon under flash_attention_2, traced on fake CPU tensors.

transformers builds ``FalconFlashAttention2`` for ``attn_implementation="flash_attention_2"``, which needs the
flash-attn package and a GPU. The trace builds the SDPA model, gives its attention modules the flash class (same
weights: it subclasses ``FalconAttention``) and runs its forward with ``flash_forward`` in place of transformers'
``_flash_attention_forward``: torch's flash kernel on (b, heads, s, d) views of the same tensors, causal, with the
multi-query or grouped k / v as they are (``enable_gqa``). It keeps what flash-attn keeps (q, k, v, the output, the
fp32 logsumexp) and returns the output in q's layout, as flash-attn's ``empty_like(q)``. Flash takes no mask, so the
model builds none (FalconModel builds it for every implementation but hands it to the kernel only under SDPA).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own alias
from transformers.models.falcon import modeling_falcon

NO_MASK = "_autoconf_flash_no_mask"  # set on a traced model's config: create_causal_mask answers None


def flash_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,  # noqa: ANN401
                  query_length: int, is_causal: bool = True, dropout: float = 0.0, **_: Any) -> torch.Tensor:  # noqa: ANN401
    """flash-attn's varlen-free path on (b, s, heads, d) inputs, through torch's flash kernel."""
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=is_causal and query_length > 1,
                                         enable_gqa=k.shape[1] != q.shape[1])
    return out.transpose(1, 2)


def _mask(original: Any) -> Any:  # noqa: ANN401 - transformers' create_causal_mask
    def create_causal_mask(config: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        if getattr(config, NO_MASK, False):
            return None
        return original(config, *args, **kwargs)

    create_causal_mask.wrapped = original  # type: ignore[attr-defined]
    return create_causal_mask


def install(model: torch.nn.Module) -> None:
    """Make a freshly built SDPA Falcon run its attention as flash_attention_2 does (idempotent per process)."""
    original = getattr(modeling_falcon, "create_causal_mask")  # noqa: B009 - imported, not re-exported
    if not hasattr(original, "wrapped"):
        setattr(modeling_falcon, "create_causal_mask", _mask(original))  # noqa: B010
    setattr(modeling_falcon, "_flash_attention_forward", flash_forward)  # noqa: B010 - set only with flash-attn
    for module in model.modules():
        if type(module) is modeling_falcon.FalconAttention:
            module.__class__ = modeling_falcon.FalconFlashAttention2
            # flash-attn >= 2.1: bottom-right causal alignment
            setattr(module, "_flash_attn_uses_top_left_mask", False)  # noqa: B010
    setattr(model.config, NO_MASK, True)
