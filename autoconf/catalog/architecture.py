"""A model's architecture (the Architecture type) and its exact parameter counts.

The fields are the config facts the memory theory needs; the counts come from the per-layer module
layout of autoconf.catalog.families (text) and the vision part computed at parse time
(autoconf.catalog.vision). tests/test_param_counts.py and tests/test_catalog_families.py check every
count against a transformers meta-device build.

MoE layout follows transformers 5: a layer's experts are ONE module holding two 3-D parameters,
``gate_up_proj`` (E, 2·I, h) and ``down_proj`` (E, h, I); the router is a custom module, not an
``nn.Linear``. ZeRO-3 gathers a module's direct parameters at once, so the largest module of a MoE is
its experts block. LoRA rules live in autoconf.catalog.lora.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from autoconf.catalog import families, lora
from autoconf.catalog.shapes import (
    ATTENTION,
    LAYER_KINDS,
    MLA,
    SLIDING,
    LayerShape,
    Linear,
    Mamba,
    Vision,
)

# Families whose config.json the parser reads (top-level model_type), text families of the VLMs.
TEXT_TYPES = frozenset(families.FAMILIES) - {"mllama_text"}
VLM_TYPES = frozenset({"llava", "llava_next", "qwen2_vl", "qwen2_5_vl", "mllama", "gemma3"})
SUPPORTED_TYPES = TEXT_TYPES | VLM_TYPES
LLAMA_LIKE = frozenset({"llama", "mistral", "granite", "qwen2", "mixtral", "granitemoe"})  # kept for callers
ROUTERS = lora.ROUTERS
__all__ = ["MLA", "SUPPORTED_TYPES", "Architecture", "LayerShape", "Linear", "Mamba", "Vision"]


@dataclass(frozen=True)
class Architecture:
    """Hyper-parameters of one catalogued (or user-given) model, with derived counts.

    The first block of fields is the original llama-shaped core; the rest describe the families
    added since (all default to "absent", so a llama-like Architecture is built as before).
    """

    name: str
    model_type: str
    hidden_size: int
    intermediate_size: int  # dense MLP width (MoE without moe_intermediate_size: per-expert width)
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    head_dim: int = 0
    tie_word_embeddings: bool = False
    num_experts: int = 0  # routed experts per MoE layer
    experts_per_token: int = 0
    attention_bias: bool = False
    qkv_bias: bool = False
    mlp_bias: bool = False
    max_position_embeddings: int = 0
    source: str = ""
    verification: str = ""
    answerable: bool = True
    aliases: tuple[str, ...] = field(default=())
    # ---- added for the wider catalogue ------------------------------------------------------------
    hf_id: str = ""
    text_model_type: str = ""  # a VLM's language-model family ("" = model_type itself)
    hidden_act: str = "silu"
    layer_types: tuple[str, ...] = ()  # one of shapes.LAYER_KINDS per layer; () = all full attention
    sliding_window: int = 0
    attn_logit_softcap: float = 0.0  # gemma2: tanh soft-cap of attention scores (0 = none)
    final_logit_softcap: float = 0.0  # gemma2: tanh soft-cap of the output logits
    partial_rotary_factor: float = 1.0  # share of head_dim that is rotated (phi-2: 0.4)
    qk_norm: bool = False  # norms on q and k (implied for qwen3 / gemma3 / olmo2; phi's qk_layernorm)
    norm_count: int = 0  # norms per decoder layer where the config decides it (falcon); 0 = family's
    moe_intermediate_size: int = 0  # routed expert width when it differs from intermediate_size
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0  # total width of the always-on shared MLP (0 = none)
    first_k_dense: int = 0  # deepseek first_k_dense_replace: leading layers with a dense MLP
    dense_layers: tuple[int, ...] = ()  # further dense-MLP layers of a MoE (qwen mlp_only_layers / sparse step)
    mla: MLA | None = None
    mamba: Mamba | None = None
    vision: Vision | None = None
    extra_vocab_rows: int = 0  # embedding rows beyond vocab_size (mllama: 8 image / special tokens)
    lm_head_bias: bool = False
    approximate: bool = False  # the architecture is an approximation; callers must show the reason
    approximation_reason: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_TYPES:
            raise ValueError(f"model_type must be one of {sorted(SUPPORTED_TYPES)}; got '{self.model_type}'")
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        uniform = ((SLIDING if self.sliding_window else ATTENTION),)
        if set(self.layer_types) <= set(uniform):  # what layer_kinds says anyway: keep replace(num_layers=...) easy
            object.__setattr__(self, "layer_types", ())
        if self.layer_types and len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for {self.num_layers} layers")
        if set(self.layer_types) - set(LAYER_KINDS):
            raise ValueError(f"layer_types must be among {LAYER_KINDS}; got {sorted(set(self.layer_types))}")

    # ---- shape facts -------------------------------------------------------------------------
    @property
    def family(self) -> str:
        """The text family whose module layout the decoder layers follow."""
        return self.text_model_type or self.model_type

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def is_vlm(self) -> bool:
        return self.vision is not None

    @property
    def gated_mlp(self) -> bool:
        """Gated MLP (act(gate) * up): SwiGLU, or GeGLU with gelu-tanh (gemma); else a plain 2-layer MLP."""
        names = families.FAMILIES[self.family].mlp
        return len(names) != 2 or names[0] == "gate_up_proj"

    @property
    def activation(self) -> str:
        """'gated-silu', 'gated-gelu-tanh', 'gated-gelu' or the plain MLP's activation ('gelu', 'gelu_new')."""
        act = {"gelu_pytorch_tanh": "gelu-tanh"}.get(self.hidden_act, self.hidden_act)
        return f"gated-{act}" if self.gated_mlp else act

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """Each layer's kind; with no layer_types, a sliding window applies to every layer."""
        return self.layer_types or ((SLIDING if self.sliding_window else ATTENTION),) * self.num_layers

    @property
    def norms_per_layer(self) -> int:
        return self.norm_count or families.FAMILIES[self.family].norms_per_layer

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    def moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` routes its MLP through experts."""
        return self.num_experts > 0 and index >= self.first_k_dense and index not in self.dense_layers

    # ---- modules -----------------------------------------------------------------------------
    @cached_property
    def layers(self) -> tuple[LayerShape, ...]:
        """Every decoder layer's shape (kind, linears, other parameters), in order."""
        return tuple(families.layer_shape(self, i) for i in range(self.num_layers))

    @cached_property
    def layer_linears(self) -> tuple[Linear, ...]:
        """Linear modules of the decoder layers under their HF names (each distinct one once)."""
        seen: dict[tuple[str, int], Linear] = {}
        for layer in self.layers:
            for lin in layer.linears:
                seen.setdefault((lin.name, lin.per_layer), lin)
        return tuple(seen.values())

    @property
    def layer_norm_params(self) -> int:
        """Norm parameters of one decoder layer (RMSNorm: weight; LayerNorm: weight and bias)."""
        return self.norms_per_layer * families.norm_size(self, self.hidden_size)

    @cached_property
    def layer_params(self) -> int:
        """Parameters of the largest decoder layer (= every layer of a homogeneous model)."""
        return max(layer.params for layer in self.layers)

    @cached_property
    def decoder_params(self) -> int:
        """All decoder layers together."""
        return sum(layer.params for layer in self.layers)

    @property
    def embedding_params(self) -> int:
        return (self.vocab_size + self.extra_vocab_rows) * self.hidden_size

    @property
    def position_params(self) -> int:
        """Learned absolute positions (gpt_bigcode / gpt2 wpe); rotary models have none."""
        return self.max_position_embeddings * self.hidden_size if self.model_type in ("gpt_bigcode", "gpt2") else 0

    @property
    def lm_head_params(self) -> int:
        bias = self.vocab_size if self.lm_head_bias else 0
        return bias + (0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size)

    @property
    def final_norm_params(self) -> int:
        return families.norm_size(self, self.hidden_size)

    @cached_property
    def text_params(self) -> int:
        """The language model alone (a VLM's text side)."""
        head = self.final_norm_params + self.lm_head_params
        return self.embedding_params + self.position_params + self.decoder_params + head

    @property
    def vision_params(self) -> int:
        """Vision tower + projector (+ extras) of a VLM; 0 for a text model."""
        return self.vision.params if self.vision else 0

    @cached_property
    def total_params(self) -> int:
        return self.text_params + self.vision_params

    @cached_property
    def active_params(self) -> int:
        """Parameters touched per token: MoE routes each token through experts_per_token experts."""
        if not self.is_moe:
            return self.total_params
        idle = sum(layer.expert_params * (self.num_experts - self.experts_per_token) // self.num_experts
                   for layer in self.layers if layer.moe)
        return self.total_params - idle

    @cached_property
    def largest_layer_params(self) -> int:
        """Largest module's *direct* parameters (DeepSpeed ZeRO-3 gathers one module at a time).

        The embedding (or an untied lm_head, same size) for most LLMs; for a MoE the experts module,
        whose direct parameters are the fused gate_up_proj (E, 2I, h) and down_proj (E, h, I).
        """
        candidates = [self.embedding_params, self.lm_head_params, self.position_params]
        candidates += [lin.params for lin in self.layer_linears if lin.per_layer == 1]
        candidates += [layer.expert_params for layer in self.layers]
        if self.vision:
            candidates.append(self.vision.largest_module_params)
        return max(candidates)

    def lora_params(self, targets: tuple[str, ...], rank: int) -> int:
        """Trainable LoRA parameters for these target names at this rank (cached)."""
        return lora.lora_params(self, tuple(targets), rank)

    def lora_targets(self, targets: tuple[str, ...]) -> tuple[Linear, ...]:
        """The distinct linears that these target names adapt (peft's suffix match)."""
        return lora.lora_targets(self, tuple(targets))

    @property
    def default_lora_targets(self) -> tuple[str, ...]:
        """What peft targets when none are named (or our choice where peft has no default)."""
        return lora.default_targets(self.family)

    @cached_property
    def linear_params_per_layer(self) -> int:
        """Mean weights of the layer linears per layer (what 4-bit QLoRA quantises), routers excluded."""
        total = sum(lin.per_layer * lin.in_features * lin.out_features
                    for layer in self.layers for lin in layer.linears if lin.name not in ROUTERS)
        return -(-total // self.num_layers)
