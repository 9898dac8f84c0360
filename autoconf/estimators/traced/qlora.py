"""QLoRA's model as transformers loads it 4-bit and peft adapts it, on fake tensors, with bitsandbytes' own code.

Runs inside the trace workers (torch, transformers, peft, bitsandbytes). Order and calls follow the stack:

1. transformers' loader swaps every linear but the head for ``bnb.nn.Linear4bit`` on the meta device
   (``replace_with_bnb_linear`` with ``get_keys_to_not_convert``; quantizer_bnb_4bit.py
   ``_process_model_before_weight_loading``).
2. peft's LoRA wraps them (``dispatch_bnb_4bit``; adapters fp32, peft's ``autocast_adapter_dtype``), on meta
   too, so that materialising needs no module swaps on fake tensors.
3. Materialised on the fake mode, each 4-bit weight is quantised as ``Bnb4bitQuantize.convert`` →
   ``Params4bit._quantize`` does: ``bitsandbytes.functional.quantize_4bit`` on the bf16 value (its
   registered fake gives the packed uint8 weight, ``numel / 2`` bytes, and the fp32 absmax, one per 64
   values; with double quantisation the uint8 absmax, its fp32 absmax per 256 and the offset). The packed
   weight is kept as a frozen parameter carrying the quant state and Params4bit's settings (a Params4bit
   cannot wrap a fake tensor), which is all ``Linear4bit.forward`` and peft read.
4. With the profile's ``kbit_upcast``, peft's ``prepare_model_for_kbit_training`` casts (peft/utils/other.py:
   ``param.data = param.data.to(torch.float32)`` for every fp16/bf16 parameter that is not ``Params4bit``)
   and, with checkpointing, ``enable_input_require_grads``.

The forward matmul runs bitsandbytes' ``gemm_4bit`` fake; the CUDA kernel's dequantised weight is added by
the tracker (kernels.transients); backward's ``dequantize_4bit`` allocates through its own fake.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from autoconf.estimators.traced.hf_config import DTYPES

SETTINGS = ("blocksize", "compress_statistics", "quant_type", "quant_storage")  # Params4bit fields peft reads


@contextlib.contextmanager
def _no_fake() -> Iterator[None]:
    """Real tensors for a moment inside a fake mode (a constant table built with ``tolist``)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        yield


def _four_bit(model: nn.Module) -> list[Any]:
    import bitsandbytes as bnb

    return [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]  # type: ignore[attr-defined]  # re-exported


def build_qlora(spec: dict[str, Any], fake_mode: Any | None, meta: Callable[[dict[str, Any]], nn.Module],
                lora: Callable[[nn.Module, dict[str, Any]], nn.Module],
                init_real: Callable[[nn.Module], None]) -> nn.Module:
    """The peft QLoRA model on fake (or, without ``fake_mode``, real) CPU tensors; ``meta`` builds the
    transformers model on the meta device, ``lora`` applies the adapters, ``init_real`` gives real tensors
    values (model.py's meta_model, _lora, _init_real)."""
    import bitsandbytes as bnb
    from transformers import BitsAndBytesConfig
    from transformers.integrations.bitsandbytes import replace_with_bnb_linear
    from transformers.quantizers.base import get_keys_to_not_convert

    compute = DTYPES[spec["dtype"]][0]
    config = BitsAndBytesConfig(  # type: ignore[no-untyped-call]  # transformers: no annotations
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute,
        bnb_4bit_use_double_quant=bool(spec["double_quant"]),
        bnb_4bit_quant_storage=spec.get("quant_storage"))  # a torch dtype's name; absent: bitsandbytes' uint8
    base = meta({**spec, "method": "full"})
    replace_with_bnb_linear(base, modules_to_not_convert=get_keys_to_not_convert(base), quantization_config=config)
    base.is_loaded_in_4bit = True  # type: ignore[assignment]  # the loader's flag peft reads
    model = lora(base, spec)
    settings = {}
    for module in _four_bit(model):  # the checkpoint's bf16 value stands where the 4-bit weight will be
        old = module.weight
        settings[id(module)] = {key: getattr(old, key) for key in SETTINGS}
        module.weight = nn.Parameter(torch.empty(old.shape, dtype=compute, device="meta"), requires_grad=False)
    keep_matmul_input(bool(spec.get("bnb_keeps_input")))
    if "dynamic" not in bnb.functional.name2qmap:  # double quantisation's code table, built from Python floats
        bnb.functional.name2qmap["dynamic"] = bnb.functional.create_dynamic_map()  # type: ignore[no-untyped-call]
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        model.to_empty(device="cpu")
        if fake_mode is None:
            init_real(model)
        base.tie_weights()  # type: ignore[operator]  # to_empty re-creates tied parameters apart
        for module in _four_bit(model):
            kept = settings[id(module)]
            packed, state = bnb.functional.quantize_4bit(module.weight.data, **kept)
            weight = nn.Parameter(packed, requires_grad=False)
            for key, value in {**kept, "quant_state": state, "bnb_quantized": True}.items():
                setattr(weight, key, value)
            module.weight = weight
            module.quant_state = state
        if spec["kbit_upcast"]:
            _kbit_upcast(base, spec["gradient_checkpointing"])
    return model


def _kbit_upcast(base: nn.Module, checkpointing: bool) -> None:
    """peft's prepare_model_for_kbit_training on the base (its adapters are fp32 already): fp16/bf16 → fp32."""
    for param in base.parameters():
        if param.dtype in (torch.float16, torch.bfloat16) and not hasattr(param, "quant_state"):
            param.data = param.data.to(torch.float32)
    if checkpointing:
        base.enable_input_require_grads()  # type: ignore[operator]  # HF models define it


_KEEPS_INPUT = [False]  # this trace's bitsandbytes: ≤ 0.43.1 (keep_matmul_input)


def keep_matmul_input(keep: bool) -> None:
    """bitsandbytes ≤ 0.43.1's ``MatMul4Bit.forward`` (autograd/_functions.py) kept its input for backward,
    ``ctx.tensors = (A, B)``, although the frozen 4-bit weight's backward needs only ``B``; 0.43.2 (2024-07-23)
    keeps ``(None, B)`` ("fix QLoRA mem bug: delete useless buffered activation", bitsandbytes #1270, 2024-07-16).
    With ``keep`` each 4-bit linear run with grad keeps its input in the compute dtype until its backward, as
    those releases did; the installed code is wrapped once, the flag read per call."""
    _KEEPS_INPUT[0] = keep
    from bitsandbytes.autograd import _functions

    cls = _functions.MatMul4Bit
    if getattr(cls, "_autoconf_keeps_input", False):
        return
    plain = cls.forward

    def forward(ctx: Any, A: torch.Tensor, B: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        out = plain(ctx, A, B, *args, **kwargs)
        tensors = getattr(ctx, "tensors", None)
        if _KEEPS_INPUT[0] and tensors is not None and tensors[1] is not None:
            ctx.tensors = (A, tensors[1])
        return out

    cls.forward = staticmethod(forward)  # type: ignore[method-assign]  # bitsandbytes' own, wrapped
    cls._autoconf_keeps_input = True  # type: ignore[attr-defined]  # a flag on bitsandbytes' class
