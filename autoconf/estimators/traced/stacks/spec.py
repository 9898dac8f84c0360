"""The architecture fields every stack driver's spec carries (also part of its cache key)."""

from __future__ import annotations

from typing import Any

from autoconf.catalog import Architecture


def arch_spec(arch: Architecture, **extra: Any) -> dict[str, Any]:  # noqa: ANN401
    """Name, family and shape of the model a driver builds, plus the fields only that driver reads."""
    return {"name": arch.name, "model_type": arch.model_type, "vocab_size": arch.vocab_size,
            "num_layers": arch.num_layers, "num_heads": arch.num_heads, "num_kv_heads": arch.num_kv_heads,
            "hidden_size": arch.hidden_size, "intermediate_size": arch.intermediate_size, "head_dim": arch.head_dim,
            **extra}
