"""Which stack wrote a training config, and the reading of one or more of them (a training config, plus an
accelerate config and / or a DeepSpeed JSON beside it) into one ``FromFile``.

Detection looks at keys only a given stack writes (``base_model`` for axolotl, a ``model._component_`` for
torchtune, ``finetuning_type``/``cutoff_len`` for LLaMA-Factory, ``checkpoint_dir`` with ``train`` for LitGPT,
``training_data_path``/``peft_method`` for fms-hf-tuning, ``distributed_type`` for accelerate,
``zero_optimization`` for DeepSpeed, a ``swift sft`` line for ms-swift); any other mapping with
TrainingArguments keys is read as TRL / Transformers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from autoconf.errors import InvalidInputError
from autoconf.interfaces.configs.common import FromFile
from autoconf.interfaces.configs.hf import precision, read_fms, read_trl
from autoconf.interfaces.configs.launch import read_accelerate, read_deepspeed
from autoconf.interfaces.configs.stacks import read_axolotl, read_litgpt, read_llama_factory
from autoconf.interfaces.configs.swift import is_swift, read_swift
from autoconf.interfaces.configs.torchtune import read_torchtune

MAX_BYTES = 1 << 20  # a training config is a few kB; anything past a MiB is not one
# format -> (framework, reader)
FORMATS: dict[str, tuple[str, Callable[[FromFile, dict[str, Any]], None]]] = {
    "axolotl": ("axolotl", read_axolotl), "torchtune": ("torchtune", read_torchtune),
    "llama-factory": ("llama-factory", read_llama_factory), "litgpt": ("litgpt", read_litgpt),
    "fms-hf-tuning": ("fms-hf-tuning", read_fms), "trl": ("hf-trainer", read_trl),
    "accelerate": ("hf-trainer", read_accelerate), "deepspeed": ("deepspeed", read_deepspeed),
}
ACCEPTED = "axolotl, torchtune, LLaMA-Factory, LitGPT, fms-hf-tuning, TRL/Transformers, accelerate, DeepSpeed, ms-swift"
FMS_KEYS = ("training_data_path", "peft_method", "use_flash_attn", "quantized_lora_config", "fused_ops_and_kernels",
            "data_config_path", "response_template")
LF_KEYS = ("finetuning_type", "cutoff_len", "lora_target", "stage", "template")
HF_KEYS = ("per_device_train_batch_size", "model_name_or_path", "use_peft", "dataset_name", "max_length",
           "max_seq_length", "gradient_accumulation_steps", "output_dir")


def detect(data: dict[str, Any]) -> str | None:
    model = data.get("model")
    checks = (
        ("deepspeed", "zero_optimization" in data),
        ("accelerate", "distributed_type" in data or "compute_environment" in data),
        ("torchtune", isinstance(model, dict) and "_component_" in model),
        ("axolotl", "base_model" in data),
        ("litgpt", "checkpoint_dir" in data and ("train" in data or "precision" in data or "devices" in data)),
        ("llama-factory", any(k in data for k in LF_KEYS)),
        ("fms-hf-tuning", any(k in data for k in FMS_KEYS)),
        ("trl", any(k in data for k in HF_KEYS)),
    )
    return next((fmt for fmt, hit in checks if hit), None)


def read_text(text: str, name: str = "<content>") -> FromFile:
    """One config's content (a file's text, or the REST/MCP field holding it)."""
    if len(text.encode("utf-8", "replace")) > MAX_BYTES:
        raise InvalidInputError("--from", f"{name}: larger than {MAX_BYTES // 1024} KiB; not a training config")
    if is_swift(text):
        found = FromFile("ms-swift", name, "ms-swift")
        found.put("framework", "ms-swift", "ms-swift format")
        read_swift(found, text)
        return settle(found)
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else f" at line {getattr(exc, 'lineno', '?')}"
        raise InvalidInputError("--from", f"{name}: neither JSON nor YAML could read it{where}; accepted formats: "
                                f"{ACCEPTED}") from None
    except RecursionError:
        raise InvalidInputError("--from", f"{name}: nested too deeply to be a training config") from None
    fmt = detect(data) if isinstance(data, dict) else None
    if fmt is None or not isinstance(data, dict):
        raise InvalidInputError("--from", f"{name}: not a training config of a known stack (no key that {ACCEPTED} "
                                "write was found)")
    framework, reader = FORMATS[fmt]
    found = FromFile(fmt, name, framework)
    found.put("framework", framework, f"{fmt} format")
    try:
        reader(found, data)
    except (AttributeError, TypeError):  # a section of the wrong shape (a list where a mapping belongs, ...)
        raise InvalidInputError("--from", f"{name}: a {fmt} section has the wrong shape (a mapping was expected)") from None
    return settle(found)


def settle(found: FromFile) -> FromFile:
    """QLoRA computes in the 16-bit dtype over NF4 weights: autocast over fp32 (LitGPT's bf16-mixed) means that
    16-bit dtype here."""
    dtype = str(found.values.get("dtype", ""))
    if found.values.get("method") == "qlora" and dtype.startswith("amp-"):
        found.put("dtype", dtype.removeprefix("amp-"), f"{found.sources['dtype']} (QLoRA: 16-bit compute over NF4)")
    return found


def read_config(path: str | Path) -> FromFile:
    file = Path(path).expanduser()
    if not file.is_file():
        raise InvalidInputError("--from", f"{file}: no such file")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError("--from", f"{file}: cannot be read ({type(exc).__name__})") from None
    return read_text(text, str(file))


def merge(parts: Sequence[FromFile]) -> FromFile:
    """One training config and its launch / DeepSpeed companions: the companions add what it leaves out
    and decide GPUs and sharding (a launcher's num_processes beats a stack's default)."""
    mains = [p for p in parts if p.format not in ("accelerate", "deepspeed")]
    if len(mains) > 1:
        raise InvalidInputError("--from", f"give one training config (and an accelerate / DeepSpeed file beside it); "
                                f"got {', '.join(p.path for p in mains)}")
    main = mains[0] if mains else parts[0]
    for part in parts:
        if part is main:
            continue
        for knob, value in part.values.items():
            if knob == "framework" and main is not part and main.format not in ("accelerate", "deepspeed"):
                continue
            if knob not in main.values or main.sources[knob].endswith(" default"):
                main.put(knob, value, f"{Path(part.path).name}: {part.sources[knob]}")
        main.unused += [f"{Path(part.path).name}: {k}" for k in part.unused]
        main.notes += part.notes
        main.path += f" + {part.path}"
    autocast = main.values.pop("autocast", None)
    main.sources.pop("autocast", None)
    if autocast and "dtype" not in main.values:
        main.put("dtype", precision(None, autocast == "bf16", autocast == "fp16"), "mixed_precision")
    return settle(main)


def read_configs(paths: Sequence[str | Path]) -> FromFile:
    return merge([read_config(p) for p in paths])


def read_texts(texts: Sequence[str]) -> FromFile:
    return merge([read_text(t, f"<content {i + 1}>" if len(texts) > 1 else "<content>") for i, t in enumerate(texts)])
