"""The Placement: where the job runs (GPUs, workers, sharding, parallelism)."""

from __future__ import annotations

from pydantic import Field, model_validator

from autoconf import defaults
from autoconf.schema.kinds import Offload, Strategy
from autoconf.schema.words import _Input


class Placement(_Input):
    """Where and how the job is spread: GPUs, workers, sharding and parallelism."""

    gpu_model: str = Field(description="GPU name in ado's spelling (e.g. NVIDIA-A100-80GB-PCIe) or an alias.")
    number_gpus: int = Field(1, ge=1, le=defaults.NUMBER_GPUS_LIMIT, description="Total GPUs across all workers.",
                             json_schema_extra={"unit": "GPUs"})
    gpus_per_worker: int | None = Field(
        None, ge=1, le=defaults.GPUS_PER_NODE, description="GPUs per worker (node); default min(number_gpus, 8).",
        json_schema_extra={"unit": "GPUs"})
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
        "(default: the GPU's NVLink / PCIe figure in the catalogue).", json_schema_extra={"unit": "GB/s"})
    inter_node_gbps: float | None = Field(
        None, gt=0, le=10_000, description="Network bandwidth between nodes, GB/s per node one direction "
        "(default 25: two 100 Gb/s Ethernet NICs; DGX H100 InfiniBand 8 x 400 Gb/s = 400).", json_schema_extra={"unit": "GB/s"})

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
