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
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

from autoconf.estimators.traced.live_bytes import GRADIENTS
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
        # forward read data; its buckets stay allocated as built, so the bytes do not change (rank_step.py)
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


def gathered_four_bit() -> None:
    """bitsandbytes' ``Linear4bit.forward`` under FSDP2 (bitsandbytes/nn/modules.py
    ``fix_4bit_weight_quant_state_from_module``, called first in ``forward``): FSDP2's all-gathered weight is a plain
    parameter that lost its quant state, so bitsandbytes wraps it, ``Params4bit(module.weight,
    quant_storage=module.quant_storage, bnb_quantized=True)`` (``Params4bit.__new__``:
    ``torch.Tensor._make_subclass(cls, data)``, a new parameter over the same storage, nothing allocated), and gives
    it the module's ``quant_state``. ``_make_subclass`` refuses a fake tensor (its object is a FakeTensor already):
    here the gathered parameter itself carries what the Params4bit would (the module's quant state and storage dtype),
    as qlora.py's packed weights do; every other case runs bitsandbytes' own function."""
    from bitsandbytes.nn import modules

    plain = modules.fix_4bit_weight_quant_state_from_module

    def fix(module: Any) -> None:
        weight = module.weight
        if not isinstance(weight, FakeTensor) or getattr(weight, "quant_state", None) is not None:
            plain(module)
            return
        assert weight.shape[1] == 1  # as bitsandbytes asserts: the packed (n, 1) column
        for key, value in {"quant_state": module.quant_state, "quant_storage": module.quant_storage,
                           "bnb_quantized": True}.items():
            setattr(weight, key, value)
        weight.__class__ = Params4bit  # peft's DoRA dequantises a weight by this class name (four_bit_class)

    setattr(modules, "fix_4bit_weight_quant_state_from_module", fix)  # noqa: B010


def four_bit_storage(spec: dict[str, Any]) -> str | None:
    """``bnb_4bit_quant_storage`` of the job: under FSDP the model's own dtype, as the FSDP-QLoRA recipe sets it
    (peft's and accelerate's FSDP-QLoRA guides: ``bnb_4bit_quant_storage=torch_dtype``), so that the packed weights
    are floating like the rest of their unit and FSDP2 shards them (accelerate/utils/fsdp_utils.py
    ``fsdp2_prepare_model``: a frozen Params4bit that is not floating is put in ``ignored_params``, whole on every
    rank); otherwise bitsandbytes' default, uint8."""
    if not str(spec["strategy"]).startswith("fsdp"):
        return None
    from autoconf.estimators.traced.hf_config import DTYPES

    return str(DTYPES[spec["dtype"]][0]).removeprefix("torch.")


def four_bit_class(model: torch.nn.Module) -> None:
    """qlora.py keeps each packed 4-bit weight as a plain (fake) parameter carrying its quant state, since a
    Params4bit cannot wrap a fake tensor. The stacks tell a 4-bit weight by its class name (accelerate/utils/
    fsdp_utils.py ``fsdp2_prepare_model``: ``param.__class__.__name__ == "Params4bit"`` decides the ignored
    parameters, skips the fp32 upcast of trainable parameters under mixed precision and the move to meta of
    ``cpu_ram_efficient_loading``; peft/utils/integrations.py ``dequantize_module_weight``, which DoRA calls,
    dequantises only a ``Params4bit``): each packed weight's class is renamed so, with bitsandbytes' read-only
    properties that show its quant state's tensors (``absmax``, ``code``, ... in nn/modules.py, which FSDP's state
    dict traversal reads), nothing else changes."""
    import bitsandbytes as bnb

    for name, value in vars(bnb.nn.Params4bit).items():  # type: ignore[attr-defined]  # re-exported
        if isinstance(value, property):
            setattr(Params4bit, name, value)
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit) and isinstance(module.weight, FakeTensor):  # type: ignore[attr-defined]
            module.weight.__class__ = Params4bit


class Params4bit(FakeTensor):
    """A fake tensor named as bitsandbytes' 4-bit parameter class (``four_bit_class``)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Params4bit:
        """bitsandbytes/nn/modules.py ``Params4bit.__deepcopy__`` (peft's DoRA deep-copies the 4-bit layer it
        dequantises): a copy of the packed data and of the quant state, the other settings as they are."""
        import copy

        copied: Params4bit = self.detach().clone()  # type: ignore[assignment]  # a FakeTensor, renamed next
        copied.__class__ = Params4bit
        for key, value in vars(self).items():
            setattr(copied, key, copy.deepcopy(value, memo) if key == "quant_state" else value)
        memo[id(self)] = copied
        return copied
