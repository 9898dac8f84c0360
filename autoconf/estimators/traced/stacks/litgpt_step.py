"""LitGPT's own finetune code on fake tensors: ``litgpt/finetune/full.py`` and ``lora.py`` (litgpt 0.5.13, Lightning
Fabric 2.6), in the order their ``main`` and ``fit`` call it, on one device or as rank ``spec['rank']`` of an FSDP
world on a fake process group (litgpt_fabric.py: ``full.py``'s ``FSDPStrategy``, ``lora.py``'s
``ModelParallelStrategy``).

The worker: ``python -m autoconf.estimators.traced.stacks.litgpt_step SPEC.json OUT.npz`` prints one JSON summary
(dist.py's ``summarise``) and writes the samples and allocation events. What runs is LitGPT's and Fabric's; what we
add is the tracker (step.py's ``LiveBytes`` with steps), a fake checkpoint and fake batches:

* **Build and load** (``main``): ``L.Fabric(precision=...)`` on the CPU accelerator, ``GPT(config)`` (litgpt.model or,
  for LoRA, litgpt.lora with its ``LoRAQKVLinear`` / ``LoRALinear``) under ``fabric.init_module(empty_init=world > 1)``,
  ``mark_only_lora_as_trainable``, ``fabric.setup`` (LoRA: ``setup_module``), ``instantiate_torch_optimizer`` with
  the job's AdamW implementation, ``fabric.setup_optimizers`` and ``load_checkpoint`` (its ``lazy_load`` of
  ``lit_model.pth``, or under FSDP ``torch.load(mmap=True)``, answered by fake host tensors of the base model's state
  dict: a file memory-mapped on the host; ``load_state_dict`` copies in place, under FSDP1 each unit gathered in
  turn; LoRA under FSDP2 ``load_from_full_model_state_dict(cpu_offload=True)``: the base shards end on the host and
  are assigned, while the optimizer, made before the load from ``model.parameters()``, keeps the materialised device
  shards they replace alive).
* **Sanity validation** (``fit`` calls ``validate`` on two batches before training): no grad, full logits and
  ``chunked_cross_entropy(..., chunk_size=0)``; traced as step 0's loss phase.
* **Two steps** (the first creates AdamW's states, the second is steady): ``model.max_seq_length`` set to the
  sequence length (the rotary cache rebuilt); per micro-batch (one, or two for gradient accumulation: the first under
  ``fabric.no_backward_sync``) forward (LoRA: ``lm_head_chunk_size=128``, the last chunk shifted),
  ``chunked_cross_entropy``, ``fabric.backward`` of the loss over the micro-batches; ``optimizer.step()``,
  ``optimizer.zero_grad()``. The finetune scripts do not clip gradients.
* **Save** on one device reads the parameters in place (``fabric.save`` / ``save_lora_checkpoint`` write host
  copies): nothing is allocated on the device. LoRA under FSDP2: ``save_lora_checkpoint`` gathers each adapter
  (``full_tensor``) and copies it to rank 0's host; full under FSDP1: ``fabric.save`` of a full state dict, each unit
  gathered on the device and moved to rank 0's host (``offload_to_cpu``) before the next.
"""

from __future__ import annotations

import contextlib
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from autoconf.estimators.traced.dist import params_of, trace_out
from autoconf.estimators.traced.live_bytes import ACTIVATIONS, BACKWARD, FORWARD, LOGITS, OPT_STEP, OPTIMIZER, WEIGHTS
from autoconf.estimators.traced.rank_step import LOAD, SAVE
from autoconf.estimators.traced.stacks.hooks import Phases, driver_main
from autoconf.estimators.traced.wrap import ACTIVE, RankBytes

LM_HEAD_CHUNK = 128  # lora.py fit: model(input_ids, lm_head_chunk_size=128)
VALIDATE_ITERS = 2  # fit's sanity check: validate(..., max_iters=2) unless eval.initial_validation
# our LoRA target names -> litgpt.lora.Config switches
SWITCH = {"q_proj": "lora_query", "k_proj": "lora_key", "v_proj": "lora_value", "o_proj": "lora_projection",
          "gate_proj": "lora_mlp", "up_proj": "lora_mlp", "down_proj": "lora_mlp"}


def _same_place_moves() -> None:
    """``Module.to(device, dtype)`` whose parameters are already there (Fabric's ``convert_module`` after
    ``init_module`` built them in the precision's dtype) moves only the floating buffers, as torch's would:
    FakeTensorMode keeps weak references to fake parameters, so torch refuses to swap them for themselves."""
    move = torch.nn.Module.to

    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        params = list(self.parameters())
        here = not params or device is None or torch.device(device) == params[0].device
        if not (here and (dtype is None or all(p.dtype == dtype for p in params if p.is_floating_point()))):
            return move(self, *args, **kwargs)
        for module in self.modules():
            for name, buf in module._buffers.items():
                if buf is not None and dtype is not None and buf.is_floating_point():
                    module._buffers[name] = buf.to(dtype)
        return self

    torch.nn.Module.to = to  # type: ignore[method-assign,assignment]


def config(spec: dict[str, Any]) -> Any:
    """The catalogue architecture as a litgpt Config (the LLaMA block: RMSNorm, LLaMAMLP, sequential residual)."""
    from litgpt.lora import Config

    arch = spec["arch"]
    lora: dict[str, Any] = {}
    if spec["method"] == "lora":
        targets = spec["lora_target_modules"]
        every = "all-linear" in targets
        lora = {switch: every or any(t in targets for t, s in SWITCH.items() if s == switch)
                for switch in set(SWITCH.values())}
        lora.update(lora_r=spec["lora_r"], lora_alpha=spec["lora_alpha"], lora_dropout=spec["lora_dropout"])
    return Config(
        name=arch["name"], block_size=spec["block_size"], vocab_size=arch["vocab_size"],
        padded_vocab_size=arch["vocab_size"], n_layer=arch["num_layers"], n_head=arch["num_heads"],
        n_embd=arch["hidden_size"], n_query_groups=arch["num_kv_heads"], head_size=arch["head_dim"],
        intermediate_size=arch["intermediate_size"], rotary_percentage=1.0, parallel_residual=False, bias=False,
        attn_bias=arch["attention_bias"], norm_class_name="RMSNorm", mlp_class_name="LLaMAMLP", **lora)


def _track_all(model: torch.nn.Module, tracker: RankBytes) -> None:
    """Charge the built parameters and buffers to weights (a function: no loop variable keeps one alive)."""
    for tensor in [*model.parameters(), *model.buffers()]:
        tracker.track(tensor, WEIGHTS)


def fake_checkpoint(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``lit_model.pth`` as ``lazy_load`` hands it over: host tensors of the base model's state dict (its names: a
    LoRA model's ``.linear`` is LitGPT's wrapper, which its loaders map)."""
    return {key.replace(".linear.", "."): torch.empty(value.shape, dtype=value.dtype)
            for key, value in model.state_dict().items() if "lora_" not in key}


def batch(spec: dict[str, Any], device: torch.device) -> dict[str, torch.Tensor]:
    """A collated batch on the device (Fabric's dataloader moves it): input ids and labels, int64."""
    rows, seq = spec["shape"]
    input_ids = torch.randint(0, spec["arch"]["vocab_size"], (rows, seq), device=device)
    return {"input_ids": input_ids, "labels": input_ids.clone()}


def step(fabric: Any, model: Any, optimizer: Any, spec: dict[str, Any], tracker: RankBytes, number: int) -> None:
    """One optimizer step of ``fit``: ``spec['accumulation']`` micro-batches (gradient accumulation: the first ones
    under ``fabric.no_backward_sync``, their gradients kept for the last), then the AdamW step and ``zero_grad``."""
    from litgpt.utils import chunked_cross_entropy

    micro = int(spec.get("accumulation", 1))
    for index in range(micro):
        tracker.enter(number, FORWARD, ACTIVATIONS)
        data = batch(spec, fabric.device)
        input_ids, targets = data["input_ids"], data["labels"]
        with fabric.no_backward_sync(model, enabled=index < micro - 1):
            if spec["method"] == "lora":
                logits = model(input_ids, lm_head_chunk_size=LM_HEAD_CHUNK)
                logits[-1] = logits[-1][..., :-1, :]
                loss = chunked_cross_entropy(logits, targets[..., 1:])
            else:
                logits = model(input_ids)
                loss = chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])
            del logits, data, input_ids, targets
            tracker.set_phase(BACKWARD, LOGITS)
            fabric.backward(loss / micro)
            del loss
    tracker.set_phase(OPT_STEP, OPTIMIZER)
    optimizer.step()
    tracker.sample()
    optimizer.zero_grad()
    tracker.sample()


def sanity_check(fabric: Any, model: Any, spec: dict[str, Any], tracker: RankBytes) -> None:
    """``fit``'s ``validate(..., max_iters=2, verbose=False)`` before the first step, on two batches."""
    from litgpt.args import EvalArgs
    from litgpt.finetune.full import validate as validate_full
    from litgpt.finetune.lora import validate as validate_lora

    tracker.enter(0, FORWARD, ACTIVATIONS)  # the final norm's hook moves it to the loss phase
    validate = validate_lora if spec["method"] == "lora" else validate_full
    loader = [batch(spec, fabric.device) for _ in range(VALIDATE_ITERS)]
    validate(fabric, model, loader, EvalArgs(max_iters=VALIDATE_ITERS), verbose=False)
    del loader
    tracker.sample()


def build(fabric: Any, spec: dict[str, Any], tracker: Any) -> tuple[Any, Any]:
    """``main``'s model, optimizer and checkpoint load (see the module docstring)."""
    from litgpt import lora, utils
    from litgpt import model as full_model
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from autoconf.estimators.traced.stacks.litgpt_fabric import HostMoves, checkpoint_file

    sharded = spec["world"] > 1  # FSDP: built on the meta device (no memory), outside fake mode (litgpt_fabric.py)
    tracker.skip = sharded
    with unset_fake_temporarily() if sharded else contextlib.nullcontext(), fabric.init_module(empty_init=sharded):
        model = (lora.GPT if spec["method"] == "lora" else full_model.GPT)(config(spec))
    tracker.skip = False
    if not sharded:
        _track_all(model, tracker)
    tracker.skip = True  # the checkpoint is memory-mapped on the host
    checkpoint = fake_checkpoint(model)
    tracker.skip = False
    if spec["method"] == "lora":
        lora.mark_only_lora_as_trainable(model)
        model = fabric.setup_module(model)
    else:
        model = fabric.setup(model)
    impl = spec["optimizer_impl"]
    optimizer = utils.instantiate_torch_optimizer("AdamW", model.parameters(), fused=impl == "fused",
                                                  foreach=impl == "foreach")
    optimizer = fabric.setup_optimizers(optimizer)
    with checkpoint_file(checkpoint) as path, HostMoves(tracker, {id(t) for t in checkpoint.values()}):
        utils.load_checkpoint(fabric, model, Path(path), strict=spec["method"] == "full")
    checkpoint.clear()
    return model, optimizer


def save(fabric: Any, model: Any, spec: dict[str, Any], tracker: Any) -> None:
    """The final save: one device reads the parameters in place (``fabric.save`` / ``save_lora_checkpoint`` write
    host copies); under FSDP each adapter (LoRA) or unit (full) is gathered and copied to rank 0's host."""
    from litgpt.finetune.lora import save_lora_checkpoint

    from autoconf.estimators.traced.stacks.litgpt_fabric import HostMoves, checkpoint_file, patch_fsdp1_offload

    tracker.enter(3, SAVE, WEIGHTS)
    if spec["world"] > 1:
        with checkpoint_file({}) as path, HostMoves(tracker, set()):
            if spec["method"] == "lora":
                save_lora_checkpoint(fabric, model, Path(path))
            else:
                patch_fsdp1_offload(tracker)
                fabric.save(Path(path), {"model": model})
    tracker.sample()


def trace(spec: dict[str, Any]) -> dict[str, Any]:
    """Build, load, sanity validation, two steps and the save of rank ``spec['rank']``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autoconf.estimators.traced.stacks.litgpt_fabric import HostBytes, fabric_for

    torch.manual_seed(0)
    start = time.perf_counter()
    tracker = HostBytes()
    ACTIVE[:] = [tracker]
    clock: dict[str, float] = {}
    fabric = fabric_for(spec)
    fake = contextlib.nullcontext() if spec.get("real") else FakeTensorMode(allow_non_fake_inputs=True)
    if not spec.get("real"):
        _same_place_moves()
    with fake, tracker:
        tracker.enter(0, LOAD, WEIGHTS)
        model, optimizer = build(fabric, spec, tracker)
        tracker.sample()
        clock["load"] = time.perf_counter() - start
        inner = model.module
        phases = Phases(inner, inner.transformer.ln_f, inner.lm_head, tracker)
        tracker.head_grad_shapes = phases.head_grad_shapes
        sanity_check(fabric, model, spec, tracker)
        with tracker.charged(WEIGHTS):  # fit: min(longest sequence, train.max_seq_length) rebuilds the rotary cache
            model.max_seq_length = spec["shape"][1]
        for number in (1, 2):
            step(fabric, model, optimizer, spec, tracker, number)
            clock[f"step{number}"] = time.perf_counter() - start - sum(clock.values())
        save(fabric, model, spec, tracker)
    ACTIVE.clear()
    return trace_out(tracker, start, params_of(model), clock, {"litgpt": metadata.version("litgpt")})


if __name__ == "__main__":
    sys.exit(driver_main(trace))
