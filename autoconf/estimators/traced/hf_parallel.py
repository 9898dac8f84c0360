"""Tensor parallelism as transformers shards a model at load, alone or inside data parallelism, with peft's LoRA.

Used by the rank-trace worker (autoconf/estimators/traced/dist.py, strategy ``tp``); imports torch, transformers, peft.

transformers 5.24 trains a tensor-parallel model the way ``from_pretrained(distributed_config=DistributedConfig(
tp_size=T, fsdp_size=F, dp_replicate_size=R))`` loads it (transformers/distributed/mixin.py,
``maybe_distribute_model``): one device mesh ``(pp, dp_replicate, fsdp, tp)`` with tp innermost
(distributed/utils.py, ``initialize_distributed_mesh``), the model's own plan applied on the ``tp`` sub-mesh with
transformers' styles (``apply_tensor_parallelism``: q/k/v and gate/up colwise, o/down rowwise, the embedding's and
the head's vocabulary rows split), then, when ``R·F > 1``, FSDP2 by the model's ``_fsdp_plan`` on the ``fsdp`` (or
``(dp_replicate, fsdp)``) sub-mesh (distributed/fsdp.py, ``apply_fully_sharded_data_parallelism``: every decoder
layer resharded after forward, ``[final norm, lm_head]`` kept gathered, then the root). The Trainer then leaves the
model alone (trainer.py: ``is_distributed_loading_by_transformers``: no DDP, no accelerate wrapping).
The placement's data-parallel strategy picks the sizes: ``fsdp`` → F = dp; ``ddp`` → R = dp, F = 1 (transformers
has no DDP for such a model: replicas are FSDP2 groups of one shard, gradients all-reduced across them);
``fsdp-hybrid`` → R = nodes, F = dp / nodes.

LoRA: peft 0.21 adapts a tensor-parallel model itself (peft/tuners/lora/model.py, ``add_lora_tp_hooks_dtensor``):
for a colwise base layer it shards ``lora_B`` by rows on the tp mesh and keeps ``lora_A`` whole; for a rowwise
one it shards ``lora_A`` by columns and keeps ``lora_B`` whole. It needs transformers' own TP (the model's
``_device_mesh`` and ``config.distributed_config``): on torch's ColwiseParallel it builds whole adapters next to
the local output and the forward fails on their shapes. So the order is transformers' TP, then peft, as a user of
the HF stack loads then adapts. With data parallelism FSDP2 comes last, after peft, as accelerate's FSDP2
preparation wraps an adapted model: peft 0.21 on a model that transformers already FSDP2-sharded at load sizes
``lora_B`` by the base weight's 2-D local shard (rows / (tp·fsdp)) and declares it a tp shard of the full rows,
and the forward fails on the shapes (both reproduced on fake tensors).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from autoconf.estimators.traced.model import _lora, meta_model

DP_STRATEGIES = ("fsdp", "ddp", "fsdp-hybrid")  # data parallelism around tensor parallelism (module docstring)


def mesh_sizes(spec: dict[str, Any]) -> tuple[int, int, int]:
    """(dp_replicate, fsdp, tp) of the spec: ``world`` is the tp degree, ``dp`` and ``dp_strategy`` the rest."""
    tp, dp = int(spec["world"]), int(spec.get("dp", 1))
    strategy = spec.get("dp_strategy", "fsdp")
    if dp == 1:
        return 1, 1, tp
    if strategy not in DP_STRATEGIES:
        raise ValueError(f"dp_strategy must be one of {', '.join(DP_STRATEGIES)} with tensor parallel; got {strategy}")
    if strategy == "ddp":
        return dp, 1, tp
    replicas = int(spec.get("replicas", 1)) if strategy == "fsdp-hybrid" else 1
    return replicas, dp // replicas, tp


def parallel_model(spec: dict[str, Any], rank: int) -> nn.Module:
    """``rank`` of a fake world of dp·tp ranks, and the model (LoRA by peft where asked) sharded as transformers
    shards it at load, on the meta device."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers.distributed.configuration_utils import DistributedConfig
    from transformers.distributed.fsdp import apply_fully_sharded_data_parallelism
    from transformers.distributed.tensor_parallel import apply_tensor_parallelism
    from transformers.distributed.utils import TransformersDeviceMesh

    replicate, shard, tp = mesh_sizes(spec)
    _forget_meshes()
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=replicate * shard * tp)
    amp = spec["dtype"].startswith("amp")  # transformers' FSDP2 mixed precision: bf16 gathers, fp32 reduce
    config = DistributedConfig(tp_size=tp, fsdp_size=shard, dp_replicate_size=replicate, fsdp_mixed_precision=amp)
    dense = init_device_mesh("cpu", (1, replicate, shard, tp), mesh_dim_names=("pp", "dp_replicate", "fsdp", "tp"))
    experts = init_device_mesh("cpu", (1, replicate, int(config.efsdp_size), int(config.ep_size or 1)),
                               mesh_dim_names=("pp", "dp_replicate", "efsdp", "ep"))
    manager = TransformersDeviceMesh(dense, experts)
    model: Any = meta_model({**spec, "method": "full"})
    # maybe_distribute_model's steps (mixin.py), with peft between tensor parallelism and FSDP2
    model.config.distributed_config = config
    model._mesh_manager, model._device_mesh = manager, manager.get_mesh(("pp", "fsdp", "tp"))
    model._is_distributed_loading_by_transformers = True
    model._tp_size, model._fsdp_size = tp, shard
    tp_plan, _, fsdp_plan = model._resolve_parallel_plans(config)
    # A tied head: transformers builds the model untied (init.no_tie_weights), shards it, and ties the head to the
    # embedding after loading (modeling_utils._finalize_model_loading); built tied here, the head's plan entry
    # ("lm_head.weight") names a parameter that named_parameters lists once, under the embedding (KeyError).
    tied = _untie(model)
    apply_tensor_parallelism(model, manager.get_mesh("tp"), tp_plan)
    adapted: nn.Module = _lora(model, spec) if spec["method"] == "lora" else model
    if config.dp_size > 1:
        apply_fully_sharded_data_parallelism(model, manager, fsdp_plan, {})
    if tied:
        model.tie_weights(recompute_mapping=False)
    return adapted


def _untie(model: Any) -> bool:
    """Give each tied target (the head) its own meta parameter of the source's shape, as transformers' untied
    build has; True if there was one."""
    tied: dict[str, str] = getattr(model, "all_tied_weights_keys", None) or {}
    for target, source in tied.items():
        parent, _, name = target.rpartition(".")
        like = model.get_parameter(source)
        setattr(model.get_submodule(parent), name, nn.Parameter(torch.empty_like(like, device="meta"),
                                                               requires_grad=like.requires_grad))
    return bool(tied)


def _forget_meshes() -> None:
    """Drop DTensor's sharding-propagation caches before a new world. They key on specs whose meshes compare equal
    across worlds of the same shape whatever the rank (DeviceMesh equality: layout and rank map), so a serving
    worker's next trace of another rank would get the previous world's mesh back, whose sub-groups are gone."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    torch._C._clear_DTensor_sharding_propagator_cache()  # the C++ dispatch fast path's
    ShardingPropagator._propagate_tensor_meta_cached.cache_clear()


def by_mesh(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """``params`` grouped by device mesh (plain tensors together), in first-seen order: the Trainer's grouping for
    parameters on several meshes (trainer.py ``create_optimizer``, ``_mixed_mesh_grad_norm``; a fused or foreach
    kernel and ``clip_grad_norm_`` cannot span meshes)."""
    from torch.distributed.tensor import DTensor

    groups: dict[Any, list[torch.Tensor]] = {}
    for param in params:
        groups.setdefault(param.device_mesh if isinstance(param, DTensor) else None, []).append(param)
    return list(groups.values())


def split_by_mesh(opt: torch.optim.Optimizer) -> None:
    """One optimizer parameter group per mesh and original group, as the Trainer builds them."""
    groups, opt.param_groups = opt.param_groups, []
    for group in groups:
        for params in by_mesh(group["params"]):
            opt.add_param_group({**{k: v for k, v in group.items() if k != "params"}, "params": params})


def clip_by_mesh(params: list[torch.Tensor], max_norm: float) -> None:
    """The Trainer's ``_mixed_mesh_grad_norm``: one norm per mesh (reduced over it), their norm, then every
    group clipped by that total."""
    from torch.distributed.tensor import DTensor
    from torch.nn.utils import clip_grads_with_norm_, get_total_norm

    groups = by_mesh(params)
    norms = []
    for group in groups:
        norm = get_total_norm([p.grad for p in group if p.grad is not None])
        norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    total = torch.linalg.vector_norm(torch.stack(norms))
    for group in groups:
        clip_grads_with_norm_(group, max_norm, total)
