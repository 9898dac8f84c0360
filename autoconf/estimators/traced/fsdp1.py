"""FSDP1 (torch's ``FullyShardedDataParallel``) as accelerate wraps a model for the HF Trainer, on a fake process group.

Used by the rank-trace worker (autoconf/estimators/traced/dist.py, strategy ``fsdp1``); imports torch and peft.

Stacks that launch the HF Trainer with an accelerate FSDP config of ``fsdp_version`` 1 (fms-hf-tuning: its
fms-acceleration benchmark ``accelerate.yaml``; Answer.AI's fsdp_qlora ``train.py`` wraps the same way itself) get:

* ``FullyShardedDataParallel`` with ``FULL_SHARD``; ``use_orig_params=True`` for fms-hf-tuning (spec
  ``use_orig_params``: ``accelerate launch`` defaults ``--fsdp_use_orig_params`` to "true" and always exports
  ``FSDP_USE_ORIG_PARAMS``, accelerate commands/launch.py and utils/launch.py, and the benchmark's yaml does not set
  it), ``False`` for fsdp_qlora (its train.py passes False),
  ``limit_all_gathers=True`` (the plugin's default), ``BackwardPrefetch.BACKWARD_PRE`` (the yaml's
  ``fsdp_backward_prefetch``), no forward prefetch.
* Wrapping: ``transformer_auto_wrap_policy`` over the model's ``_no_split_modules`` (``TRANSFORMER_BASED_WRAP``);
  for LoRA, peft's ``fsdp_auto_wrap_policy`` (peft/utils/other.py), which the Trainer installs for a peft model
  under FSDP1 (transformers trainer.py ``update_fsdp_plugin_peft``, called because FSDP1 delays the optimizer's
  creation): every leaf module with a trainable weight (each ``lora_A`` / ``lora_B``) is a unit of its own, then
  the decoder layers, then the root. With ``use_orig_params=False`` a flat parameter must be all trainable or
  all frozen, which that policy ensures.
* Mixed precision for amp-* jobs: ``MixedPrecision(param_dtype=reduce_dtype=buffer_dtype=<autocast dtype>)``
  (accelerate's ``set_mixed_precision`` for FSDP1).

Each unit's parameters become one flat parameter, padded to a multiple of the world size and split into equal
chunks; rank r keeps chunk r (``FlatParamHandle.shard``). What FSDP1 does outside the dispatcher (its storage
resizes) and what fake tensors lack (data pointers) is patched for the tracker in fsdp1_patches.py.

Gradient checkpointing as transformers 4.x runs it for fms-hf-tuning LoRA (spec ``hf4_checkpointing``; every
fms-acceleration campaign pins a 4.x release): a reentrant checkpoint around each FSDP decoder-layer unit
(``checkpoint_units``), not 5.x's non-reentrant one inside the layer, with the rows' ``bf16: True`` on bf16 weights
(accelerate's autocast and ``MixedPrecision`` in bf16). The recomputation runs each frozen unit with grad enabled
on the checkpoint's detached input, so FSDP1's reshard-only hook (``_register_post_backward_reshard_only_hook``:
``register_multi_grad_hook`` on the unit's inputs that require grad, kept in ``_post_backward_hook_state`` until
``_finalize_params`` at the end of backward) holds that input and the gradient accumulated into it: each
layer keeps 2·h + 2·h bytes per token until backward ends, instead of 2·h.

peft QLoRA (frameworks.Profile.fsdp1_qlora, fms-acceleration's ``baseline-peft-bnb``): the model is quantised in host
memory (``qlora_model``) with its packed 4-bit weights in the model dtype (``bnb_4bit_quant_storage``), which FSDP1
flattens with the layer's norms; no kbit upcast (TRL's ``is_sharded_qlora``); the quant states, no parameters, are
moved to the device whole (``four_bit_states_to_device``); ``MixedPrecision`` in the storage dtype.

Not run as on a GPU: ``sync_module_states`` (the broadcast of rank 0's weights at load) refuses CPU modules
(``_check_module_states_for_sync_module_states``), and ``device_id`` is the CPU. The model is materialised outside
the tracker (with ``fsdp_cpu_ram_efficient_loading`` rank 0 holds it in host memory, the other ranks on the meta
device) and each unit's flat parameter is built and sharded inside it, as FSDP1's constructor does on the GPU. For a
stack that builds FSDP1 with a CUDA ``device_id`` and ``sync_module_states`` (frameworks.Profile
``fsdp1_device_load``; spec ``device_load``), ``device_load`` stands in for the per-unit copy to the device and the
broadcast's buckets with their allocations, so that the allocator replay holds the cache the load leaves.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn


def wrap_fsdp1(model: nn.Module, spec: dict[str, Any], amp: torch.dtype | None) -> nn.Module:
    """``model`` (materialised, on the fake process group of dist.join_world) wrapped as the module docstring says."""
    from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    policy: Callable[..., bool]
    if spec["method"] in ("lora", "qlora"):
        from peft.utils.other import fsdp_auto_wrap_policy

        policy = fsdp_auto_wrap_policy(model)  # type: ignore[no-untyped-call]  # peft is unannotated
    else:
        names = set(getattr(model, "_no_split_modules", None) or [])
        layers = {type(m) for m in model.modules() if type(m).__name__ in names}
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layers)
    precision = MixedPrecision(param_dtype=amp, reduce_dtype=amp, buffer_dtype=amp) if amp is not None else None
    with device_load() if spec.get("device_load") else contextlib.nullcontext():
        sharding = ShardingStrategy.NO_SHARD if spec.get("fsdp1_sharding") == "no_shard" else ShardingStrategy.FULL_SHARD
        return FSDP(model, auto_wrap_policy=policy, sharding_strategy=sharding,
                    use_orig_params=bool(spec.get("use_orig_params")),
                    limit_all_gathers=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=False,
                    mixed_precision=precision, device_id=torch.device("cpu"), sync_module_states=False,
                    cpu_offload=CPUOffload(offload_params=bool(spec.get("cpu_offload"))))


# torch/distributed/fsdp/_init_utils.py PARAM_BROADCAST_BUCKET_SIZE: sync_module_states' dist._broadcast_coalesced
# packs a unit's states into buckets of this many bytes
BROADCAST_BUCKET_BYTES = 250 * 1024 * 1024


def broadcast_buckets(sizes: list[tuple[torch.dtype, int]]) -> list[int]:
    """Bytes of each flattened bucket ``dist._broadcast_coalesced`` allocates for tensors of these (dtype, bytes):
    torch/csrc/utils/tensor_flatten.cpp ``take_tensors`` groups them by type in order and closes a group once it
    holds at least the limit (so one tensor larger than the limit is a bucket of its own); the groups left open
    are flushed at the end."""
    buckets: list[int] = []
    open_groups: dict[torch.dtype, int] = {}
    for dtype, size in sizes:
        total = open_groups.get(dtype, 0) + size
        if total >= BROADCAST_BUCKET_BYTES:
            buckets.append(total)
            open_groups.pop(dtype, None)
        else:
            open_groups[dtype] = total
    return buckets + [size for size in open_groups.values() if size]


@contextlib.contextmanager
def device_load() -> Iterator[None]:
    """FSDP1's constructor as on a GPU with ``device_id`` and ``sync_module_states=True``: the states of each unit
    still in host memory are copied to the device one by one (``_move_states_to_device``: ``param.data =
    param.to(device)``; a meta rank's ``param_init_fn`` ``to_empty`` allocates the same), then broadcast from rank 0
    (``_sync_module_params_and_buffers`` → ``dist._broadcast_coalesced``: each bucket flattened into a new tensor,
    broadcast and copied back), then flattened and sharded. The fake-CPU wrap (device_id CPU, no sync) calls the move
    for each unit's own states; its allocations, and the buckets', are stood in for there."""
    from torch.distributed.fsdp import _init_utils

    move = _init_utils._move_states_to_device

    def moved(params: list[nn.Parameter], buffers: list[torch.Tensor], device_from_device_id: torch.device | None
              ) -> None:
        states = [*params, *buffers]
        with torch.no_grad():
            for tensor in states:
                tensor.data = tensor.detach().clone()
        for size in broadcast_buckets([(t.dtype, t.numel() * t.element_size()) for t in states]):
            bucket = torch.empty(size, dtype=torch.uint8)
            del bucket

    _init_utils._move_states_to_device = moved
    try:
        yield
    finally:
        _init_utils._move_states_to_device = move


class _ReentrantAround(nn.Module):
    """transformers 4.x gradient checkpointing of one decoder layer under FSDP1: the model's loop calls
    ``self._gradient_checkpointing_func(decoder_layer.__call__, hidden_states, ...)`` (modeling_mistral.py /
    modeling_llama.py 4.35-4.51), where ``decoder_layer`` is already accelerate's FSDP unit, and
    ``gradient_checkpointing_enable`` defaults to ``use_reentrant=True`` (modeling_utils.py 4.44: kwargs None ->
    ``{"use_reentrant": True}``): a reentrant ``torch.utils.checkpoint`` around the whole FSDP unit. From 4.52 the
    checkpoint is the layer's own ``__call__`` (``GradientCheckpointingLayer``), inside the unit."""

    def __init__(self, unit: nn.Module) -> None:
        super().__init__()
        self.unit = unit

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        if not self.training:
            return self.unit(hidden_states, *args, **kwargs)
        return checkpoint(lambda h: self.unit(h, *args, **kwargs), hidden_states, use_reentrant=True)


def checkpoint_units(model: nn.Module) -> None:
    """Put each FSDP1 decoder-layer unit of ``model`` (its ``_no_split_modules`` class) inside a reentrant
    checkpoint, as transformers 4.x does (``_ReentrantAround``); the model's own checkpointing must be off and
    its input embeddings' output must require grad (``enable_input_require_grads``, which 4.x enables for peft)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    for module in list(model.modules()):
        if isinstance(module, nn.ModuleList):
            for i, unit in enumerate(module):
                inner = getattr(unit, "module", None)
                if isinstance(unit, FSDP) and type(inner).__name__.endswith("DecoderLayer"):
                    module[i] = _ReentrantAround(unit)
    inner_model = model.module if isinstance(model, FSDP) else model
    enable = getattr(inner_model, "enable_input_require_grads", None)
    if enable is not None:
        enable()
    model.train()


def qlora_model(spec: dict[str, Any], fake_mode: Any) -> nn.Module:
    """The peft QLoRA model quantised in host memory (qlora.py, outside the tracker), its 4-bit weights packed in
    ``spec["quant_storage"]`` so that FSDP1 flattens them with the unit's other frozen tensors; bitsandbytes'
    ``Linear4bit.forward`` then finds its quant state on the gathered weight (trl_fakes.gathered_four_bit)."""
    from autoconf.estimators.traced.model import _init_real, _lora, meta_model
    from autoconf.estimators.traced.qlora import build_qlora
    from autoconf.estimators.traced.stacks.trl_fakes import gathered_four_bit

    gathered_four_bit()
    return build_qlora(spec, fake_mode, meta_model, _lora, _init_real)


def four_bit_states_to_device(model: nn.Module) -> None:
    """Each 4-bit layer's quant state on the rank's device: not a parameter or buffer, so FSDP1 does not shard it;
    its constructor moves each unit to ``device_id`` (``_move_states_to_device``: ``tensor.to(device)``), where
    ``Params4bit.to`` moves the quant state too (bitsandbytes nn/modules.py; ``QuantState.to``: the absmax, the code
    table and, doubly quantised, the offset and the nested absmax and code), whole on every rank."""
    found = (getattr(m, "quant_state", None) for m in model.modules())
    states: dict[int, Any] = {id(s): s for s in found if hasattr(s, "absmax")}
    for state in states.values():
        state.absmax, state.code = state.absmax.clone(), state.code.clone()
        if getattr(state, "nested", False):
            state.offset = state.offset.clone()
            state.state2.absmax, state.state2.code = state.state2.absmax.clone(), state.state2.code.clone()


def is_fsdp1(model: nn.Module) -> bool:
    """``model`` is an FSDP1 root (``FullyShardedDataParallel``)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return isinstance(model, FSDP)


def clip_fsdp1(model: nn.Module, max_norm: float) -> None:
    """The Trainer's clipping of an FSDP1 model: ``FullyShardedDataParallel.clip_grad_norm_`` (accelerate's
    ``clip_grad_norm_`` calls it for FSDP1), over the local gradient shards and one all-reduce."""
    model.clip_grad_norm_(max_norm)  # type: ignore[operator]
