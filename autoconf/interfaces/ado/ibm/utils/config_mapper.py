"""IBM ado-autoconf's model-name mapping: production names of a family -> the name measured for it.

A family is matched from the start of the name, case-sensitively; the first family that matches wins and
an unmatched name is returned unchanged. The families and their targets are IBM's table (2.1.2):

* granite 2B (``granite-2b``, ``granite-3.1/3.2/3.3-2b``, optional ``-base``/``-instruct``, then ``-`` or the
  end) -> ``granite-3.1-2b``;
* granite 8B (the same spellings, nothing after) -> ``granite-3.1-8b-instruct``;
* llama 3.1 8B (``llama-3?1-8b``, any one character between 3 and 1, any suffix) -> ``llama3.1-8b``;
* granite 4.0 small / tiny / micro (with or without ``-h``) -> ``granite-4.0-h-small`` / ``-h-tiny`` /
  ``-h-micro``.

``map_to_valid`` also rewrites the GPU spelling ``NVIDIA A100-SXM4-80GB`` (nvidia-smi's) to ado's.
"""

from __future__ import annotations

import re
from copy import deepcopy
from typing import Any

_VARIANT = r"(?:-(?:instruct|base))?"
_GRANITE_3 = r"granite-(?:3\.[123]-)?"

model_patterns: dict[str, str] = {
    "GRANITE_3_1_2B": rf"^{_GRANITE_3}2b{_VARIANT}(?:-|$)",
    "GRANITE_3_1_8B": rf"^{_GRANITE_3}8b{_VARIANT}$",
    "LLAMA_3_1_8B": r"^llama-3.1-8b(?:-.*)?$",
    **{f"GRANITE_4_{size.upper()}": rf"^granite-4\.0(?:-h)?-{size}(?:-|$)" for size in ("small", "tiny", "micro")},
}

mapped_models: dict[str, str] = {
    "GRANITE_3_1_2B": "granite-3.1-2b",
    "GRANITE_3_1_8B": "granite-3.1-8b-instruct",
    "LLAMA_3_1_8B": "llama3.1-8b",
    **{f"GRANITE_4_{size.upper()}": f"granite-4.0-h-{size}" for size in ("small", "tiny", "micro")},
}

_COMPILED = [(re.compile(pattern), mapped_models[family]) for family, pattern in model_patterns.items()]
# nvidia-smi's spelling of the SXM A100 -> ado's
_GPU_SPELLINGS = {"NVIDIA A100-SXM4-80GB": "NVIDIA-A100-SXM4-80GB"}


def map_valid_model_name(model_name: str) -> str:
    """The measured model of ``model_name``'s family, or ``model_name`` itself."""
    for pattern, target in _COMPILED:
        if pattern.match(model_name):
            return target
    return model_name


def map_to_valid(input_dict: dict[str, Any]) -> dict[str, Any]:
    """A copy of a configuration with its model name mapped and nvidia-smi's A100 spelling made ado's."""
    out = deepcopy(input_dict)
    if "model_name" in out:
        out["model_name"] = map_valid_model_name(out["model_name"])
    if out.get("gpu_model") in _GPU_SPELLINGS:
        out["gpu_model"] = _GPU_SPELLINGS[out["gpu_model"]]
    return out
