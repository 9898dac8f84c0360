"""How the HF Trainer's stack wraps the model for N GPUs, on a fake process group, and what the tracker hears.

Used by the rank-trace worker (autoconf/estimators/traced/dist.py); imports torch.

* **FSDP2** (``fsdp``: full shard; ``fsdp-shard-grad-op``: no reshard after forward; ``fsdp-hybrid``: shard
  within a node, replicate across nodes, on a 2-D mesh): accelerate's ``fsdp2_prepare_model``
  (accelerate/utils/fsdp_utils.py, 1.15): ``fully_shard`` every module whose class is in
  ``model._no_split_modules`` (the decoder layers; transformer_auto_wrap_policy), the input embedding alone
  when untied, ``[final norm, lm_head]`` as one unit with ``reshard_after_forward=False``, then the root.
* **DDP** (``ddp``): ``DistributedDataParallel`` as the Trainer builds it (its gradient buckets are allocated
  at construction), without the parameter-shape check and initial broadcast (both read data) and with
  torch's no-op communication hook.

FSDP2 frees and re-allocates gathered parameters by resizing their storage, outside the dispatcher: its
``alloc_storage``/``free_storage`` are wrapped to tell the tracker; all-gathers are charged to weights,
reduce-scatters to gradients, and allocations inside FSDP2's side-stream contexts are tagged with the stream.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from autoconf.estimators.traced.live_bytes import GRADIENTS, WEIGHTS, LiveBytes


class RankBytes(LiveBytes):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """LiveBytes whose samples also carry the step number (0 = load, 1 = first, 2 = steady, 3 = save)."""

    def __init__(self) -> None:
        super().__init__(events=True)
        self.step = 0
        # stream object id -> number (0: the compute stream); FSDP's streams live as long as the model
        self.streams: dict[int, int] = {id(torch.cpu.current_stream()): 0}
        self.event_ops: list[int] = []  # samples index at each allocation event

    def sample(self) -> None:
        self.samples.append((*self.totals, self.phase, self.step))

    def enter(self, step: int, phase: int, category: int) -> None:
        """Start ``phase`` of ``step`` (0 = load, 1 = first step, 2 = steady step, 3 = save)."""
        self.sample()
        self.step, self.phase, self.category = step, phase, category
        self.sample()

    def _event(self, block: int, nbytes: int) -> None:
        if self.events is not None and nbytes:
            self.events.append((block, nbytes, self.stream))
            self.event_ops.append(len(self.samples))

    @contextlib.contextmanager
    def charged(self, category: int) -> Iterator[None]:
        """New storages of the enclosed calls go to ``category``."""
        before, self.category = self.category, category
        try:
            yield
        finally:
            self.category = before


def join_world(world: int, rank: int = 0, replicas: int = 1) -> Any:
    """``rank`` of a fake process group of ``world`` ranks, and its device mesh: 1-D, or for hybrid sharding
    (``replicas`` > 1) 2-D (replicate across nodes, shard within one), the mesh accelerate's
    ParallelismConfig builds for ``dp_replicate_size`` × ``dp_shard_size``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    if replicas > 1:
        return init_device_mesh("cpu", (replicas, world // replicas), mesh_dim_names=("dp_replicate", "dp_shard"))
    return init_device_mesh("cpu", (world,))


def _final_norm(model: torch.nn.Module) -> torch.nn.Module | None:
    """The last ``*Norm*`` child of the decoder stack (accelerate's ``_find_final_norm``)."""
    base: Any = model.get_base_model() if hasattr(model, "get_base_model") else model  # type: ignore[operator]
    inner: torch.nn.Module = getattr(base, str(base.base_model_prefix), base)
    norms = [m for _, m in inner.named_children() if "Norm" in type(m).__name__]
    return norms[-1] if norms else None


def wrap_fsdp2(model: torch.nn.Module, mesh: Any, reshard: bool, amp: torch.dtype | None) -> torch.nn.Module:
    """accelerate's fsdp2_prepare_model, in its order (see the module docstring). Mixed precision (``amp``,
    the autocast dtype of amp-* jobs) gathers and reduces in that dtype, as accelerate's
    ``FullyShardedDataParallelPlugin.set_mixed_precision`` sets ``param_dtype`` and ``reduce_dtype`` for FSDP2."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=amp, reduce_dtype=amp) if amp is not None else MixedPrecisionPolicy()
    kwargs: dict[str, Any] = {"mesh": mesh, "mp_policy": policy, "reshard_after_forward": reshard}
    layer_types = set(getattr(model, "_no_split_modules", None) or [])
    for module in reversed(list(model.modules())[1:]):  # bottom-up, the root last
        if type(module).__name__ in layer_types and not isinstance(module, FSDPModule):
            fully_shard(module, **kwargs)
    embed = model.get_input_embeddings()  # type: ignore[operator]
    head = model.get_output_embeddings()  # type: ignore[operator]
    tied = head is not None and embed.weight is head.weight
    if not tied:
        fully_shard(embed, **kwargs)
    tail = [m for m in ((_final_norm(model), embed, head) if tied else (_final_norm(model), head)) if m is not None]
    fully_shard(tail, **{**kwargs, "reshard_after_forward": False})
    fully_shard(model, mesh=mesh, mp_policy=kwargs["mp_policy"])
    return model


def wrap_ddp(model: torch.nn.Module) -> torch.nn.Module:
    from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook
    from torch.nn.parallel import distributed as ddp_module

    setattr(ddp_module, "_verify_param_shape_across_processes", lambda *a, **k: None)  # noqa: B010  # reads data
    wrapped = ddp_module.DistributedDataParallel(model, init_sync=False)
    wrapped.register_comm_hook(None, noop_hook)
    return wrapped


# The tracker of the trace in progress: FSDP2's hooks are patched once per process (a serving worker runs
# many traces) and report to it.
ACTIVE: list[RankBytes] = []


def patch_fsdp() -> None:
    """Tell the active tracker about FSDP2's storage resizes; charge all-gathers and reduce-scatters."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    if getattr(_fsdp_param_group, "_autoconf_patched", False):
        return
    setattr(_fsdp_param_group, "_autoconf_patched", True)  # noqa: B010  # a flag on torch's module

    def resized(fn: Callable[[torch.Tensor], None]) -> Callable[[torch.Tensor], None]:
        @functools.wraps(fn)
        def call(tensor: torch.Tensor) -> None:
            fn(tensor)
            if ACTIVE:
                ACTIVE[-1].track(tensor, WEIGHTS)
        return call

    for module in (_fsdp_param, _fsdp_param_group):
        for name in ("alloc_storage", "free_storage"):
            if hasattr(module, name):
                setattr(module, name, resized(getattr(_fsdp_param, name)))

    group = _fsdp_param_group.FSDPParamGroup

    def charged(method: Callable[..., Any], category: int) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not ACTIVE:
                return method(self, *args, **kwargs)
            tracker = ACTIVE[-1]
            if category == GRADIENTS:
                for param in self.fsdp_params:
                    unsharded = getattr(param, "_unsharded_param", None)
                    if unsharded is not None and unsharded.grad is not None:
                        tracker.reclassify(unsharded.grad, GRADIENTS)
            with tracker.charged(category):
                out = method(self, *args, **kwargs)
            if category == GRADIENTS:
                for param in self.fsdp_params:
                    if param.sharded_param.grad is not None:
                        tracker.reclassify(param.sharded_param.grad, GRADIENTS)
            return out
        return call

    for name, category in (("unshard", WEIGHTS), ("wait_for_unshard", WEIGHTS), ("post_backward", GRADIENTS)):
        setattr(group, name, charged(getattr(group, name), category))
    tag_streams()


def tag_streams() -> None:
    """FSDP2 allocates the all-gather output on its copy-in stream and the reduce-scatter output on its
    reduce-scatter stream (``with device_handle.stream(...)`` in _fsdp_collectives.py); FSDP1 its unsharded flat
    parameters on ``_unshard_stream``, the offloaded shard's device copy on ``_pre_unshard_stream`` and the
    reduce-scatter on ``_post_backward_stream`` (_runtime_utils.py ``_unshard``, ``_post_backward_hook``). On a GPU
    the caching allocator reuses a freed block only on the stream that allocated it. The CPU device handle's stream
    context is a no-op: wrapped to tag the allocations made inside it with that stream."""
    plain = torch.cpu.stream
    if getattr(plain, "_autoconf_tagged", False):
        return

    @contextlib.contextmanager
    def tagged(stream: Any) -> Iterator[None]:
        if not ACTIVE:
            with plain(stream):
                yield
            return
        tracker = ACTIVE[-1]
        before = tracker.stream
        tracker.stream = tracker.streams.setdefault(id(stream), len(tracker.streams))
        try:
            with plain(stream):
                yield
        finally:
            tracker.stream = before

    setattr(tagged, "_autoconf_tagged", True)  # noqa: B010  # a flag on our wrapper
    torch.cpu.stream = tagged
