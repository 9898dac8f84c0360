"""``autoconf-gpu deepspeed``: DeepSpeed ZeRO model-state memory per GPU and per CPU, for each offload option.

    autoconf-gpu deepspeed --params 70e9 --nodes 1 --gpus-per-node 8 --stage 2
    autoconf-gpu deepspeed --model llama3.1-70b --stage 3          # largest layer from the architecture
"""

from __future__ import annotations

import argparse
import json

from autoconf.catalog import get_architecture, parse_param_count
from autoconf.defaults import GPUS_PER_NODE
from autoconf.errors import InvalidInputError
from autoconf.planning.zero import DEFAULT_BUFFER_FACTOR, format_table, zero_table


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("deepspeed", help="DeepSpeed ZeRO model-state memory table (per CPU / per GPU)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--params", help="total parameters, e.g. 70e9 or 8B")
    src.add_argument("--model", help="catalogue name or path to a config.json")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=GPUS_PER_NODE)
    p.add_argument("--stage", type=int, choices=(1, 2, 3), default=2, help="ZeRO stage (1 and 2 share one estimate)")
    p.add_argument("--largest-layer-params", help="ZeRO-3: parameters of the largest module (default: from the "
                   "architecture; with --params, from the Llama-shaped stand-in of that size)")
    p.add_argument("--buffer-factor", type=float, default=DEFAULT_BUFFER_FACTOR,
                   help="CPU safety factor (DeepSpeed: 1.5)")
    p.add_argument("--json", action="store_true")


def _count(text: str, field: str) -> int:
    value = parse_param_count(text)
    if value is None:
        raise InvalidInputError(field, f"must be a parameter count such as 70e9 or 8B; got '{text}'")
    return value


def run(args: argparse.Namespace) -> int:
    if args.model:
        arch = get_architecture(args.model)
        total = arch.total_params
    else:
        total = _count(args.params, "params")
        arch = get_architecture(str(total))  # Llama-shaped stand-in, only for the largest layer
    largest = _count(args.largest_layer_params,
                     "largest_layer_params") if args.largest_layer_params else arch.largest_layer_params
    rows = zero_table(args.stage, total, largest, args.nodes, args.gpus_per_node, args.buffer_factor)
    if args.json:
        out = [{"stage": r.stage, "options": r.options, "per_gpu_gib": round(r.per_gpu_gib, 2),
                "per_cpu_gib": round(r.per_cpu_gib, 2)} for r in rows]
        print(json.dumps({"total_params": total, "largest_layer_params": largest if args.stage == 3 else None,
                          "nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "rows": out}, indent=2))
        return 0
    print(format_table(rows, total, args.nodes, args.gpus_per_node, largest if args.stage == 3 else None))
    return 0
