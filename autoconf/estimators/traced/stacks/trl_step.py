"""TRL's ``SFTTrainer`` (trl 1.16, transformers 5.24, accelerate 1.15, peft 0.21) on fake tensors, one rank of N.

The worker: ``python -m autoconf.estimators.traced.stacks.trl_step SPEC.json OUT.npz`` prints one JSON summary
(dist.py's ``summarise``) and writes the samples and allocation events. What runs is the stacks' own code:
``SFTTrainer(model, SFTConfig(...), peft_config=LoraConfig(...))`` over a pre-tokenised dataset of full-length
samples, then ``trainer.train()`` for two steps: TRL's dataset preparation and collator, peft's wrapping (LoRA,
DoRA: ``use_dora``), the Trainer's fused AdamW (``optim="adamw_torch_fused"``), accelerate's ``prepare`` (DDP,
FSDP1, FSDP2 with ``cpu_ram_efficient_loading`` on or off, from ``fsdp_config``), TRL's ``compute_loss`` through
its fused LM head (``add_fused_lm_head``), ``accelerator.backward``, the Trainer's ``_clip_grad_norm`` and
optimizer step.

With ``trainer: transformers`` in the spec it runs transformers' own ``Trainer`` instead (the model's own loss over
full logits, peft's ``get_peft_model`` applied first, ``DataCollatorForLanguageModeling``): the tests hold the HF
step (dist.py) that answers ``hf-trainer`` jobs against it; no job routes there.

Then the Trainer's checkpoint save after step 2 (``_save_checkpoint``: model, optimizer, scheduler; for FSDP the
full state dicts it gathers on the device); host copies and file writes are not counted.

Where fake tensors or a CPU machine cannot run that code unchanged (trl_fakes.py, trl_host.py; none of these
allocates device memory, or each allocates what the GPU code allocates):

* **Host and device.** The checkpoint is materialised in host memory (uncounted), as ``from_pretrained`` leaves it;
  every move to the device is a counted copy: the Trainer's ``model.to(device)`` (one GPU, DDP), FSDP2's
  ``_move_states_to_device`` per unit (loading off), ``fsdp2_load_full_state_dict``'s ``.to(device)`` of each full
  tensor (loading on: the model is moved to meta first, as accelerate does). QLoRA: each 4-bit weight is quantised on
  the device by bitsandbytes' own ``quantize_4bit`` from its host value, every other tensor lands on the device
  (``device_map``); the packed weight is a frozen parameter carrying its quant state (qlora.py: a Params4bit cannot
  wrap a fake tensor), of a fake-tensor class named ``Params4bit`` (trl_fakes.four_bit_class: accelerate and peft
  tell 4-bit weights by that name). Under FSDP the packed weights are stored in the model's dtype, as the FSDP-QLoRA
  recipe sets ``bnb_4bit_quant_storage``, and FSDP2's gathered weight gets its module's quant state where
  bitsandbytes would wrap it in a new Params4bit (trl_fakes.gathered_four_bit). With 4-bit weights accelerate skips
  ``cpu_ram_efficient_loading``'s move to meta (fsdp_utils.py ``fsdp2_prepare_model``): every rank holds the whole
  quantised model until ``fully_shard`` shards it, the load spike accelerate's comment there names.
* **The GPU route of the fused LM head.** ``_fused_forward`` (trl/trainer/utils.py, ``compact =
  _use_triton(device)``) scores only the valid positions on a GPU (``hidden_states[mask]``) and folds each
  ``[4096, 32768]`` logits tile in a Triton kernel (trl/kernels/chunked_logprob.py ``_forward_kernel``,
  ``_backward_kernel``) that allocates nothing: it reads the tile and writes the per-token statistics (forward) or
  the tile itself (backward) in place; ``_addmm_fp32`` accumulates with ``torch.addmm(..., out_dtype=float32,
  out=acc)`` on CUDA, no temporary. Here ``compact`` is the GPU's, the tile folds are in-place no-ops and
  ``_addmm_fp32`` allocates nothing (the CPU fallbacks would allocate several fp32 tiles the GPU never does).
* **Boolean masks.** A boolean index or ``masked_select`` runs as CUDA's: ``nonzero`` of the mask ((N, ndim)
  int64), then an integer index. The synthetic batch has no padding and no masked label, so on fake tensors every
  position is selected; transformers' check that the padding mask is all ones (``fast_all``, which it skips for a
  fake mask as if tracing) answers true, so the causal mask is left to SDPA as on the GPU.
* **Scalar reads.** Logging (loss, grad norm, token counts, NaN checks) reads values: on fake tensors they answer
  1 (false for a boolean: no NaN, no overflow).
* **Devices.** accelerate shards only on accelerator devices: its state is told it runs ``MULTI_GPU`` on the
  fake process group, with ``cpu`` as the device; FSDP2's default mesh is built before fake mode (its coordinates
  are computed from tensor values). ``Module.to`` to the device a module is on only changes dtypes (FakeTensorMode
  keeps weak references to fake parameters, so torch refuses to swap them). DDP is built without device ids,
  without its initial broadcast, with torch's no-op communication hook, its steps as under ``no_sync()`` (rank_step.py's
  reasons). A fake tensor's ``data_ptr()`` is 0: where accelerate maps the optimizer's parameters to FSDP2's by
  address, and where transformers' save finds tied weights by address, it is the storage's identity.
* **FSDP1** (``fsdp_version`` 1, driver only): its flat parameters' storage resizes are told to the tracker; its
  ``sync_module_states`` broadcast needs a CUDA device in accelerate's plugin, so it runs with it off; its
  checkpoint save (``save_fsdp_model``) reads tensor data and is not traced.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist

from autoconf.estimators.traced.dist import trace_out
from autoconf.estimators.traced.live_bytes import (
    ACTIVATIONS,
    BACKWARD,
    FORWARD,
    LOGITS,
    OPT_STEP,
    OPTIMIZER,
    WEIGHTS,
)
from autoconf.estimators.traced.rank_step import CLIP, LOAD
from autoconf.estimators.traced.stacks.hooks import driver_main
from autoconf.estimators.traced.stacks.trl_fakes import (
    FakeReads,
    accelerate_on_fake_gpus,
    default_mesh,
    distinct_addresses,
    four_bit_class,
    four_bit_storage,
    gathered_four_bit,
    gpu_fused_head,
    padding_free,
)
from autoconf.estimators.traced.stacks.trl_host import (
    HostBytes,
    HostToDevice,
    device_moves,
    host_then_quantised,
    patch_fsdp1,
    sharded_params_are_weights,
)
from autoconf.estimators.traced.wrap import ACTIVE, patch_fsdp

MODEL_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "amp-bf16": "fp32", "amp-fp16": "fp32"}


def _tokenizer() -> Any:
    """A word-level tokenizer (the dataset is pre-tokenised; TRL wants a pad and an eos token)."""
    import transformers
    from tokenizers import Tokenizer, models

    words = Tokenizer(models.WordLevel({"<pad>": 0, "<eos>": 1, "<unk>": 2}, unk_token="<unk>"))
    return transformers.PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers: unannotated
        tokenizer_object=words, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def sft_config(spec: dict[str, Any], output_dir: str) -> Any:
    """The job's SFTConfig (TrainingArguments for transformers' Trainer): two steps at the spec's micro-batch, no
    logging target, a checkpoint save after step 2."""
    trl: Any = importlib.import_module("trl")
    arguments: Any = importlib.import_module("transformers.training_args")
    setattr(arguments, "is_torch_bf16_gpu_available", lambda: True)  # noqa: B010  # the GPUs traced for have bf16
    batch, seq = spec["shape"]
    strategy = spec["strategy"]
    fsdp: dict[str, Any] = {}
    save = "steps"
    if strategy.startswith("fsdp"):
        version = int(spec.get("fsdp_version", 2))
        extra = {"sync_module_states": False} if version == 1 else {}  # see the module docstring
        save = "no" if version == 1 else save
        fsdp = {"fsdp": "full_shard auto_wrap" if strategy != "fsdp-shard-grad-op" else "shard_grad_op auto_wrap",
                "fsdp_config": {"version": version, **extra,
                                "cpu_ram_efficient_loading": bool(spec.get("cpu_ram_efficient_loading", False))}}
    hf_trainer = spec.get("trainer") == "transformers"  # transformers' own Trainer (its TrainingArguments)
    config = importlib.import_module("transformers").TrainingArguments if hf_trainer else trl.SFTConfig
    return config(
        output_dir=output_dir, max_steps=2, per_device_train_batch_size=batch, **({} if hf_trainer else {"max_length": seq}),
        bf16=spec["dtype"] == "amp-bf16", fp16=spec["dtype"] == "amp-fp16",
        gradient_checkpointing=bool(spec["gradient_checkpointing"]),
        gradient_checkpointing_kwargs={"use_reentrant": False}, optim=OPTIM[spec["optimizer_impl"]],
        learning_rate=1e-5, logging_steps=1, save_strategy=save, save_steps=2, report_to=[], dataloader_num_workers=0,
        disable_tqdm=True, **fsdp)


OPTIM = {"fused": "adamw_torch_fused", "foreach": "adamw_torch", "for-loop": "adamw_torch"}


def peft_config(spec: dict[str, Any]) -> Any:
    """peft's LoraConfig of the job (DoRA: ``use_dora``), or None for full fine-tuning."""
    if spec["method"] == "full":
        return None
    import peft

    targets = list(spec["lora_target_modules"])
    return peft.LoraConfig(r=spec["lora_r"], lora_alpha=spec["lora_alpha"], lora_dropout=spec["lora_dropout"],
                           target_modules="all-linear" if "all-linear" in targets else targets,
                           use_dora=bool(spec.get("dora")), task_type="CAUSAL_LM")


class _Steps:
    """Trainer callbacks and wrappers that move the tracker through the steps and phases."""

    def __init__(self, tracker: HostBytes) -> None:
        self.tracker, self.step = tracker, 0

    def callback(self) -> Any:
        import transformers

        steps = self

        class Phases(transformers.TrainerCallback):
            def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
                steps.step += 1
                steps.tracker.enter(steps.step, FORWARD, ACTIVATIONS)

            def on_pre_optimizer_step(self, *args: Any, **kwargs: Any) -> None:
                steps.tracker.set_phase(OPT_STEP, OPTIMIZER)

            def on_step_end(self, *args: Any, **kwargs: Any) -> None:
                steps.tracker.sample()

        return Phases()

    def wrap_save(self, trainer: Any) -> None:
        """The Trainer's checkpoint save after step 2 (model, optimizer, scheduler, RNG states): its gathers on the
        device are counted, its host copies and file writes are not (they cannot read fake data)."""
        from autoconf.estimators.traced.rank_step import SAVE, HostCopies

        files: Any = importlib.import_module("safetensors.torch")

        save = trainer._save_checkpoint

        def save_checkpoint(*args: Any, **kwargs: Any) -> None:
            self.tracker.enter(3, SAVE, WEIGHTS)
            writes = (torch.save, files.serialize_file, files._flatten_as_ptr)
            torch.save = lambda *a, **k: None
            files.serialize_file = lambda *a, **k: None
            files._flatten_as_ptr = lambda *a, **k: {}
            try:
                with HostCopies(self.tracker), distinct_addresses():
                    save(*args, **kwargs)
            finally:
                torch.save, files.serialize_file, files._flatten_as_ptr = writes
            self.tracker.sample()

        trainer._save_checkpoint = save_checkpoint

    def wrap(self, accelerator: Any) -> None:
        backward, clip = accelerator.backward, accelerator.clip_grad_norm_

        def on_backward(loss: torch.Tensor, **kwargs: Any) -> None:
            self.tracker.set_phase(BACKWARD, LOGITS)
            backward(loss, **kwargs)

        def on_clip(*args: Any, **kwargs: Any) -> Any:
            self.tracker.set_phase(CLIP, OPTIMIZER)
            return clip(*args, **kwargs)

        accelerator.backward, accelerator.clip_grad_norm_ = on_backward, on_clip


def final_norm(base: torch.nn.Module) -> torch.nn.Module:
    """The decoder's final norm: the last ``*Norm*`` module outside the layer lists (no numeric path component) and
    outside a vision tower (a vision-language model's is its language model's)."""
    norms: list[torch.nn.Module] = [m for name, m in base.named_modules() if "Norm" in type(m).__name__
                                    and not any(part.isdigit() for part in name.split(".")) and "vis" not in name]
    return norms[-1]


def trace(spec: dict[str, Any]) -> dict[str, Any]:
    """Load and two SFTTrainer steps of rank ``spec['rank']`` of ``spec['world']``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    rank, world = int(spec.get("rank", 0)), int(spec["world"])
    if world > 1:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        accelerate_on_fake_gpus()
        default_mesh(world)
    import datasets
    import transformers

    from autoconf.estimators.traced.model import _init_real, meta_model
    from autoconf.estimators.traced.stacks.hooks import Phases
    from autoconf.estimators.traced.step import _no_packed_sequences

    transformers.masking_utils.find_packed_sequence_indices = _no_packed_sequences
    reads = FakeReads(fake=not spec.get("real"))
    padding_free(reads)
    gpu_fused_head()
    gathered_four_bit()
    torch.manual_seed(0)
    start = time.perf_counter()
    batch, seq = spec["shape"]
    vocab = int(spec["arch"]["vocab_size"])
    rows = [[3 + (i * 7 + j) % (vocab - 3) for j in range(seq)] for i in range(batch * world * 2)]
    dataset = datasets.Dataset.from_dict({"input_ids": rows})
    model = meta_model({**spec, "method": "full", "dtype": MODEL_DTYPE[spec["dtype"]]})
    tracker = HostBytes()
    device_moves(tracker)
    patch_fsdp1(tracker)
    sharded_params_are_weights(tracker)
    patch_fsdp()  # FSDP2's storage resizes, all-gathers and reduce-scatters reach the tracker (wrap.py)
    ACTIVE[:] = [tracker]
    steps = _Steps(tracker)
    fake = contextlib.nullcontext() if spec.get("real") else FakeTensorMode(allow_non_fake_inputs=True)
    clock: dict[str, float] = {}
    trl: Any = importlib.import_module("trl")
    trainer: Any = None
    if spec["method"] == "qlora":
        from autoconf.estimators.traced.qlora import build_qlora

        model = build_qlora({**spec, "kbit_upcast": False, "quant_storage": four_bit_storage(spec)},
                            host_then_quantised(fake, tracker), meta_model, lambda m, s: m, _init_real)
        four_bit_class(model)
        with fake, tracker:  # from_pretrained's device_map: every tensor it does not quantise lands on the GPU
            for tensor in [*model.parameters(), *model.buffers()]:
                tracker.mark_host(tensor)
            for tensor in [*model.parameters(), *model.buffers()]:
                moved = tracker.to_device(tensor.data)
                if moved is not tensor.data:
                    tensor.data = moved
    with tempfile.TemporaryDirectory(prefix="autoconf-trl-") as out, fake, tracker, reads, HostToDevice(tracker):
        if spec["method"] != "qlora":  # (QLoRA's model is built above, quantised on the device)
            tracker.enter(0, LOAD, WEIGHTS)
            tracker.skip = True  # the checkpoint as from_pretrained loads it: in host memory
            model.to_empty(device="cpu")
            if spec.get("real"):
                _init_real(model)
            model.tie_weights()  # type: ignore[operator]
            tracker.skip = False
            for tensor in [*model.parameters(), *model.buffers()]:
                tracker.mark_host(tensor)
        if spec.get("trainer") == "transformers":  # the model's own loss; peft applied as the peft recipes do
            lora = peft_config(spec)
            if lora is not None:
                model = importlib.import_module("peft").get_peft_model(model, lora)
            collator = transformers.DataCollatorForLanguageModeling(_tokenizer(), mlm=False)
            trainer = transformers.Trainer(model=model, args=sft_config(spec, out), train_dataset=dataset,
                                           data_collator=collator, callbacks=[steps.callback()])
        else:
            trainer = trl.SFTTrainer(model=model, args=sft_config(spec, out), train_dataset=dataset,
                                     processing_class=_tokenizer(), peft_config=peft_config(spec),
                                     callbacks=[steps.callback()])
        steps.wrap(trainer.accelerator)
        steps.wrap_save(trainer)
        base: Any = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
        norm = final_norm(base)
        phases = Phases(trainer.model, norm, base.get_output_embeddings(), tracker)
        tracker.head_grad_shapes = phases.head_grad_shapes
        clock["build"] = time.perf_counter() - start
        trainer.train()
        clock["steps"] = time.perf_counter() - start - clock["build"]
    ACTIVE.clear()
    params = {id(p): p for p in trainer.model.parameters()}.values()
    return trace_out(tracker, start, sum(p.numel() for p in params), clock,
                     {"trl": trl.__version__, "transformers": transformers.__version__})


if __name__ == "__main__":
    sys.exit(driver_main(trace))
