"""ms-swift command lines (``swift sft ...`` in a shell script, backslash continuations and environment
assignments such as ``NPROC_PER_NODE=4`` included): its argument names are TrainingArguments' with ms-swift's
own (``--train_type``, ``--torch_dtype``, ``--max_length``, ``--deepspeed zero2``, ``--quant_bits``) and
those of its 2.x releases (``--sft_type``, ``--dtype``, ``--batch_size``, ``--lora_target_modules``).
ms-swift checkpoints activations unless told not to.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from autoconf.interfaces.configs.common import ConfigKeyError, FromFile, as_int, catalogue_name, read, take
from autoconf.interfaces.configs.hf import read_lora, read_training_args, weights_dtype
from autoconf.interfaces.configs.launch import read_deepspeed_ref

COMMAND = re.compile(r"\bswift\s+(sft|pt|rlhf)\b")
ENV = re.compile(r"^([A-Z_][A-Z0-9_]*)=(\S*)$")
DEEPSPEED_NAMES = {"zero0": ("zero0", "none"), "zero1": ("zero1", "none"), "zero2": ("zero2", "none"),
                   "zero3": ("zero3", "none"), "zero2_offload": ("zero2", "optimizer"),
                   "zero3_offload": ("zero3", "optimizer+params"), "default-zero2": ("zero2", "none"),
                   "default-zero3": ("zero3", "none"), "zero3-offload": ("zero3", "optimizer+params")}
ATTN = {"flash_attn": "flash", "flash_attention_2": "flash", "sdpa": "sdpa", "eager": "eager"}


def is_swift(text: str) -> bool:
    return bool(COMMAND.search(text))


def parse_command(found: FromFile, text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``--key value`` pairs of the swift command, and the environment assignments before it."""
    joined = re.sub(r"\\\r?\n", " ", text)
    lines = [line for line in joined.splitlines() if COMMAND.search(line) and not line.lstrip().startswith("#")]
    if not lines:
        raise ConfigKeyError(found.path, found.format, "swift sft", "is not in the file")
    try:
        words = shlex.split(lines[0], comments=True)
    except ValueError as exc:
        raise ConfigKeyError(found.path, found.format, "swift sft", f"line cannot be split ({exc})") from None
    env = {m.group(1): m.group(2) for m in map(ENV.match, words) if m}
    args: dict[str, Any] = {}
    at = next(i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] == "swift") + 2
    while at < len(words):
        word = words[at]
        if not word.startswith("--"):
            at += 1
            continue
        key, _, inline = word[2:].partition("=")
        values = [] if inline == "" else [inline]
        while not inline and at + 1 < len(words) and not words[at + 1].startswith("--"):
            at += 1
            values.append(words[at])
        args[key] = values[0] if len(values) == 1 else (values or "true")
        at += 1
    return args, env


def read_swift(found: FromFile, text: str) -> None:
    args, env = parse_command(found, text)
    rest = dict(args)
    key, model = take(rest, "model", "model_id_or_path", "model_type")
    found.put("model", catalogue_name(str(model)) if model else None, key)
    read(found, rest, "seq_len", as_int, "max_length")
    key, kind = take(rest, "train_type", "tuner_type", "sft_type")
    kind = str(kind or "lora").lower()  # ms-swift's default train_type
    bits = as_int(found, "quant_bits", take(rest, "quant_bits", "quantization_bit")[1])
    if kind not in ("lora", "full", "qlora", "longlora", "dora"):
        raise ConfigKeyError(found.path, found.format, key, f"must be lora or full; got {kind!r}")
    four = str(take(rest, "load_in_4bit")[1]).lower() == "true"
    method = "full" if kind == "full" else "qlora" if (bits == 4 or four or kind == "qlora") else "lora"
    found.put("method", method, "quant_bits/load_in_4bit" if method == "qlora" else key or "ms-swift default")
    if kind == "dora":
        found.put("dora", True, key)
    read_lora(found, rest, ("lora_rank",), ("target_modules", "lora_target_modules"))
    rest.pop("lora_dropout_p", None)
    key, value = take(rest, "torch_dtype", "dtype")
    found.put("dtype", weights_dtype(found, key, value), key)
    key, value = take(rest, "attn_impl")
    if key:
        found.put("attention", ATTN.get(str(value).lower(), "sdpa"), key)
    key, value = take(rest, "use_flash_attn")
    if key and str(value).lower() == "true":
        found.put("attention", "flash", key)
    key, value = take(rest, "gradient_checkpointing")
    if not key:
        found.put("gradient_checkpointing", True, "ms-swift default")
    else:
        rest["gradient_checkpointing"] = value
    key, value = take(rest, "deepspeed")
    if key:
        if str(value).lower() in DEEPSPEED_NAMES:
            strategy, offload = DEEPSPEED_NAMES[str(value).lower()]
            found.put("strategy", strategy, key)
            if offload != "none":
                found.put("offload", offload, key)
        else:
            read_deepspeed_ref(found, key, value)
    for name, knob in (("packing", "packing"), ("bnb_4bit_use_double_quant", "double_quant"),
                       ("use_liger_kernel", "fused_loss")):
        key, value = take(rest, name)
        found.put(knob, str(value).lower() == "true" if key else None, key)
    if "NPROC_PER_NODE" in env:
        found.put("gpus_per_node", as_int(found, "NPROC_PER_NODE", env["NPROC_PER_NODE"]), "NPROC_PER_NODE")
    elif "CUDA_VISIBLE_DEVICES" in env and env["CUDA_VISIBLE_DEVICES"]:
        found.put("gpus_per_node", len(env["CUDA_VISIBLE_DEVICES"].split(",")), "CUDA_VISIBLE_DEVICES")
    if "NNODES" in env:
        found.put("nodes", as_int(found, "NNODES", env["NNODES"]), "NNODES")
    read_training_args(found, rest, micro_default=1)  # ms-swift's per_device_train_batch_size default is 1
    found.unused += [k for k, v in rest.items() if v not in (None, "", [], {})]
