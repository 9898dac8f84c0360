"""The Job: what is trained and how, independent of where it runs; and the one way in (``job_and_placement``).

Each field's metadata (``json_schema_extra``) is the one table of how the entry points spell and offer it; the
CLI flags, REST bodies and sweep columns take every field by its name, and besides:

* ``aliases``: other spellings any entry point accepts (the VRAM-budget CLI's, the data tables'; schema.ALIASES);
* ``ado``: [position, where]: an optional property of ado's experiments, at that position among the Job's (their
  published order), ``"all"``: of every one, ``"fixed-batch"``: only of those answering one global batch
  (min_gpu_recommender, resource_estimate; the searches choose it themselves);
  ``ado_default``: ado's default where it is not the field's (ado's SFTTrainer stack; 0 for "none");
* ``from``: a knob of a training config read by ``--from`` (``True``: of the field's name; else the knob's name),
  listed in what the answer says was read or defaulted;
* ``group``: the heading the CLI lists the field's flag under, and the page its control (default: the training
  stack's);
* ``unit``: what a number counts, shown beside the page's control (api/form.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from autoconf import defaults
from autoconf.schema.kinds import (
    DEFAULT_LORA_TARGETS,
    FRAMEWORKS,
    Attention,
    DType,
    Framework,
    LossKernel,
    Method,
    Optimizer,
    OptimizerImpl,
)
from autoconf.schema.placement import Placement
from autoconf.schema.words import _Input

# a package release as pip spells it (4.44.2, 4.45.0.dev0, 5.0.0rc1, 0.43.1)
RELEASE = re.compile(r"(?P<major>\d+)\.(?P<minor>\d+)(?:\.\d+)?(?:[.+-]?[0-9A-Za-z.]+)?")
FIRST_MODELLED_RELEASE = (4, 39)  # transformers: the loss is modelled from 4.39 on (theory/loss.py HF_LOSS_LINES)
FIRST_4BIT_RELEASE = (0, 39)  # bitsandbytes: 4-bit matmuls (MatMul4Bit, QLoRA) exist from 0.39 on


def _release_of(value: object, first: tuple[int, int], what: str) -> str | None:
    """``value`` as a package release (MAJOR.MINOR[.PATCH…]) no older than ``first``; None stays None."""
    if value is None:
        return None
    found = RELEASE.fullmatch(str(value).strip()) if isinstance(value, str) else None
    if found is None or (int(found["major"]), int(found["minor"])) < first:
        raise ValueError(f"{what}; got {value!r}")
    return str(value).strip()


VISION = "vision-language models"  # the group of the fields only a vision-language model reads


class Job(_Input):
    """What is trained and how: independent of where it runs."""

    model: str = Field(
        description="Catalogue model name or alias (e.g. 'llama3.1-8b'), a path to a local HF "
        "config.json, or a bare parameter count such as '7e9'.", json_schema_extra={"aliases": ["model_name"], "from": True}
    )
    framework: Framework = Field(
        defaults.FRAMEWORK,  # type: ignore[arg-type]
        description="Training stack whose behaviour the estimate follows (load path, loss, adapter dtype, "
        "quantised layers, optimizer defaults); see docs/frameworks.md.",
        json_schema_extra={"ado": [6, "all"], "ado_default": defaults.ADO_FRAMEWORK, "from": True},
    )
    method: Method = Field("full", description="Fine-tuning method: full, lora or qlora.",
                           json_schema_extra={"from": True})
    dtype: DType = Field(
        "bf16",
        description="Training precision: pure bf16/fp16/fp32 weights, or amp-* (fp32 master "
        "weights with autocast to bf16/fp16).",
        json_schema_extra={"ado": [0, "all"], "from": True},
    )
    tokens_per_sample: int = Field(
        4096, gt=0, le=2_097_152, description="Sequence length per sample (padded), tokens.",
        json_schema_extra={"aliases": ["seq_len"], "from": "seq_len", "unit": "tokens"})
    batch_size: int = Field(
        16, gt=0, le=1_048_576,
        description="Global batch per optimizer step across all GPUs (as in ado's SFTTrainer).",
        json_schema_extra={"from": "micro_batch", "unit": "samples"},
    )
    gradient_accumulation_steps: int = Field(1, ge=1, le=4096, description="Micro-steps per optimizer step.",
                                             json_schema_extra={"aliases": ["grad_accum"], "ado": [1, "fixed-batch"],
                                                                "from": "grad_accum", "unit": "micro-steps"})
    lora_r: int = Field(8, gt=0, le=4096, description="LoRA rank (lora and qlora only).",
                        json_schema_extra={"aliases": ["lora_rank"], "ado": [5, "all"], "from": True})
    lora_alpha: float = Field(16.0, gt=0, description="LoRA alpha (does not change memory).")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout probability.")
    lora_target_modules: tuple[str, ...] = Field(
        DEFAULT_LORA_TARGETS,
        description="Module names LoRA adapts (e.g. q_proj, v_proj), or 'all-linear'.",
        json_schema_extra={"from": True},
    )
    optimizer: Optimizer = Field("adamw", description="Optimizer: adamw, adamw-8bit or sgd (momentum).",
                                 json_schema_extra={"from": True})
    optimizer_state_dtype: Literal["param", "fp32"] = Field(
        "param",
        description="AdamW state precision: 'param' (torch default: same dtype as the parameter) or fp32.",
    )
    optimizer_impl: OptimizerImpl = Field(
        "foreach",
        description="torch AdamW implementation: foreach (HF adamw_torch on CUDA, fms-hf-tuning's default; "
        "a params-sized temporary in step()), fused (adamw_torch_fused) or for-loop.",
    )
    gradient_checkpointing: bool = Field(True, description="Full activation recomputation per decoder layer.",
                                         json_schema_extra={"aliases": ["grad_checkpoint"], "ado": [2, "all"], "from": True})
    attention: Attention = Field("flash", description="Attention kernel: flash, sdpa (memory-efficient) or eager.",
                                 json_schema_extra={"ado": [3, "all"], "from": True})
    fused_loss: bool = Field(
        False, description="Chunked/fused cross-entropy (Liger, fms-acceleration FOAK): no b·s·V logits.",
        json_schema_extra={"aliases": ["liger"], "ado": [4, "all"], "from": True})
    loss_kernel: LossKernel | None = Field(
        None,
        description="Cross-entropy implementation: hf (fp32 upcast), chunked (torchtune/LitGPT chunked CE), "
        "fused-ce (Triton CE over bf16 logits, fms-acceleration FOAK, Unsloth) or fused-linear-ce (Liger: "
        "logits never materialised). Default: fused-linear-ce when fused_loss, else the framework's.",
    )
    packing: bool = Field(False, description="Pack samples to tokens_per_sample (no padding waste).",
                          json_schema_extra={"from": True})
    samples_vary_in_length: bool = Field(
        False,
        description="Unpacked samples of different lengths, each batch padded to its longest: tokens_per_sample is "
        "then the longest batch's length (e.g. max_length). The caching allocator keeps loss-sized segments of "
        "shorter batches, so reserved and device peaks grow (framework profile; docs/frameworks.md).",
    )
    # --- vision-language models (ignored for text models, which refuse images_per_sample > 0) -------
    images_per_sample: int = Field(
        0, ge=0, le=64, description="Images per training sample (0 = text-only, even for a vision-language model).",
        json_schema_extra={"ado": [7, "all"], "group": VISION, "unit": "images"})
    image_resolution: int | None = Field(
        None, gt=0, le=16384,
        description="Longer image side in pixels (default: the model's image_size; 448 for dynamic-resolution Qwen-VL).",
        json_schema_extra={"ado": [8, "all"], "ado_default": 0, "group": VISION, "unit": "pixels"})
    freeze_vision: bool = Field(
        True, description="Keep the vision tower frozen (the LLaVA and Qwen2-VL fine-tuning recipes' default).",
        json_schema_extra={"ado": [9, "all"], "group": VISION})
    freeze_projector: bool = Field(False, description="Keep the vision-to-text projector frozen.",
                                   json_schema_extra={"group": VISION})
    # --- settings that frameworks differ on; None = the framework profile's value ------------------
    fsdp_cpu_ram_efficient_loading: bool | None = Field(
        None, description="FSDP: load weights on rank 0 / meta device (true) or a full copy per rank (false).")
    double_quant: bool | None = Field(None, description="QLoRA: quantise the NF4 absmax constants again (8-bit).")
    kbit_prepare: bool | None = Field(
        None, description="QLoRA on one GPU: the script calls peft's prepare_model_for_kbit_training, which casts every "
        "parameter that is not 4-bit to fp32 (default: the stack's; TRL's SFTTrainer calls it, a plain Trainer does not).")
    quantize_lm_head: bool | None = Field(None, description="QLoRA: quantise the output head to 4 bits as well.")
    vocab_parallel_loss: bool | None = Field(
        None, description="Tensor parallel: the loss splits the vocabulary over the TP ranks (Megatron, NeMo, nanotron, "
        "InternEvo, torchtitan's loss_parallel); false: every rank holds the whole vocabulary's logits, as transformers' "
        "tp_plan gathers the LM head's output (default: the stack's).")
    optimizer_in_backward: bool | None = Field(
        None, description="Step each parameter in backward and free its gradient (torchtune): no full gradient set.")
    activation_offloading: bool | None = Field(
        None, description="Move checkpointed layer inputs to CPU RAM during forward (torchtune, axolotl).")
    torch_compile: bool | None = Field(None, description="torch.compile the model (memory: not modelled; speed).")
    fp8: bool = Field(
        False, description="FP8 matmuls in the decoder layers (Transformer Engine FP8 / MXFP8, torchao float8): they "
        "run at the GPU's FP8 peak; attention and the LM head stay in the training dtype (speed; memory: not modelled).")
    transformers_version: str | None = Field(
        None, description="transformers release the stack ran (e.g. 4.44.2, 4.39 or later): the causal-LM loss keeps "
        "12·V bytes per token at its peak in 4.39–4.45, 14·V in 4.46–4.48 (bf16 logits kept beside the fp32 copy), "
        "12·V from 4.49 on, and gpt_bigcode's loss runs on the bf16 logits before 4.49 (6·V); default: the installed "
        "(latest) release's loss. See docs/frameworks.md.")
    bitsandbytes_version: str | None = Field(
        None, description="bitsandbytes release the stack ran (QLoRA; e.g. 0.43.3, 0.39 or later): up to 0.43.1 "
        "every 4-bit matmul keeps its input for backward (fixed in 0.43.2); default: the installed release's "
        "behaviour (input not kept). See docs/frameworks.md.")
    expandable_segments: bool | None = Field(
        None, description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less allocator fragmentation).")
    dora: bool = Field(False, description="DoRA (weight-decomposed LoRA): a magnitude vector per adapted module.")
    save_only_model: bool = Field(
        False, description="Checkpoints hold the trained weights only, no optimizer states (HF TrainingArguments "
        "save_only_model; the run cannot resume from them): smaller, faster checkpoint writes in the job's time.")
    sequence_parallel: int = Field(
        1, ge=1, le=1024, description="Sequence/context-parallel degree: GPUs that split one sample's tokens.",
        json_schema_extra={"unit": "GPUs"})

    @model_validator(mode="before")
    @classmethod
    def _framework_defaults(cls, data: object) -> object:
        """Fields whose default depends on the framework take it from defaults.FRAMEWORK_JOB_DEFAULTS."""
        if not isinstance(data, dict):
            return data
        framework = data.get("framework") or defaults.FRAMEWORK
        name = str(framework).strip().lower()
        found = defaults.FRAMEWORK_JOB_DEFAULTS.get(name, defaults.FRAMEWORK_JOB_DEFAULT) if name in FRAMEWORKS else {}
        missing = {k: v for k, v in found.items() if data.get(k) is None}
        return {**data, **missing} if missing else data

    @property
    def effective_loss_kernel(self) -> str:
        if self.loss_kernel is not None:
            return self.loss_kernel
        if self.fused_loss:
            return "fused-linear-ce"
        return defaults.FRAMEWORK_LOSS_KERNEL.get(self.framework, "hf")

    @field_validator("lora_target_modules", mode="before")
    @classmethod
    def _split_targets(cls, value: object) -> object:
        """Accept 'q_proj,v_proj' and '[q_proj, v_proj]' as well as lists."""
        if isinstance(value, str):
            text = value.strip().strip("[]")
            return tuple(p.strip().strip("'\"") for p in text.split(",") if p.strip())
        return value

    @field_validator("transformers_version", mode="before")
    @classmethod
    def _release(cls, value: object) -> object:
        """A transformers release, MAJOR.MINOR[.PATCH…] with a modelled loss (4.39 or later)."""
        return _release_of(value, FIRST_MODELLED_RELEASE, "transformers_version must be a transformers release such "
                           "as 4.44.2, 4.39 or later (the loss is modelled for 4.39–4.45, 4.46–4.48 and 4.49 on)")

    @field_validator("bitsandbytes_version", mode="before")
    @classmethod
    def _bnb_release(cls, value: object) -> object:
        """A bitsandbytes release, MAJOR.MINOR[.PATCH…], with 4-bit matmuls (0.39 or later)."""
        return _release_of(value, FIRST_4BIT_RELEASE, "bitsandbytes_version must be a bitsandbytes release such as "
                           "0.43.3, 0.39 or later (4-bit matmuls arrived in 0.39)")

    @field_validator("model")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("model must be a catalogue name, a config.json path or a parameter count")
        return value.strip()


def field_metadata(key: str) -> dict[str, Any]:
    """The Job fields whose metadata has ``key`` (see the module's docstring), in field order, with its value."""
    found = {name: info.json_schema_extra for name, info in Job.model_fields.items()}
    return {name: extra[key] for name, extra in found.items() if isinstance(extra, dict) and key in extra}


# Other spellings of Job words, one table for every entry point that reads words (sweep rows, ado points, REST
# bodies, the CLI's generated flags), read from the fields' ``aliases`` metadata: the ado/data-table name of the
# model and the VRAM-budget CLI's names (docs/dialects.md). A canonical name given beside its alias wins.
def _field_aliases() -> dict[str, str]:
    return {str(alias): name for name, found in field_metadata("aliases").items() for alias in found}


ALIASES = _field_aliases()
PER_DEVICE_BATCH = "per_device_batch_size"  # batch_size = this × number_gpus × gradient_accumulation_steps


def _plain(value: Any) -> Any:  # noqa: ANN401 - any cell of a table or body
    """numpy scalars -> Python; an empty cell (None, NaN) -> None."""
    item = getattr(value, "item", None)
    value = item() if callable(item) and not isinstance(value, (str, bytes)) else value
    return None if isinstance(value, float) and math.isnan(value) else value


def canonical_words(words: Mapping[str, Any], default_gpus: int = 1) -> dict[str, Any]:
    """``words`` with empty cells dropped, aliases renamed and a per-device batch turned into batch_size."""
    data = {key: v for key, value in words.items() if (v := _plain(value)) is not None}
    for alias, name in ALIASES.items():
        if alias in data:
            data.setdefault(name, data.pop(alias))
    if data.get("model") is not None and not isinstance(data["model"], str):
        data["model"] = str(data["model"])  # a bare parameter count read as a number
    if data.get(PER_DEVICE_BATCH) is not None and data.get("batch_size") is None:
        gpus = int(data.get("number_gpus") or default_gpus)
        data["batch_size"] = int(data[PER_DEVICE_BATCH]) * gpus * int(data.get("gradient_accumulation_steps") or 1)
    return data


def job_of_words(words: Mapping[str, Any]) -> Job:
    """The Job in a mapping of a user's words; words that are no Job field are left to the caller."""
    data = canonical_words(words)
    return Job(**{k: v for k, v in data.items() if k in Job.model_fields})


def job_and_placement(words: Mapping[str, Any], default_gpus: int = 1) -> tuple[Job, Placement]:
    """The one way in: a mapping of a user's words (CLI flags, a REST body, an ado point, a sweep row) ->
    Job and Placement. Booleans and choices are read by ``read_word``, aliases by ``ALIASES``; a bad word
    raises pydantic's ValidationError naming the field and the accepted values. Words that are neither Job
    nor Placement fields are ignored here (the entry point decides whether they are allowed)."""
    data = canonical_words(words, default_gpus)
    data.setdefault("number_gpus", default_gpus)
    job = Job(**{k: v for k, v in data.items() if k in Job.model_fields})
    return job, Placement(**{k: v for k, v in data.items() if k in Placement.model_fields})
