"""Count the live tensor bytes of one training step, op by op, on fake (or real) CPU tensors.

The trace worker: ``python -m autoconf.estimators.traced.step SPECS.json OUT.npz`` builds each model
(autoconf/estimators/traced/model.py), creates the optimizer states with one untracked ``step()`` (steady state,
as from step 2 of real training), then runs one tracked step per requested (batch, sequence) shape.

The tracker that counts the bytes (categories, phases, samples) is live_bytes.py's ``LiveBytes``; this module
drives the step around it: the hooks that move it between phases, the step itself and the worker.
"""

from __future__ import annotations

import contextlib
import gc
import json
import resource
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers.masking_utils

from autoconf.estimators.traced import cuda_dropout
from autoconf.estimators.traced.hf_config import DTYPES
from autoconf.estimators.traced.kernels import kernel_loss
from autoconf.estimators.traced.live_bytes import (
    ACTIVATIONS,
    BACKWARD,
    FORWARD,
    GRADIENTS,
    LOGITS,
    LOSS,
    OPT_STEP,
    OPTIMIZER,
    WEIGHTS,
    LiveBytes,
)
from autoconf.estimators.traced.model import build_model, build_optimizer


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
