"""Host and device for the SFTTrainer driver (trl_step.py): the checkpoint sits in host memory (uncounted) as
``from_pretrained`` leaves it; every move to the device is a counted copy, as on a GPU (fake CPU tensors are the
device here, so those moves would otherwise be no-ops); FSDP1's storage resizes reach the tracker."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.overrides import TorchFunctionMode

from autoconf.estimators.traced.live_bytes import GRADIENTS, WEIGHTS
from autoconf.estimators.traced.rank_step import LOAD
from autoconf.estimators.traced.wrap import RankBytes


class HostBytes(RankBytes):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """RankBytes that knows which storages are on the host (the loaded checkpoint in CPU RAM, as ``from_pretrained``
    leaves it): never counted, nor their views; a move to the device is a counted copy (``to_device``)."""

    def mark_host(self, tensor: torch.Tensor) -> None:
        if id(tensor.untyped_storage()) not in self.records:
            self.remember_host(tensor)

    def on_host(self, tensor: torch.Tensor) -> bool:
        return not isinstance(tensor, DTensor) and id(tensor.untyped_storage()) in self.host

    def track(self, tensor: torch.Tensor, category: int) -> None:
        if tensor.device.type != "meta":  # meta: no storage anywhere (host storages: LiveBytes.track)
            super().track(tensor, category)

    def to_device(self, tensor: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The device copy of a host tensor (in ``dtype``), counted as weights; a device tensor as it is."""
        if not self.on_host(tensor):
            return tensor if dtype is None or not tensor.is_floating_point() else tensor.to(dtype)
        with self.charged(WEIGHTS), torch.no_grad():
            return tensor.to(dtype) if dtype is not None and tensor.is_floating_point() and dtype != tensor.dtype \
                else tensor.clone()


class HostToDevice(TorchFunctionMode):
    """``Tensor.to(device)`` of a host tensor is a counted device copy (on fake CPU tensors it is a no-op)."""

    def __init__(self, tracker: HostBytes) -> None:
        super().__init__()
        self.tracker = tracker

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.to and isinstance(args[0], torch.Tensor) and self.tracker.on_host(args[0]):
            device, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
            if device is not None and torch.device(device).type == "cpu":
                return self.tracker.to_device(args[0], dtype)
        return func(*args, **kwargs)


def device_moves(tracker: HostBytes) -> None:
    """``Module.to(device)``: host tensors get a counted device copy, device tensors change dtype in place of their
    data (FakeTensorMode keeps weak references to fake parameters, so torch refuses to swap them); FSDP2's move of
    a unit's states to the device likewise."""
    from torch.distributed.fsdp._fully_shard import _fsdp_init

    move = torch.nn.Module.to

    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        tensors = [*self.parameters(), *self.buffers()]
        if device is not None and torch.device(device).type == "meta":  # accelerate's cpu_ram_efficient_loading
            for module in self.modules():
                for name, param in list(module._parameters.items()):
                    if param is not None:
                        module._parameters[name] = torch.nn.Parameter(torch.empty_like(param, device="meta"),
                                                                      requires_grad=param.requires_grad)
                for name, buffer in list(module._buffers.items()):
                    if buffer is not None:
                        module._buffers[name] = torch.empty_like(buffer, device="meta")
            return self
        if tensors and device is not None and torch.device(device).type != tensors[0].device.type:
            return move(self, *args, **kwargs)
        for tensor in tensors:
            moved = tracker.to_device(tensor.data, dtype)
            if moved is not tensor.data:
                tensor.data = moved
        return self

    def move_states(params: list[torch.Tensor], buffers: list[torch.Tensor], device: torch.device) -> None:
        for tensor in [*params, *buffers]:
            if tensor.device.type != "meta" and tracker.on_host(tensor):
                tensor.data = tracker.to_device(tensor.data)

    torch.nn.Module.to = to  # type: ignore[method-assign,assignment]
    setattr(_fsdp_init, "_move_states_to_device", move_states)  # noqa: B010


def sharded_params_are_weights(tracker: HostBytes) -> None:
    """FSDP2's lazy init before the first forward re-creates a sharded parameter whose storage is not its padded
    shard's (``FSDPParamGroup.lazy_init`` → ``reset_sharded_param``: the last rank of an uneven world): weights."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    group = _fsdp_param_group.FSDPParamGroup
    plain = group.lazy_init

    def lazy_init(self: Any) -> None:
        with tracker.charged(WEIGHTS):
            plain(self)  # type: ignore[no-untyped-call]  # torch: unannotated

    setattr(group, "lazy_init", lazy_init)  # noqa: B010


def patch_fsdp1(tracker: HostBytes) -> None:
    """FSDP1 frees and re-allocates its unsharded flat parameters by resizing their storage, outside the dispatcher:
    tell the tracker (as wrap.patch_fsdp does for FSDP2); its post-backward reduce-scatter makes gradients."""
    from torch.distributed.fsdp import _flat_param, _runtime_utils

    for name in ("_alloc_storage", "_free_storage"):
        plain = getattr(_flat_param, name)

        def resized(tensor: torch.Tensor, *args: Any, plain: Any = plain) -> None:
            plain(tensor, *args)
            tracker.track(tensor, WEIGHTS)

        setattr(_flat_param, name, resized)
    hook = _runtime_utils._post_backward_hook

    def post_backward(state: Any, handle: Any, *args: Any) -> Any:
        if handle.flat_param.grad is not None:
            tracker.reclassify(handle.flat_param.grad, GRADIENTS)
        with tracker.charged(GRADIENTS):
            out = hook(state, handle, *args)
        for grad in (handle.flat_param.grad, getattr(handle.flat_param, "_saved_grad_shard", None)):
            if grad is not None:
                tracker.reclassify(grad, GRADIENTS)
        return out

    setattr(_runtime_utils, "_post_backward_hook", post_backward)  # noqa: B010


@contextlib.contextmanager
def host_then_quantised(fake: Any, tracker: HostBytes) -> Iterator[None]:
    """qlora.build_qlora's materialisation: the checkpoint's bf16 values on the host (uncounted), each 4-bit weight
    quantised on the device by bitsandbytes' own ``quantize_4bit`` (counted)."""
    import bitsandbytes as bnb

    plain = bnb.functional.quantize_4bit

    def quantize_4bit(*args: Any, **kwargs: Any) -> Any:
        tracker.skip = False
        try:
            return plain(*args, **kwargs)
        finally:
            tracker.skip = True

    with fake, tracker:
        tracker.enter(0, LOAD, WEIGHTS)
        tracker.skip = True
        bnb.functional.quantize_4bit = quantize_4bit
        try:
            yield
        finally:
            bnb.functional.quantize_4bit = plain
            tracker.skip = False
