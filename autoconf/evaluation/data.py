"""Measured runs (``data/measurements.csv``, design §7): load the table, turn a row into inputs.

The table is built from public benchmark files by ``data/convert_fms.py`` (columns and provenance:
``data/README.md``). It lives in the repository, not in the wheel; point ``AUTOCONF_DATA`` at a copy
to use it from an installed package.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import SupportsFloat, SupportsInt, get_args

import pandas as pd

from autoconf.defaults import DATA_ENV, measurements_path
from autoconf.errors import InvalidInputError
from autoconf.schema import Job, OptimizerImpl, Placement

logger = logging.getLogger(__name__)


# Columns of data/measurements.csv, in order (design §7; data/README.md explains each). The base columns are
# convert_fms.py's table; the extra ones came with the external sources and the probe. The converters
# (data/common.py), the probe's rows and `data import` all write this one header.
MEASUREMENT_BASE_COLUMNS: tuple[str, ...] = (
    "source", "source_ref", "campaign", "in_repo_head", "framework", "gpu_model", "gpu_variant_stated",
    "number_gpus", "number_nodes", "model_name", "model_hf_id", "method", "tokens_per_sample",
    "variable_length", "batch_size", "per_device_batch_size", "gradient_accumulation_steps", "dtype", "amp",
    "strategy", "gradient_checkpointing", "attention", "fused_loss", "loss_kernel", "packing", "kernels",
    "lora_r", "lora_alpha", "lora_target_modules", "status", "peak_memory_bytes", "memory_metric",
    "torch_allocated_bytes", "torch_allocated_static_bytes", "nvidia_smi_bytes", "tokens_per_second",
    "tokens_per_second_per_device", "train_samples_per_second", "train_runtime_s", "duplicate_of", "notes",
)
MEASUREMENT_EXTRA_COLUMNS: tuple[str, ...] = (
    "torch_reserved_bytes", "optimizer", "optimizer_impl", "reason", "label_strength", "scored", "unscored_reason",
    "memory_source_text", "offload", "quantization", "double_quant", "dora", "tensor_parallel", "pipeline_parallel",
    "context_parallel", "expert_parallel", "sequence_parallel", "compute_precision", "framework_version",
    "seconds_per_step", "model_tflops_per_device", "mfu", "hfu", "upstream",
)
MEASUREMENT_COLUMNS = MEASUREMENT_BASE_COLUMNS + MEASUREMENT_EXTRA_COLUMNS
# Text columns: empty cells mean "not stated" and are read as "" rather than NaN.
STRING_COLUMNS = (
    "source", "source_ref", "campaign", "framework", "gpu_model", "model_name", "model_hf_id",
    "method", "dtype", "amp", "strategy", "attention", "loss_kernel", "kernels",
    "lora_target_modules", "status", "memory_metric", "duplicate_of", "notes", "optimizer", "optimizer_impl",
    "reason", "label_strength", "unscored_reason", "memory_source_text", "offload", "quantization",
    "compute_precision", "framework_version", "upstream",
)
# Integer columns that may be empty (nullable Int64).
INT_COLUMNS = (
    "number_gpus", "number_nodes", "tokens_per_sample", "batch_size", "per_device_batch_size",
    "gradient_accumulation_steps", "lora_r", "peak_memory_bytes", "torch_allocated_bytes",
    "torch_allocated_static_bytes", "nvidia_smi_bytes", "torch_reserved_bytes", "scored", "variable_length",
)
# Data column loss_kernel -> Job.loss_kernel (data/README.md "Loss kernels").
LOSS_KERNELS = {"": "hf", "foak-fast-loss": "fused-ce", "liger-flce": "fused-linear-ce", "chunked": "chunked"}
# Memory metric -> the column holding that metric's bytes. A row may carry several of the first three;
# "stated" (an author's remark) and "percent_of_device" (already × capacity by the converter) are read from
# peak_memory_bytes of the rows whose memory_metric names them.
METRIC_COLUMNS = {"torch_allocated": "torch_allocated_bytes", "torch_reserved": "torch_reserved_bytes",
                  "nvidia_smi": "nvidia_smi_bytes", "stated": "peak_memory_bytes",
                  "percent_of_device": "peak_memory_bytes"}
# Data column framework -> Job.framework (only stacks with a profile; other rows are refused with the reason).
FRAMEWORKS = {"fms-hf-tuning": "fms-hf-tuning", "hf-trainer": "hf-trainer", "ms-swift": "ms-swift",
              "fsdp-qlora": "fsdp-qlora", "axolotl": "axolotl", "torchtune": "torchtune", "unsloth": "unsloth",
              "litgpt": "litgpt", "llama-factory": "llama-factory", "peft": "peft", "deepspeed": "deepspeed",
              "llm-foundry": "llm-foundry",
              # our own probe: a transformers model, HF's loss (or the loss_kernel cell), peft adapters in fp32,
              # torch AdamW foreach, no wrapper — the HF Trainer's single-GPU step (docs/probe.md)
              "autoconf-probe": "hf-trainer"}
# Stacks whose QLoRA skips peft's prepare_model_for_kbit_training although their profile's stack calls it: the
# probe builds its 4-bit model itself (interfaces/probe/step.py) and never calls it.
NO_KBIT_PREPARE = ("autoconf-probe",)
# Campaigns whose samples vary in length although the peak batch's length is known (``variable_length = 0``):
# Job.samples_vary_in_length for their rows, with the evidence. Rows with ``variable_length = 1`` vary too.
VARYING_LENGTH_CAMPAIGNS = {
    "ms-swift/ms_swift_v2_benchmark_A100_memory_speed.csv": "cls-fudan-news-zh, 91..19,548 tokens per sample, "
    "unpacked, batches padded to the longest (shared/data/external/ms-swift/SOURCE.md §1)",
}
# The transformers release in a row's ``framework_version`` (the converters write "transformers 4.44.2, torch ...";
# fms-acceleration's from the campaign's pinned requirements file, data/README.md) -> Job.transformers_version.
TRANSFORMERS_IN_VERSION = re.compile(r"\btransformers[ =]+(\d+\.\d+[^\s,;()]*)")
# The bitsandbytes release in ``framework_version`` -> Job.bitsandbytes_version: a pinned release, or the upper bound
# "<=0.43.1" that the fms campaigns predating 0.43.2 carry (data/README.md), as that release: every release from 0.39
# to 0.43.1 keeps the 4-bit matmul's input alike, the one behaviour the field selects.
BITSANDBYTES_IN_VERSION = re.compile(r"\bbitsandbytes[ =]+(?:<=)?(\d+\.\d+[^\s,;()]*)")
# Data column optimizer (sources' spellings) -> (Job.optimizer, Job.optimizer_impl or None = framework default).
OPTIMIZERS = {"adamw": ("adamw", None), "adamw_torch": ("adamw", "foreach"), "adamw_torch_fused": ("adamw", "fused"),
              "adamw-8bit": ("adamw-8bit", None), "adamw_8bit": ("adamw-8bit", None),
              "adamw_bnb_8bit": ("adamw-8bit", None), "paged_adamw_8bit": ("paged-adamw-8bit", None),
              "paged_adamw_32bit": ("paged-adamw", None), "decoupled-adamw": ("adamw", "for-loop")}


def default_path() -> Path:
    """``$AUTOCONF_DATA`` if set, else the shipped ``measurements.csv`` (see ``autoconf.defaults``)."""
    return measurements_path()


def load_measurements(path: Path | str | None = None) -> pd.DataFrame:
    """The measurement table, one row per measured run, with empty text cells as ''."""
    target = Path(path) if path is not None else default_path()
    if not target.is_file():
        raise FileNotFoundError(
            f"measurement table not found at {target}; set {DATA_ENV} to a measurements.csv "
            "or rebuild it with `python data/convert_fms.py`"
        )
    frame = pd.read_csv(target, low_memory=False)
    for col in STRING_COLUMNS:
        if col in frame:
            frame[col] = frame[col].fillna("").astype(str)
    for col in INT_COLUMNS:
        if col in frame:
            frame[col] = frame[col].astype("Int64")
    logger.debug("loaded %d measured rows from %s", len(frame), target)
    return frame


def _present(value: object) -> bool:
    if value is None or value is pd.NA:
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return not (isinstance(value, str) and not value.strip())


def _required(row: Mapping[str, object], name: str) -> object:
    value = row.get(name)
    if not _present(value):
        ref = row.get("source_ref", "?")
        raise InvalidInputError(name, f"must be stated to build a Job; got an empty cell (row {ref})")
    return value


def _int(value: object) -> int:
    if isinstance(value, str | SupportsInt):
        return int(value)
    raise InvalidInputError("row", f"expected a whole number; got {value!r}")


def _float(value: object) -> float:
    if isinstance(value, str | SupportsFloat):
        return float(value)
    raise InvalidInputError("row", f"expected a number; got {value!r}")


def _flag(value: object) -> bool:
    return bool(_int(value))


def job_dtype(row: Mapping[str, object]) -> str | None:
    """The Job dtype of a row: its torch_dtype, or amp-* when FSDP upcasts trainable weights.

    With HF ``bf16=True``/``fp16=True`` (column ``amp``) under accelerate FSDP (any sharding strategy), accelerate's
    ``prepare_model`` casts every trainable FSDP flat parameter to fp32 ("Upcasted low precision
    parameters ... because mixed precision turned on in FSDP", huggingface/accelerate
    src/accelerate/accelerator.py), so full fine-tuning keeps fp32 master weights, gradients and
    AdamW states; frozen LoRA bases are not upcast. Empty = not stated (the Job default applies).
    """
    dtype, amp = row.get("dtype"), row.get("amp")
    if _present(amp) and str(row.get("strategy") or "").startswith("fsdp") and row.get("method") == "full":
        return f"amp-{amp}"
    return str(dtype) if _present(dtype) else None


def row_to_inputs(row: Mapping[str, object] | pd.Series) -> tuple[Job, Placement]:
    """The (Job, Placement) a measured row describes; empty optional cells keep the schema defaults."""
    if isinstance(row, pd.Series):
        row = row.to_dict()
    job: dict[str, object] = {
        "model": str(_required(row, "model_name")),
        "method": str(_required(row, "method")),
        "tokens_per_sample": _int(_required(row, "tokens_per_sample")),
        "batch_size": _int(_required(row, "batch_size")),
    }
    dtype = job_dtype(row)
    if dtype is not None:
        job["dtype"] = dtype
    optional: dict[str, Callable[[object], object]] = {
        "gradient_accumulation_steps": _int, "lora_r": _int, "lora_alpha": _float,
        "lora_target_modules": str, "gradient_checkpointing": _flag, "attention": str,
        "fused_loss": _flag, "packing": _flag,
    }
    for name, convert in optional.items():
        value = row.get(name)
        if _present(value):
            job[name] = convert(value)
    kernel = row.get("loss_kernel")
    # an empty cell means HF's loss on the fms rows; elsewhere it means "not stated" (the profile's loss)
    fms_row = row.get("framework") in (None, "", "fms-hf-tuning")
    if isinstance(kernel, str) and kernel in LOSS_KERNELS and (kernel or fms_row):
        job["loss_kernel"] = LOSS_KERNELS[kernel]
    job.update(_stack_fields(row))
    varies = row.get("variable_length")
    if (_present(varies) and _int(varies) == 1) or row.get("campaign") in VARYING_LENGTH_CAMPAIGNS:
        job["samples_vary_in_length"] = True
    placement: dict[str, object] = {
        "gpu_model": str(_required(row, "gpu_model")),
        "number_gpus": _int(_required(row, "number_gpus")),
    }
    if _present(row.get("strategy")):
        placement["strategy"] = str(row["strategy"])
    if row.get("offload") in ("optimizer", "optimizer+params"):
        placement["offload"] = str(row["offload"])
    return Job(**job), Placement(**placement)


def _stack_fields(row: Mapping[str, object]) -> dict[str, object]:
    """Job fields of the training stack: framework, optimizer, double quantisation, DoRA, sequence parallel."""
    out: dict[str, object] = {}
    framework = row.get("framework")
    if _present(framework):
        if str(framework) not in FRAMEWORKS:
            raise InvalidInputError("framework", f"has no profile for {framework!r}; profiles: {', '.join(FRAMEWORKS)}")
        out["framework"] = FRAMEWORKS[str(framework)]
        if str(framework) in NO_KBIT_PREPARE:
            out["kbit_prepare"] = False
    optimizer = row.get("optimizer")
    if _present(optimizer):
        if str(optimizer) not in OPTIMIZERS:
            raise InvalidInputError("optimizer", f"{optimizer!r} cannot be expressed; known: {', '.join(OPTIMIZERS)}")
        out["optimizer"], impl = OPTIMIZERS[str(optimizer)]
        if impl is not None:
            out["optimizer_impl"] = impl
    impl_stated = row.get("optimizer_impl")  # the row's own torch implementation (the probe writes it)
    if _present(impl_stated):
        if str(impl_stated) not in get_args(OptimizerImpl):
            raise InvalidInputError("optimizer_impl", f"must be one of {', '.join(get_args(OptimizerImpl))}; "
                                    f"got {impl_stated!r}")
        out["optimizer_impl"] = str(impl_stated)
    found = TRANSFORMERS_IN_VERSION.search(str(row.get("framework_version") or ""))
    if found:
        out["transformers_version"] = found[1]
    found = BITSANDBYTES_IN_VERSION.search(str(row.get("framework_version") or ""))
    if found:
        out["bitsandbytes_version"] = found[1]
    for name in ("double_quant", "dora"):
        if _present(row.get(name)):
            out[name] = bool(float(str(row[name])))
    stated = [int(float(str(row[c]))) for c in ("context_parallel", "sequence_parallel") if _present(row.get(c))]
    degree = max(stated, default=1)
    if degree > 1:
        out["sequence_parallel"] = degree
    return out
