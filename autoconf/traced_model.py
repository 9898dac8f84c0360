"""Build the Hugging Face model of a catalogue Architecture without weights: meta device, then fake tensors.

Runs inside the trace worker (autoconf/traced_step.py) only: it imports torch, transformers and peft.
The model is created on the meta device (no memory, no init), then ``to_empty`` inside a
``FakeTensorMode`` gives every parameter a fake CPU storage of the right size (pitfall 1 of
shared/theory_notes.md: never random-init on a fake device). ``real=True`` does the same on real CPU
tensors, for the fake-vs-real equality test.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch
import transformers
from torch import nn

logger = logging.getLogger(__name__)

# Job.dtype -> (parameter dtype, autocast dtype or None). amp-* keeps fp32 master weights and
# autocasts to the low precision (the "AMP" row of shared/theory_notes.md, 16 B/param static).
DTYPES: dict[str, tuple[torch.dtype, torch.dtype | None]] = {
    "bf16": (torch.bfloat16, None),
    "fp16": (torch.float16, None),
    "fp32": (torch.float32, None),
    "amp-bf16": (torch.float32, torch.bfloat16),
    "amp-fp16": (torch.float32, torch.float16),
}


def _llama_like_kwargs(arch: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "vocab_size": arch["vocab_size"],
        "hidden_size": arch["hidden_size"],
        "intermediate_size": arch["intermediate_size"],
        "num_hidden_layers": arch["num_layers"],
        "num_attention_heads": arch["num_heads"],
        "num_key_value_heads": arch["num_kv_heads"],
        "head_dim": arch["head_dim"],
        "tie_word_embeddings": arch["tie_word_embeddings"],
        # Rotary tables are sized at runtime; 131072 only bounds the position ids we feed.
        "max_position_embeddings": arch["max_position_embeddings"] or 131072,
    }
    mtype = arch["model_type"]
    if mtype in ("llama", "granite", "granitemoe"):
        kwargs["attention_bias"] = arch["attention_bias"]
    if mtype in ("llama", "granite"):
        kwargs["mlp_bias"] = arch["mlp_bias"]
    if mtype in ("mistral", "mixtral"):
        # GPU flash-attention handles a sliding window inside the kernel; SDPA would need an explicit
        # (b, 1, s, s) mask for it. No window reproduces the flash memory (same saved tensors).
        kwargs["sliding_window"] = None
    if mtype in ("mixtral", "granitemoe"):
        kwargs["num_local_experts"] = arch["num_experts"]
        kwargs["num_experts_per_tok"] = arch["experts_per_token"]
    return kwargs


def hf_config(arch: dict[str, Any], attention: str) -> transformers.PretrainedConfig:
    """The transformers config of an Architecture (as a dict of its dataclass fields)."""
    mtype = arch["model_type"]
    if mtype == "gpt_bigcode":
        config: transformers.PretrainedConfig = transformers.GPTBigCodeConfig(
            vocab_size=arch["vocab_size"], n_positions=arch["max_position_embeddings"] or 8192,
            n_embd=arch["hidden_size"], n_layer=arch["num_layers"], n_head=arch["num_heads"],
            n_inner=arch["intermediate_size"], multi_query=arch["num_kv_heads"] == 1,
            tie_word_embeddings=arch["tie_word_embeddings"],
        )
    else:
        config = transformers.AutoConfig.for_model(mtype, **_llama_like_kwargs(arch))
    config.use_cache = False
    # Dropout 0 everywhere (HF defaults for these families; fms-hf-tuning keeps them).
    for name in ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop"):
        if hasattr(config, name):
            setattr(config, name, 0.0)
    config._attn_implementation = attention
    if mtype in ("mixtral", "granitemoe"):
        # Static shapes: tokens sorted by expert and one grouped GEMM per projection. The eager
        # per-expert loop has data-dependent shapes that fake tensors cannot size.
        config._experts_implementation = "grouped_mm"
    return config


def _lora(model: nn.Module, spec: dict[str, Any]) -> nn.Module:
    import peft

    targets = list(spec["lora_target_modules"])
    config = peft.LoraConfig(
        r=spec["lora_r"], lora_alpha=spec["lora_alpha"], lora_dropout=spec["lora_dropout"],
        target_modules="all-linear" if "all-linear" in targets else targets, task_type="CAUSAL_LM",
    )
    # peft's default autocast_adapter_dtype=True keeps adapters in fp32 next to a bf16 base, as
    # in a real peft run: their weights, grads and AdamW states are 4 B/param.
    return peft.get_peft_model(model, config)


def build_model(spec: dict[str, Any], fake_mode: Any | None) -> nn.Module:
    """The model in training mode on fake (or, without ``fake_mode``, real) CPU tensors."""
    param_dtype, _ = DTYPES[spec["dtype"]]
    config = hf_config(spec["arch"], spec["attention"])
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=param_dtype)
    if spec["method"] == "lora":
        model = _lora(model, spec)
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        model.to_empty(device="cpu")
        if fake_mode is None:
            _init_real(model)
    # to_empty re-creates each parameter per module: re-tie the input and output embeddings.
    (model.get_base_model() if hasattr(model, "get_base_model") else model).tie_weights()
    if spec["gradient_checkpointing"]:
        # Non-reentrant recomputation per decoder layer (HF Trainer's gradient_checkpointing=True).
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


@torch.no_grad()
def _init_real(model: nn.Module) -> None:
    """Finite values for a real run: memory does not depend on them, NaNs would only obscure errors."""
    for tensor in list(model.parameters()) + list(model.buffers()):
        if tensor.is_floating_point():
            tensor.normal_(0.0, 0.02)
        else:
            tensor.zero_()


def build_optimizer(model: nn.Module, spec: dict[str, Any]) -> torch.optim.Optimizer:
    """The optimizer over trainable parameters with the implementation named explicitly (pitfall 3)."""
    params = [p for p in model.parameters() if p.requires_grad]
    impl = spec["optimizer_impl"]
    flags = {"fused": impl == "fused", "foreach": impl == "foreach"}
    if spec["optimizer"] == "sgd":
        # momentum 0.9: one state buffer per parameter (the SGD row of shared/theory_notes.md).
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9, **flags)
    return torch.optim.AdamW(params, lr=1e-5, **flags)
