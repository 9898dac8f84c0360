"""Training-stack flags shared by ``estimate`` and ``recommend``: ``--framework`` and the settings it sets.

Each flag left out takes the framework profile's value (docs/frameworks.md); a given flag overrides it.
"""

from __future__ import annotations

import argparse
import typing
from typing import Any

from autoconf import defaults
from autoconf.schema import Framework, LossKernel

# (flag, Job field, help) of the on/off overrides; --no-<flag> turns a profile's default off.
_SWITCHES = (
    ("fsdp-cpu-ram-efficient-loading", "fsdp_cpu_ram_efficient_loading", "FSDP: rank-0 / meta-device load"),
    ("double-quant", "double_quant", "QLoRA: double quantisation of the NF4 constants"),
    ("quantize-lm-head", "quantize_lm_head", "QLoRA: 4-bit output head"),
    ("optimizer-in-backward", "optimizer_in_backward", "step each parameter inside backward (torchtune)"),
    ("activation-offloading", "activation_offloading", "checkpointed activations in CPU RAM"),
    ("torch-compile", "torch_compile", "torch.compile (memory effect not modelled)"),
    ("expandable-segments", "expandable_segments", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
)


def add_stack_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("training stack (default: the framework profile's behaviour)")
    group.add_argument("--framework", choices=typing.get_args(Framework), default=defaults.FRAMEWORK,
                       help="training stack (default %(default)s); see docs/frameworks.md")
    group.add_argument("--loss-kernel", choices=typing.get_args(LossKernel), help="cross-entropy implementation")
    for flag, _, text in _SWITCHES:
        group.add_argument(f"--{flag}", action=argparse.BooleanOptionalAction, default=None, help=text)
    group.add_argument("--dora", action="store_true", help="DoRA adapters (a magnitude vector per module)")
    group.add_argument("--sequence-parallel", type=int, default=1, help="sequence/context-parallel degree")
    group.add_argument("--samples-vary-in-length", action="store_true",
                       help="unpacked samples of different lengths, each batch padded to its longest (length given = the longest)")
    vlm = p.add_argument_group("vision-language models")
    vlm.add_argument("--images-per-sample", type=int, default=0, help="images per sample (default 0: text only)")
    vlm.add_argument("--image-resolution", type=int, help="longer image side in pixels (default: the model's)")
    vlm.add_argument("--freeze-vision", action=argparse.BooleanOptionalAction, default=True,
                     help="keep the vision tower frozen (default: frozen)")
    vlm.add_argument("--freeze-projector", action=argparse.BooleanOptionalAction, default=False,
                     help="keep the projector frozen (default: trained)")


def stack_fields(args: argparse.Namespace) -> dict[str, Any]:
    """Job fields from the stack flags (None = not given: the profile decides)."""
    out: dict[str, Any] = {"framework": args.framework, "dora": args.dora, "sequence_parallel": args.sequence_parallel,
                           "samples_vary_in_length": args.samples_vary_in_length}
    out |= {"images_per_sample": args.images_per_sample, "image_resolution": args.image_resolution,
            "freeze_vision": args.freeze_vision, "freeze_projector": args.freeze_projector}
    if args.loss_kernel is not None:
        out["loss_kernel"] = args.loss_kernel
    for _, field, _ in _SWITCHES:
        if getattr(args, field) is not None:
            out[field] = getattr(args, field)
    return out
