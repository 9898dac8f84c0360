"""``--from FILE`` on estimate, recommend and check: the user's own training config fills the flags that were
not typed; a flag typed beside ``--from`` wins over the file (see autoconf/interfaces/configs/).

Which flags were typed is read from the command line itself (``args.argv``, set by ``main``), not from the
values, so a flag given with its default value still overrides the file.
"""

from __future__ import annotations

import argparse
from typing import Any

from autoconf.errors import InvalidInputError
from autoconf.interfaces.configs import FromFile, read_configs
from autoconf.interfaces.configs.common import JOB_KNOBS

# knob of a config -> estimate's flags (dest) that override it: the VRAM-budget CLI's spellings, and for every other
# knob that is a Job field (configs.common.JOB_KNOBS) the generated flag of its own name
SPELLED: dict[str, tuple[str, ...]] = {
    "model": ("model", "config", "params"), "method": ("lora", "qlora", "method"), "dtype": ("dtype",),
    "storage": ("dtype",), "seq_len": ("seq_len",), "micro_batch": ("per_device_batch",), "grad_accum": ("grad_accum",),
    "gpus_per_node": ("dp", "gpus"), "nodes": ("dp", "nodes"), "tp": ("tp",), "pp": ("pp",),
    "strategy": ("zero", "strategy"), "offload": ("cpu_offload_optimizer", "cpu_offload_params"),
    "gradient_checkpointing": ("grad_checkpoint",), "attention": ("attention", "flashattn"), "lora_r": ("lora_rank",),
}
ESTIMATE_FLAGS: dict[str, tuple[str, ...]] = SPELLED | {k: (k,) for k in JOB_KNOBS if k not in SPELLED}
_SET_ABOVE = ("method", "dtype", "gradient_checkpointing", "attention", "packing")  # apply_to_estimate_args
# recommend's flags for the same knobs (its own spellings)
RECOMMEND_FLAGS: dict[str, tuple[str, ...]] = {
    **ESTIMATE_FLAGS, "seq_len": ("tokens_per_sample",), "grad_accum": ("gradient_accumulation_steps",),
    "lora_r": ("lora_r",), "micro_batch": ("batch_size",), "gpus_per_node": ("batch_size",), "nodes": ("batch_size",),
}


def add_from_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_files", action="append", metavar="FILE",
                   help="read the job from your training config: axolotl, torchtune, LLaMA-Factory, LitGPT, TRL / "
                   "Transformers (JSON/YAML), fms-hf-tuning JSON or an ms-swift script; repeat it for the accelerate "
                   "and/or DeepSpeed config beside it. Flags given beside it override the file")


def given_dests(parser_actions: list[argparse.Action], argv: list[str]) -> set[str]:
    """The dests of the options typed in ``argv`` (``--flag``, ``--flag=value`` and ``--no-flag`` forms)."""
    words = {w.split("=", 1)[0] for w in argv if w.startswith("-")}
    given = set()
    for action in parser_actions:
        names = set(action.option_strings) | {f"--no-{o[2:]}" for o in action.option_strings if o.startswith("--")}
        if names & words:
            given.add(action.dest)
    return given


def typed(args: argparse.Namespace) -> set[str]:
    from autoconf.interfaces.cli import build_parser

    parser = build_parser(args.command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return given_dests(sub.choices[args.command]._actions, list(getattr(args, "argv", []) or []))  # noqa: SLF001


def load(args: argparse.Namespace, flags: dict[str, tuple[str, ...]]) -> tuple[FromFile | None, set[str]]:
    """The files of --from (None without it) and the knobs the typed flags override."""
    if not getattr(args, "from_files", None):
        return None, set()
    found = read_configs(args.from_files)
    given = typed(args)
    return found, {knob for knob, dests in flags.items() if given & set(dests)}


def apply_to_estimate_args(args: argparse.Namespace, found: FromFile, overridden: set[str]) -> dict[str, Any]:
    """Write the file's knobs into estimate's flags where no flag was typed; returns the knobs that have no
    estimate flag (packing, nodes), for the caller to set on the Job / Placement."""
    values = {k: v for k, v in found.values.items() if k not in overridden}
    if "model" not in found.values and "model" not in overridden:
        raise InvalidInputError("model", "the file names no model this reader maps to ours: give --model beside it")
    if "model" in values:
        args.model, args.config, args.params = values["model"], None, None
    method = values.get("method")
    if method is not None:
        args.lora, args.qlora = method == "lora", method == "qlora"
    if "dtype" in values:
        args.dtype = values["dtype"]
    if values.get("storage") and method == "lora":
        args.dtype = values["storage"]
    if "seq_len" in values:
        args.seq_len = values["seq_len"]
    if "micro_batch" in values:
        args.per_device_batch = values["micro_batch"]
    if "grad_accum" in values:
        args.grad_accum = values["grad_accum"]
    args.tp, args.pp = values.get("tp", args.tp), values.get("pp", args.pp)
    if "gpus_per_node" in values or "nodes" in values:
        gpus = int(values.get("gpus_per_node", 1)) * int(values.get("nodes", 1))
        args.dp = max(gpus // (args.tp * args.pp), 1)
    if "strategy" in values:
        args.zero, args.strategy = None, values["strategy"]
    if "offload" in values:
        args.cpu_offload_params = values["offload"] == "optimizer+params"
        args.cpu_offload_optimizer = values["offload"] != "none"
    if "gradient_checkpointing" in values:
        args.grad_checkpoint = values["gradient_checkpointing"]
    if "attention" in values:
        args.attention = values["attention"]
    # the other Job-field knobs set the generated flag of their own name (packing: no estimate flag, below)
    renamed = {knob: ESTIMATE_FLAGS[knob][-1] for knob in JOB_KNOBS if knob not in _SET_ABOVE}
    for knob, dest in renamed.items():
        if knob in values:
            value = values[knob]
            setattr(args, dest, list(value) if isinstance(value, tuple) else value)
    if "framework" not in overridden:
        args.framework = values.get("framework", found.framework)
    extra: dict[str, Any] = {}
    if "packing" in values:
        extra["packing"] = values["packing"]
    if int(values.get("nodes", 1)) > 1:
        extra["gpus_per_worker"] = int(values.get("gpus_per_node", 1))
    return extra


def describe(found: FromFile, overridden: set[str]) -> list[str]:
    """The lines a table answer ends with: what was read, defaulted, overridden and of no effect."""
    report = found.report(overridden)
    lines = [f"from {report['file']} ({report['format']}, framework {report['framework']}):",
             "  read: " + "; ".join(f"{k} ← {v}" for k, v in report["read"].items())]
    if report["defaulted"]:
        lines.append("  defaulted (not in the file): " + ", ".join(report["defaulted"]))
    if report["overridden_by_flags"]:
        lines.append("  overridden by flags: " + ", ".join(report["overridden_by_flags"]))
    if report["no_effect"]:
        lines.append("  no effect on memory or speed: " + ", ".join(report["no_effect"]))
    lines += [f"  note: {n}" for n in report["notes"]]
    return lines
