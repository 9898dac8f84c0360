"""One estimator contract for theory, learned, hybrid and traced (design §4).

Every estimator has ``name``, ``model_version``, ``estimate(job, placement) -> Estimate`` and a
vectorised ``estimate_frame(df) -> df`` (batch columns of design §8). Implementations are imported
lazily so that importing this module pulls in no AutoGluon or torch.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from autoconf.errors import InvalidInputError
from autoconf.schema import Estimate, Job, Placement

if TYPE_CHECKING:
    import pandas as pd

ESTIMATORS: dict[str, str] = {
    "theory": "autoconf.theory.estimator:TheoryEstimator",
    "learned": "autoconf.learned.estimator:LearnedEstimator",
    "hybrid": "autoconf.hybrid:HybridEstimator",
    "traced": "autoconf.traced:TracedEstimator",
}
DEFAULT_ESTIMATOR = "hybrid"


@runtime_checkable
class Estimator(Protocol):
    name: str
    model_version: str | None

    def estimate(self, job: Job, placement: Placement) -> Estimate: ...

    def estimate_frame(self, frame: "pd.DataFrame") -> "pd.DataFrame": ...


@lru_cache(maxsize=16)
def get_estimator(name: str = DEFAULT_ESTIMATOR, model_version: str | None = None) -> Estimator:
    """Cached estimator instance by name (and learned-model version, where it applies)."""
    if name not in ESTIMATORS:
        raise InvalidInputError("estimator", f"must be one of {', '.join(ESTIMATORS)}; got '{name}'")
    module_name, cls_name = ESTIMATORS[name].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    if name == "theory":
        return cls()
    return cls(model_version=model_version)
