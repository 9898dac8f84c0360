"""Count the live tensor bytes of one training step, op by op, on fake (or real) CPU tensors.

The trace worker: ``python -m autoconf.estimators.traced.step SPECS.json OUT.npz`` builds each model
(autoconf/estimators/traced/model.py), creates the optimizer states with one untracked ``step()`` (steady state,
as from step 2 of real training), then runs one tracked step per requested (batch, sequence) shape.

Accounting (our own ``TorchDispatchMode``; the stock MemTracker walks every module on every op and
cannot hook frozen LoRA weights, shared/theory_notes.md pitfall 5): every storage an op returns is
counted once, by its ``nbytes``, until its Python storage object dies (a weakref callback). Storages
are charged to a category: parameters and buffers = weights, optimizer states = optimizer, new
storages by the phase that made them (forward and backward = activations, the lm_head + loss and
their backward = logits, optimizer step = optimizer). A parameter's gradient moves to the gradients
category when autograd accumulates it; the output projection's weight gradient, computed inside the
loss backward, is a gradient from the start. After every op the five category totals and the phase are
sampled, so the peak, its phase and its breakdown are exact at op granularity.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import resource
import sys
import time
import weakref
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers.masking_utils
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from autoconf.defaults import STATE_PARTS
from autoconf.estimators.traced import cuda_dropout
from autoconf.estimators.traced.hf_config import DTYPES
from autoconf.estimators.traced.kernels import kernel_loss, transients
from autoconf.estimators.traced.model import build_model, build_optimizer

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
        for tensor in tensors:
            self.track(tensor, GRADIENTS if self._is_head_grad(tensor, args) else self.category)
        self.ops.update(func.__name__.encode())
        self.num_ops += 1
        self.sample()
        return out


class StepHooks:
    """Model hooks that move the active tracker between phases and categories."""

    def __init__(self, model: torch.nn.Module, num_layers: int) -> None:
        self.tracker: LiveBytes | None = None
        self.manual_loss = False  # a loss kernel switches to the loss phase itself (run_step)
        # nn.Module.__getattr__ is typed Tensor | Module; HF models define get_output_embeddings()
        head: torch.nn.Module = model.get_output_embeddings()  # type: ignore[operator]
        self.head_grad_shapes = {tuple(p.shape) for p in head.parameters() if p.requires_grad}
        head.register_forward_pre_hook(self._enter_loss)
        for param in model.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self._grad_ready)  # type: ignore[no-untyped-call]  # torch: unannotated
        # Entries of two consecutive decoder layers (the 2nd and 3rd when there are 3+): their
        # difference is exactly what one layer keeps for backward.
        layers = next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == num_layers)
        first = 1 if num_layers >= 3 else 0
        for name, index in (("layer_a", first), ("layer_b", first + 1)):
            layers[index].register_forward_pre_hook(partial(self._layer_entry, name))

    def _layer_entry(self, name: str, _module: torch.nn.Module, _args: tuple[Any, ...]) -> None:
        if self.tracker is not None and self.tracker.phase == FORWARD:  # not the recomputation
            self.tracker.mark(name)

    def _enter_loss(self, _module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if self.tracker is not None and not self.manual_loss:
            self.enter_loss(args[0])

    def enter_loss(self, hidden: torch.Tensor) -> None:
        """The final hidden states go into the head and loss: the loss phase, until their gradient exists."""
        if self.tracker is None:
            return
        self.tracker.set_phase(LOSS, LOGITS)
        if hidden.requires_grad:  # its gradient = the loss and lm_head backward are done
            hidden.register_hook(self._leave_loss_backward)  # type: ignore[no-untyped-call]  # torch: unannotated

    def _leave_loss_backward(self, grad: torch.Tensor) -> None:
        if self.tracker is not None:
            self.tracker.set_phase(BACKWARD, ACTIVATIONS)

    def _grad_ready(self, param: torch.Tensor) -> None:
        if self.tracker is not None and param.grad is not None:
            self.tracker.reclassify(param.grad, GRADIENTS)


def _quant_tensors(state: Any) -> list[torch.Tensor]:
    """The tensors of a bitsandbytes QuantState (absmax, code; the nested state's with double quantisation)."""
    found = [getattr(state, name, None) for name in ("absmax", "code", "offset")]
    nested = getattr(state, "state2", None)
    return [t for t in found if isinstance(t, torch.Tensor)] + (_quant_tensors(nested) if nested is not None else [])


def _static_tensors(model: torch.nn.Module,
                    opt: torch.optim.Optimizer) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    weights = list(model.parameters()) + list(model.buffers())
    for module in model.modules():  # bitsandbytes 4-bit weights keep absmax (and code) in their quant state
        state = getattr(getattr(module, "weight", None), "quant_state", None)
        if state is not None:
            weights += [t for t in _quant_tensors(state)]
    states = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return weights, states


def run_step(model: torch.nn.Module, opt: torch.optim.Optimizer, hooks: StepHooks,
             shape: tuple[int, int], spec: dict[str, Any], tracker: LiveBytes | None) -> None:
    """One training step: forward with the model's own loss, backward, optimizer step, zero_grad."""
    batch, seq = shape
    ids = torch.randint(0, spec["arch"]["vocab_size"], (batch, seq))
    labels = ids.clone()
    autocast_dtype = DTYPES[spec["dtype"]][1]
    amp = torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
    with tracker if tracker is not None else contextlib.nullcontext():
        if tracker is not None:
            tracker.head_grad_shapes = hooks.head_grad_shapes
            weights, states = _static_tensors(model, opt)
            for tensor in weights:
                tracker.track(tensor, WEIGHTS)
            for tensor in states:
                tracker.track(tensor, OPTIMIZER)
            for tensor in (ids, labels):
                tracker.track(tensor, ACTIVATIONS)
            tracker.sample()
        hooks.tracker = tracker
        kernel = spec.get("loss_kernel", "hf")
        hooks.manual_loss = kernel != "hf"
        with amp:
            held = None
            if kernel == "hf":
                out = model(input_ids=ids, labels=labels)
                loss = out.loss
                held = kept_output(out, spec)  # the Trainer keeps only the loss (pitfall 6)
                del out
            else:
                loss = kernel_loss(model, ids, kernel, hooks.enter_loss)
        if tracker is not None:
            tracker.set_phase(BACKWARD, LOGITS)
        loss.backward()
        del loss
        if tracker is not None:
            tracker.set_phase(OPT_STEP, OPTIMIZER)
        opt.step()
        del held
        if tracker is not None:
            tracker.sample()
        hooks.tracker = None
    opt.zero_grad(set_to_none=True)
    del ids, labels


def kept_output(out: Any, spec: dict[str, Any]) -> Any:  # noqa: ANN401 - a transformers ModelOutput
    """What the training loop keeps of the model's output once it has the loss: nothing for the HF Trainer (its
    logits must not live through backward), the whole output for a stack whose loop holds it until after the
    optimizer step (spec ``keep_output``). Before that, accelerate's ``convert_outputs_to_fp32`` (spec
    ``fp32_outputs``: the HF Trainer under bf16 mixed precision, where the loss keeps bf16 logits: kernels.py
    ``release_loss`` "bf16-4.x") makes an fp32 copy of the returned logits while the half-precision ones are alive,
    which the Trainer then drops."""
    if spec.get("fp32_outputs"):
        copy = out.logits.float()
        del copy
    return out if spec.get("keep_output") else None


def warm_up(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    """Create the optimizer states as the first real step does: zero gradients, one ``step()``.

    The states (and their dtypes) come from the optimizer's own first step, without the cost of a
    forward and backward; the traced step that follows is then a steady-state step (>= 2).
    """
    for param in model.parameters():
        if param.requires_grad:
            param.grad = torch.zeros_like(param)
    opt.step()
    opt.zero_grad(set_to_none=True)


def _no_packed_sequences(position_ids: torch.Tensor) -> None:
    """Our synthetic batches are never packed; fake position ids cannot be read (theory_notes pitfall 4)."""
    return None


def trace(spec: dict[str, Any]) -> dict[str, Any]:
    """Optimizer warm-up, then one tracked step per shape; returns samples and facts per shape."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    transformers.masking_utils.find_packed_sequence_indices = _no_packed_sequences
    cuda_dropout.install()
    torch.manual_seed(0)
    fake_mode = None if spec.get("real") else FakeTensorMode(allow_non_fake_inputs=True)
    start = time.perf_counter()
    model = build_model(spec, fake_mode)
    opt = build_optimizer(model, spec)
    hooks = StepHooks(model, spec["arch"]["num_layers"])
    built = time.perf_counter()
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        if spec.get("warmup_shape"):  # a whole step, for comparison with the optimizer-only warm-up
            run_step(model, opt, hooks, tuple(spec["warmup_shape"]), spec, None)
        else:
            warm_up(model, opt)
        results = []
        for shape in spec["shapes"]:
            tracker = LiveBytes()
            t0 = time.perf_counter()
            run_step(model, opt, hooks, tuple(shape), spec, tracker)
            results.append({
                "shape": list(shape), "samples": np.asarray(tracker.samples, dtype=np.int64),
                "marks": tracker.marks, "ops_digest": tracker.ops.hexdigest(), "num_ops": tracker.num_ops,
                "step_seconds": time.perf_counter() - t0,
            })
    params = {id(p): p for p in model.parameters()}.values()
    return {
        "results": results,
        "total_params": sum(p.numel() for p in params),
        "trainable_params": sum(p.numel() for p in params if p.requires_grad),
        "build_seconds": built - start,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }


def main(argv: list[str]) -> int:
    """Worker entry point: SPEC.json holds a list of specs (one start-up for all of them); writes
    samples_<spec>_<shape> arrays to OUT.npz and one JSON line with a summary per spec on stdout."""
    specs = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    summaries, arrays = [], {}
    for j, spec in enumerate(specs):
        out = trace(spec)
        for i, result in enumerate(out["results"]):
            arrays[f"samples_{j}_{i}"] = result.pop("samples")
        summaries.append(out)
        gc.collect()
    np.savez_compressed(argv[1], **arrays)
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"specs": summaries, "max_rss_bytes": max_rss}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
