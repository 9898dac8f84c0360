"""Build the Hugging Face model of a catalogue Architecture without weights: meta device, then fake tensors.

Runs inside the trace worker (autoconf/estimators/traced/step.py) only: it imports torch, transformers and peft.
The model is created on the meta device (no memory, no init), then ``to_empty`` inside a
``FakeTensorMode`` gives every parameter a fake CPU storage of the right size (pitfall 1 of
shared/theory_notes.md: never random-init on a fake device). ``real=True`` does the same on real CPU
tensors, for the fake-vs-real equality test.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, cast

import torch
import transformers
from torch import nn
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

from autoconf.estimators.traced.hf_config import DTYPES, hf_config

logger = logging.getLogger(__name__)

def _lora(model: nn.Module, spec: dict[str, Any]) -> nn.Module:
    import peft

    targets = list(spec["lora_target_modules"])
    config = peft.LoraConfig(
        r=spec["lora_r"], lora_alpha=spec["lora_alpha"], lora_dropout=spec["lora_dropout"],
        target_modules="all-linear" if "all-linear" in targets else targets, task_type="CAUSAL_LM",
    )
    # peft's default autocast_adapter_dtype=True keeps adapters in fp32 next to a bf16 base, as
    # in a real peft run: their weights, grads and AdamW states are 4 B/param.
    adapted = peft.get_peft_model(model, config)
    if spec.get("adapter_dtype") == "model":
        # peft before 0.12 (tuners/lora/layer.py update_layer, read at 0.7.1 and 0.10.0) moves each new adapter to
        # its base weight's floating dtype: the model dtype (or a 4-bit weight's floating quant_storage), 2 B/param
        param_dtype, _ = DTYPES[spec["dtype"]]
        for name, module in adapted.named_modules():
            if name.rsplit(".", 1)[-1] in ("lora_A", "lora_B"):
                module.to(param_dtype)
    return adapted


def meta_model(spec: dict[str, Any]) -> nn.Module:
    """The transformers model (with peft's LoRA where asked) on the meta device: no storage yet."""
    param_dtype, _ = DTYPES[spec["dtype"]]
    config = hf_config(spec["arch"], spec["attention"], bool(spec.get("sliding_mask")))
    with torch.device("meta"):
        # transformers' from_config has no annotations
        try:
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=param_dtype)  # type: ignore[no-untyped-call]
        except ValueError:  # a vision-language config has no *ForCausalLM: its image-text-to-text model, on text
            if config.model_type not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
                raise  # the causal LM's own reason (gemma2, mpt: no SDPA path), not "not an image-text model"
            model = transformers.AutoModelForImageTextToText.from_config(  # type: ignore[no-untyped-call]
                config, dtype=param_dtype)
    if spec.get("falcon_flash"):  # flash_attention_2 on Falcon: its own attention class (falcon_flash.py)
        from autoconf.estimators.traced import falcon_flash

        falcon_flash.install(model)
    if spec.get("hf_loss"):  # an older transformers release's loss on the installed model's logits (kernels.py)
        from autoconf.estimators.traced.kernels import release_loss

        model.loss_function = release_loss(spec["hf_loss"])
    if spec["method"] == "lora":
        model = _lora(model, spec)
    return cast(nn.Module, model)


def finish(model: nn.Module, spec: dict[str, Any]) -> nn.Module:
    """Gradient checkpointing as the HF Trainer enables it, and training mode."""
    if spec["gradient_checkpointing"]:
        # Non-reentrant recomputation per decoder layer (HF Trainer's gradient_checkpointing=True); ``reentrant``:
        # torch's reentrant checkpoint, transformers 4.x's default (``use_reentrant=True`` when no kwargs are given)
        kwargs = {"use_reentrant": bool(spec.get("reentrant"))}
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)  # type: ignore[operator]
    model.train()
    return model


def build_model(spec: dict[str, Any], fake_mode: Any | None) -> nn.Module:
    """The model in training mode on fake (or, without ``fake_mode``, real) CPU tensors."""
    if spec["method"] == "qlora":
        from autoconf.estimators.traced.qlora import build_qlora

        return finish(build_qlora(spec, fake_mode, meta_model, _lora, _init_real), spec)
    model = meta_model(spec)
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        model.to_empty(device="cpu")
        if fake_mode is None:
            _init_real(model)
    # to_empty re-creates each parameter per module: re-tie the input and output embeddings.
    (model.get_base_model() if hasattr(model, "get_base_model") else model).tie_weights()  # type: ignore[operator]
    return finish(model, spec)


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
    if spec["optimizer"] == "adamw-8bit":
        # bitsandbytes' own AdamW8bit: uint8 states with fp32 absmax per 256-block (fp32 states for tensors
        # under min_8bit_size); its update op is registered with a fake that allocates nothing (in place)
        import bitsandbytes as bnb

        eight_bit: torch.optim.Optimizer = bnb.optim.AdamW8bit(  # type: ignore[attr-defined,no-untyped-call]
            params, lr=1e-5)
        return eight_bit
    if spec["optimizer"] == "sgd":
        # momentum 0.9: one state buffer per parameter (the SGD row of shared/theory_notes.md).
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9, **flags)
    return torch.optim.AdamW(params, lr=1e-5, **flags)
