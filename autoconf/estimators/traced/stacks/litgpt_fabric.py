"""Lightning Fabric as LitGPT's finetune scripts build it, on the CPU accelerator and (several devices) a fake
process group; used by litgpt_step.py (imports torch and lightning).

One device: ``L.Fabric(devices=1, strategy="auto", precision=...)``. Several (``full.py``): ``FSDPStrategy`` with
``auto_wrap_policy={Block}``, ``activation_checkpointing_policy={Block}``, ``state_dict_type="full"``,
``limit_all_gathers=True``, ``cpu_offload=False`` (torch's FSDP1, ``use_orig_params`` Fabric's default True) on rank
``spec['rank']`` of a fake world, which the process joins as a launcher-started rank would (``LOCAL_RANK`` set: Fabric
starts no processes; the process group exists: Fabric does not create one). Where the CPU stands in for the GPU:

* Fabric refuses FSDP on the CPU accelerator (``connector._check_strategy_and_fallback``: ``type(strategy) is
  FSDPStrategy``), a guard only: the strategy is a subclass with nothing changed.
* Fabric passes ``device_id=None`` on the CPU (``FSDPStrategy.setup_module``) and FSDP1 then cannot materialise the
  meta-device model without an accelerator: the CPU is passed as the device, as the GPU is on a GPU.
* The model is built on the meta device (``init_module(empty_init=True)``) outside FakeTensorMode: a fake meta
  parameter cannot be swapped for its materialised self (``to_empty``); FSDP1 materialises and shards each unit
  inside it, traced. FSDP1's storage resizes are told to the tracker (traced/fsdp1.py ``patch_fsdp1``).
* ``broadcast_object_list`` (Fabric broadcasts the checkpoint path from rank 0) pickles into a byte tensor that the
  fake process group keeps alive; on a GPU it is freed at once: not counted.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import torch

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


def _uncounted_broadcasts() -> None:
    """Object broadcasts outside the tracker (see the module docstring)."""
    import torch.distributed as dist

    from autoconf.estimators.traced.wrap import ACTIVE

    broadcast = dist.broadcast_object_list

    @functools.wraps(broadcast)
    def uncounted(*args: Any, **kwargs: Any) -> Any:
        if not ACTIVE:
            return broadcast(*args, **kwargs)
        ACTIVE[-1].skip = True
        try:
            return broadcast(*args, **kwargs)
        finally:
            ACTIVE[-1].skip = False

    dist.broadcast_object_list = uncounted


def fabric_for(spec: dict[str, Any]) -> Any:
    """The script's Fabric for ``spec`` (one device, or rank ``spec['rank']`` of full.py's FSDP world)."""
    import lightning as L

    world = int(spec["world"])
    if world == 1:
        return L.Fabric(accelerator="cpu", devices=1, strategy="auto", precision=PRECISION[spec["dtype"]])
    from lightning.fabric.strategies import FSDPStrategy
    from litgpt.model import Block

    from autoconf.estimators.traced.fsdp1 import patch_fsdp1
    from autoconf.estimators.traced.wrap import join_world

    class CPUFSDPStrategy(FSDPStrategy):  # type: ignore[misc]  # lightning is untyped here
        """Fabric's FSDPStrategy, unchanged (a subclass passes the connector's GPU-only guard)."""

    rank = int(spec.get("rank", 0))
    join_world(world, rank)
    os.environ.update(LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE=str(world), RANK=str(rank))
    _cpu_is_the_device()
    _uncounted_broadcasts()
    patch_fsdp1()
    strategy = CPUFSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy={Block},
                               state_dict_type="full", limit_all_gathers=True, cpu_offload=False)
    fabric = L.Fabric(accelerator="cpu", devices=world, num_nodes=1, strategy=strategy,
                      precision=PRECISION[spec["dtype"]])
    fabric.launch()
    return fabric


@contextlib.contextmanager
def checkpoint_file(checkpoint: dict[str, torch.Tensor]) -> Iterator[str]:
    """A ``lit_model.pth`` path whose reads (litgpt's ``lazy_load``, Fabric's ``torch.load(mmap=True)``) return
    ``checkpoint``: host tensors, memory-mapped from the file on a GPU machine."""
    from litgpt import utils

    lazy, load = utils.lazy_load, torch.load
    utils.lazy_load = lambda _path: checkpoint
    torch.load = lambda *_args, **_kwargs: checkpoint
    with tempfile.NamedTemporaryFile(suffix=".pth") as file:
        try:
            yield file.name
        finally:
            utils.lazy_load, torch.load = lazy, load
