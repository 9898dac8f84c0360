"""FSDP1's storage calls told to the rank trace's tracker (the FSDP1 wrap: autoconf/estimators/traced/fsdp1.py).

FSDP1 gathers a unit into its padded unsharded buffer and frees it by resizing storages outside the dispatcher
(``_alloc_storage`` / ``_free_storage``, torch/distributed/fsdp/_flat_param.py, and ``FlatParamHandle.shard``'s
resize of the whole flat parameter); all are wrapped to tell the tracker. All-gathers count as weights, the
reduce-scatters' padded gradients as gradients. Fake tensors have no data pointers, by which FSDP1 tells storages
apart: its two checks compare storage objects instead. Each of FSDP1's streams keeps its own cached blocks.
Imports torch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from autoconf.estimators.traced.live_bytes import GRADIENTS, WEIGHTS
from autoconf.estimators.traced.wrap import ACTIVE, tag_streams


def patch_fsdp1() -> None:
    """Tell the active tracker about FSDP1's storage resizes (gathered flat parameters, mixed-precision shards)."""
    from torch.distributed.fsdp import _flat_param

    tag_streams()  # each of FSDP1's streams keeps its own cached blocks (wrap.tag_streams)
    if getattr(_flat_param, "_autoconf_patched", False):
        return
    setattr(_flat_param, "_autoconf_patched", True)  # noqa: B010  # a flag on torch's module

    def resized(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(tensor: torch.Tensor, *args: Any) -> Any:
            out = fn(tensor, *args)
            if ACTIVE:  # the resize may have been seen by the dispatcher in the current category: weights
                ACTIVE[-1].track(tensor, WEIGHTS)
                ACTIVE[-1].reclassify(tensor, WEIGHTS)
            return out
        return call

    for name in ("_alloc_storage", "_free_storage"):
        setattr(_flat_param, name, resized(getattr(_flat_param, name)))

    # FlatParamHandle.shard frees the unsharded flat parameter by resizing its storage to 0 (a storage call the
    # dispatcher does not see) before keeping the rank's chunk: tell the tracker through a view of that storage.
    handle_cls = _flat_param.FlatParamHandle
    shard = handle_cls.shard

    @functools.wraps(shard)
    def sharded(self: Any) -> Any:
        whole = self.flat_param.detach()  # shares the unsharded storage
        out = shard(self)  # type: ignore[no-untyped-call]  # torch's method is unannotated
        if ACTIVE:
            ACTIVE[-1].track(whole, WEIGHTS)
        return out

    setattr(handle_cls, "shard", sharded)  # noqa: B010  # torch's method, wrapped

    # Fake tensors have no data pointers (all 0), and FSDP1 tells storages apart by them: ``_same_storage`` and
    # ``_catch_all_reshard``'s "already resharded" check (flat_param.data_ptr() == _local_shard.data_ptr()), which
    # would then skip resharding the units whose post-backward hook never runs (frozen LoRA bases whose inputs need
    # no gradient: the embedding's unit and the first layer), leaving them gathered through the optimizer step.
    # Both compare the storage objects instead (their C pointers, distinct per storage, shared by views).
    from torch.distributed.fsdp import _runtime_utils

    def storage_id(tensor: torch.Tensor) -> int:
        local = getattr(tensor, "_local_tensor", tensor)  # a DTensor's local shard, as torch's check does
        return int(local.untyped_storage()._cdata)

    setattr(_flat_param, "_same_storage", lambda a, b: storage_id(a) == storage_id(b))  # noqa: B010

    @functools.wraps(_runtime_utils._catch_all_reshard)
    def reshard_unless_sharded(state: Any) -> None:  # torch's body, with the storage check
        handle = state._handle
        if not handle or (storage_id(handle.flat_param) == storage_id(handle.flat_param._local_shard)
                          and not handle._skipped_use_sharded_views):
            return
        _runtime_utils._reshard(state, handle, _runtime_utils._should_free_in_backward(state, handle))

    setattr(_runtime_utils, "_catch_all_reshard", reshard_unless_sharded)  # noqa: B010

    # The post-backward hook reduce-scatters a unit's padded unsharded gradient into a new shard-sized one and
    # sets it as the flat parameter's gradient (_runtime_utils._post_backward_hook / _reduce_grad): gradients.
    # The hook is bound by name when FSDP1 registers it (functools.partial at lazy init), so the wrapper is seen.
    hook = _runtime_utils._post_backward_hook

    @functools.wraps(hook)
    def post_backward(state: Any, handle: Any, *args: Any, **kwargs: Any) -> Any:
        if not ACTIVE:
            return hook(state, handle, *args, **kwargs)
        tracker = ACTIVE[-1]
        with tracker.charged(GRADIENTS):
            out = hook(state, handle, *args, **kwargs)
        grad = handle.flat_param.grad if handle is not None else None
        if grad is not None:
            tracker.reclassify(grad, GRADIENTS)
        return out

    _runtime_utils._post_backward_hook = post_backward
