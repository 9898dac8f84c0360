"""autoconf: will an LLM fine-tuning job fit, on how many GPUs, how fast, how long, at what cost?

``autoconf.min_gpu_recommender`` is the module IBM's ado plugin users import
(``from autoconf.min_gpu_recommender import min_gpu_recommender``): a lazy alias of
``autoconf.interfaces.ado.measured``, loaded on first attribute access, so that ``import autoconf`` stays
cheap and never imports ado.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.2.0"  # the one place: pyproject.toml, /healthz, --version and the ado operator read it


class _LazyAlias(types.ModuleType):
    """A module whose attributes are those of ``target``, imported on first use."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, f"Alias of {target} (imported on first attribute access).")
        self._target = target

    def _load(self) -> types.ModuleType:
        return importlib.import_module(self._target)

    def __getattr__(self, attr: str) -> Any:  # noqa: ANN401
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return getattr(self._load(), attr)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self._load())))


min_gpu_recommender = sys.modules.setdefault(
    f"{__name__}.min_gpu_recommender",
    _LazyAlias(f"{__name__}.min_gpu_recommender", "autoconf.interfaces.ado.measured"),
)
