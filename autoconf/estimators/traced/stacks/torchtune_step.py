"""torchtune's own training code on fake tensors: its model builders, LoRA modules, chunked loss, checkpointing
wrapper and FSDP2 sharding helper, in the order its recipes call them (torchtune 0.6.1).

The worker: ``python -m autoconf.estimators.traced.stacks.torchtune_step SPEC.json OUT.npz`` prints one JSON
summary (dist.py's ``summarise``: peak per step and phase, allocator replay) and writes the samples and
allocation events. What runs is torchtune's, what we add is the tracker (step.py's ``LiveBytes`` with steps) and
a fake checkpoint (fake host tensors of the model's state dict):

* **Build and load** as ``recipes/full_finetune_single_device.py`` / ``lora_finetune_single_device.py``
  ``_setup_model``: the component builder (``llama3_2``, ``qwen2``, ``mistral`` or their ``lora_*``; QLoRA:
  ``quantize_base=True``, base weights as torchao ``NF4Tensor``, see ``_nf4_without_swap``) under
  ``training.set_default_dtype`` on the device, ``set_trainable_params(get_adapter_params)`` for LoRA,
  ``training.set_activation_checkpointing`` on ``TransformerSelfAttentionLayer``, then ``load_state_dict`` of the
  checkpoint (an in-place copy). Distributed (``full_finetune_distributed.py`` / ``lora_finetune_distributed.py``):
  the builder on the meta device, ``training.shard_model`` with ``training.get_shard_conditions`` on the data
  parallel mesh, LoRA modules ``to_empty`` + ``initialize_parameters``, ``rope_init``, and
  ``training.load_from_full_model_state_dict``, which moves each full tensor to the device and keeps its shard.
* **Two steps** (the first creates AdamW's states, the second is steady): forward with
  ``set_num_output_chunks`` (the output projection per chunk), labels shifted with the ignore column,
  ``CEWithChunkedOutputLoss`` (or ``torch.nn.CrossEntropyLoss`` for the ``hf`` loss kernel) times the token count,
  ``del logits``, backward, ``training.scale_grads`` (distributed), AdamW step, ``zero_grad(set_to_none=True)``.
  Recipes clip only when ``clip_grad_norm`` is set (their configs leave it unset): not traced.
* **Save** (distributed): ``training.gather_cpu_state_dict`` and ``training.get_full_optimizer_state_dict``,
  each gathered tensor copied to the host (host copies are not counted). A single-device save reads the
  parameters in place (``model.state_dict()``): nothing is allocated on the device.
"""

from __future__ import annotations

import contextlib
import sys
import time
from functools import partial
from typing import Any, cast

import torch
from torch.overrides import TorchFunctionMode

from autoconf.estimators.traced.dist import params_of, trace_out
from autoconf.estimators.traced.live_bytes import (
    ACTIVATIONS,
    BACKWARD,
    FORWARD,
    LOGITS,
    OPT_STEP,
    OPTIMIZER,
    WEIGHTS,
)
from autoconf.estimators.traced.rank_step import CLIP, LOAD, SAVE, HostCopies
from autoconf.estimators.traced.stacks.hooks import Phases, driver_main
from autoconf.estimators.traced.wrap import ACTIVE, RankBytes, join_world, patch_fsdp

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# our LoRA target names -> torchtune's attention projection names (torchtune/modules/peft/lora.py users)
ATTN = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "o_proj": "output_proj"}
MLP = ("gate_proj", "up_proj", "down_proj")
NUM_OUTPUT_CHUNKS = 8  # CEWithChunkedOutputLoss default, as in every torchtune config


def builder_args(spec: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """torchtune's component builder for the architecture and its arguments (LoRA variant for LoRA)."""
    from torchtune.models.llama3_1._position_embeddings import Llama3ScaledRoPE
    from torchtune.models.llama3_2 import _component_builders as llama
    from torchtune.models.mistral import _component_builders as mistral
    from torchtune.models.qwen2 import _component_builders as qwen2

    # Llama 3.1+'s RoPE scaling compares frequencies by value (data-dependent on fake tensors); its result has the
    # input's shape, so the identity keeps every byte (the rotary cache is (max_seq_len, head_dim / 2, 2) either way)
    Llama3ScaledRoPE.apply_scaling = lambda self, freqs, *args, **kwargs: freqs
    arch = spec["arch"]
    kwargs: dict[str, Any] = {
        "vocab_size": arch["vocab_size"], "num_layers": arch["num_layers"], "num_heads": arch["num_heads"],
        "num_kv_heads": arch["num_kv_heads"], "embed_dim": arch["hidden_size"],
        "intermediate_dim": arch["intermediate_size"], "max_seq_len": spec["max_seq_len"],
    }
    lora = spec["method"] in ("lora", "qlora")
    family = {"llama": llama, "qwen2": qwen2, "mistral": mistral}[arch["model_type"]]
    name = {"llama": "llama3_2", "qwen2": "qwen2", "mistral": "mistral"}[arch["model_type"]]
    if arch["model_type"] != "mistral":
        kwargs["tie_word_embeddings"] = arch["tie_word_embeddings"]
    if lora:
        targets = spec["lora_target_modules"]
        every = "all-linear" in targets
        kwargs.update(
            lora_attn_modules=[ATTN[t] for t in ATTN if every or t in targets],
            apply_lora_to_mlp=every or any(t in targets for t in MLP),
            lora_rank=spec["lora_r"], lora_alpha=spec["lora_alpha"], lora_dropout=spec["lora_dropout"],
            quantize_base=spec["method"] == "qlora",  # the base weights as torchao NF4Tensor (QLoRA recipes)
        )
        name = f"lora_{name}"
    return getattr(family, name), kwargs


class DeviceCopies(TorchFunctionMode):
    """A checkpoint tensor (a host tensor) moved ``.to(device)`` is a host-to-device copy: a new device tensor.
    On fake CPU tensors the move is a no-op; make it a counted clone."""

    def __init__(self, host: set[int]) -> None:
        super().__init__()
        self.host = host

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.to and args and id(args[0]) in self.host:
            out = func(*args, **kwargs)
            if out is args[0] and isinstance(args[1] if len(args) > 1 else kwargs.get("device"), torch.device | str):
                return out.clone()
            if out is not args[0]:
                self.host.add(id(out))  # a dtype conversion on the host: still a host tensor
            return out
        return func(*args, **kwargs)


class GatherToHost(TorchFunctionMode):
    """``training.gather_cpu_state_dict`` on fake CPU tensors: its ``param.to(device)`` (reached only because fake
    shards report ``is_cpu``; on a GPU it is skipped) moves nothing, and ``.cpu()`` of a gathered tensor is a
    device-to-host copy, made uncounted (on fake CPU tensors it would return the device tensor itself)."""

    def __init__(self, tracker: RankBytes) -> None:
        super().__init__()
        self.tracker = tracker

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if func is torch.Tensor.to and args and len(args) > 1 and isinstance(args[1], torch.device):
            return args[0]
        if func is torch.Tensor.cpu:
            self.tracker.skip = True
            try:
                return args[0].detach().clone()
            finally:
                self.tracker.skip = False
        return func(*args, **(kwargs or {}))


class StackBytes(RankBytes):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """RankBytes that counts torchao's NF4Tensor (a wrapper tensor subclass) by the tensors it wraps: the wrapper's
    own storage reports the logical bf16 size, which the quantised weight does not occupy."""

    def track(self, tensor: torch.Tensor, category: int) -> None:
        from torchao.dtypes.nf4tensor import NF4Tensor

        if isinstance(tensor, NF4Tensor):
            names, _ = tensor.__tensor_flatten__()
            for name in names:
                super().track(getattr(tensor, name), category)
            return
        super().track(tensor, category)


def _nf4_without_swap() -> None:
    """``FrozenNF4Linear.__init__`` swaps its bf16 weight for the NF4 one with ``torch.utils.swap_tensors``, which
    refuses fake tensors (FakeTensorMode keeps weak references to them): register the NF4 weight instead. The same
    tensors live and die at the same points (the bf16 weight is dropped right after quantisation either way)."""
    from torchao.dtypes.nf4tensor import to_nf4
    from torchtune.modules.low_precision.nf4_linear import FrozenNF4Linear

    def init(self: Any, in_dim: int, out_dim: int, bias: bool = False, device: Any = None, dtype: Any = None,
             **quantization: Any) -> None:
        torch.nn.Linear.__init__(self, in_dim, out_dim, bias=bias, device=device, dtype=dtype)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        self.weight = torch.nn.Parameter(to_nf4(self.weight, **quantization), requires_grad=False)

    FrozenNF4Linear.__init__ = init


def fake_checkpoint(model: torch.nn.Module, spec: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The state dict a checkpointer would read (full tensors on the host, base weights only for LoRA)."""
    state = {}
    for key, value in model.state_dict().items():
        if spec["method"] != "full" and ("lora_" in key or "magnitude" in key):
            continue
        shape = value.shape if not hasattr(value, "full_tensor") else value.size()
        state[key] = torch.empty(shape, dtype=value.dtype)
    return state


def build(spec: dict[str, Any], tracker: RankBytes, mesh: Any) -> torch.nn.Module:
    """The recipe's ``_setup_model`` (see the module docstring), traced as the load phase."""
    from torchtune import modules, training
    from torchtune.modules.peft import LoRALinear, get_adapter_params, set_trainable_params

    builder, kwargs = builder_args(spec)
    dtype = DTYPES[spec["dtype"]]
    if mesh is None:
        with training.set_default_dtype(dtype), torch.device("cpu"):
            model = builder(**kwargs)
    else:
        with training.set_default_dtype(dtype), torch.device("meta"):
            model = builder(**kwargs)
    if spec["method"] != "full":
        set_trainable_params(model, get_adapter_params(model))
    if spec["gradient_checkpointing"]:
        training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
    with tracker.charged(WEIGHTS):
        tracker.skip = True
        checkpoint = fake_checkpoint(model, spec)
        tracker.skip = False
        if mesh is None:
            for tensor in list(model.parameters()) + list(model.buffers()):
                tracker.track(tensor, WEIGHTS)
            model.load_state_dict(checkpoint, strict=spec["method"] == "full")
        else:
            patch_fsdp()
            training.shard_model(model=model, shard_conditions=[partial(training.get_shard_conditions, names_to_match=None)],
                                 cpu_offload=False, reshard_after_forward=spec["strategy"] != "fsdp-shard-grad-op",
                                 dp_mesh=mesh)
            with training.set_default_dtype(dtype), torch.device("cpu"):
                for module in model.modules():
                    if isinstance(module, LoRALinear):
                        module.to_empty(device="cpu")
                        module.initialize_parameters()
                    if hasattr(module, "rope_init"):
                        module.rope_init()
            with DeviceCopies({id(t) for t in checkpoint.values()}):
                training.load_from_full_model_state_dict(model, checkpoint, torch.device("cpu"), strict=False)
    del checkpoint
    return cast(torch.nn.Module, model)


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn: Any, spec: dict[str, Any], tracker: RankBytes,
         number: int) -> None:
    """One step of the recipe's ``train`` loop (gradient accumulation 1)."""
    from torchtune import training

    batch, seq = spec["shape"]
    tracker.enter(number, FORWARD, ACTIVATIONS)
    tokens = torch.randint(0, spec["arch"]["vocab_size"], (batch, seq))
    labels = tokens.clone()
    ignore = torch.full((batch, 1), loss_fn.ignore_index)
    num_tokens = (labels != loss_fn.ignore_index).sum()
    logits = model(tokens)
    labels = torch.hstack((labels[..., 1:], ignore))
    if not isinstance(logits, list):
        labels = labels.reshape(-1)
        logits = logits.reshape(-1, logits.size(-1))
    loss = loss_fn(logits, labels) * num_tokens
    del logits, labels, tokens
    tracker.set_phase(BACKWARD, LOGITS)
    loss.backward()
    del loss
    tracker.set_phase(CLIP, OPTIMIZER)
    if spec["world"] > 1:
        training.scale_grads(model, torch.tensor(spec["world"]) / num_tokens)
    tracker.set_phase(OPT_STEP, OPTIMIZER)
    opt.step()
    tracker.sample()
    opt.zero_grad(set_to_none=True)
    tracker.sample()


def save(model: torch.nn.Module, opt: torch.optim.Optimizer, spec: dict[str, Any], tracker: RankBytes) -> None:
    """The distributed recipes' ``save_checkpoint`` gathers (full state dicts to the host)."""
    from torchtune import training

    tracker.enter(3, SAVE, WEIGHTS)
    if spec["world"] == 1:
        tracker.sample()
        return
    rank0 = spec.get("rank", 0) == 0
    with GatherToHost(tracker):
        state = [training.gather_cpu_state_dict(model, rank0, device=torch.device("cpu"),
                                                adapter_weights_only=spec["method"] != "full")]
    with HostCopies(tracker):  # torch's get_optimizer_state_dict(cpu_offload=True) moves with .to("cpu")
        state.append(training.get_full_optimizer_state_dict(model, opt, rank0, device=torch.device("cpu")))
    tracker.sample()
    del state
    tracker.sample()


def trace(spec: dict[str, Any]) -> dict[str, Any]:
    """Load, two steps and (distributed) a save of rank ``spec['rank']`` of ``spec['world']``."""
    import torchtune
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torchtune.modules.loss import CEWithChunkedOutputLoss

    torch.manual_seed(0)
    start = time.perf_counter()
    world = int(spec["world"])
    mesh = join_world(world, int(spec.get("rank", 0))) if world > 1 else None
    tracker = StackBytes()
    ACTIVE[:] = [tracker]
    clock: dict[str, float] = {}
    # ``real``: the same code on real CPU tensors (the tests' reference for the fake trace)
    fake = contextlib.nullcontext() if spec.get("real") else FakeTensorMode(allow_non_fake_inputs=True)
    if not spec.get("real"):
        _nf4_without_swap()
    with fake, tracker:
        tracker.enter(0, LOAD, WEIGHTS)
        model = build(spec, tracker, mesh)
        tracker.sample()
        clock["load"] = time.perf_counter() - start
        head = model.output if isinstance(model.output, torch.nn.Module) else None
        phases = Phases(model, model.norm, head, tracker)  # type: ignore[arg-type]  # TransformerDecoder.norm
        tracker.head_grad_shapes = phases.head_grad_shapes
        if spec["loss"] == "chunked":
            loss_fn: Any = CEWithChunkedOutputLoss(num_output_chunks=NUM_OUTPUT_CHUNKS)
            model.set_num_output_chunks(NUM_OUTPUT_CHUNKS)  # type: ignore[operator]
        else:
            loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100)
        impl = spec["optimizer_impl"]
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=2e-5, fused=impl == "fused", foreach=impl == "foreach")
        for number in (1, 2):
            step(model, opt, loss_fn, spec, tracker, number)
            clock[f"step{number}"] = time.perf_counter() - start - sum(clock.values())
        save(model, opt, spec, tracker)
        clock["save"] = time.perf_counter() - start - sum(clock.values())
    ACTIVE.clear()
    return trace_out(tracker, start, params_of(model), clock, {"torchtune": torchtune.__version__})


if __name__ == "__main__":
    sys.exit(driver_main(trace))
