"""GPU catalogue: ado's spelling (NVIDIA-A100-80GB-PCIe, L40S, ...) with aliases -> GPUSpec."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from autoconf.errors import UnknownGPUError

MIB = 2**20


@dataclass(frozen=True)
class GPUSpec:
    name: str
    architecture: str
    memory_bytes: int
    bf16_tflops: float | None
    fp16_tflops: float | None
    memory_bandwidth_gbps: float
    intra_node_link: str  # "nvlink" or "pcie"
    intra_node_bandwidth_gbps: float  # per GPU, one direction
    source: str
    aliases: tuple[str, ...] = ()
    fp8_tflops: float | None = None  # dense FP8 tensor-core peak (Hopper and later, Ada); not used by the estimators yet

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30

    def peak_tflops(self, dtype: str) -> float | None:
        """Dense tensor-core peak for the training dtype (fp32 trains through TF32 = bf16/2)."""
        if dtype in ("bf16", "amp-bf16"):
            return self.bf16_tflops
        if dtype in ("fp16", "amp-fp16"):
            return self.fp16_tflops
        return self.bf16_tflops / 2 if self.bf16_tflops else None


def _f(value: str) -> float | None:
    return float(value) if value.strip() else None


@lru_cache(maxsize=1)
def _specs() -> dict[str, GPUSpec]:
    text = resources.files("autoconf.catalog").joinpath("gpus.csv").read_text(encoding="utf-8")
    specs = {}
    for row in csv.DictReader(text.splitlines()):
        specs[row["name"]] = GPUSpec(
            name=row["name"], architecture=row["architecture"], memory_bytes=int(row["memory_mib"]) * MIB,
            bf16_tflops=_f(row["bf16_dense_tflops"]), fp16_tflops=_f(row["fp16_dense_tflops"]),
            memory_bandwidth_gbps=float(row["memory_bandwidth_gbps"]), intra_node_link=row["intra_node_link"],
            intra_node_bandwidth_gbps=float(row["intra_node_bandwidth_gbps"]), source=row["source"],
            aliases=tuple(a for a in row["aliases"].split(";") if a), fp8_tflops=_f(row.get("fp8_dense_tflops") or ""),
        )
    return specs


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    index = {}
    for name, spec in _specs().items():
        for key in (name, *spec.aliases):
            index[key.lower().replace(" ", "-")] = name
    return index


def list_gpus() -> list[str]:
    return list(_specs())


def canonical_gpu(name: str) -> str:
    key = str(name).strip().lower().replace(" ", "-")
    if key in _index():
        return _index()[key]
    raise UnknownGPUError(str(name), list_gpus())


def get_gpu(name: str) -> GPUSpec:
    return _specs()[canonical_gpu(name)]
