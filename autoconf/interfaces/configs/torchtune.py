"""torchtune recipe configs: the model builder names the model and the method (``lora_``/``qlora_``
prefixes), ``batch_size`` is per device, ``dtype`` is the weights' own dtype (no AMP), and the distributed
recipes shard with FSDP2 full shard (``fsdp_cpu_offload``: parameters and optimizer on the CPU).
"""

from __future__ import annotations

import re
from typing import Any

from autoconf.interfaces.configs.common import (
    ConfigKeyError,
    FromFile,
    as_bool,
    as_float,
    as_int,
    catalogue_name,
    read,
    set_optimizer,
    take,
)

SIZE = re.compile(r"^(?P<size>\d+(?:_\d+)?[bm])(?:_\w+)?$")  # 8b, 0_5b, 7b_instruct (the tail is the variant)
# torchtune builder family (before the size) -> the catalogue's hub id pattern (size in upper case, '_' as '.')
FAMILIES = {
    "llama3_1": "meta-llama/Llama-3.1-{size}", "llama3_2": "meta-llama/Llama-3.2-{size}",
    "llama3_3": "meta-llama/Llama-3.3-{size}-Instruct", "llama3": "meta-llama/Meta-Llama-3-{size}",
    "llama2": "meta-llama/Llama-2-{size}-hf", "code_llama2": "codellama/CodeLlama-{size}-hf",
    "qwen2_5": "Qwen/Qwen2.5-{size}", "qwen2": "Qwen/Qwen2-{size}", "qwen3": "Qwen/Qwen3-{size}",
    "mistral": "mistralai/Mistral-{size}-v0.1", "gemma": "google/gemma-{size}", "gemma2": "google/gemma-2-{size}",
    "phi3_mini": "microsoft/Phi-3-mini-4k-instruct", "phi4": "microsoft/phi-4",
}
LORA_MODULES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}


def model_from_builder(component: str) -> tuple[str | None, str]:
    """(model, method) from a builder path such as torchtune.models.llama3_1.qlora_llama3_1_8b; the model is
    None for a builder this reader does not map (the caller's --model then names it)."""
    name = component.rsplit(".", 1)[-1]
    method, _, rest = name.partition("_") if name.startswith(("lora_", "qlora_")) else ("full", "", name)
    for family in sorted(FAMILIES, key=len, reverse=True):  # qwen2_5 before qwen2
        size = SIZE.match(rest.removeprefix(f"{family}_")) if rest.startswith(f"{family}_") else None
        if size is not None:
            hub_id = FAMILIES[family].format(size=size.group("size").replace("_", ".").upper())
            return catalogue_name(hub_id), method
    return None, method


def read_torchtune(found: FromFile, data: dict[str, Any]) -> None:
    rest = dict(data)
    model = dict(take(rest, "model")[1])
    component = str(model.pop("_component_"))
    name, method = model_from_builder(component)
    found.put("model", name, "model._component_")
    if name is None:
        found.notes.append(f"model._component_ {component}: no catalogue model for this builder; give --model")
    found.put("method", method, "model._component_")
    if method != "full":
        found.put("lora_r", as_int(found, "model.lora_rank", model.pop("lora_rank", None)), "model.lora_rank")
        found.put("lora_alpha", as_float(found, "model.lora_alpha", model.pop("lora_alpha", None)), "model.lora_alpha")
        attn = model.pop("lora_attn_modules", None) or []
        targets = [LORA_MODULES.get(str(m), str(m)) for m in attn]
        if as_bool(found, "model.apply_lora_to_mlp", model.pop("apply_lora_to_mlp", None)):
            targets += ["gate_proj", "up_proj", "down_proj"]
        if as_bool(found, "model.apply_lora_to_output", model.pop("apply_lora_to_output", None)):
            targets.append("lm_head")
        found.put("lora_target_modules", tuple(dict.fromkeys(targets)) or None,
                  "model.lora_attn_modules/apply_lora_to_mlp")
        found.put("dora", as_bool(found, "model.use_dora", model.pop("use_dora", None)), "model.use_dora")
    tokenizer = take(rest, "tokenizer")[1] or {}
    found.put("seq_len", as_int(found, "tokenizer.max_seq_len", tokenizer.get("max_seq_len")), "tokenizer.max_seq_len")
    dataset = rest.get("dataset")
    if isinstance(dataset, dict) and dataset.get("packed") is not None:
        found.put("packing", as_bool(found, "dataset.packed", dataset["packed"]), "dataset.packed")
    read(found, rest, "micro_batch", as_int, "batch_size")
    read(found, rest, "grad_accum", as_int, "gradient_accumulation_steps")
    key, value = take(rest, "dtype")
    if key:
        dtype = {"bf16": "bf16", "fp32": "fp32", "fp16": "fp16"}.get(str(value).lower())
        if dtype is None:
            raise ConfigKeyError(found.path, found.format, key, f"must be bf16 or fp32; got {value!r}")
        found.put("dtype", dtype, key)
    for name, knob in (("enable_activation_checkpointing", "gradient_checkpointing"),
                       ("enable_activation_offloading", "activation_offloading"), ("compile", "torch_compile"),
                       ("optimizer_in_bwd", "optimizer_in_backward")):
        key, value = take(rest, name)
        found.put(knob, as_bool(found, key, value), key)
    optimizer = take(rest, "optimizer")[1] or {}
    if isinstance(optimizer, dict) and optimizer.get("_component_"):
        set_optimizer(found, "optimizer._component_", optimizer["_component_"])
        if optimizer.get("fused") is True and found.values.get("optimizer") == "adamw":
            found.put("optimizer_impl", "fused", "optimizer.fused")
    loss = take(rest, "loss")[1] or {}
    if "Chunked" in str(loss.get("_component_", "")):
        found.put("loss_kernel", "chunked", "loss._component_")
    key, value = take(rest, "fsdp_cpu_offload")
    if as_bool(found, key, value):
        found.put("offload", "optimizer+params", key)
    found.put("attention", "sdpa", "torchtune default (its attention calls torch SDPA)")
    take(rest, "device")
    found.unused += [k for k, v in rest.items() if v not in (None, "", [], {})]
    found.unused += [f"model.{k}" for k, v in model.items() if v not in (None, "", [], {})]
