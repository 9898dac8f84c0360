"""One rank of an N-GPU job, traced on fake tensors: load, first step, steady step, clipping, checkpoint save.

The worker: ``python -m autoconf.estimators.traced.dist SPEC.json OUT.npz``. It joins a fake process
group of the job's world size (torch's ``FakeStore`` and ``fake`` backend: collectives return at once
and move no data, their output buffers are allocated as on a GPU), builds the device mesh, then wraps
the transformers model (LoRA by peft where asked) as the HF Trainer does through accelerate:

* **FSDP2** (``fsdp``: full shard; ``fsdp-shard-grad-op``: no reshard after forward; ``fsdp-hybrid``: shard
  within a node, replicate across nodes, on a 2-D mesh): accelerate's
  ``fsdp2_prepare_model`` (accelerate/utils/fsdp_utils.py, 1.15): ``fully_shard`` every module whose
  class is in ``model._no_split_modules`` (the decoder layers; transformer_auto_wrap_policy), the input
  embedding alone when untied, ``[final norm, lm_head]`` as one unit with ``reshard_after_forward=False``,
  then the root, with ``MixedPrecisionPolicy()`` for pure-dtype training and the autocast dtype as
  ``param_dtype`` and ``reduce_dtype`` for amp-* (accelerate's ``set_mixed_precision``). With FSDP2 the
  Trainer keeps this policy for LoRA too: it applies peft's ``fsdp_auto_wrap_policy`` only when it delays
  the optimizer's creation, which it never does with FSDP2 (transformers 5.24 trainer.py, ``is_fsdp2``).
* **DDP** (``ddp``): ``DistributedDataParallel`` as the Trainer builds it (its gradient buckets are
  allocated at construction), with changes that fake tensors need and that allocate nothing: no
  parameter-shape check or initial broadcast (both read data), the no-op communication hook (torch's
  ``debugging_hooks.noop_hook``), and steps under ``no_sync()``: the reducer's in-place bucket all-reduce
  and its bucket rebuild after step 1 read data, and skipping them frees or allocates nothing.

Then, under one tracker (autoconf/estimators/traced/step.py's ``LiveBytes`` with an allocation log):
materialisation of the rank's parameters (``to_empty``: the load phase), two training steps (forward with
the model's loss, backward, ``clip_grad_norm_(1.0)`` as the Trainer's ``max_grad_norm``, AdamW step,
``zero_grad``): the first creates the optimizer states, the second is steady (``short_first_step`` traces
only step 1's clipping and AdamW step: a fifth less CPU, but the allocator then sees the states before any
activation, not in the real order, and its reserved peak differs); and a checkpoint save as
accelerate's FULL_STATE_DICT default for several processes (torch.distributed.checkpoint.state_dict
``get_model_state_dict`` / ``get_optimizer_state_dict`` with ``full_state_dict``, ``cpu_offload``): each
parameter is gathered whole on the device, copied to the host and dropped. Host copies are not counted.
FSDP2 frees and re-allocates gathered parameters by resizing their storage, outside the dispatcher: its
``alloc_storage``/``free_storage`` are wrapped to tell the tracker. All-gathers are charged to weights,
reduce-scatters to gradients.

The trace runs as rank 0, or the spec's ``rank``. When every sharded dimension divides by the world,
all ranks hold the same bytes. Otherwise FSDP2 pads each shard to ⌈rows/world⌉, but the last rank's
optimizer states follow its shorter unpadded shard and its load copies the padding, so phases differ
by rank: the estimator (ranks.py) then traces the last rank too and reports the larger.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import transformers.masking_utils
from torch.nn.parallel import DistributedDataParallel
from torch.overrides import TorchFunctionMode

from autoconf.estimators.traced.allocator import replay
from autoconf.estimators.traced.hf_config import DTYPES
from autoconf.estimators.traced.model import build_optimizer, finish, meta_model
from autoconf.estimators.traced.step import (
    ACTIVATIONS,
    BACKWARD,
    FORWARD,
    GRADIENTS,
    LOGITS,
    OPT_STEP,
    OPTIMIZER,
    WEIGHTS,
    LiveBytes,
    StepHooks,
    _no_packed_sequences,
)

# Phase codes of the samples: step.py's four, then these (the estimator maps them to schema phases).
CLIP, LOAD, SAVE = 4, 5, 6
PHASES = ("forward", "loss", "backward", "optimizer", "clip", "load", "save")
STRATEGIES = ("ddp", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid")
MAX_GRAD_NORM = 1.0  # transformers TrainingArguments.max_grad_norm default


class RankBytes(LiveBytes):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """LiveBytes whose samples also carry the step number (0 = load, 1 = first, 2 = steady, 3 = save)."""

    def __init__(self) -> None:
        super().__init__(events=True)
        self.step = 0
        # stream object id -> number (0: the compute stream); FSDP's streams live as long as the model
        self.streams: dict[int, int] = {id(torch.cpu.current_stream()): 0}
        self.event_ops: list[int] = []  # samples index at each allocation event

    def sample(self) -> None:
        self.samples.append((*self.totals, self.phase, self.step))

    def enter(self, step: int, phase: int, category: int) -> None:
        """Start ``phase`` of ``step`` (0 = load, 1 = first step, 2 = steady step, 3 = save)."""
        self.sample()
        self.step, self.phase, self.category = step, phase, category
        self.sample()

    def _event(self, block: int, nbytes: int) -> None:
        if self.events is not None and nbytes:
            self.events.append((block, nbytes, self.stream))
            self.event_ops.append(len(self.samples))

    @contextlib.contextmanager
    def charged(self, category: int) -> Iterator[None]:
        """New storages of the enclosed calls go to ``category``."""
        before, self.category = self.category, category
        try:
            yield
        finally:
            self.category = before


class HostCopies(TorchFunctionMode):
    """``Tensor.to("cpu")`` in a checkpoint save is a device-to-host copy: make it, uncounted."""

    def __init__(self, tracker: RankBytes) -> None:
        super().__init__()
        self.tracker = tracker

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        target = kwargs.get("device", args[1] if len(args) > 1 else None)
        if func is torch.Tensor.to and str(target) == "cpu":
            self.tracker.skip = True
            try:
                return args[0].detach().clone()
            finally:
                self.tracker.skip = False
        return func(*args, **kwargs)


def join_world(world: int, rank: int = 0, replicas: int = 1) -> Any:
    """``rank`` of a fake process group of ``world`` ranks, and its device mesh: 1-D, or for hybrid sharding
    (``replicas`` > 1) 2-D (replicate across nodes, shard within one), the mesh accelerate's
    ParallelismConfig builds for ``dp_replicate_size`` × ``dp_shard_size``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    if replicas > 1:
        return init_device_mesh("cpu", (replicas, world // replicas), mesh_dim_names=("dp_replicate", "dp_shard"))
    return init_device_mesh("cpu", (world,))


def _final_norm(model: torch.nn.Module) -> torch.nn.Module | None:
    """The last ``*Norm*`` child of the decoder stack (accelerate's ``_find_final_norm``)."""
    base: Any = model.get_base_model() if hasattr(model, "get_base_model") else model  # type: ignore[operator]
    inner: torch.nn.Module = getattr(base, str(base.base_model_prefix), base)
    norms = [m for _, m in inner.named_children() if "Norm" in type(m).__name__]
    return norms[-1] if norms else None


def wrap_fsdp2(model: torch.nn.Module, mesh: Any, reshard: bool, amp: torch.dtype | None) -> torch.nn.Module:
    """accelerate's fsdp2_prepare_model, in its order (see the module docstring). Mixed precision (``amp``,
    the autocast dtype of amp-* jobs) gathers and reduces in that dtype, as accelerate's
    ``FullyShardedDataParallelPlugin.set_mixed_precision`` sets ``param_dtype`` and ``reduce_dtype`` for FSDP2."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=amp, reduce_dtype=amp) if amp is not None else MixedPrecisionPolicy()
    kwargs: dict[str, Any] = {"mesh": mesh, "mp_policy": policy, "reshard_after_forward": reshard}
    layer_types = set(getattr(model, "_no_split_modules", None) or [])
    for module in reversed(list(model.modules())[1:]):  # bottom-up, the root last
        if type(module).__name__ in layer_types and not isinstance(module, FSDPModule):
            fully_shard(module, **kwargs)
    embed = model.get_input_embeddings()  # type: ignore[operator]
    head = model.get_output_embeddings()  # type: ignore[operator]
    tied = head is not None and embed.weight is head.weight
    if not tied:
        fully_shard(embed, **kwargs)
    tail = [m for m in ((_final_norm(model), embed, head) if tied else (_final_norm(model), head)) if m is not None]
    fully_shard(tail, **{**kwargs, "reshard_after_forward": False})
    fully_shard(model, mesh=mesh, mp_policy=kwargs["mp_policy"])
    return model


def wrap_ddp(model: torch.nn.Module) -> torch.nn.Module:
    from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook
    from torch.nn.parallel import distributed as ddp_module

    setattr(ddp_module, "_verify_param_shape_across_processes", lambda *a, **k: None)  # noqa: B010  # reads data
    wrapped = ddp_module.DistributedDataParallel(model, init_sync=False)
    wrapped.register_comm_hook(None, noop_hook)
    return wrapped


# The tracker of the trace in progress: FSDP2's hooks are patched once per process (a serving worker runs
# many traces) and report to it.
_ACTIVE: list[RankBytes] = []


def _patch_fsdp() -> None:
    """Tell the active tracker about FSDP2's storage resizes; charge all-gathers and reduce-scatters."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    if getattr(_fsdp_param_group, "_autoconf_patched", False):
        return
    setattr(_fsdp_param_group, "_autoconf_patched", True)  # noqa: B010  # a flag on torch's module

    def resized(fn: Callable[[torch.Tensor], None]) -> Callable[[torch.Tensor], None]:
        @functools.wraps(fn)
        def call(tensor: torch.Tensor) -> None:
            fn(tensor)
            if _ACTIVE:
                _ACTIVE[-1].track(tensor, WEIGHTS)
        return call

    for module in (_fsdp_param, _fsdp_param_group):
        for name in ("alloc_storage", "free_storage"):
            if hasattr(module, name):
                setattr(module, name, resized(getattr(_fsdp_param, name)))

    group = _fsdp_param_group.FSDPParamGroup

    def charged(method: Callable[..., Any], category: int) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not _ACTIVE:
                return method(self, *args, **kwargs)
            tracker = _ACTIVE[-1]
            if category == GRADIENTS:
                for param in self.fsdp_params:
                    unsharded = getattr(param, "_unsharded_param", None)
                    if unsharded is not None and unsharded.grad is not None:
                        tracker.reclassify(unsharded.grad, GRADIENTS)
            with tracker.charged(category):
                out = method(self, *args, **kwargs)
            if category == GRADIENTS:
                for param in self.fsdp_params:
                    if param.sharded_param.grad is not None:
                        tracker.reclassify(param.sharded_param.grad, GRADIENTS)
            return out
        return call

    for name, category in (("unshard", WEIGHTS), ("wait_for_unshard", WEIGHTS), ("post_backward", GRADIENTS)):
        setattr(group, name, charged(getattr(group, name), category))

    # FSDP2 allocates the all-gather output on its copy-in stream and the reduce-scatter output on its
    # reduce-scatter stream (``with device_handle.stream(...)`` in _fsdp_collectives.py); on a GPU the caching
    # allocator reuses a freed block only on the stream that allocated it. The CPU device handle's stream
    # context is a no-op: wrap it to tag the allocations made inside it with that stream.
    plain = torch.cpu.stream

    @contextlib.contextmanager
    def tagged(stream: Any) -> Iterator[None]:
        if not _ACTIVE:
            with plain(stream):
                yield
            return
        tracker = _ACTIVE[-1]
        before = tracker.stream
        tracker.stream = tracker.streams.setdefault(id(stream), len(tracker.streams))
        try:
            with plain(stream):
                yield
        finally:
            tracker.stream = before

    torch.cpu.stream = tagged


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, hooks: StepHooks, shape: tuple[int, int],
               spec: dict[str, Any], tracker: RankBytes) -> None:
    """The HF Trainer's step: forward with the model's loss, backward, clip, optimizer step, zero_grad."""
    batch, seq = shape
    ids = torch.randint(0, spec["arch"]["vocab_size"], (batch, seq))
    labels = ids.clone()
    autocast_dtype = DTYPES[spec["dtype"]][1]
    amp = torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
    hooks.tracker = tracker
    # DDP: the reducer's bucket all-reduce (and its bucket rebuild after step 1) reads data; its buckets are
    # allocated at construction and the all-reduce works in place, so no_sync() leaves the bytes unchanged
    sync = model.no_sync() if isinstance(model, DistributedDataParallel) else contextlib.nullcontext()
    with sync:
        with amp:
            out = model(input_ids=ids, labels=labels)
        loss = out.loss
        del out
        tracker.set_phase(BACKWARD, LOGITS)
        loss.backward()
        del loss, ids, labels
    update(model, opt, tracker)
    hooks.tracker = None


def update(model: torch.nn.Module, opt: torch.optim.Optimizer, tracker: RankBytes) -> None:
    """Clip the gradients, step the optimizer, drop the gradients (the Trainer's ``zero_grad``)."""
    tracker.set_phase(CLIP, OPTIMIZER)
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], MAX_GRAD_NORM)
    tracker.set_phase(OPT_STEP, OPTIMIZER)
    opt.step()
    tracker.sample()
    opt.zero_grad(set_to_none=True)
    tracker.sample()


def first_update(model: torch.nn.Module, opt: torch.optim.Optimizer, tracker: RankBytes) -> None:
    """Step 1's clipping and optimizer step, where AdamW creates its states, from gradients of the rank's
    size and layout (zeros: values do not change bytes). Step 1's forward and backward are step 2's
    without the states, so they are not traced again."""
    tracker.enter(1, CLIP, GRADIENTS)
    for param in model.parameters():
        if param.requires_grad:
            param.grad = torch.zeros_like(param)
    update(model, opt, tracker)


def save_checkpoint(model: torch.nn.Module, opt: torch.optim.Optimizer, strategy: str, tracker: RankBytes) -> None:
    """accelerate's save for several processes: full state dicts offloaded to the host (FSDP2); DDP's
    ``state_dict()`` holds references only."""
    tracker.enter(3, SAVE, WEIGHTS)
    with HostCopies(tracker):
        if strategy == "ddp":
            state = [model.state_dict(), opt.state_dict()]
        else:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
                get_optimizer_state_dict,
            )
            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            state = [get_model_state_dict(model, options=options)]
            state.append(get_optimizer_state_dict(model, opt, options=options))
    tracker.sample()
    del state
    tracker.sample()


def trace_rank(spec: dict[str, Any]) -> dict[str, Any]:
    """Load, two steps at ``spec['shape']`` and a checkpoint save of rank 0 of ``spec['world']`` ranks."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    strategy, world = spec["strategy"], int(spec["world"])
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy}")
    transformers.masking_utils.find_packed_sequence_indices = _no_packed_sequences
    torch.manual_seed(0)
    start = time.perf_counter()
    mesh = join_world(world, int(spec.get("rank", 0)), int(spec.get("replicas", 1)))
    model = meta_model(spec)
    tracker = RankBytes()
    _ACTIVE[:] = [tracker]
    if strategy != "ddp":
        _patch_fsdp()
        model = wrap_fsdp2(model, mesh, reshard=strategy != "fsdp-shard-grad-op", amp=DTYPES[spec["dtype"]][1])
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    clock = {"build": time.perf_counter() - start}
    with fake_mode, tracker:
        tracker.enter(0, LOAD, WEIGHTS)
        model.to_empty(device="cpu")
        if strategy == "ddp":
            with tracker.charged(GRADIENTS):  # the reducer's gradient buckets
                model = wrap_ddp(model)
        inner: torch.nn.Module = model.module if isinstance(model, DistributedDataParallel) else model
        finish(inner, spec)
        tracker.sample()
        opt = build_optimizer(inner, spec)
        hooks = StepHooks(inner, spec["arch"]["num_layers"])
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
        save_checkpoint(inner, opt, strategy, tracker)
        clock["save"] = time.perf_counter() - start - sum(clock.values())
    _ACTIVE.clear()
    params = {id(p): p for p in inner.parameters()}.values()
    return {
        "samples": np.asarray(tracker.samples, dtype=np.int64),
        "events": np.asarray(tracker.events, dtype=np.int64).reshape(-1, 3),
        "event_ops": np.asarray(tracker.event_ops, dtype=np.int64),
        "total_params": sum(p.numel() for p in params),
        "seconds": time.perf_counter() - start, "num_ops": tracker.num_ops,
        "stage_seconds": {k: round(v, 3) for k, v in clock.items()},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
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


def run_one(spec_path: str, out_path: str) -> dict[str, Any]:
    """Trace SPEC.json's spec; the samples and events go to OUT.npz; the summary is returned."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    out = trace_rank(spec)
    np.savez_compressed(out_path, samples=out["samples"], events=out["events"])
    return summarise(out, bool(spec.get("expandable_segments")))


def serve() -> int:
    """Serving worker (``--serve``): one ``SPEC.json OUT.npz`` request per stdin line, one JSON line back per
    request (the summary, or ``{"error": ...}`` after which the worker exits). Saves the start-up (imports:
    seconds) of every trace after the first; the caller (ranks.py) restarts it now and then."""
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
