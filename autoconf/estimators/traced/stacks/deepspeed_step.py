"""DeepSpeed's ZeRO engine (stages 1–3) on fake tensors, as the HF Trainer drives it (DeepSpeed 0.19.8).

The worker: ``python -m autoconf.estimators.traced.stacks.deepspeed_step SPEC.json OUT.npz`` prints one JSON
summary (dist.py's ``summarise``) and writes the samples and allocation events. What runs is DeepSpeed's:
``deepspeed.initialize`` with the transformers model (fake CPU tensors, LoRA by peft where asked) and the Trainer's
torch AdamW as client optimizer, under the config the Trainer fills for an ``auto`` ZeRO config
(transformers/integrations/deepspeed.py ``trainer_config_finalize``: ``reduce_bucket_size`` = hidden², ZeRO-3
``stage3_prefetch_bucket_size`` = 0.9·hidden², ``stage3_param_persistence_threshold`` = 10·hidden; ``bf16`` or
``fp16`` from the job's dtype, ``gradient_clipping`` = ``max_grad_norm`` 1.0); the engine's partitioning and flat
fp32 master partitions (the load phase), two steps of ``engine(...)``, ``engine.backward``, ``engine.step`` (its
gradient clipping and optimizer step).

DeepSpeed on a fake process group needs: its CPU accelerator (``DS_ACCELERATOR=cpu``) with ``LOCAL_SIZE=1`` (more
local ranks make it wait for peers in its shared-memory communication op), the rank's environment
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``); moves of a module to the device and dtype it already has are no-ops
(FakeTensorMode keeps weak references to fake parameters, so torch refuses to swap them); and three reads of
values answer as a healthy step would: no gradient overflow (``has_overflow``), a finite gradient norm
(``is_invalid_grad_norm``), the same partition sizes on every rank (``assert_ints_same_as_other_ranks``, a
cross-rank consistency check). None of these allocates device memory.

Categories are exact in total, approximate per part: DeepSpeed's flat buffers are charged to the phase that makes
them (the fp32 master partitions and gradient buckets at initialisation to weights).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from autoconf.estimators.traced.dist import trace_out
from autoconf.estimators.traced.live_bytes import ACTIVATIONS, BACKWARD, FORWARD, LOGITS, OPT_STEP, OPTIMIZER, WEIGHTS
from autoconf.estimators.traced.rank_step import LOAD
from autoconf.estimators.traced.stacks.hooks import Phases, driver_main
from autoconf.estimators.traced.wrap import RankBytes

MODEL_DTYPE = {"bf16": "bf16", "amp-bf16": "bf16", "fp16": "fp16", "amp-fp16": "fp16", "fp32": "fp32"}


def _same_place_moves() -> None:
    """``Module.to(device, dtype)`` where the module already is: return it (see the module docstring)."""
    move = torch.nn.Module.to

    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        params = list(self.parameters())
        here = not params or device is None or torch.device(device) == params[0].device
        same = dtype is None or all(p.dtype == dtype for p in params if p.is_floating_point())
        return self if here and same else move(self, *args, **kwargs)

    torch.nn.Module.to = to  # type: ignore[method-assign,assignment]


def _healthy_reads() -> None:
    """The value reads of a step answer as a healthy step's (see the module docstring)."""
    import deepspeed.runtime.utils as runtime_utils
    import deepspeed.runtime.zero.partition_parameters as partition
    import deepspeed.runtime.zero.partitioned_param_coordinator as coordinator
    import deepspeed.runtime.zero.stage3 as stage3
    import deepspeed.runtime.zero.stage_1_and_2 as stage12
    import deepspeed.runtime.zero.utils as zero_utils

    for module in (stage3, stage12, runtime_utils):
        if hasattr(module, "is_invalid_grad_norm"):
            setattr(module, "is_invalid_grad_norm", lambda *args, **kwargs: False)  # noqa: B010
    for module in (stage3, partition, coordinator, zero_utils):
        if hasattr(module, "assert_ints_same_as_other_ranks"):
            setattr(module, "assert_ints_same_as_other_ranks", lambda *args, **kwargs: None)  # noqa: B010
    for cls in (stage3.DeepSpeedZeroOptimizer_Stage3, stage12.DeepSpeedZeroOptimizer):
        setattr(cls, "has_overflow", lambda self, *args, **kwargs: False)  # noqa: B010


def ds_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The config the HF Trainer fills for an ``auto`` ZeRO config (see the module docstring)."""
    hidden = int(spec["arch"]["hidden_size"])
    zero: dict[str, Any] = {"stage": int(spec["stage"]), "reduce_bucket_size": hidden * hidden}
    if zero["stage"] == 3:
        zero.update(stage3_prefetch_bucket_size=int(0.9 * hidden * hidden), stage3_param_persistence_threshold=10 * hidden)
    dtype = MODEL_DTYPE[spec["dtype"]]
    return {"train_micro_batch_size_per_gpu": spec["shape"][0], "gradient_accumulation_steps": 1,
            "zero_optimization": zero, "bf16": {"enabled": dtype == "bf16"}, "fp16": {"enabled": dtype == "fp16"},
            "gradient_clipping": 1.0, "zero_allow_untested_optimizer": True}


def trace(spec: dict[str, Any]) -> dict[str, Any]:
    """Initialisation and two steps of rank ``spec['rank']`` of ``spec['world']`` under ZeRO ``spec['stage']``."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    rank, world = int(spec.get("rank", 0)), int(spec["world"])
    os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(world), LOCAL_SIZE="1")
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    import deepspeed
    import transformers

    from autoconf.estimators.traced.model import build_optimizer, finish, meta_model
    from autoconf.estimators.traced.step import _no_packed_sequences

    _same_place_moves()
    _healthy_reads()
    transformers.masking_utils.find_packed_sequence_indices = _no_packed_sequences
    torch.manual_seed(0)
    start = time.perf_counter()
    model_spec = {**spec, "dtype": MODEL_DTYPE[spec["dtype"]]}
    model = meta_model(model_spec)
    tracker = RankBytes()
    batch, seq = spec["shape"]
    # ``real``: the same code on real CPU tensors (the tests' reference for the fake trace)
    fake = contextlib.nullcontext() if spec.get("real") else FakeTensorMode(allow_non_fake_inputs=True)
    with fake, tracker:
        tracker.enter(0, LOAD, WEIGHTS)
        model.to_empty(device="cpu")
        base: Any = model.get_base_model() if hasattr(model, "get_base_model") else model  # type: ignore[operator]
        base.tie_weights()
        finish(model, model_spec)
        opt = build_optimizer(model, model_spec)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config(spec),
                                               dist_init_required=False)
        tracker.sample()
        loaded = time.perf_counter()
        norm = getattr(getattr(base, base.base_model_prefix), "norm")  # noqa: B009  # the decoder's final norm
        phases = Phases(model, norm, base.get_output_embeddings(), tracker)
        tracker.head_grad_shapes = phases.head_grad_shapes
        for number in (1, 2):
            tracker.enter(number, FORWARD, ACTIVATIONS)
            ids = torch.randint(0, spec["arch"]["vocab_size"], (batch, seq))
            loss = engine(input_ids=ids, labels=ids).loss
            tracker.set_phase(BACKWARD, LOGITS)
            engine.backward(loss)
            del loss, ids
            tracker.set_phase(OPT_STEP, OPTIMIZER)  # clipping and the optimizer step, inside engine.step
            engine.step()
            tracker.sample()
    params = {id(p): p for p in model.parameters()}.values()
    return trace_out(tracker, start, sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in params),
                     {"load": loaded - start, "steps": time.perf_counter() - loaded},
                     {"deepspeed": deepspeed.__version__, "transformers": transformers.__version__})


if __name__ == "__main__":
    sys.exit(driver_main(trace))
