"""The Placement (where the job runs) and the one way in: a mapping of a user's words -> Job + Placement."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from autoconf import defaults
from autoconf.schema.job import Job, field_metadata
from autoconf.schema.kinds import Offload, Strategy
from autoconf.schema.words import _Input


class Placement(_Input):
    """Where and how the job is spread: GPUs, workers, sharding and parallelism."""

    gpu_model: str = Field(description="GPU name in ado's spelling (e.g. NVIDIA-A100-80GB-PCIe) or an alias.")
    number_gpus: int = Field(1, ge=1, le=defaults.NUMBER_GPUS_LIMIT, description="Total GPUs across all workers.")
    gpus_per_worker: int | None = Field(
        None, ge=1, le=defaults.GPUS_PER_NODE, description="GPUs per worker (node); default min(number_gpus, 8)."
    )
    strategy: Strategy | None = Field(
        None,
        description="Data-parallel sharding: ddp, fsdp (full shard), fsdp-shard-grad-op, fsdp-hybrid, "
        "zero0..zero3. Default: fsdp when number_gpus > 1 (as fms-hf-tuning), else ddp.",
    )
    tp: int = Field(1, ge=1, le=64, description="Tensor-parallel degree (must divide heads).")
    pp: int = Field(1, ge=1, le=256, description="Pipeline-parallel degree (must divide layers).")
    offload: Offload = Field("none", description="CPU offload: none, optimizer, or optimizer+params.")
    virtual_pp: int = Field(
        1, ge=1, le=64, description="Interleaved pipeline stages per GPU (Megatron virtual pipeline size); "
        "divides the pipeline bubble.")
    intra_node_gbps: float | None = Field(
        None, gt=0, le=10_000, description="GPU-to-GPU bandwidth inside a node, GB/s per GPU one direction "
        "(default: the GPU's NVLink / PCIe figure in the catalogue).")
    inter_node_gbps: float | None = Field(
        None, gt=0, le=10_000, description="Network bandwidth between nodes, GB/s per node one direction "
        "(default 25: two 100 Gb/s Ethernet NICs; DGX H100 InfiniBand 8 x 400 Gb/s = 400).")

    @model_validator(mode="after")
    def _check_degrees(self) -> Placement:
        if self.number_gpus % (self.tp * self.pp) != 0:
            raise ValueError(
                f"number_gpus must be a multiple of tp*pp = {self.tp * self.pp}; got {self.number_gpus}"
            )
        return self

    @property
    def effective_strategy(self) -> Strategy:
        if self.strategy is not None:
            return self.strategy
        return "fsdp" if self.dp > 1 else "ddp"

    @property
    def dp(self) -> int:
        """Data-parallel degree: GPUs that each hold a different micro-batch."""
        return self.number_gpus // (self.tp * self.pp)

    @property
    def workers(self) -> int:
        per = self.gpus_per_worker or min(self.number_gpus, defaults.GPUS_PER_NODE)
        return -(-self.number_gpus // per)


# Other spellings of Job words, one table for every entry point that reads words (sweep rows, ado points, REST
# bodies, the CLI's generated flags), read from the fields' ``aliases`` metadata: the ado/data-table name of the
# model and the VRAM-budget CLI's names (docs/dialects.md). A canonical name given beside its alias wins.
def _field_aliases() -> dict[str, str]:
    return {str(alias): name for name, found in field_metadata("aliases").items() for alias in found}


ALIASES = _field_aliases()
PER_DEVICE_BATCH = "per_device_batch_size"  # batch_size = this × number_gpus × gradient_accumulation_steps


def _plain(value: Any) -> Any:  # noqa: ANN401 - any cell of a table or body
    """numpy scalars -> Python; an empty cell (None, NaN) -> None."""
    item = getattr(value, "item", None)
    value = item() if callable(item) and not isinstance(value, (str, bytes)) else value
    return None if isinstance(value, float) and math.isnan(value) else value


def canonical_words(words: Mapping[str, Any], default_gpus: int = 1) -> dict[str, Any]:
    """``words`` with empty cells dropped, aliases renamed and a per-device batch turned into batch_size."""
    data = {key: v for key, value in words.items() if (v := _plain(value)) is not None}
    for alias, name in ALIASES.items():
        if alias in data:
            data.setdefault(name, data.pop(alias))
    if data.get("model") is not None and not isinstance(data["model"], str):
        data["model"] = str(data["model"])  # a bare parameter count read as a number
    if data.get(PER_DEVICE_BATCH) is not None and data.get("batch_size") is None:
        gpus = int(data.get("number_gpus") or default_gpus)
        data["batch_size"] = int(data[PER_DEVICE_BATCH]) * gpus * int(data.get("gradient_accumulation_steps") or 1)
    return data


def job_of_words(words: Mapping[str, Any]) -> Job:
    """The Job in a mapping of a user's words; words that are no Job field are left to the caller."""
    data = canonical_words(words)
    return Job(**{k: v for k, v in data.items() if k in Job.model_fields})


def job_and_placement(words: Mapping[str, Any], default_gpus: int = 1) -> tuple[Job, Placement]:
    """The one way in: a mapping of a user's words (CLI flags, a REST body, an ado point, a sweep row) ->
    Job and Placement. Booleans and choices are read by ``read_word``, aliases by ``ALIASES``; a bad word
    raises pydantic's ValidationError naming the field and the accepted values. Words that are neither Job
    nor Placement fields are ignored here (the entry point decides whether they are allowed)."""
    data = canonical_words(words, default_gpus)
    data.setdefault("number_gpus", default_gpus)
    job = Job(**{k: v for k, v in data.items() if k in Job.model_fields})
    return job, Placement(**{k: v for k, v in data.items() if k in Placement.model_fields})
