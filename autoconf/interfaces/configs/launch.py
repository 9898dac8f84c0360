"""What a launch says beside a training config: an accelerate config (YAML: processes, machines, precision,
its DeepSpeed or FSDP plugin), a DeepSpeed config (JSON: ZeRO stage and offload), and the FSDP keys
TrainingArguments and axolotl share.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from autoconf.interfaces.configs.common import ConfigKeyError, FromFile, as_bool, as_int, take

FSDP_SHARDING = {"full_shard": "fsdp", "1": "fsdp", "shard_grad_op": "fsdp-shard-grad-op", "2": "fsdp-shard-grad-op",
                 "hybrid_shard": "fsdp-hybrid", "4": "fsdp-hybrid", "no_shard": "ddp", "3": "ddp"}
STAGE_IN_NAME = re.compile(r"(?:zero|z|ds|stage)[_-]?([0-3])(?![0-9])", re.IGNORECASE)


def read_fsdp_config(found: FromFile, block: dict[str, Any], where: str) -> None:
    """accelerate's / TrainingArguments' FSDP keys, with or without their ``fsdp_`` prefix."""
    plain = {k.removeprefix("fsdp_"): v for k, v in block.items()}
    if plain.get("sharding_strategy") is not None:
        word = str(plain["sharding_strategy"]).lower()
        found.put("strategy", FSDP_SHARDING.get(word, "fsdp"), f"{where}.fsdp_sharding_strategy")
    elif str(plain.get("version", "1")) == "2" and plain.get("reshard_after_forward") is not None:
        reshard = as_bool(found, f"{where}.fsdp_reshard_after_forward", plain["reshard_after_forward"])
        found.put("strategy", "fsdp" if reshard else "fsdp-shard-grad-op", f"{where}.fsdp_reshard_after_forward")
    else:
        found.put("strategy", "fsdp", where)
    if as_bool(found, f"{where}.fsdp_offload_params", plain.get("offload_params")):
        found.put("offload", "optimizer+params", f"{where}.fsdp_offload_params")
    ram = as_bool(found, f"{where}.fsdp_cpu_ram_efficient_loading", plain.get("cpu_ram_efficient_loading"))
    found.put("fsdp_cpu_ram_efficient_loading", ram, f"{where}.fsdp_cpu_ram_efficient_loading")
    if as_bool(found, f"{where}.fsdp_activation_checkpointing", plain.get("activation_checkpointing")):
        found.put("gradient_checkpointing", True, f"{where}.fsdp_activation_checkpointing")


def read_deepspeed_ref(found: FromFile, key: str, value: object) -> None:
    """A DeepSpeed config given inline (a dict), as a path beside the file or the working folder, or, when
    that file is not here, by the stage its name says (ds_z3_config.json, zero2.json: noted)."""
    if isinstance(value, dict):
        read_deepspeed(found, value, key)
        return
    name = str(value)
    for base in (Path(found.path).parent, Path.cwd()):
        path = base / name
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ConfigKeyError(found.path, found.format, key, f"names {name}, which is not a readable DeepSpeed "
                                     f"JSON ({type(exc).__name__})") from None
            if not isinstance(data, dict):
                raise ConfigKeyError(found.path, found.format, key, f"names {name}, which is not a JSON object")
            read_deepspeed(found, data, f"{key} ({name})")
            return
    match = STAGE_IN_NAME.search(Path(name).stem)
    if match is None:
        raise ConfigKeyError(found.path, found.format, key, f"names {name}, which is neither here nor named by its "
                             "ZeRO stage; pass it with a second --from")
    found.put("strategy", f"zero{match.group(1)}", f"{key} (stage from the name {name}; the file is not here)")
    if "offload" in name.lower():
        found.put("offload", "optimizer", f"{key} (offload from the name {name})")
    found.notes.append(f"{name} was not found beside the file: ZeRO stage {match.group(1)} taken from its name")


def read_deepspeed(found: FromFile, data: dict[str, Any], where: str = "DeepSpeed") -> None:
    zero = data.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        raise ConfigKeyError(found.path, "DeepSpeed", "zero_optimization", "must be an object")
    stage = as_int(found, "zero_optimization.stage", zero.get("stage", 0), low=0)
    if stage is not None and stage > 3:
        raise ConfigKeyError(found.path, "DeepSpeed", "zero_optimization.stage", f"must be 0-3; got {stage}")
    found.put("strategy", f"zero{stage}", f"{where}: zero_optimization.stage")
    devices = {part: str((zero.get(f"offload_{part}") or {}).get("device", "none")).lower()
               for part in ("optimizer", "param")}
    if devices["param"] in ("cpu", "nvme"):
        found.put("offload", "optimizer+params", f"{where}: zero_optimization.offload_param")
    elif devices["optimizer"] in ("cpu", "nvme"):
        found.put("offload", "optimizer", f"{where}: zero_optimization.offload_optimizer")
    for key, knob in (("train_micro_batch_size_per_gpu", "micro_batch"), ("gradient_accumulation_steps", "grad_accum")):
        if str(data.get(key, "auto")) != "auto" and knob not in found.sources:
            found.put(knob, as_int(found, key, data[key]), f"{where}: {key}")


def read_accelerate(found: FromFile, data: dict[str, Any]) -> None:
    """An accelerate config: the launch (processes, machines), its precision and its sharding plugin."""
    rest = dict(data)
    _, kind = take(rest, "distributed_type")
    processes = as_int(found, "num_processes", take(rest, "num_processes")[1])
    machines = as_int(found, "num_machines", take(rest, "num_machines")[1]) or 1
    if processes:
        found.put("nodes", machines, "num_machines")
        found.put("gpus_per_node", max(processes // machines, 1), "num_processes / num_machines")
    _, mixed = take(rest, "mixed_precision")
    if mixed and str(mixed).lower() in ("bf16", "fp16"):
        found.put("autocast", str(mixed).lower(), "mixed_precision")
    kind = str(kind or "NO").upper()
    if kind == "DEEPSPEED":
        block = take(rest, "deepspeed_config")[1] or {}
        if block.get("deepspeed_config_file"):
            read_deepspeed_ref(found, "deepspeed_config.deepspeed_config_file", block["deepspeed_config_file"])
        else:
            stage = as_int(found, "deepspeed_config.zero_stage", block.get("zero_stage", 0), low=0)
            found.put("strategy", f"zero{stage}", "deepspeed_config.zero_stage")
            if str(block.get("offload_param_device", "none")).lower() in ("cpu", "nvme"):
                found.put("offload", "optimizer+params", "deepspeed_config.offload_param_device")
            elif str(block.get("offload_optimizer_device", "none")).lower() in ("cpu", "nvme"):
                found.put("offload", "optimizer", "deepspeed_config.offload_optimizer_device")
    elif kind == "FSDP":
        read_fsdp_config(found, take(rest, "fsdp_config")[1] or {}, "fsdp_config")
    elif kind == "MULTI_GPU":
        found.put("strategy", "ddp", "distributed_type")
    found.unused += [k for k, v in rest.items() if v not in (None, "", [], {})]
