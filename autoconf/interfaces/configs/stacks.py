"""axolotl, LLaMA-Factory and LitGPT YAML configs.

Each stack's documented default is used where its key is absent and the default matters to memory:
LLaMA-Factory trains with gradient checkpointing unless ``disable_gradient_checkpointing`` and cuts at
``cutoff_len`` 2048; a LoRA or full run that is not ``pure_bf16`` keeps fp32 trainable weights (amp-bf16 for
full fine-tuning); LitGPT's fine-tuning scripts do not checkpoint activations and attend through SDPA;
axolotl loads the model in the dtype of ``bf16``/``fp16`` and uses the model's SDPA attention unless a
flash/sdp switch says otherwise.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from autoconf.interfaces.configs.common import (
    ConfigKeyError,
    FromFile,
    as_bool,
    as_int,
    catalogue_name,
    read,
    set_optimizer,
    take,
)
from autoconf.interfaces.configs.hf import read_lora, read_training_args
from autoconf.interfaces.configs.launch import read_deepspeed_ref, read_fsdp_config

LF_CUTOFF = 2048  # LLaMA-Factory DataArguments.cutoff_len default
LITGPT_PRECISION = {"bf16-true": "bf16", "bf16-mixed": "amp-bf16", "16-true": "fp16", "16-mixed": "amp-fp16",
                    "32-true": "fp32", "32": "fp32", "bf16": "bf16", "transformer-engine": "bf16"}


def _left(found: FromFile, rest: dict[str, Any]) -> None:
    found.unused += [k for k, v in rest.items() if v not in (None, "", [], {})]


def read_axolotl(found: FromFile, data: dict[str, Any]) -> None:
    rest = dict(data)
    key, model = take(rest, "base_model")
    found.put("model", catalogue_name(str(model)) if model else None, key)
    read(found, rest, "seq_len", as_int, "sequence_len")
    read(found, rest, "micro_batch", as_int, "micro_batch_size")
    read(found, rest, "grad_accum", as_int, "gradient_accumulation_steps")
    adapter = take(rest, "adapter")[1]
    four = as_bool(found, "load_in_4bit", take(rest, "load_in_4bit")[1])
    eight = as_bool(found, "load_in_8bit", take(rest, "load_in_8bit")[1])
    if adapter in ("lora", "qlora"):
        found.put("method", "qlora" if adapter == "qlora" or four else "lora", "adapter")
        if eight and adapter == "lora":
            found.put("storage", "int8", "load_in_8bit")
    elif adapter:
        raise ConfigKeyError(found.path, found.format, "adapter", f"must be lora or qlora; got {adapter!r}")
    else:
        found.put("method", "full", "adapter (absent: full fine-tuning)")
    if as_bool(found, "lora_target_linear", take(rest, "lora_target_linear")[1]):
        rest.pop("lora_target_modules", None)
        found.put("lora_target_modules", ("all-linear",), "lora_target_linear")
    read_lora(found, rest, ("lora_r",), ("lora_target_modules",))
    bf16 = take(rest, "bf16")[1]
    fp16 = as_bool(found, "fp16", take(rest, "fp16")[1])
    found.put("dtype", "fp16" if fp16 else "bf16" if as_bool(found, "bf16", bf16) is not False else "fp32", "bf16/fp16")
    key, value = take(rest, "gradient_checkpointing")
    if isinstance(value, str) and value.lower() in ("unsloth", "offload"):
        found.put("activation_offloading", True, key)
        value = True
    found.put("gradient_checkpointing", as_bool(found, key, value), key)
    read(found, rest, "activation_offloading", as_bool, "activation_offloading")
    flash = as_bool(found, "flash_attention", take(rest, "flash_attention")[1])
    sdp = as_bool(found, "sdp_attention", take(rest, "sdp_attention")[1])
    xformers = as_bool(found, "xformers_attention", take(rest, "xformers_attention")[1])
    attention = "flash" if flash else "sdpa" if (sdp or xformers) else None
    found.put("attention", attention or "sdpa", "flash_attention" if flash else "sdp/xformers_attention"
              if attention else "axolotl default (the model's SDPA)")
    key, value = take(rest, "optimizer")
    set_optimizer(found, key, value)
    read(found, rest, "packing", as_bool, "sample_packing")
    liger = take(rest, "liger_fused_linear_cross_entropy")[1]
    cce = take(rest, "cut_cross_entropy")[1]
    if as_bool(found, "liger_fused_linear_cross_entropy", liger) or as_bool(found, "cut_cross_entropy", cce):
        found.put("fused_loss", True, "liger_fused_linear_cross_entropy" if liger else "cut_cross_entropy")
    read(found, rest, "torch_compile", as_bool, "torch_compile")
    for name, knob in (("tensor_parallel_size", "tp"), ("sequence_parallel_degree", "sequence_parallel"),
                       ("context_parallel_size", "sequence_parallel")):
        key, value = take(rest, name)
        found.put(knob, as_int(found, key, value), key)
    key, value = take(rest, "deepspeed")
    if value:
        read_deepspeed_ref(found, key, value)
    fsdp = take(rest, "fsdp")[1]
    key, value = take(rest, "fsdp_config")
    if fsdp or isinstance(value, dict):
        read_fsdp_config(found, value if isinstance(value, dict) else {}, key or "fsdp")
        if fsdp and any("offload" in str(w) for w in fsdp):
            found.put("offload", "optimizer+params", "fsdp")
    _left(found, rest)


def read_llama_factory(found: FromFile, data: dict[str, Any]) -> None:
    rest = dict(data)
    key, model = take(rest, "model_name_or_path")
    found.put("model", catalogue_name(str(model)) if model else None, key)
    key, value = take(rest, "cutoff_len")
    found.put("seq_len", as_int(found, key, value) if key else LF_CUTOFF, key or "llama-factory default")
    key, kind = take(rest, "finetuning_type")
    kind = str(kind or "lora").lower()  # LLaMA-Factory's FinetuningArguments default
    if kind not in ("lora", "full", "freeze", "oft"):
        raise ConfigKeyError(found.path, found.format, "finetuning_type", f"must be lora, full or freeze; got {kind!r}")
    bits = as_int(found, "quantization_bit", take(rest, "quantization_bit")[1])
    method = "full" if kind in ("full", "freeze") else "qlora" if bits == 4 else "lora"
    found.put("method", method, "quantization_bit" if method == "qlora" else key or "llama-factory default")
    if bits == 8 and method == "lora":
        found.put("storage", "int8", "quantization_bit")
    if kind == "freeze":
        found.notes.append("finetuning_type freeze: estimated as full fine-tuning (every layer trainable)")
    read_lora(found, rest, ("lora_rank",), ("lora_target",))
    pure = as_bool(found, "pure_bf16", take(rest, "pure_bf16")[1])
    bf16 = as_bool(found, "bf16", rest.get("bf16"))
    fp16 = as_bool(found, "fp16", rest.get("fp16"))
    rest.pop("bf16", None)
    rest.pop("fp16", None)
    amp = "bf16" if (bf16 or pure) else "fp16" if fp16 else None
    dtype = "fp32" if amp is None else amp if (pure or method != "full") else f"amp-{amp}"
    found.put("dtype", dtype, "pure_bf16" if pure else "bf16/fp16")
    key, value = take(rest, "disable_gradient_checkpointing")
    off = as_bool(found, key, value)
    found.put("gradient_checkpointing", not off, key or "llama-factory default")
    key, value = take(rest, "flash_attn")
    attention = {"fa2": "flash", "sdpa": "sdpa", "disabled": "eager", "auto": "sdpa"}.get(str(value or "auto").lower())
    found.put("attention", attention, key or "llama-factory default (auto: SDPA)")
    read(found, rest, "fused_loss", as_bool, "enable_liger_kernel")
    for name in ("packing", "neat_packing"):
        key, value = take(rest, name)
        if as_bool(found, key, value):
            found.put("packing", True, key)
    read(found, rest, "dora", as_bool, "use_dora")
    read(found, rest, "sequence_parallel", as_int, "sequence_parallel_size")
    read_training_args(found, rest)
    _left(found, rest)


def read_litgpt(found: FromFile, data: dict[str, Any]) -> None:
    rest = dict(data)
    key, folder = take(rest, "checkpoint_dir")
    if folder:
        parts = PurePosixPath(str(folder)).parts
        hub_id = "/".join(parts[-2:]) if parts and parts[0] == "checkpoints" and len(parts) >= 3 else parts[-1]
        found.put("model", catalogue_name(hub_id), key)
    key, value = take(rest, "precision")
    if key:
        if str(value).lower() not in LITGPT_PRECISION:
            raise ConfigKeyError(found.path, found.format, key, f"must be one of {', '.join(LITGPT_PRECISION)}; "
                                 f"got {value!r}")
        found.put("dtype", LITGPT_PRECISION[str(value).lower()], key)
    key, quant = take(rest, "quantize")
    lora = any(k.startswith("lora_") for k in rest)
    method = "qlora" if quant and "nf4" in str(quant) else "lora" if lora else "full"
    found.put("method", method, key if method == "qlora" else "lora_* keys" if lora else "no lora_* keys")
    if quant and "int8" in str(quant) and lora:
        found.put("storage", "int8", key)
    if lora:
        read_lora(found, rest, ("lora_r",), ())
        names = {"lora_query": "q_proj", "lora_key": "k_proj", "lora_value": "v_proj", "lora_projection": "o_proj"}
        on = [name for flag, name in names.items() if as_bool(found, flag, rest.pop(flag, flag in ("lora_query", "lora_value")))]
        if as_bool(found, "lora_mlp", rest.pop("lora_mlp", False)):
            on += ["gate_proj", "up_proj", "down_proj"]
        if as_bool(found, "lora_head", rest.pop("lora_head", False)):
            on.append("lm_head")
        found.put("lora_target_modules", tuple(on), "lora_query/key/value/projection/mlp/head")
    devices = as_int(found, "devices", take(rest, "devices")[1] or 1)
    nodes = as_int(found, "num_nodes", take(rest, "num_nodes")[1] or 1) or 1
    found.put("gpus_per_node", devices, "devices")
    found.put("nodes", nodes, "num_nodes")
    train = take(rest, "train")[1] or {}
    if not isinstance(train, dict):
        raise ConfigKeyError(found.path, found.format, "train", "must be a mapping of TrainArgs")
    train = dict(train)
    micro = as_int(found, "train.micro_batch_size", train.pop("micro_batch_size", None))
    found.put("micro_batch", micro, "train.micro_batch_size")
    global_batch = as_int(found, "train.global_batch_size", train.pop("global_batch_size", None))
    if micro and global_batch:
        accum = max(global_batch // (micro * (devices or 1) * nodes), 1)
        found.put("grad_accum", accum, "train.global_batch_size / (micro_batch_size × devices × num_nodes)")
    found.put("seq_len", as_int(found, "train.max_seq_length", train.pop("max_seq_length", None)), "train.max_seq_length")
    found.put("gradient_checkpointing", False, "litgpt default (its fine-tuning scripts do not checkpoint)")
    found.put("attention", "sdpa", "litgpt default (torch SDPA)")
    if (devices or 1) * nodes > 1:
        found.put("strategy", "fsdp", "devices > 1 (LitGPT's FSDPStrategy, full shard)")
    optimizer = take(rest, "optimizer")[1]
    name = optimizer.get("class_path") if isinstance(optimizer, dict) else optimizer
    set_optimizer(found, "optimizer.class_path", name)
    found.unused += [f"train.{k}" for k, v in train.items() if v not in (None, "", [], {})]
    _left(found, rest)
