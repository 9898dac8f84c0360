"""FSDP1's parameter CPU offload (``CPUOffload(offload_params=True)``) as a GPU rank runs it, on fake CPU tensors.

Used by the rank-trace worker (fsdp1.py ``wrap_fsdp1``, spec ``cpu_offload``); imports torch. Answer.AI's fsdp_qlora
``train.py`` passes it by default (``use_cpu_offload: bool = True``; ``cpu_offload=CPUOffload(offload_params=True)``).
Everything in the trace is a CPU tensor, so FSDP1's own device checks (``flat_param.device != self.device``) never
fire; what lives in host memory is told to the tracker instead (``LiveBytes.to_host``, which also takes an op's new
storages as host memory when it reads host tensors only), and each host-to-device copy FSDP1 makes is made on the
device. From torch/distributed/fsdp (read at the installed 2.x, the same code since 2.1):

* construction (_init_utils.py ``_init_param_handle_from_params``): each unit is moved to ``device_id`` whole,
  flattened and sharded as without offload, then ``handle.flat_param_to(cpu)``: the rank's shard leaves the device.
* lazy init (_flat_param.py ``init_flat_param_attributes``): ``_local_shard`` pinned, ``_cpu_grad =
  torch.zeros_like(_local_shard, device=cpu).pin_memory()``: host memory (pinning is the identity here; fake
  tensors cannot pin).
* unshard (``pre_unshard``): without parameter mixed precision, ``flat_param_to(self.device)``, a device copy of the
  shard that the all-gather reads and that dies when the unsharded parameter takes its place; with it,
  ``_use_low_precision_shard`` copies ``_local_shard.to(device)`` (a full-precision staging copy) into ``_mp_shard``.
* backward (_runtime_utils.py ``_post_backward_hook``): the reduce-scatter's new shard is kept on the device as
  ``_saved_grad_shard`` until the backward ends and is copied into ``_cpu_grad`` (``_offload_grad``), which becomes
  ``.grad`` (``prepare_gradient_for_optim``); clipping and the optimizer then run on the host.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from autoconf.estimators.traced.live_bytes import LiveBytes
from autoconf.estimators.traced.wrap import ACTIVE


def _host(tensor: torch.Tensor | None) -> None:
    if tensor is not None and ACTIVE:
        ACTIVE[-1].to_host(tensor)


def _device_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of ``tensor`` made on the device (a new storage, not derived from the host one: counted)."""
    copy = torch.empty(tensor.shape, dtype=tensor.dtype)
    return copy.copy_(tensor)


@contextlib.contextmanager
def cpu_offload(tracker: LiveBytes) -> Iterator[None]:
    """FSDP1's parameter offload for the trace (module docstring) under ``tracker``; undone on exit."""
    from torch.distributed.fsdp import _init_utils
    from torch.distributed.fsdp._flat_param import FlatParamHandle

    init_handle = _init_utils._init_param_handle_from_params
    init_attributes = FlatParamHandle.init_flat_param_attributes
    pre_unshard = FlatParamHandle.pre_unshard
    low_precision = FlatParamHandle._use_low_precision_shard

    @functools.wraps(init_handle)
    def handle_to_host(state: Any, *args: Any, **kwargs: Any) -> None:
        init_handle(state, *args, **kwargs)
        if state.cpu_offload.offload_params and state._handle is not None:
            _host(state._handle.flat_param)  # ``handle.flat_param_to(cpu_device)``

    def attributes_on_host(self: Any) -> None:
        init_attributes(self)
        if self._offload_params:
            _host(self.flat_param._local_shard)
            _host(getattr(self.flat_param, "_cpu_grad", None))

    def shard_to_device(self: Any) -> bool:
        ret: bool = pre_unshard(self)
        mixed = self._uses_param_mixed_precision and not self._force_full_precision
        if self._offload_params and not mixed and ACTIVE and ACTIVE[-1].is_host(self.flat_param):
            self.flat_param.data = _device_copy(self.flat_param)  # ``flat_param_to(self.device)``
            if self._use_orig_params:
                self._use_sharded_views()
            ret = True
        return ret

    def staged_low_precision(self: Any) -> None:
        staging = _device_copy(self.flat_param._local_shard) if self._offload_params else None  # ``.to(device)``
        low_precision(self)  # type: ignore[no-untyped-call]  # torch's method is unannotated
        del staging

    patches: list[tuple[Any, str, Callable[..., Any]]] = [
        (_init_utils, "_init_param_handle_from_params", handle_to_host),
        (FlatParamHandle, "init_flat_param_attributes", attributes_on_host),
        (FlatParamHandle, "pre_unshard", shard_to_device),
        (FlatParamHandle, "_use_low_precision_shard", staged_low_precision),
        (torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self),
    ]
    stream = type(torch.cpu.current_stream())
    if not hasattr(stream, "synchronize"):  # the post-backward callback waits for the copies to the host
        patches.append((stream, "synchronize", lambda self: None))
    originals = [(owner, name, owner.__dict__.get(name)) for owner, name, _ in patches]
    for owner, name, patched in patches:
        setattr(owner, name, patched)
    tracker.host_outputs = True
    try:
        yield
    finally:
        tracker.host_outputs = False
        for owner, name, original in originals:
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
