"""torchtitan's own model and parallelisation code on fake tensors (torchtitan 0.3.0, full fine-tuning of llama).

The worker: ``python -m autoconf.estimators.traced.stacks.torchtitan_step SPEC.json OUT.npz`` prints one JSON
summary (dist.py's ``summarise``) and writes the samples and allocation events. As ``torchtitan/trainer.py`` does:

* ``ParallelDims`` (data-parallel shard × tensor parallel) on a fake process group, its meshes built on CPU;
  ``Llama3Model.Config(...).build()`` on the meta device under ``set_default_dtype(training.dtype)``;
  ``parallelize_llama`` with the trainer's configs: tensor parallelism (``model.parallelize``), full activation
  checkpointing (``FullAC``) when the job checkpoints, FSDP2 by ``apply_fsdp_to_decoder`` with the mixed-precision
  policy (``mixed_precision_param`` bf16, ``mixed_precision_reduce`` fp32); then ``to_empty`` (the load phase;
  ``init_weights`` only writes values).
* Two steps: positions and ``get_attention_masks`` (flex-attention block masks, as ``post_dataloading_process``),
  forward, ``CrossEntropyLoss`` (torchtitan's ``cross_entropy_loss``: fp32 logits, loss-parallel under TP) over the
  valid-token count, ``del pred``, backward, ``dist_utils.clip_grad_norm_(max_norm=1.0, foreach=True)``, AdamW step
  (torchtitan's default optimizer: ``torch.optim.AdamW``, implementation ``fused``), ``zero_grad``.

What differs from a GPU run, and why it keeps the bytes: the trainer's flex attention is compiled into a Triton
kernel that returns the output and the log-sum-exp and saves q, k, v for backward; here the same
``flex_attention`` higher-order op runs uncompiled, and on fake tensors its registered fake implementation
allocates exactly those outputs (torch/_higher_order_ops/flex_attention.py, ``flex_attention_fake_impl``), with
no score matrix. Checkpoint saves are DCP's sharded writes from each rank's own shards (staged to the host):
not traced.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from autoconf.estimators.traced.dist import params_of, trace_out
from autoconf.estimators.traced.live_bytes import ACTIVATIONS, BACKWARD, FORWARD, LOGITS, OPT_STEP, OPTIMIZER, WEIGHTS
from autoconf.estimators.traced.rank_step import CLIP, LOAD
from autoconf.estimators.traced.stacks.hooks import Phases, driver_main
from autoconf.estimators.traced.wrap import ACTIVE, RankBytes, patch_fsdp

TORCH_DTYPES = {"bf16": ("bfloat16", "bfloat16"), "amp-bf16": ("float32", "bfloat16"), "fp32": ("float32", "float32")}
MAX_NORM = 1.0  # torchtitan TrainingConfig.max_norm default


class OpBytes(RankBytes):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """RankBytes that also sees higher-order ops (flex attention and its backward) and counts their outputs."""

    supports_higher_order_operators = True


def _patch_flex() -> None:
    """The flex_attention op uncompiled (see the module docstring): no CPU-backward refusal, no torch.compile."""
    import torch.nn.attention.flex_attention as flex
    from torchtitan.models.common.attention import FlexAttention

    setattr(flex, "_validate_device", lambda *args, **kwargs: None)  # noqa: B010  # refuses CPU backward
    setattr(flex, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True)  # noqa: B010  # the op itself, not compiled
    FlexAttention._compiled_flex_attn = staticmethod(flex.flex_attention)


def model_config(spec: dict[str, Any]) -> Any:
    """A ``Llama3Model.Config`` of the catalogue architecture, as torchtitan's own flavours are written."""
    import torchtitan.models.llama3 as llama3
    from torchtitan.models.common import Embedding, Linear, RMSNorm
    from torchtitan.models.common.rope import ComplexRoPE

    arch = spec["arch"]
    dim, vocab = arch["hidden_size"], arch["vocab_size"]
    return llama3.Llama3Model.Config(
        dim=dim, vocab_size=vocab, enable_weight_tying=arch["tie_word_embeddings"],
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim, param_init=llama3._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=llama3._NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=vocab, param_init=llama3._output_linear_init(dim)),
        layers=llama3._build_llama3_layers(
            fuse_qkv=True, n_layers=arch["num_layers"], dim=dim, n_heads=arch["num_heads"],
            n_kv_heads=arch["num_kv_heads"], hidden_dim=arch["intermediate_size"],
            # the trainer resizes every RoPE cache to training.seq_len (Decoder.Config.update_from_config)
            rope=ComplexRoPE.Config(dim=arch["head_dim"], max_seq_len=spec["shape"][1], theta=500000),
            attn_backend="flex"),
    )


def build(spec: dict[str, Any]) -> tuple[torch.nn.Module, Any]:
    """Parallel dims, the meta model and ``parallelize_llama`` (see the module docstring)."""
    import torchtitan.distributed.parallel_dims as parallel_dims_module
    import torchtitan.tools.utils as tools
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.config.configs import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed.activation_checkpoint import FullAC
    from torchtitan.models.llama3 import parallelize_llama
    from torchtitan.models.llama3.sharding import set_llama3_sharding_config

    for module in (tools, parallel_dims_module):  # meshes on CPU for the fake process group
        setattr(module, "device_type", "cpu")  # noqa: B010
    world, tp = int(spec["world"]), int(spec["tp"])
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=int(spec.get("rank", 0)), world_size=world)
    parallelism = ParallelismConfig()
    parallelism.data_parallel_shard_degree = world // tp
    parallelism.tensor_parallel_degree = tp
    # trainer default "spmd_types" expects every parameter distributed on the full mesh before FSDP; the
    # documented "partial_dtensor" backend runs the same TP plan and FSDP2 wrapping with DTensors
    parallelism.spmd_backend = "partial_dtensor"
    from torchtitan.distributed import utils as dist_utils

    dist_utils.set_spmd_backend(parallelism.spmd_backend)  # as the trainer's __init__ does
    parallelism.fsdp_reshard_after_forward = "default" if spec["strategy"] != "fsdp-shard-grad-op" else "never"
    dims = parallel_dims_module.ParallelDims.from_config(parallelism, world)
    dims.build_mesh()
    training = TrainingConfig()
    training.dtype, training.mixed_precision_param = TORCH_DTYPES[spec["dtype"]]
    training.mixed_precision_reduce = "float32"
    import torchtitan.tools.utils as utils

    config = model_config(spec)
    # Llama3Model.Config.update_from_config's own step (its Decoder part, which imports the trainer and thereby
    # tensorboard, only resizes the RoPE caches to training.seq_len: model_config already sizes them so)
    set_llama3_sharding_config(config, enable_sp=parallelism.enable_sequence_parallel)
    with torch.device("meta"), utils.set_default_dtype(getattr(torch, training.dtype)):
        model = config.build()
    ac = FullAC.Config() if spec["gradient_checkpointing"] else None
    model = parallelize_llama(model, parallel_dims=dims, training=training, parallelism=parallelism,
                              compile_config=CompileConfig(), ac_config=ac, dump_folder="")
    return model, dims


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, spec: dict[str, Any], tracker: RankBytes,
         number: int, dims: Any) -> None:
    """One step of the trainer's ``train_step`` (one micro-batch)."""
    from torchtitan.components.loss import cross_entropy_loss
    from torchtitan.distributed import utils as dist_utils

    batch, seq = spec["shape"]
    tracker.enter(number, FORWARD, ACTIVATIONS)
    tokens = torch.randint(0, spec["arch"]["vocab_size"], (batch, seq))
    labels = tokens.clone()
    positions = torch.arange(seq).unsqueeze(0).expand(batch, seq)
    valid = (labels != -100).sum()
    masks = model.get_attention_masks(positions=positions)  # type: ignore[operator]
    pred = model(tokens, attention_masks=masks, positions=positions)
    loss = cross_entropy_loss(pred, labels) / valid
    del pred, tokens, labels, masks
    tracker.set_phase(BACKWARD, LOGITS)
    loss.backward()
    del loss
    tracker.set_phase(CLIP, OPTIMIZER)
    dist_utils.clip_grad_norm_([p for p in model.parameters()], MAX_NORM, foreach=True, pp_mesh=None, ep_enabled=False)
    tracker.set_phase(OPT_STEP, OPTIMIZER)
    opt.step()
    tracker.sample()
    opt.zero_grad(set_to_none=True)
    tracker.sample()


def trace(spec: dict[str, Any]) -> dict[str, Any]:
    """Load and two steps of rank ``spec['rank']`` of ``spec['world']`` (TP degree ``spec['tp']``)."""
    import torchtitan
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch.manual_seed(0)
    _patch_flex()
    start = time.perf_counter()
    model, dims = build(spec)
    tracker = OpBytes()
    ACTIVE[:] = [tracker]
    patch_fsdp()
    clock: dict[str, float] = {}
    fake = contextlib.nullcontext() if spec.get("real") else FakeTensorMode(allow_non_fake_inputs=True)
    with fake, tracker:
        tracker.enter(0, LOAD, WEIGHTS)
        model.to_empty(device="cpu")
        tracker.sample()
        clock["load"] = time.perf_counter() - start
        phases = Phases(model, model.norm, model.lm_head, tracker)  # type: ignore[arg-type]  # Decoder's modules
        tracker.head_grad_shapes = phases.head_grad_shapes
        impl = spec["optimizer_impl"]
        opt = torch.optim.AdamW(model.parameters(), lr=8e-4, eps=1e-8, weight_decay=0.1, fused=impl == "fused",
                                foreach=impl == "foreach")
        for number in (1, 2):
            step(model, opt, spec, tracker, number, dims)
            clock[f"step{number}"] = time.perf_counter() - start - sum(clock.values())
    ACTIVE.clear()
    return trace_out(tracker, start, params_of(model), clock,
                     {"torchtitan": getattr(torchtitan, "__version__", "0.3.0")})


if __name__ == "__main__":
    sys.exit(driver_main(trace))
