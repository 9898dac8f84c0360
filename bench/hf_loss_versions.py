"""What transformers' causal-LM loss keeps alive, per release line, in bytes per token per vocabulary entry.

    python bench/hf_loss_versions.py [--write]

The measured rows of data/ ran transformers 4.39–4.49 (fms-acceleration pins it per campaign in
``scripts/benchmarks/refs/requirements*.txt``) while the trace runs the installed 5.x. The loss code changed
between them; this runs each release line's sequence of tensor operations after the LM head (bf16 logits, as the
head returns them) on real CPU tensors and counts the live tensor bytes op by op (storages, freed when the last
reference goes), forward and backward, with the model output dropped before backward as the Trainer drops it
(``compute_loss`` returns the loss only). The lines, read in each release's source:

* **4.39–4.45, llama / mistral** (modeling_llama.py / modeling_mistral.py ``*ForCausalLM.forward``:
  ``logits = logits.float()`` right after the head, then ``shift_logits = logits[..., :-1, :].contiguous()`` and
  ``CrossEntropyLoss``; 4.45 moves the upcast under ``if labels is not None``, same tensors in training).
* **4.46–4.48** (loss/loss_utils.py ``ForCausalLMLoss``: ``logits = logits.float()`` inside the loss, then the same
  ``shift_logits ... .contiguous()``; the model output keeps the bf16 logits).
* **4.49 and later, 5.x** (``ForCausalLMLoss``: ``labels = nn.functional.pad(labels, (0, 1), ...)`` and
  ``shift_labels = labels[..., 1:]``: the labels are shifted, the fp32 logits are not copied).
* **gpt_bigcode, 4.x** (modeling_gpt_bigcode.py ``GPTBigCodeForCausalLM.forward`` up to 4.48 at least:
  ``shift_logits = lm_logits[..., :-1, :].contiguous()`` and ``CrossEntropyLoss`` on the bf16 logits, no upcast).
* **... + accelerate's fp32 outputs**: the HF Trainer under bf16 mixed precision runs the forward through
  accelerate's ``convert_outputs_to_fp32`` (accelerate/utils/operations.py ``ConvertOutputsToFp32``), which copies
  the returned half-precision logits to fp32 after the loss ran, while they are still alive.

``--write`` puts the table into section ``loss-versions`` of docs/traced_vs_theory.md.
"""

from __future__ import annotations

import argparse
import sys
import weakref
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import ROOT, update_section  # noqa: E402

IGNORE = -100  # transformers' ignore_index
BATCH, SEQ, HIDDEN, VOCAB = 2, 256, 32, 8192  # V ≫ h: the logits dominate; bytes are reported per token·V


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages that ops created and that are still referenced; the peak over the run."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[int] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or key in self._seen:  # a view of a storage already counted
                continue
            self._seen.add(key)
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, key, size)
        return out

    def _free(self, key: int, size: int) -> None:
        self.live -= size
        self._seen.discard(key)


def _shift_copy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Loss over a contiguous copy of the shifted logits (4.x)."""
    shifted = logits[..., :-1, :].contiguous()
    return F.cross_entropy(shifted.view(-1, shifted.shape[-1]), labels[..., 1:].contiguous().view(-1))


def loss_line(line: str, head: torch.nn.Module, hidden: torch.Tensor,
              labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, the logits the model output keeps) as release line ``line`` computes them after the head."""
    logits = head(hidden)
    if line == "4.39–4.45 llama/mistral":
        logits = logits.float()  # in forward, rebinding the name: the bf16 logits are dropped at once
        return _shift_copy(logits, labels), logits
    if line == "4.46–4.48":
        return _shift_copy(logits.float(), labels), logits
    if line == "≥ 4.49, 5.x":
        shifted = F.pad(labels, (0, 1), value=IGNORE)[..., 1:].contiguous()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), shifted.view(-1)), logits
    if line == "gpt_bigcode 4.x":
        return _shift_copy(logits, labels), logits
    raise ValueError(line)


LINES = ("4.39–4.45 llama/mistral", "4.46–4.48", "≥ 4.49, 5.x", "gpt_bigcode 4.x")
FP32_OUTPUTS = " + accelerate fp32 outputs"  # suffix: the line under accelerate's convert_outputs_to_fp32


def measure(line: str) -> tuple[float, float]:
    """(forward peak, step peak) of one loss line, in bytes per token per vocabulary entry."""
    torch.manual_seed(0)
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=False, dtype=torch.bfloat16).requires_grad_(False)
    hidden = torch.randn(BATCH, SEQ, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
    with LiveBytes() as mode:
        loss, kept = loss_line(line.removesuffix(FP32_OUTPUTS), head, hidden, labels)
        if line.endswith(FP32_OUTPUTS):
            converted = kept.float()  # made while the half-precision output is alive; no copy when already fp32
            del converted
        forward = mode.peak
        del kept  # the Trainer keeps only the loss through backward
        loss.backward()  # type: ignore[no-untyped-call]
    unit = BATCH * SEQ * VOCAB
    return forward / unit, mode.peak / unit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write section loss-versions of docs/traced_vs_theory.md")
    args = parser.parse_args(argv)
    rows = ["| transformers | forward peak (B per token·V) | step peak (B per token·V) |", "|---|---|---|"]
    for line in (*LINES, *(line + FP32_OUTPUTS for line in LINES)):
        forward, step = measure(line)
        rows.append(f"| {line} | {forward:.1f} | {step:.1f} |")
    markdown = "\n".join([
        "## The causal-LM loss by transformers release", "",
        f"`python bench/hf_loss_versions.py` (the loss code of each release line on real CPU tensors, "
        f"{BATCH}×{SEQ} tokens, V = {VOCAB}, h = {HIDDEN}; the fraction above whole numbers is one V × h bf16 "
        "temporary of the CPU matmul, 2·h·V bytes per step, not per token). The trace runs the installed "
        "transformers (the ≥ 4.49 line).", "", *rows, ""])
    print(markdown)
    if args.write:
        update_section(ROOT / "docs" / "traced_vs_theory.md", "loss-versions", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
