"""One rank of an N-GPU job, traced on fake tensors: load, first step, steady step, clipping, checkpoint save.

The worker: ``python -m autoconf.estimators.traced.dist SPEC.json OUT.npz``. It joins a fake process
group of the job's world size (torch's ``FakeStore`` and ``fake`` backend: collectives return at once
and move no data, their output buffers are allocated as on a GPU), builds the device mesh, then wraps
the transformers model (LoRA by peft where asked) as the HF Trainer does through accelerate:

FSDP2 as accelerate's ``fsdp2_prepare_model`` wraps it, DDP (autoconf/estimators/traced/wrap.py), or tensor
parallelism as transformers shards a model at load (``tp``: its own plan and styles, peft's LoRA on the shards,
FSDP2 or replicas over the data-parallel dimension; autoconf/estimators/traced/hf_parallel.py), with
``MixedPrecisionPolicy()`` for pure-dtype training and the autocast dtype as ``param_dtype`` and
``reduce_dtype`` for amp-* (accelerate's ``set_mixed_precision``). With FSDP2 the Trainer keeps this
wrapping for LoRA too: it applies peft's ``fsdp_auto_wrap_policy`` only when it delays the optimizer's
creation, which it never does with FSDP2 (transformers 5.24 trainer.py, ``is_fsdp2``).

Then, under one tracker (autoconf/estimators/traced/live_bytes.py's ``LiveBytes`` with an allocation log):
materialisation of the rank's parameters (``to_empty``: the load phase), two training steps and a checkpoint
save (autoconf/estimators/traced/rank_step.py: the Trainer's step, accelerate's save).

The trace runs as rank 0, or the spec's ``rank``. When every sharded dimension divides by the world,
all ranks hold the same bytes. Otherwise FSDP2 pads each shard to ⌈rows/world⌉, but the last rank's
optimizer states follow its shorter unpadded shard and its load copies the padding, so phases differ
by rank: the estimator (ranks.py) then traces the last rank too and reports the larger.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers.masking_utils
from torch.nn.parallel import DistributedDataParallel

from autoconf.estimators.traced import cuda_dropout
from autoconf.estimators.traced.allocator import replay
from autoconf.estimators.traced.fsdp1 import checkpoint_units, four_bit_states_to_device, qlora_model, wrap_fsdp1
from autoconf.estimators.traced.fsdp1_offload import cpu_offload
from autoconf.estimators.traced.fsdp1_patches import patch_fsdp1
from autoconf.estimators.traced.hf_config import DTYPES
from autoconf.estimators.traced.hf_parallel import parallel_model, split_by_mesh
from autoconf.estimators.traced.live_bytes import ACTIVATIONS, FORWARD, GRADIENTS, WEIGHTS
from autoconf.estimators.traced.model import build_optimizer, finish, meta_model
from autoconf.estimators.traced.rank_step import LOAD, PHASES, first_update, fsdp1_amp, save_checkpoint, train_step
from autoconf.estimators.traced.step import StepHooks, _no_packed_sequences
from autoconf.estimators.traced.wrap import ACTIVE, RankBytes, join_world, patch_fsdp, wrap_ddp, wrap_fsdp2

# single: one unwrapped GPU, for the allocator replay of a one-GPU step (docs/traced_vs_theory.md, findings)
# fsdp1: torch's FullyShardedDataParallel as accelerate wraps it for the FSDP1 stacks (fsdp1.py)
STRATEGIES = ("ddp", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid", "tp", "single", "fsdp1")


def trace_rank(spec: dict[str, Any]) -> dict[str, Any]:
    """Load, two steps at ``spec['shape']`` and a checkpoint save of rank 0 of ``spec['world']`` ranks."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    cuda_dropout.install()
    strategy, world = spec["strategy"], int(spec["world"])
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy}")
    transformers.masking_utils.find_packed_sequence_indices = _no_packed_sequences
    torch.manual_seed(0)
    start = time.perf_counter()
    tracker = RankBytes()
    ACTIVE[:] = [tracker]
    replicated: Any = contextlib.nullcontext()
    if strategy == "tp":  # transformers' own sharding at load, peft, FSDP2 over dp (hf_parallel.py)
        from torch.distributed.tensor.experimental import implicit_replication

        patch_fsdp()
        model, replicated = parallel_model(spec, int(spec.get("rank", 0))), implicit_replication()
    else:
        mesh = join_world(world, int(spec.get("rank", 0)), int(spec.get("replicas", 1)))
        model = meta_model(spec)
    if strategy == "fsdp1":
        patch_fsdp1()
    elif strategy not in ("ddp", "single", "tp"):
        patch_fsdp()
        model = wrap_fsdp2(model, mesh, reshard=strategy != "fsdp-shard-grad-op", amp=DTYPES[spec["dtype"]][1])
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    clock = {"build": time.perf_counter() - start}
    if strategy == "fsdp1" and spec["method"] == "qlora":  # quantised in host memory: FSDP1 moves the units (fsdp1.py)
        model = qlora_model(spec, fake_mode)
    elif strategy == "fsdp1":  # the whole model in host memory (rank 0) or on meta: not the GPU's (fsdp1.py)
        with fake_mode:
            model.to_empty(device="cpu")
            base: Any = model.get_base_model() if hasattr(model, "get_base_model") else model  # type: ignore[operator]
            base.tie_weights()
    if strategy == "fsdp1":  # the Trainer enables checkpointing before accelerate wraps the model (4.x: around each unit)
        finish(model, {**spec, "gradient_checkpointing": False} if spec.get("hf4_checkpointing") else spec)
    offload = cpu_offload(tracker) if spec.get("cpu_offload") else contextlib.nullcontext()  # FSDP1's (fsdp1_offload.py)
    with fake_mode, tracker, replicated, offload:
        tracker.enter(0, LOAD, WEIGHTS)
        if strategy == "fsdp1":  # each unit flattened, padded, sharded: FSDP1's constructor
            hf4 = bool(spec.get("hf4_checkpointing"))
            model = wrap_fsdp1(model, spec, fsdp1_amp(spec))
            if spec["method"] == "qlora":
                four_bit_states_to_device(model)
            if hf4:
                checkpoint_units(model)
        else:
            model.to_empty(device="cpu")
        if strategy == "ddp":
            with tracker.charged(GRADIENTS):  # the reducer's gradient buckets
                model = wrap_ddp(model)
        inner: torch.nn.Module = model.module if isinstance(model, DistributedDataParallel) else model
        if strategy != "fsdp1":
            finish(inner, spec)
        tracker.sample()
        opt = build_optimizer(inner, spec)
        if strategy == "tp":
            split_by_mesh(opt)
        hooked: Any = inner.module if strategy == "fsdp1" else inner  # FSDP1: the HF model inside the root
        hooks = StepHooks(hooked, spec["arch"]["num_layers"])
        clock["load"] = time.perf_counter() - start - sum(clock.values())
        if spec.get("short_first_step"):
            first_update(inner, opt, tracker)
        else:
            tracker.enter(1, FORWARD, ACTIVATIONS)
            train_step(model, opt, hooks, tuple(spec["shape"]), spec, tracker)
        clock["step1"] = time.perf_counter() - start - sum(clock.values())
        tracker.enter(2, FORWARD, ACTIVATIONS)
        train_step(model, opt, hooks, tuple(spec["shape"]), spec, tracker)
        clock["step2"] = time.perf_counter() - start - sum(clock.values())
        if strategy != "fsdp1":  # FSDP1 stacks save SHARDED_STATE_DICT: the rank's own shards (fsdp1.py)
            save_checkpoint(inner, opt, strategy, tracker)
        clock["save"] = time.perf_counter() - start - sum(clock.values())
    ACTIVE.clear()
    out = trace_out(tracker, start, params_of(inner), clock, {"transformers": transformers.__version__})
    return {**out, "event_ops": np.asarray(tracker.event_ops, dtype=np.int64)}


def params_of(model: torch.nn.Module) -> int:
    """Elements of the model's distinct parameters (tied weights once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def trace_out(tracker: RankBytes, start: float, total_params: int, clock: dict[str, float],
              versions: dict[str, str]) -> dict[str, Any]:
    """What every rank trace hands to ``summarise``: the tracker's samples and events, the parameter count, the
    seconds by stage since ``start`` and the versions traced (torch's added)."""
    return {
        "samples": np.asarray(tracker.samples, dtype=np.int64),
        "events": np.asarray(tracker.events, dtype=np.int64).reshape(-1, 3),
        "total_params": total_params,
        "seconds": time.perf_counter() - start, "num_ops": tracker.num_ops,
        "stage_seconds": {k: round(v, 3) for k, v in clock.items()},
        "versions": {"torch": torch.__version__, **versions},
    }


def summarise(out: dict[str, Any], expandable: bool) -> dict[str, Any]:
    """Peak per (step, phase) with its breakdown, and the allocator replay's reserved peak."""
    samples = out["samples"][1:]  # the first sample precedes the load
    totals = samples[:, :5].sum(axis=1)
    phases = []
    for step, phase in sorted({(int(s), int(p)) for p, s in samples[:, 5:7]}):
        rows = np.flatnonzero((samples[:, 5] == phase) & (samples[:, 6] == step))
        i = rows[int(np.argmax(totals[rows]))]
        phases.append({"step": step, "phase": PHASES[phase], "peak": int(totals[i]),
                       "parts": [int(v) for v in samples[i, :5]]})
    sim = replay([(int(b), int(n), int(st)) for b, n, st in out["events"]], expandable=expandable)
    return {"phases": phases, "allocated_peak": int(totals.max()), "replayed_allocated_peak": sim.max_allocated,
            "reserved_peak": sim.max_reserved, "segments": sim.num_segments, "total_params": out["total_params"],
            "seconds": round(out["seconds"], 3), "stage_seconds": out["stage_seconds"], "num_ops": out["num_ops"],
            "versions": out["versions"]}


def run_one(spec_path: str, out_path: str, tracer: Callable[[dict[str, Any]], dict[str, Any]] | None = None
            ) -> dict[str, Any]:
    """Trace SPEC.json's spec with ``tracer`` (default: the HF rank trace; the stack drivers pass their own);
    the samples and events go to OUT.npz; the summary is returned."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    cuda_dropout.install()
    out = (tracer or trace_rank)(spec)
    np.savez_compressed(out_path, samples=out["samples"], events=out["events"])
    return summarise(out, bool(spec.get("expandable_segments")))


def serve() -> int:
    """Serving worker (``--serve``): one ``SPEC.json OUT.npz`` request per stdin line, one JSON line back per
    request (the summary, or ``{"error": ...}`` after which the worker exits). Saves the start-up (imports:
    seconds) of every trace after the first; the caller (rank_cache.py) restarts it now and then."""
    for line in sys.stdin:
        spec_path, out_path = line.split()
        try:
            answer = run_one(spec_path, out_path)
        except Exception as exc:  # noqa: BLE001  # reported to the caller, who starts a fresh worker
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
            return 1
        print(json.dumps(answer), flush=True)
        gc.collect()
    return 0


def main(argv: list[str]) -> int:
    """Worker entry point: ``SPEC.json OUT.npz`` (prints one JSON summary line) or ``--serve``."""
    if argv == ["--serve"]:
        return serve()
    print(json.dumps(run_one(argv[0], argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
