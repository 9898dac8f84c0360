"""The choice types of the schema (Literals), the stack names and the byte unit: the words every field uses."""

from __future__ import annotations

import typing
from typing import Literal

GIB = 2**30

Method = Literal["full", "lora", "qlora"]
DType = Literal["bf16", "fp16", "fp32", "amp-bf16", "amp-fp16"]
Optimizer = Literal["adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit", "sgd"]
OptimizerImpl = Literal["fused", "foreach", "for-loop"]
Attention = Literal["flash", "sdpa", "eager"]
Strategy = Literal[
    "ddp", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid", "zero0", "zero1", "zero2", "zero3"
]
Offload = Literal["none", "optimizer", "optimizer+params"]
EstimatorName = Literal["theory", "learned", "hybrid", "traced"]
Phase = Literal["load", "static", "forward", "loss", "backward", "optimizer"]
# Training stacks with a documented profile (autoconf/estimators/theory/frameworks.py, docs/frameworks.md).
Framework = Literal[
    "hf-trainer", "fms-hf-tuning", "peft", "litgpt", "torchtune", "unsloth", "axolotl", "llama-factory",
    "ms-swift", "deepspeed", "fsdp-qlora", "llm-foundry", "torchtitan", "trl",
]
FRAMEWORKS: tuple[str, ...] = typing.get_args(Framework)  # the one list of stack names (profiles: frameworks.py)
LossKernel = Literal["hf", "chunked", "fused-ce", "fused-linear-ce"]

DEFAULT_LORA_TARGETS: tuple[str, ...] = ("q_proj", "v_proj")
