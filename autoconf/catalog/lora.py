"""LoRA: which linears a target list adapts, and the trainable parameters peft 0.21 creates.

A linear (in, out) gets A (r, in) and B (out, r): r·(in + out). peft matches a target name against
the end of a module's dotted name. On transformers 5 the experts of a MoE are 3-D parameters, not
``nn.Linear``: peft reaches them only for the families whose transformers conversion pattern it maps
(peft/utils/transformers_weight_conversion.py ``_MOE_TARGET_MODULE_MAPPING`` with transformers'
``_MODEL_TO_CONVERSION_PATTERN``: mixtral's w1/w3/w2, and the qwen2_moe pattern gate_proj/up_proj/
down_proj, used for qwen3_moe and deepseek_v2/v3 — not for qwen2_moe itself). There the gate and up names land together on the fused
``gate_up_proj`` — one adapter of rank 2r, so naming one without the other is refused as peft
refuses it — and a mapped name no longer reaches the plain ``nn.Linear`` modules of that name
(dense and shared-expert MLPs). The router ``gate`` becomes a parameter target of rank r.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from autoconf.catalog.shapes import Linear
from autoconf.errors import InvalidInputError

if TYPE_CHECKING:
    from autoconf.catalog.architecture import Architecture

ROUTERS = frozenset({"gate", "router"})  # routers are custom modules, no nn.Linear (peft maps mixtral/qwen2_moe "gate")
_GATED = ("gate_proj", "up_proj", "down_proj")
# family -> transformers-4 expert names (gate, up, down) peft maps onto the fused experts
# (qwen2_moe itself is left alone: transformers has no checkpoint conversion for it, so peft skips it)
PEFT_MOE = {"mixtral": ("w1", "w3", "w2"), "qwen3_moe": _GATED, "deepseek_v2": _GATED, "deepseek_v3": _GATED}
PEFT_FUSED = {family: names[:2] for family, names in PEFT_MOE.items()}  # fused into gate_up_proj at rank 2r
MIXTRAL_FUSED = PEFT_FUSED["mixtral"]
ROUTER_IS_LINEAR = frozenset({"phimoe"})  # PhimoeTopKRouter subclasses nn.Linear

# peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING where it has the family; elsewhere the
# projections that make queries and values (our choice, the analogue of llama's q_proj + v_proj).
_QV = ("q_proj", "v_proj")
DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "phi": ("q_proj", "v_proj", "fc1", "fc2"),  # peft
    "phi3": ("qkv_proj",),  # fused q, k, v
    "falcon": ("query_key_value",),  # peft
    "gpt_neox": ("query_key_value",),  # peft
    "gpt_bigcode": ("c_attn",),  # peft
    "gpt2": ("c_attn",),  # peft
    "qwen": ("c_attn",),  # peft; ms-swift 1.x LoRATM.qwen too
    "mpt": ("Wqkv",),  # peft
    "deepseek_v2": ("q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"),  # MLA: every q / kv projection
    "deepseek_v3": ("q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"),
}


def default_targets(family: str) -> tuple[str, ...]:
    return DEFAULT_TARGETS.get(family, _QV)


def _matches(name: str, wanted: set[str]) -> bool:
    return any(name == t or name.endswith("." + t) for t in wanted)


def _adaptable(arch: Architecture, lin: Linear, vision: bool) -> bool:
    """nn.Linear modules, plus experts and router where peft maps them onto transformers 5.
    (A vision Linear's ``per_layer`` counts tower layers: every one is an nn.Linear.)"""
    if vision:
        return True
    mapped = PEFT_MOE.get(arch.family)
    if mapped:  # experts and router are parameter targets; plain linears of a mapped name are not
        return lin.per_layer > 1 or lin.name in ROUTERS or lin.name.split(".")[-1] not in mapped
    if lin.name in ROUTERS:
        return arch.family in ROUTER_IS_LINEAR
    return lin.per_layer == 1


def _wanted(arch: Architecture, targets: tuple[str, ...]) -> set[str]:
    wanted = {t.strip() for t in targets}
    names = [lin.name for lin in arch.layer_linears]
    if wanted == set(_QV) and not any(_matches(n, wanted) for n in names):
        return set(default_targets(arch.family))  # e.g. gpt_bigcode: peft's default c_attn
    return wanted


def target_names(arch: Architecture, targets: tuple[str, ...]) -> tuple[str, ...]:
    """The module names peft is given for these targets: the default q_proj, v_proj becomes the family's
    own default where the architecture has no such modules (phi3's qkv_proj, falcon's query_key_value, ...)."""
    return tuple(sorted(_wanted(arch, targets)))


def _chosen(arch: Architecture, linears: tuple[Linear, ...], wanted: set[str], vision: bool = False) -> tuple[Linear, ...]:
    adaptable = tuple(lin for lin in linears if _adaptable(arch, lin, vision))
    if "all-linear" in wanted:
        return adaptable
    return tuple(lin for lin in adaptable if _matches(lin.name, wanted))


@lru_cache(maxsize=4096)
def lora_targets(arch: Architecture, targets: tuple[str, ...]) -> tuple[Linear, ...]:
    """Distinct linears (decoder layers, then vision tower / projector) these names adapt (memoised: the theory
    asks for every batch it answers)."""
    wanted = _wanted(arch, targets)
    vision = arch.vision.linears if arch.vision else ()
    chosen = _chosen(arch, arch.layer_linears, wanted) + _chosen(arch, vision, wanted, vision=True)
    pair: tuple[str, ...] = PEFT_FUSED.get(arch.family, ())
    fused = {lin.name for lin in chosen if lin.per_layer > 1} & set(pair)
    if pair and len(fused) == 1:
        raise InvalidInputError(
            "lora_target_modules", f"must name both {pair[0]} and {pair[1]} or neither (one fused gate_up_proj); got {sorted(wanted)}"
        )
    return chosen


def _count(arch: Architecture, linears: tuple[Linear, ...], wanted: set[str], rank: int, vision: bool = False) -> int:
    pair: tuple[str, ...] = () if vision else PEFT_FUSED.get(arch.family, ())
    total = 0
    chosen = _chosen(arch, linears, wanted, vision)
    experts = [lin for lin in chosen if lin.per_layer > 1 and lin.name in pair]
    for lin in chosen:
        if lin not in experts:
            total += lin.per_layer * rank * (lin.in_features + lin.out_features)
    if experts:  # gate_up_proj (E, 2I, h) adapted at rank 2r: E · 2r · (h + 2I)
        h, inter = experts[0].in_features, experts[0].out_features
        total += experts[0].per_layer * 2 * rank * (h + 2 * inter)
    return total


@lru_cache(maxsize=4096)
def lora_params(arch: Architecture, targets: tuple[str, ...], rank: int) -> int:
    """Trainable LoRA parameters over every decoder layer and the vision side (peft's count)."""
    lora_targets(arch, targets)  # refuses half a fused pair
    wanted = _wanted(arch, targets)
    counted: dict[tuple[Linear, ...], int] = {}  # decoder layers of one shape (most models: all) are counted once
    total = 0
    for layer in arch.layers:
        found = counted.get(layer.linears)
        if found is None:
            found = counted[layer.linears] = _count(arch, layer.linears, wanted, rank)
        total += found
    vision = arch.vision.linears if arch.vision else ()
    return total + _count(arch, vision, wanted, rank, vision=True)
