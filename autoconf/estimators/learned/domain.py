"""The domains of a learned model version (design §5): answerable, training and correction.

* **answerable**: every catalogue model with a verified architecture, every catalogued GPU, the
  methods and the Job's token/batch bounds: what the ado experiment declares, since theory answers
  all of it.
* **training**: what the learned models saw measured (model names, methods, GPUs, token, batch and
  GPU-count ranges). Strict mode answers ``can_recommend = 0`` outside it.
* **correction**: where the hybrid applies the learned correction. A tree ensemble cannot follow a
  trend beyond its data, so the correction is used only for a method and block family it was trained
  on (llama-like or gpt_bigcode, dense or MoE) and within a factor ``WIDEN`` of the measured ranges
  of parameters, micro-batch tokens per GPU and GPUs. The model *name* is not required: the grouped
  held-out scores in the card measure exactly this case (architectures the models never saw).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol, cast, get_args

import annotated_types
import numpy as np
import pandas as pd

from autoconf.catalog import canonical_gpu, canonical_name, list_gpus, list_models
from autoconf.schema import Job, Method

WIDEN = 2.0  # a correction is trusted up to 2× beyond the measured range (one octave): an assumption
FAMILIES = ("llama-like/dense", "llama-like/moe", "gpt_bigcode/dense", "gpt_bigcode/moe")


def families(x: Mapping[str, np.ndarray]) -> np.ndarray:
    """Block family index per row from the features gpt_bigcode and num_experts."""
    return (2 * (x["gpt_bigcode"] > 0) + (x["num_experts"] > 1)).astype(int)


def method_names(x: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.select([x["method_full"] > 0, x["method_lora"] > 0], ["full", "lora"], "qlora")


def _range(values: np.ndarray) -> tuple[float, float]:
    return float(np.nanmin(values)), float(np.nanmax(values))


class Columns(Protocol):
    """Anything that gives a feature column by name: a dict of arrays or a FeatureTable."""

    def __getitem__(self, name: str) -> np.ndarray: ...


@dataclass(frozen=True)
class CorrectionDomain:
    methods: tuple[str, ...]
    families: tuple[str, ...]
    params_b: tuple[float, float]
    micro_batch_tokens: tuple[float, float]
    number_gpus: tuple[float, float]
    widen: float = WIDEN

    @classmethod
    def from_features(cls, x: Mapping[str, np.ndarray]) -> CorrectionDomain:
        fam = sorted(set(families(x).tolist()))
        return cls(methods=tuple(sorted(set(method_names(x).tolist()))), families=tuple(FAMILIES[f] for f in fam),
                   params_b=_range(x["params_b"]), micro_batch_tokens=_range(x["micro_batch_tokens"]),
                   number_gpus=_range(x["number_gpus"]))

    def contains(self, x: Columns) -> np.ndarray:
        """Boolean per row: inside the correction domain (NaN rows are outside)."""
        with np.errstate(invalid="ignore"):
            inside = sum(x[f"method_{m}"] > 0 for m in self.methods)
            fam = 2 * (x["gpt_bigcode"] > 0) + (x["num_experts"] > 1)
            inside = (inside > 0) & np.array([f in self.families for f in FAMILIES])[fam]
            for name in ("params_b", "micro_batch_tokens", "number_gpus"):
                lo, hi = getattr(self, name)
                inside &= (x[name] >= lo / self.widen) & (x[name] <= hi * self.widen)
        mask: np.ndarray = inside
        return mask

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CorrectionDomain:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**fields)


@dataclass(frozen=True)
class TrainingDomain:
    models: tuple[str, ...]
    methods: tuple[str, ...]
    gpus: tuple[str, ...]
    tokens_per_sample: tuple[int, int]
    batch_size: tuple[int, int]
    number_gpus: tuple[int, int]

    def check(self, job: Job, gpu_model: str) -> tuple[bool, str]:
        """(inside, reason): the first field of the point that the training data never covered."""
        return self._check(job.model, job.method, gpu_model, job.tokens_per_sample, job.batch_size)

    def check_columns(self, models: np.ndarray, methods: np.ndarray, gpus: np.ndarray, tokens: np.ndarray,
                      batch: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """``check`` over rows given as columns: (inside per row, the reason of each row outside, in row order),
        checked once per distinct point."""
        key = pd.DataFrame({"m": models, "k": methods, "g": gpus, "t": tokens, "b": batch})
        group = key.groupby(list(key.columns), sort=False).ngroup().to_numpy()
        firsts = np.unique(group, return_index=True)[1]
        found = [self._check(str(models[i]), str(methods[i]), str(gpus[i]), int(tokens[i]), int(batch[i]))
                 for i in firsts.tolist()]
        inside = np.array([ok for ok, _ in found], dtype=bool)[group]
        return inside, [found[g][1] for g in group[~inside].tolist()]

    def _check(self, name: str, method: str, gpu_model: str, tokens: int, batch: int) -> tuple[bool, str]:
        model, gpu = _known(canonical_name, name), _known(canonical_gpu, gpu_model)
        checks = [
            (model in self.models, f"model {model} was not measured (measured: {', '.join(self.models)})"),
            (method in self.methods, f"method {method} was not measured (measured: {', '.join(self.methods)})"),
            (gpu in self.gpus, f"GPU {gpu} was not measured (measured: {', '.join(self.gpus)})"),
            (self.tokens_per_sample[0] <= tokens <= self.tokens_per_sample[1],
             f"tokens_per_sample {tokens} is outside the measured "
             f"{self.tokens_per_sample[0]}-{self.tokens_per_sample[1]}"),
            (self.batch_size[0] <= batch <= self.batch_size[1],
             f"batch_size {batch} is outside the measured {self.batch_size[0]}-{self.batch_size[1]}"),
        ]
        for ok, why in checks:
            if not ok:
                return False, why
        return True, "inside the training domain"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainingDomain:
        return cls(**{k: tuple(v) for k, v in data.items()})


def _known(canonical: Any, name: str) -> str:
    """The catalogue spelling of ``name``, or ``name`` itself when the catalogue does not know it."""
    try:
        return str(canonical(name))
    except ValueError:
        return name


def training_domain(models: list[str], methods: list[str], gpus: list[str], tokens: np.ndarray,
                    batch: np.ndarray, gpus_used: np.ndarray) -> TrainingDomain:
    return TrainingDomain(
        models=tuple(sorted(set(models))), methods=tuple(sorted(set(methods))), gpus=tuple(sorted(set(gpus))),
        tokens_per_sample=(int(np.min(tokens)), int(np.max(tokens))),
        batch_size=(int(np.min(batch)), int(np.max(batch))),
        number_gpus=(int(np.min(gpus_used)), int(np.max(gpus_used))),
    )


def job_field_range(name: str) -> list[int]:
    """Inclusive [low, high] of an integer Job field, from its pydantic bounds."""
    low = high = 0
    for bound in Job.model_fields[name].metadata:
        if isinstance(bound, annotated_types.Gt):
            low = int(cast(int, bound.gt)) + 1
        elif isinstance(bound, annotated_types.Ge):
            low = int(cast(int, bound.ge))
        elif isinstance(bound, annotated_types.Le):
            high = int(cast(int, bound.le))
    return [low, high]


def answerable_domain() -> dict[str, Any]:
    """What theory answers: the key names experiments.answerable_domain reads."""
    return {
        "models": list_models(answerable_only=True), "gpus": list_gpus(), "methods": list(get_args(Method)),
        "tokens_per_sample": job_field_range("tokens_per_sample"), "batch_size": job_field_range("batch_size"),
    }
