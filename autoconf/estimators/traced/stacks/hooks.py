"""What the stack drivers share: their command line, which phase the tracker is in, when a gradient is a gradient."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any

import torch

from autoconf.estimators.traced.dist import run_one
from autoconf.estimators.traced.live_bytes import ACTIVATIONS, BACKWARD, GRADIENTS, LOGITS, LOSS
from autoconf.estimators.traced.wrap import RankBytes


def driver_main(trace: Callable[[dict[str, Any]], dict[str, Any]], argv: list[str] | None = None) -> int:
    """A driver's ``__main__``, ``SPEC.json OUT.npz``: ``trace`` the spec; one JSON summary line on stdout, samples and
    events to OUT.npz (dist.run_one). A reader gone before the line is written (a closed pipe) ends it quietly."""
    args = sys.argv[1:] if argv is None else argv
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(run_one(args[0], args[1], trace)))
    return 0


class Phases:
    """Move the tracker to the loss phase at the final norm's output (the output projection and the loss follow)
    and back to backward when that output's gradient arrives; charge each accumulated gradient as a gradient."""

    def __init__(self, model: torch.nn.Module, norm: torch.nn.Module, head: torch.nn.Module | None,
                 tracker: RankBytes) -> None:
        self.tracker = tracker
        norm.register_forward_hook(self._enter_loss)
        for param in model.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self._grad_ready)  # type: ignore[no-untyped-call]
        # the output projection's weight gradient is made inside the loss backward (live_bytes.py's LiveBytes)
        self.head_grad_shapes = {tuple(p.shape) for p in head.parameters() if p.requires_grad} if head else set()

    def _enter_loss(self, _module: torch.nn.Module, _args: Any, out: torch.Tensor) -> None:
        if self.tracker.phase == BACKWARD:  # a recomputation inside backward
            return
        self.tracker.set_phase(LOSS, LOGITS)
        if out.requires_grad:
            out.register_hook(self._leave_loss_backward)  # type: ignore[no-untyped-call]  # torch: unannotated

    def _leave_loss_backward(self, _grad: torch.Tensor) -> None:
        self.tracker.set_phase(BACKWARD, ACTIVATIONS)

    def _grad_ready(self, param: torch.Tensor) -> None:
        if param.grad is not None:
            self.tracker.reclassify(param.grad, GRADIENTS)
