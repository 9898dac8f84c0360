"""Live tensor bytes per category, op by op: the tracker every traced step and rank trace runs under.

Accounting (our own ``TorchDispatchMode``; the stock MemTracker walks every module on every op and
cannot hook frozen LoRA weights, shared/theory_notes.md pitfall 5): every storage an op returns is
counted once, by its ``nbytes``, until its Python storage object dies (a weakref callback). Storages
are charged to a category: parameters and buffers = weights, optimizer states = optimizer, new
storages by the phase that made them (forward and backward = activations, the lm_head + loss and
their backward = logits, optimizer step = optimizer). A parameter's gradient moves to the gradients
category when autograd accumulates it; the output projection's weight gradient, computed inside the
loss backward, is a gradient from the start. After every op the five category totals and the phase are
sampled, so the peak, its phase and its breakdown are exact at op granularity.

Kept apart from step.py (which drives one step around it) because every trace imports it: the HF step, the rank
traces (dist.py, rank_step.py, wrap.py, fsdp1_patches.py) and the stack drivers take their categories and phase
codes from here.
"""

from __future__ import annotations

import hashlib
import weakref
from functools import partial
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from autoconf.defaults import STATE_PARTS
from autoconf.estimators.traced.kernels import transients

CATEGORIES = STATE_PARTS
WEIGHTS, GRADIENTS, OPTIMIZER, ACTIVATIONS, LOGITS = range(5)
PHASES = ("forward", "loss", "backward", "optimizer")
FORWARD, LOSS, BACKWARD, OPT_STEP = range(4)


def _tensors(out: Any) -> list[torch.Tensor]:
    """Tensors an op returned: one, a tuple of them, or (foreach ops) lists."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return []


class LiveBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """Live storage bytes per category, sampled after every dispatched op."""

    def __init__(self, events: bool = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # TorchDispatchMode.__init__ is unannotated
        self.totals = [0] * len(CATEGORIES)
        # (block, signed bytes, stream) per allocation (+) and free (−), for the caching-allocator replay
        self.events: list[tuple[int, int, int]] | None = [] if events else None
        self.stream = 0  # the stream new storages are allocated on (0: the compute stream)
        self.serial = 0
        self.skip = False  # host-side copies (checkpoint offload) are not device memory
        # id(storage) -> weakref: storages in host memory (to_host, remember_host), never counted
        self.host: dict[int, Any] = {}
        # FSDP1's CPU offload (fsdp1_offload.py): an op that reads host tensors only runs on the host, so its new
        # storages are host memory too (the CPU optimizer's states). Off elsewhere: the TRL driver's host tensors
        # (stacks/trl_host.py) reach the device through copies that read them only.
        self.host_outputs = False
        # id(storage) -> [nbytes, category, weakref]; the weakref's callback drops the entry at free
        self.records: dict[int, list[Any]] = {}
        self.phase, self.category = FORWARD, ACTIVATIONS
        self.samples: list[tuple[int, ...]] = []
        self.ops = hashlib.sha1()
        self.num_ops = 0
        self.marks: dict[str, int] = {}
        # Shapes of the trainable output-projection weights: their gradient is computed inside the
        # loss backward (the logits category) but is a gradient, accumulated a few ops later.
        self.head_grad_shapes: set[tuple[int, ...]] = set()

    def mark(self, name: str) -> None:
        """Remember the current sample (a named landmark, e.g. a decoder layer's entry)."""
        self.sample()
        self.marks[name] = len(self.samples) - 1

    def track(self, tensor: torch.Tensor, category: int) -> None:
        if isinstance(tensor, DTensor):  # sharded parameters and states: the rank's local shard
            tensor = tensor._local_tensor
        storage = tensor.untyped_storage()
        if self.host and id(storage) in self.host:  # host memory: not the GPU's
            return
        record = self.records.get(id(storage))
        if record is None:
            nbytes = storage.nbytes()
            self.serial += 1
            self.records[id(storage)] = [nbytes, category, weakref.ref(storage, partial(self._free, id(storage))),
                                         self.serial]
            self.totals[category] += nbytes
            self._event(self.serial, nbytes)
        elif record[0] != storage.nbytes():  # resized in place (out= variants, FSDP's storage resize)
            self._event(record[3], -record[0])
            self.totals[record[1]] += storage.nbytes() - record[0]
            record[0] = storage.nbytes()
            self.serial += 1
            record[3] = self.serial
            self._event(self.serial, record[0])

    def _event(self, block: int, nbytes: int) -> None:
        if self.events is not None and nbytes:
            self.events.append((block, nbytes, self.stream))

    def to_host(self, tensor: torch.Tensor) -> None:
        """``tensor``'s storage is in host memory from now on (a move to the host frees its device bytes; a
        storage born there is only remembered): uncounted until it dies."""
        record = self.records.pop(id(tensor.untyped_storage()), None)  # its weakref goes: no free callback later
        if record is not None:
            self.totals[record[1]] -= record[0]
            self._event(record[3], -record[0])
        self.remember_host(tensor)

    def remember_host(self, tensor: torch.Tensor) -> None:
        """Remember ``tensor``'s storage (a DTensor's local shard) as host memory until it dies; a storage counted
        already stays counted (``to_host`` frees it)."""
        storage = getattr(tensor, "_local_tensor", tensor).untyped_storage()
        key = id(storage)
        if key not in self.host:
            self.host[key] = weakref.ref(storage, partial(self._host_freed, key))

    def _host_freed(self, key: int, _ref: object) -> None:
        self.host.pop(key, None)

    def is_host(self, tensor: torch.Tensor) -> bool:
        """``tensor``'s storage (a DTensor's local shard) is in host memory."""
        return id(getattr(tensor, "_local_tensor", tensor).untyped_storage()) in self.host

    def _reads_host_only(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Every tensor input of more than one element is in host memory (0-d scalars go anywhere)."""
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.dim() > 0]
        return bool(inputs) and all(self.is_host(t) for t in inputs)

    def reclassify(self, tensor: torch.Tensor, category: int) -> None:
        if isinstance(tensor, DTensor):  # a tensor-parallel gradient: the rank's local shard
            tensor = tensor._local_tensor
        record = self.records.get(id(tensor.untyped_storage()))
        if record is None:
            self.track(tensor, category)
        elif record[1] != category:
            self.totals[record[1]] -= record[0]
            self.totals[category] += record[0]
            record[1] = category

    def _free(self, key: int, _ref: object) -> None:
        nbytes, category, _, block = self.records.pop(key)
        self.totals[category] -= nbytes
        self._event(block, -nbytes)

    def _is_head_grad(self, tensor: torch.Tensor, args: tuple[Any, ...]) -> bool:
        """The lm_head weight gradient: made in the loss backward with the weight's shape, from
        activations only (the input gradient, which may have the same shape when b·s = V, reads the
        weight itself)."""
        if self.category != LOGITS or self.phase != BACKWARD or tuple(tensor.shape) not in self.head_grad_shapes:
            return False
        for arg in tree_flatten(args)[0]:
            if isinstance(arg, torch.Tensor):
                record = self.records.get(id(arg.untyped_storage()))
                if record is not None and record[1] == WEIGHTS:
                    return False
        return True

    def set_phase(self, phase: int, category: int) -> None:
        self.sample()
        self.phase, self.category = phase, category
        self.sample()

    def sample(self) -> None:
        self.samples.append((*self.totals, self.phase))

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        scratch = transients(func, args, kwargs or {})  # what the GPU kernel allocates inside the op
        for tensor in scratch:
            self.track(tensor, self.category)
        if scratch:
            self.sample()
        out = func(*args, **(kwargs or {}))
        del scratch
        tensors = _tensors(out)
        if not tensors or self.skip:  # metadata queries (prim.device on fake tensors) allocate nothing
            return out
        on_host = self.host_outputs and bool(self.host) and self._reads_host_only(args, kwargs or {})
        for tensor in tensors:
            if on_host and id(tensor.untyped_storage()) not in self.records:
                self.to_host(tensor)  # made on the host (a CPU optimizer's states, clipping of host gradients)
                continue
            self.track(tensor, GRADIENTS if self._is_head_grad(tensor, args) else self.category)
        self.ops.update(func.__name__.encode())
        self.num_ops += 1
        self.sample()
        return out
