"""Lightning Fabric as LitGPT's finetune scripts build it, on the CPU accelerator and (several devices) a fake
process group; used by litgpt_step.py (imports torch and lightning).

One device: ``L.Fabric(devices=1, strategy="auto", precision=...)``. Several, on rank ``spec['rank']`` of a fake world
that the process joins as a launcher-started rank would (``LOCAL_RANK`` set: Fabric starts no processes; the
process group exists: Fabric creates none):

* ``full.py``: ``FSDPStrategy`` with ``auto_wrap_policy={Block}``, ``activation_checkpointing_policy={Block}``,
  ``state_dict_type="full"``, ``limit_all_gathers=True``, ``cpu_offload=False`` (torch's FSDP1; Fabric's
  ``use_orig_params=True``). Fabric refuses FSDP on the CPU accelerator (``connector._check_strategy_and_fallback``:
  ``type(strategy) is FSDPStrategy``), a guard only: the strategy is a subclass with nothing changed. Fabric passes
  ``device_id=None`` on the CPU (``FSDPStrategy.setup_module``) and FSDP1 then cannot materialise a meta-device
  model without an accelerator: the CPU is passed as the device, as the GPU is on a GPU. FSDP1's storage resizes
  are told to the tracker (traced/fsdp1_patches.py ``patch_fsdp1``).
* ``lora.py``: ``ModelParallelStrategy(parallelize_fn, data_parallel_size=world, tensor_parallel_size=1)``: its
  ``parallelize_fn`` wraps each ``Block`` in ``checkpoint_wrapper`` and applies FSDP2's ``fully_shard`` to every
  trainable ``Linear``, checkpointed block and ``Block``, then the root (traced/wrap.py ``patch_fsdp``). Its
  ``load_checkpoint`` calls ``load_from_full_model_state_dict(cpu_offload=True)``: each checkpoint tensor moved to
  the device, sharded, and the shard moved to the host (``.cpu()``) and assigned: the base weights' shards live in
  host memory and are gathered to the device each forward (``HostMoves``).
* Both: the model is built on the meta device (``init_module(empty_init=True)``) outside FakeTensorMode (a fake
  meta parameter cannot be swapped for its materialised self in ``to_empty``); the strategy materialises and shards
  it inside, traced. ``broadcast_object_list`` (Fabric broadcasts the checkpoint path from rank 0, which every rank
  already holds) is answered by the rank's own objects: its receiving side reads a size by value, which a fake
  tensor has not. A sub-mesh's rank tensor (``device_mesh["data_parallel"]``) is host memory: not counted.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from autoconf.estimators.traced.wrap import RankBytes

# our dtype -> Fabric's precision flag (litgpt finetune --precision)
PRECISION = {"bf16": "bf16-true", "fp32": "32-true", "amp-bf16": "bf16-mixed"}


def _cpu_is_the_device() -> None:
    """FSDP1 on the CPU device when Fabric names none (see the module docstring)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    init = FSDP.__init__
    if getattr(init, "_autoconf_cpu", False):
        return

    @functools.wraps(init)
    def on_cpu(self: Any, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("device_id") is None:
            kwargs["device_id"] = torch.device("cpu")
        init(self, module, *args, **kwargs)

    on_cpu._autoconf_cpu = True  # type: ignore[attr-defined]
    FSDP.__init__ = on_cpu  # type: ignore[method-assign]


def _uncounted(fn: Any) -> Any:
    """``fn`` with the active tracker not counting what it allocates."""
    from autoconf.estimators.traced.wrap import ACTIVE

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not ACTIVE:
            return fn(*args, **kwargs)
        ACTIVE[-1].skip = True
        try:
            return fn(*args, **kwargs)
        finally:
            ACTIVE[-1].skip = False

    return call


def _host_side_helpers() -> None:
    """Object broadcasts and sub-mesh rank tensors outside the tracker (see the module docstring)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    if not getattr(DeviceMesh.__getitem__, "_autoconf_host", False):
        dist.broadcast_object_list = lambda *_args, **_kwargs: None  # every rank holds rank 0's objects already
        DeviceMesh.__getitem__ = _uncounted(DeviceMesh.__getitem__)  # type: ignore[method-assign]
        DeviceMesh.__getitem__._autoconf_host = True  # type: ignore[attr-defined]


def fabric_for(spec: dict[str, Any]) -> Any:
    """The script's Fabric for ``spec`` (one device, or rank ``spec['rank']`` of its FSDP world)."""
    import lightning as L

    world = int(spec["world"])
    if world == 1:
        return L.Fabric(accelerator="cpu", devices=1, strategy="auto", precision=PRECISION[spec["dtype"]])
    from lightning.fabric.strategies import FSDPStrategy, ModelParallelStrategy
    from litgpt.finetune import lora
    from litgpt.model import Block

    from autoconf.estimators.traced.fsdp1_patches import patch_fsdp1
    from autoconf.estimators.traced.wrap import join_world, patch_fsdp

    class CPUFSDPStrategy(FSDPStrategy):  # type: ignore[misc]  # lightning is untyped here
        """Fabric's FSDPStrategy, unchanged (a subclass passes the connector's GPU-only guard)."""

    rank = int(spec.get("rank", 0))
    join_world(world, rank)
    os.environ.update(LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE=str(world), RANK=str(rank))
    _host_side_helpers()
    if spec["method"] == "lora":
        patch_fsdp()
        strategy: Any = ModelParallelStrategy(parallelize_fn=lora.parallelize_fn, data_parallel_size=world,
                                              tensor_parallel_size=1)
    else:
        _cpu_is_the_device()
        patch_fsdp1()
        strategy = CPUFSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy={Block},
                                   state_dict_type="full", limit_all_gathers=True, cpu_offload=False)
    fabric = L.Fabric(accelerator="cpu", devices=world, num_nodes=1, strategy=strategy,
                      precision=PRECISION[spec["dtype"]])
    fabric.launch()
    return fabric


class HostBytes(RankBytes):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """RankBytes that never counts the storages put on the host (``remember_host``), views of them, nor the padded copies
    FSDP2 makes of them (``new_zeros``, on the tensor's own device)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if func not in HOST_SIDE or not self.is_host(args[0]):
            return super().__torch_dispatch__(func, types, args, kwargs)
        out = func(*args, **(kwargs or {}))  # on the tensor's own device: the host
        self.remember_host(out)
        return out


# ops whose result lives where their input does: FSDP2 pads a host shard (reset_sharded_param: new_zeros), FSDP1's
# full state dict clones each parameter of a unit offloaded to the host (_full_post_state_dict_hook: clone)
HOST_SIDE = (torch.ops.aten.new_zeros.default, torch.ops.aten.clone.default)


def patch_fsdp1_offload(tracker: HostBytes) -> None:
    """FSDP1's ``FlatParamHandle.to_cpu`` (a full state dict with ``offload_to_cpu``) moves the gathered unit to the
    host with ``flat_param_to(cpu)``, a no-op on fake CPU tensors that would leave it counted and its padded storage
    referenced: the move makes an uncounted host copy, as on a GPU."""
    from torch.distributed.fsdp._flat_param import FlatParamHandle

    to_cpu = FlatParamHandle.to_cpu

    @contextlib.contextmanager
    def offloaded(self: Any) -> Iterator[None]:
        self.flat_param_to = functools.partial(_to_host, self, tracker)
        try:
            with to_cpu(self):
                del self.flat_param_to  # only the move in to_cpu's entry
                yield
        finally:
            self.__dict__.pop("flat_param_to", None)

    FlatParamHandle.to_cpu = offloaded  # type: ignore[method-assign]


def _to_host(handle: Any, tracker: HostBytes, *_args: Any, **_kwargs: Any) -> None:
    """``FlatParamHandle.flat_param_to(cpu)`` as on a GPU: the flat parameter's data becomes a host copy."""
    tracker.skip = True
    try:
        data = handle.flat_param.detach().clone()
    finally:
        tracker.skip = False
    tracker.remember_host(data)
    handle.flat_param.data = data
    if handle._use_orig_params:  # torch's flat_param_to refreshes the views on the new storage
        handle._use_unsharded_views(as_params=True)


class HostMoves(TorchFunctionMode):
    """``.cpu()`` of a device tensor is a device-to-host copy: made, and never counted (on fake CPU tensors it would
    return the device tensor itself); a host tensor of ``host`` (the checkpoint) moved ``.to(device)`` is a new, counted
    device tensor (on fake CPU tensors the move is a no-op)."""

    def __init__(self, tracker: HostBytes, host: set[int]) -> None:
        super().__init__()
        self.tracker, self.host = tracker, host

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.cpu:
            self.tracker.skip = True
            try:
                out = args[0].detach().clone()
            finally:
                self.tracker.skip = False
            self.tracker.remember_host(out)
            return out
        if func is torch.Tensor.to and args and id(args[0]) in self.host:
            out = func(*args, **kwargs)
            target = args[1] if len(args) > 1 else kwargs.get("device")
            if out is args[0] and isinstance(target, torch.device | str):
                return out.clone()
            if out is not args[0]:
                self.host.add(id(out))  # a dtype conversion on the host: still a host tensor
            return out
        return func(*args, **kwargs)


@contextlib.contextmanager
def checkpoint_file(checkpoint: dict[str, torch.Tensor]) -> Iterator[str]:
    """A ``lit_model.pth`` path whose reads (litgpt's ``lazy_load``, ``torch.load(mmap=True)``) return ``checkpoint``
    (host tensors, memory-mapped from the file on a GPU machine) and whose writes (``torch.save``) write nothing."""
    from litgpt import utils

    lazy, load, save = utils.lazy_load, torch.load, torch.save
    utils.lazy_load = lambda _path: checkpoint
    torch.load = lambda *_args, **_kwargs: checkpoint
    torch.save = lambda *_args, **_kwargs: None  # the file write of a save (host side)
    with tempfile.NamedTemporaryFile(suffix=".pth") as file:
        try:
            yield file.name
        finally:
            utils.lazy_load, torch.load, torch.save = lazy, load, save
