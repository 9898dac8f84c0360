"""nanotron's cost-based pipeline stage split, and what it costs a 1F1B step: the slowest stage, and the logits that
cross a stage boundary when the LM head and the loss land on different stages.

nanotron (``build_model`` in src/nanotron/models/base.py at the benchmark commit c2528430) walks the model's pipeline
blocks in order (embedding, the decoder layers, final norm, LM head, fp32 cast, loss) with their costs
(``get_block_compute_costs`` in models/llama.py: a decoder layer 4·heads·head_dim·h + 3·h·ffn, the LM head V·h, every
other block 0) and moves to the next stage *after* the block whose cumulative cost exceeds (rank + 1) / p of the
total. So the first stages take an extra layer, and with many stages the cost-0 blocks after the head pass the
head's threshold too: at 1.34B on 16 stages the head sits alone on stage 12, the fp32 cast on 13 and the loss on
14. A block's input that lives on another rank is sent there (PipelineBlock's P2P), so the head's vocabulary-sharded
logits (bf16) cross to the cast's stage and the fp32 logits to the loss's stage, and their gradients come back.

1F1B runs at its slowest stage: steady state one micro-batch per slowest-stage time, fill and drain p - 1 such slots
(Narayanan et al. 2021, §2.2), so a balanced model's compute is multiplied by max / mean stage time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from autoconf.catalog import Architecture

# nanotron's pipeline blocks after the decoder layers, in model order (models/llama.py LlamaModel and
# LlamaForTraining): TritonRMSNorm, the TensorParallelColumnLinear LM head, cast_to_fp32 (x.float()), Loss
_TAIL = ("norm", "head", "cast", "loss")


@dataclass(frozen=True)
class Stage:
    layers: int
    head: bool
    cast: bool
    loss: bool


@lru_cache(maxsize=256)
def nanotron_split(num_layers: int, layer_cost: float, head_cost: float, pp: int) -> tuple[Stage, ...]:
    """The stages nanotron's build_model assigns: blocks in order, the next stage begins after the block whose
    cumulative cost exceeds (rank + 1) / pp of the total (costs as get_block_compute_costs counts them)."""
    blocks = ["embedding", *["layer"] * num_layers, *_TAIL]
    costs = {"layer": layer_cost, "head": head_cost}
    total = num_layers * layer_cost + head_cost
    owner: list[list[str]] = [[] for _ in range(pp)]
    rank, cumulative = 0, 0.0
    for block in blocks:
        cumulative += costs.get(block, 0.0)
        owner[rank].append(block)
        if cumulative > total * (rank + 1) / pp and rank < pp - 1:
            rank += 1
    return tuple(Stage(s.count("layer"), "head" in s, "cast" in s, "loss" in s) for s in owner)


def cost_based_split(arch: Architecture, pp: int) -> tuple[Stage, ...]:
    """nanotron's stages of a decoder (pipeline_stages.nanotron_split) with get_block_compute_costs' costs: a layer
    4·heads·head_dim·h + 3·h·ffn (no key/value-head term: nanotron's formula), the LM head V·h."""
    h = arch.hidden_size
    layer = 4.0 * arch.q_width * h + 3.0 * arch.intermediate_size * h
    return nanotron_split(arch.num_layers, layer, float(arch.vocab_size * h), pp)


def stage_imbalance(stages: tuple[Stage, ...], layer_seconds: float, head_seconds: float) -> float:
    """The slowest stage's time over the mean stage's: each stage's layers and head at their own cost per token."""
    times = [s.layers * layer_seconds + (head_seconds if s.head else 0.0) for s in stages]
    return max(times) * len(times) / sum(times)


def logits_bytes_per_token(stages: tuple[Stage, ...], vocab_per_rank: float) -> float:
    """Bytes of logits one rank sends forward per token (and receives back as their gradient): the bf16 shard when
    the head and the fp32 cast sit on different stages, the fp32 shard when the cast and the loss do."""
    head = next(i for i, s in enumerate(stages) if s.head)
    cast = next(i for i, s in enumerate(stages) if s.cast)
    loss = next(i for i, s in enumerate(stages) if s.loss)
    return vocab_per_rank * (2.0 * (head != cast) + 4.0 * (cast != loss))
