"""Hugging Face TrainingArguments and the stacks built on them: TRL's SFTConfig / ModelConfig (JSON or YAML)
and fms-hf-tuning's JSON (accelerate and DeepSpeed configs: launch.py).

TrainingArguments' own defaults apply where a key is absent (per_device_train_batch_size 8, no gradient
checkpointing, fp32 without bf16/fp16); a model loaded without ``torch_dtype`` keeps fp32 master weights,
so ``bf16: true`` alone is AMP (``amp-bf16``). fms-hf-tuning loads in bfloat16 and uses flash attention by
default (its ``torch_dtype`` and ``use_flash_attn`` defaults).
"""

from __future__ import annotations

from typing import Any

from autoconf.interfaces.configs.common import (
    ConfigKeyError,
    FromFile,
    as_bool,
    as_float,
    as_int,
    as_names,
    catalogue_name,
    read,
    set_optimizer,
    take,
)
from autoconf.interfaces.configs.launch import FSDP_SHARDING, read_deepspeed_ref, read_fsdp_config

HF_MICRO_BATCH = 8  # TrainingArguments.per_device_train_batch_size default
TRL_MAX_LENGTH = 1024  # SFTConfig.max_length default (TRL's docs: truncation at 1024 tokens unless set)
TORCH_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
                "float32": "fp32", "fp32": "fp32", "float": "fp32"}
ATTENTION = {"flash_attention_2": "flash", "flash_attention_3": "flash", "flash_attn": "flash", "fa2": "flash",
             "sdpa": "sdpa", "eager": "eager", "flex_attention": "sdpa", "kernels-community/vllm-flash-attn3": "flash"}


def weights_dtype(found: FromFile, key: str, value: object) -> str | None:
    if value is None or str(value).lower() in ("auto", "none", ""):
        return None
    text = str(value).lower().removeprefix("torch.")
    if text not in TORCH_DTYPES:
        raise ConfigKeyError(found.path, found.format, key, f"must be one of bfloat16, float16, float32; got {value!r}")
    return TORCH_DTYPES[text]


def precision(weights: str | None, bf16: bool | None, fp16: bool | None) -> str | None:
    """Our dtype from the loaded weights' dtype and the autocast flags (None = nothing said)."""
    amp = "bf16" if bf16 else "fp16" if fp16 else None
    if weights is None:
        return None if amp is None else f"amp-{amp}"
    if weights == "fp32" and amp:
        return f"amp-{amp}"
    return weights


def read_training_args(found: FromFile, rest: dict[str, Any], micro_default: int | None = HF_MICRO_BATCH) -> None:
    """The TrainingArguments keys every HF-based stack shares (LLaMA-Factory and fms-hf-tuning included)."""
    key, value = take(rest, "per_device_train_batch_size", "train_batch_size", "batch_size")
    if key:
        found.put("micro_batch", as_int(found, key, value), key)
    elif micro_default is not None:
        found.put("micro_batch", micro_default, f"{found.format} default")
    read(found, rest, "grad_accum", as_int, "gradient_accumulation_steps")
    read(found, rest, "gradient_checkpointing", as_bool, "gradient_checkpointing")
    take(rest, "gradient_checkpointing_kwargs")
    key, value = take(rest, "optim")
    set_optimizer(found, key, value)
    for name, knob in (("use_liger_kernel", "fused_loss"), ("use_liger", "fused_loss"), ("torch_compile", "torch_compile")):
        key, value = take(rest, name)
        found.put(knob, as_bool(found, key, value), key)
    key, value = take(rest, "deepspeed")
    if value:
        read_deepspeed_ref(found, key, value)
    key, value = take(rest, "fsdp")
    if value:
        words = value if isinstance(value, list) else str(value).replace(",", " ").split()
        strategy = next((FSDP_SHARDING[w.lower()] for w in map(str, words) if w.lower() in FSDP_SHARDING), "fsdp")
        found.put("strategy", strategy, key)
        if any(str(w).lower() == "offload" for w in words):
            found.put("offload", "optimizer+params", key)
    key, value = take(rest, "fsdp_config")
    if isinstance(value, dict):
        read_fsdp_config(found, value, key)


def read_trl(found: FromFile, data: dict[str, Any]) -> None:
    """TRL's SFTConfig + ModelConfig + ScriptArguments (the keys of its example YAML / CLI), or bare
    TrainingArguments."""
    rest = dict(data)
    key, model = take(rest, "model_name_or_path", "model")
    found.put("model", catalogue_name(str(model)) if model else None, key)
    key, value = take(rest, "max_length", "max_seq_length")
    found.put("seq_len", as_int(found, key, value) if key else TRL_MAX_LENGTH, key or "trl default (SFTConfig.max_length)")
    kwargs = rest.pop("model_init_kwargs", None) or {}
    key, value = take(rest, "torch_dtype", "dtype")
    if not key and isinstance(kwargs, dict):
        key, value = ("model_init_kwargs.torch_dtype", kwargs.get("torch_dtype", kwargs.get("dtype")))
    weights = weights_dtype(found, key, value)
    bf16 = as_bool(found, "bf16", take(rest, "bf16")[1])
    fp16 = as_bool(found, "fp16", take(rest, "fp16")[1])
    found.put("dtype", precision(weights, bf16, fp16), f"{key or 'bf16/fp16'}")
    key, value = take(rest, "attn_implementation")
    found.put("attention", ATTENTION.get(str(value).lower()) if value else None, key)
    use_peft = as_bool(found, "use_peft", take(rest, "use_peft")[1])
    four = as_bool(found, "load_in_4bit", take(rest, "load_in_4bit")[1])
    eight = as_bool(found, "load_in_8bit", take(rest, "load_in_8bit")[1])
    if use_peft or four:
        found.put("method", "qlora" if four else "lora", "load_in_4bit" if four else "use_peft")
        if eight:
            found.put("storage", "int8", "load_in_8bit")
    elif use_peft is False:
        found.put("method", "full", "use_peft")
    read_lora(found, rest, ("lora_r",), ("lora_target_modules",))
    read(found, rest, "double_quant", as_bool, "use_bnb_nested_quant")
    read(found, rest, "packing", as_bool, "packing")
    read_training_args(found, rest)
    found.unused += [k for k, v in rest.items() if v not in (None, "", [], {})]


def read_lora(found: FromFile, rest: dict[str, Any], ranks: tuple[str, ...], targets: tuple[str, ...]) -> None:
    read(found, rest, "lora_r", as_int, *ranks)
    read(found, rest, "lora_alpha", as_float, "lora_alpha")
    read(found, rest, "lora_dropout", as_float, "lora_dropout")
    read(found, rest, "lora_target_modules", as_names, *targets)


def read_fms(found: FromFile, data: dict[str, Any]) -> None:
    """fms-hf-tuning's JSON (its sft_trainer arguments: model, data, training, peft and acceleration)."""
    rest = dict(data)
    key, model = take(rest, "model_name_or_path")
    found.put("model", catalogue_name(str(model)) if model else None, key)
    read(found, rest, "seq_len", as_int, "max_seq_length")
    key, value = take(rest, "torch_dtype")
    weights = weights_dtype(found, key, value) if key else "bf16"
    found.put("dtype", precision(weights, as_bool(found, "bf16", take(rest, "bf16")[1]),
                                 as_bool(found, "fp16", take(rest, "fp16")[1])), key or "fms-hf-tuning default")
    key, value = take(rest, "use_flash_attn")
    flash = as_bool(found, key, value) if key else True
    found.put("attention", "flash" if flash else "sdpa", key or "fms-hf-tuning default")
    key, value = take(rest, "peft_method")
    quant = take(rest, "quantized_lora_config")[1]
    method = "full" if value in (None, "none", "") else str(value).lower()
    if method not in ("full", "lora", "pt"):
        raise ConfigKeyError(found.path, found.format, key, f"must be lora, pt or none; got {value!r}")
    if method == "pt":
        raise ConfigKeyError(found.path, found.format, key, "pt (prompt tuning) is not estimated; use lora or none")
    if method == "lora" and quant:
        method = "qlora"
    found.put("method", method, "quantized_lora_config" if method == "qlora" else key or "fms-hf-tuning default")
    read_lora(found, rest, ("r", "lora_r"), ("target_modules", "lora_target_modules"))
    read(found, rest, "packing", as_bool, "packing")
    kernels = take(rest, "fused_ops_and_kernels")[1]
    if kernels:
        found.put("loss_kernel", "fused-ce", "fused_ops_and_kernels")
    read_training_args(found, rest)
    found.unused += [k for k, v in rest.items() if v not in (None, "", [], {})]
