"""TRL's ``SFTTrainer`` (trl 1.16, transformers 5.24, accelerate 1.15, peft 0.21) on fake tensors, one rank of N.

The worker: ``python -m autoconf.estimators.traced.stacks.trl_step SPEC.json OUT.npz`` prints one JSON summary
(dist.py's ``summarise``) and writes the samples and allocation events. What runs is the stacks' own code:
``SFTTrainer(model, SFTConfig(...), peft_config=LoraConfig(...))`` over a pre-tokenised dataset of full-length
samples, then ``trainer.train()`` for two steps: TRL's dataset preparation and collator, peft's wrapping (LoRA,
DoRA: ``use_dora``), the Trainer's fused AdamW (``optim="adamw_torch_fused"``), accelerate's ``prepare`` (DDP,
FSDP1, FSDP2 with ``cpu_ram_efficient_loading`` on or off, from ``fsdp_config``), TRL's ``compute_loss`` through
its fused LM head (``add_fused_lm_head``), ``accelerator.backward``, the Trainer's ``_clip_grad_norm`` and
optimizer step.

Where fake tensors or a CPU machine cannot run that code unchanged (none of these allocates device memory, or each
allocates what the GPU code allocates):

* **The GPU route of the fused LM head.** ``_fused_forward`` (trl/trainer/utils.py, ``compact =
  _use_triton(device)``) scores only the valid positions on a GPU (``hidden_states[mask]``) and folds each
  ``[4096, 32768]`` logits tile in a Triton kernel (trl/kernels/chunked_logprob.py ``_forward_kernel``,
  ``_backward_kernel``) that allocates nothing: it reads the tile and writes the per-token statistics (forward) or
  the tile itself (backward) in place; ``_addmm_fp32`` accumulates with ``torch.addmm(..., out_dtype=float32,
  out=acc)`` on CUDA, no temporary. Here ``compact`` is the GPU's, the tile folds are in-place no-ops and
  ``_addmm_fp32`` allocates nothing (the CPU fallbacks would allocate several fp32 tiles the GPU never does).
* **Boolean masks.** The synthetic batch has no padding and no masked label, so every position is valid: a
  boolean index or ``masked_select`` over a fake mask returns all positions, through the same (N, ndim) int64
  index tensor CUDA's ``index`` builds with ``nonzero``.
* **Scalar reads.** Logging (loss, grad norm, token counts, NaN checks) reads values: on fake tensors they answer
  1 (0 for a boolean).
* **Devices.** accelerate shards only on accelerator devices: its state is told it runs ``MULTI_GPU`` on the
  fake process group, with ``cpu`` as the device. ``Module.to`` to the device a module is on only changes dtypes
  (FakeTensorMode keeps weak references to fake parameters, so torch refuses to swap them). DDP is built without
  device ids, without its initial broadcast, with torch's no-op communication hook, its steps as under ``no_sync()``
  (dist.py's reasons).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from autoconf.estimators.traced.dist import CLIP, LOAD, run_one, trace_out
from autoconf.estimators.traced.step import (
    ACTIVATIONS,
    BACKWARD,
    FORWARD,
    GRADIENTS,
    LOGITS,
    OPT_STEP,
    OPTIMIZER,
    WEIGHTS,
)
from autoconf.estimators.traced.wrap import ACTIVE, RankBytes, patch_fsdp

MODEL_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "amp-bf16": "fp32", "amp-fp16": "fp32"}


class FakeReads(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """A boolean index or ``masked_select`` is CUDA's: ``nonzero`` of the mask ((N, ndim) int64), then an integer
    index. Under fake tensors (``fake``) the mask selects every position and value reads answer 1 (booleans: true
    for an all-ones padding mask, as on the unpadded synthetic batch, else false: no NaN, no overflow);
    on a real run (the tests' reference) the values are read."""

    def __init__(self, fake: bool) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # TorchDispatchMode.__init__ is unannotated
        self.fake = fake
        # padding masks found all ones (_padding_free): true on the synthetic batch
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


def _padding_free(reads: FakeReads) -> None:
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


def _gpu_fused_head() -> None:
    """TRL's fused LM head as on a GPU (see the module docstring)."""
    import trl.kernels.chunked_logprob as kernels
    import trl.trainer.utils as trl_utils

    setattr(trl_utils, "_use_triton", lambda device: True)  # noqa: B010  # the compact (valid positions) route
    for name in ("_forward_tile", "_backward_tile"):
        setattr(kernels, name, lambda *args, **kwargs: None)
    setattr(kernels, "_addmm_fp32", lambda acc, a, b: None)  # noqa: B010


class HostBytes(RankBytes):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """RankBytes that knows which storages are on the host (the loaded checkpoint in CPU RAM, as ``from_pretrained``
    leaves it): never counted, nor their views; a move to the device is a counted copy (``to_device``)."""

    def __init__(self) -> None:
        super().__init__()
        self.host: dict[int, Any] = {}

    def mark_host(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = id(storage)
        if key not in self.records:
            self.host[key] = weakref.ref(storage, functools.partial(self._left_host, key))

    def _left_host(self, key: int, _ref: object) -> None:
        self.host.pop(key, None)

    def on_host(self, tensor: torch.Tensor) -> bool:
        return not isinstance(tensor, DTensor) and id(tensor.untyped_storage()) in self.host

    def track(self, tensor: torch.Tensor, category: int) -> None:
        if tensor.device.type != "meta" and not self.on_host(tensor):  # meta: no storage anywhere
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


def _device_moves(tracker: HostBytes) -> None:
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


def _accelerate_on_fake_gpus() -> None:
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


def _default_mesh(world: int) -> None:
    """FSDP2's default mesh (``fully_shard`` without one, as accelerate calls it), built before fake mode: its
    coordinates are computed from tensor values."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp._fully_shard import _fsdp_init, _fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for module in (_fsdp_init, _fully_shard):
        setattr(module, "_init_default_mesh", lambda *args, **kwargs: mesh)  # noqa: B010


def _patch_fsdp1(tracker: HostBytes) -> None:
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
def _host_then_quantised(fake: Any, tracker: HostBytes) -> Iterator[None]:
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


def _tokenizer() -> Any:
    """A word-level tokenizer (the dataset is pre-tokenised; TRL wants a pad and an eos token)."""
    import transformers
    from tokenizers import Tokenizer, models

    words = Tokenizer(models.WordLevel({"<pad>": 0, "<eos>": 1, "<unk>": 2}, unk_token="<unk>"))
    return transformers.PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers: unannotated
        tokenizer_object=words, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def sft_config(spec: dict[str, Any], output_dir: str) -> Any:
    """The job's SFTConfig: two steps at the spec's micro-batch, no logging target, no saving."""
    trl: Any = importlib.import_module("trl")
    batch, seq = spec["shape"]
    strategy = spec["strategy"]
    fsdp: dict[str, Any] = {}
    if strategy.startswith("fsdp"):
        fsdp = {"fsdp": "full_shard auto_wrap" if strategy != "fsdp-shard-grad-op" else "shard_grad_op auto_wrap",
                "fsdp_config": {"version": int(spec.get("fsdp_version", 2)),
                                "cpu_ram_efficient_loading": bool(spec.get("cpu_ram_efficient_loading", False)),
                                **spec.get("fsdp_extra", {})}}
    return trl.SFTConfig(
        output_dir=output_dir, max_steps=2, per_device_train_batch_size=batch, max_length=seq,
        bf16=spec["dtype"] == "amp-bf16", fp16=spec["dtype"] == "amp-fp16",
        gradient_checkpointing=bool(spec["gradient_checkpointing"]),
        gradient_checkpointing_kwargs={"use_reentrant": False}, optim=OPTIM[spec["optimizer_impl"]],
        learning_rate=1e-5, logging_steps=1, save_strategy="steps", save_steps=2, report_to=[], dataloader_num_workers=0,
        disable_tqdm=True, **fsdp)


OPTIM = {"fused": "adamw_torch_fused", "foreach": "adamw_torch", "for-loop": "adamw_torch"}


def peft_config(spec: dict[str, Any]) -> Any:
    """peft's LoraConfig of the job (DoRA: ``use_dora``), or None for full fine-tuning."""
    if spec["method"] == "full":
        return None
    import peft

    targets = list(spec["lora_target_modules"])
    return peft.LoraConfig(r=spec["lora_r"], lora_alpha=spec["lora_alpha"], lora_dropout=spec["lora_dropout"],
                           target_modules="all-linear" if "all-linear" in targets else targets,
                           use_dora=bool(spec.get("dora")), task_type="CAUSAL_LM")


class _Steps:
    """Trainer callbacks and wrappers that move the tracker through the steps and phases."""

    def __init__(self, tracker: RankBytes) -> None:
        self.tracker, self.step = tracker, 0

    def callback(self) -> Any:
        import transformers

        steps = self

        class Phases(transformers.TrainerCallback):
            def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
                steps.step += 1
                steps.tracker.enter(steps.step, FORWARD, ACTIVATIONS)

            def on_pre_optimizer_step(self, *args: Any, **kwargs: Any) -> None:
                steps.tracker.set_phase(OPT_STEP, OPTIMIZER)

            def on_step_end(self, *args: Any, **kwargs: Any) -> None:
                steps.tracker.sample()

        return Phases()

    def wrap_save(self, trainer: Any) -> None:
        """The Trainer's checkpoint save after step 2 (model, optimizer, scheduler, RNG states): its gathers on the
        device are counted, its host copies and file writes are not (they cannot read fake data)."""
        from autoconf.estimators.traced.dist import SAVE, HostCopies

        files: Any = importlib.import_module("safetensors.torch")

        save = trainer._save_checkpoint

        def save_checkpoint(*args: Any, **kwargs: Any) -> None:
            self.tracker.enter(3, SAVE, WEIGHTS)
            writes = (torch.save, files.serialize_file, files._flatten_as_ptr)
            torch.save = lambda *a, **k: None
            files.serialize_file = lambda *a, **k: None
            files._flatten_as_ptr = lambda *a, **k: {}
            try:
                with HostCopies(self.tracker), distinct_addresses():
                    save(*args, **kwargs)
            finally:
                torch.save, files.serialize_file, files._flatten_as_ptr = writes
            self.tracker.sample()

        trainer._save_checkpoint = save_checkpoint

    def wrap(self, accelerator: Any) -> None:
        backward, clip = accelerator.backward, accelerator.clip_grad_norm_

        def on_backward(loss: torch.Tensor, **kwargs: Any) -> None:
            self.tracker.set_phase(BACKWARD, LOGITS)
            backward(loss, **kwargs)

        def on_clip(*args: Any, **kwargs: Any) -> Any:
            self.tracker.set_phase(CLIP, OPTIMIZER)
            return clip(*args, **kwargs)

        accelerator.backward, accelerator.clip_grad_norm_ = on_backward, on_clip


def trace(spec: dict[str, Any]) -> dict[str, Any]:
    """Load and two SFTTrainer steps of rank ``spec['rank']`` of ``spec['world']``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    rank, world = int(spec.get("rank", 0)), int(spec["world"])
    if world > 1:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        _accelerate_on_fake_gpus()
        _default_mesh(world)
    import datasets
    import transformers

    from autoconf.estimators.traced.model import _init_real, meta_model
    from autoconf.estimators.traced.stacks.hooks import Phases
    from autoconf.estimators.traced.step import _no_packed_sequences

    transformers.masking_utils.find_packed_sequence_indices = _no_packed_sequences
    reads = FakeReads(fake=not spec.get("real"))
    _padding_free(reads)
    _gpu_fused_head()
    torch.manual_seed(0)
    start = time.perf_counter()
    batch, seq = spec["shape"]
    vocab = int(spec["arch"]["vocab_size"])
    rows = [[3 + (i * 7 + j) % (vocab - 3) for j in range(seq)] for i in range(batch * world * 2)]
    dataset = datasets.Dataset.from_dict({"input_ids": rows})
    model = meta_model({**spec, "method": "full", "dtype": MODEL_DTYPE[spec["dtype"]]})
    tracker = HostBytes()
    _device_moves(tracker)
    _patch_fsdp1(tracker)
    patch_fsdp()  # FSDP2's storage resizes, all-gathers and reduce-scatters reach the tracker (wrap.py)
    ACTIVE[:] = [tracker]
    steps = _Steps(tracker)
    fake = contextlib.nullcontext() if spec.get("real") else FakeTensorMode(allow_non_fake_inputs=True)
    clock: dict[str, float] = {}
    trl: Any = importlib.import_module("trl")
    trainer: Any = None
    if spec["method"] == "qlora":
        from autoconf.estimators.traced.qlora import build_qlora

        model = build_qlora({**spec, "kbit_upcast": False}, _host_then_quantised(fake, tracker), meta_model,
                            lambda m, s: m, _init_real)
        with fake, tracker:  # from_pretrained's device_map: every tensor it does not quantise lands on the GPU
            for tensor in [*model.parameters(), *model.buffers()]:
                tracker.mark_host(tensor)
            for tensor in [*model.parameters(), *model.buffers()]:
                moved = tracker.to_device(tensor.data)
                if moved is not tensor.data:
                    tensor.data = moved
    with tempfile.TemporaryDirectory(prefix="autoconf-trl-") as out, fake, tracker, reads, HostToDevice(tracker):
        if spec["method"] != "qlora":  # (QLoRA's model is built above, quantised on the device)
            tracker.enter(0, LOAD, WEIGHTS)
            tracker.skip = True  # the checkpoint as from_pretrained loads it: in host memory
            model.to_empty(device="cpu")
            if spec.get("real"):
                _init_real(model)
            model.tie_weights()  # type: ignore[operator]
            tracker.skip = False
            for tensor in [*model.parameters(), *model.buffers()]:
                tracker.mark_host(tensor)
        trainer = trl.SFTTrainer(model=model, args=sft_config(spec, out), train_dataset=dataset,
                                 processing_class=_tokenizer(), peft_config=peft_config(spec),
                                 callbacks=[steps.callback()])
        steps.wrap(trainer.accelerator)
        steps.wrap_save(trainer)
        base: Any = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
        norm = getattr(getattr(base, base.base_model_prefix), "norm")  # noqa: B009  # the decoder's final norm
        phases = Phases(trainer.model, norm, base.get_output_embeddings(), tracker)
        tracker.head_grad_shapes = phases.head_grad_shapes
        clock["build"] = time.perf_counter() - start
        trainer.train()
        clock["steps"] = time.perf_counter() - start - clock["build"]
    ACTIVE.clear()
    params = {id(p): p for p in trainer.model.parameters()}.values()
    return trace_out(tracker, start, sum(p.numel() for p in params), clock,
                     {"trl": trl.__version__, "transformers": transformers.__version__})


def main(argv: list[str]) -> int:
    """``SPEC.json OUT.npz``: one JSON summary line on stdout; samples and events to OUT.npz."""
    print(json.dumps(run_one(argv[0], argv[1], trace)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
