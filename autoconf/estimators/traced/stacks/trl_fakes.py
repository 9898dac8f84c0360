"""What the SFTTrainer driver (trl_step.py) changes so that TRL, transformers and accelerate run on fake tensors and
a fake process group as on GPUs; the reasons are in trl_step.py's docstring. None of these allocates device memory,
or each allocates what the GPU code allocates."""

from __future__ import annotations

import contextlib
import importlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autoconf.estimators.traced.step import GRADIENTS
from autoconf.estimators.traced.wrap import ACTIVE


class FakeReads(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """A boolean index or ``masked_select`` is CUDA's: ``nonzero`` of the mask ((N, ndim) int64), then an integer
    index. Under fake tensors (``fake``) the mask selects every position and value reads answer 1 (booleans: true
    for an all-ones padding mask, as on the unpadded synthetic batch, else false: no NaN, no overflow);
    on a real run (the tests' reference) the values are read."""

    def __init__(self, fake: bool) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # TorchDispatchMode.__init__ is unannotated
        self.fake = fake
        # padding masks found all ones (padding_free): true on the synthetic batch
        self.all_true: dict[int, weakref.ref[torch.Tensor]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        aten = torch.ops.aten
        if func is aten._local_scalar_dense.default and self.fake:
            value = args[0]
            if value.dtype == torch.bool:
                found = self.all_true.get(id(value))
                return found is not None and found() is value
            return 1.0 if value.is_floating_point() else 1
        if func is aten.index.Tensor and any(i is not None and i.dtype == torch.bool for i in args[1]):
            indices: list[Any] = []
            for index in args[1]:
                if index is not None and index.dtype == torch.bool:
                    indices.extend(self.positions(index))
                else:
                    indices.append(index)
            return func(args[0], indices)
        if func is aten.masked_select.default:
            return aten.index.Tensor(args[0], self.positions(args[1].expand_as(args[0])))
        return func(*args, **kwargs)

    def positions(self, mask: torch.Tensor) -> list[torch.Tensor]:
        """``mask.nonzero().unbind(1)`` (on fake tensors: of an all-true mask, the synthetic batch's)."""
        if self.fake:
            return list(torch.empty((mask.numel(), mask.dim()), dtype=torch.long).unbind(1))
        return list(mask.nonzero().unbind(1))


def padding_free(reads: FakeReads) -> None:
    """transformers skips the causal mask (SDPA's ``is_causal``) when the padding mask is all ones, which it checks
    with ``fast_all`` unless the mask is a fake tensor (it counts as tracing). The synthetic batch has no padding:
    the check runs on fake tensors too, and its answer is true."""
    masking: Any = importlib.import_module("transformers.masking_utils")
    plain_tracing, plain_all = masking.is_tracing, masking.fast_all

    def fast_all(tensor: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = plain_all(tensor)
        if reads.fake:
            reads.all_true[id(out)] = weakref.ref(out)
        return out

    setattr(masking, "is_tracing", lambda tensor=None: plain_tracing())  # noqa: B010
    setattr(masking, "fast_all", fast_all)  # noqa: B010


def gpu_fused_head() -> None:
    """TRL's fused LM head as on a GPU (trl_step.py's docstring)."""
    import trl.kernels.chunked_logprob as kernels
    import trl.trainer.utils as trl_utils

    setattr(trl_utils, "_use_triton", lambda device: True)  # noqa: B010  # the compact (valid positions) route
    for name in ("_forward_tile", "_backward_tile"):
        setattr(kernels, name, lambda *args, **kwargs: None)
    setattr(kernels, "_addmm_fp32", lambda acc, a, b: None)  # noqa: B010


def accelerate_on_fake_gpus() -> None:
    """accelerate's state runs MULTI_GPU on the fake process group, on the ``cpu`` device; DDP as dist.py builds it."""
    import accelerate.state
    from accelerate.utils import DistributedType
    from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook
    from torch.nn.parallel import distributed as ddp_module

    state = accelerate.state.PartialState
    setattr(state, "_prepare_backend", lambda self, *a, **k: ("fake", DistributedType.MULTI_GPU))  # noqa: B010

    def set_device(self: Any) -> None:
        self.device = torch.device("cpu")

    setattr(state, "set_device", set_device)  # noqa: B010
    setattr(ddp_module, "_verify_param_shape_across_processes", lambda *a, **k: None)  # noqa: B010
    plain = ddp_module.DistributedDataParallel.__init__

    def ddp_init(self: Any, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        kwargs.update(device_ids=None, output_device=None, init_sync=False)
        with ACTIVE[-1].charged(GRADIENTS) if ACTIVE else contextlib.nullcontext():  # the reducer's buckets
            plain(self, module, **kwargs)
        self.register_comm_hook(None, noop_hook)
        # as under no_sync(): the reducer's in-place bucket all-reduce and its bucket rebuild before step 2's
        # forward read data; its buckets stay allocated as built, so the bytes do not change (dist.py)
        self.require_backward_grad_sync = False

    setattr(ddp_module.DistributedDataParallel, "__init__", ddp_init)  # noqa: B010
    _addresses()


@contextlib.contextmanager
def distinct_addresses() -> Iterator[None]:
    """A fake tensor's ``data_ptr()`` (and its storage's) is 0: inside, it is its storage's identity, distinct as on
    a GPU. accelerate's FSDP2 prepare maps the optimizer's parameters to the sharded ones by address, and
    transformers' save finds tied weights by storage address."""
    tensor_ptr, storage_ptr = torch.Tensor.data_ptr, torch.UntypedStorage.data_ptr

    def storage_address(self: torch.UntypedStorage) -> int:
        return storage_ptr(self) or id(self)

    def tensor_address(self: torch.Tensor) -> int:
        found = tensor_ptr(self)
        return found or id(self.untyped_storage()) + int(self.storage_offset()) * self.element_size()

    torch.Tensor.data_ptr = tensor_address  # type: ignore[method-assign,assignment]
    torch.UntypedStorage.data_ptr = storage_address  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.Tensor.data_ptr = tensor_ptr  # type: ignore[method-assign]
        torch.UntypedStorage.data_ptr = storage_ptr  # type: ignore[method-assign]


def _addresses() -> None:
    """accelerate's FSDP2 prepare with distinct addresses (``distinct_addresses``)."""
    from accelerate import Accelerator

    prepare = Accelerator._prepare_fsdp2

    def prepare_fsdp2(self: Any, *args: Any) -> Any:
        with distinct_addresses():
            return prepare(self, *args)

    setattr(Accelerator, "_prepare_fsdp2", prepare_fsdp2)  # noqa: B010


def default_mesh(world: int) -> None:
    """FSDP2's default mesh (``fully_shard`` without one, as accelerate calls it), built before fake mode: its
    coordinates are computed from tensor values."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp._fully_shard import _fsdp_init, _fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for module in (_fsdp_init, _fully_shard):
        setattr(module, "_init_default_mesh", lambda *args, **kwargs: mesh)  # noqa: B010
