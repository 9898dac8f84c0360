"""The one source of defaults: job settings, search limits, and where the package's shipped files live.

Job defaults follow the stack behind ado's SFTTrainer measurements (fms-hf-tuning through accelerate: bf16,
flash attention, gradient checkpointing, FSDP full-shard on more than one GPU, padded sequences). Every CLI
verb, REST body and ado experiment reads them from here, so ``plan`` and ``estimate`` cannot drift apart.
"""

from __future__ import annotations

import os
from pathlib import Path

# --- job -------------------------------------------------------------------------------------------
METHOD = "full"
DTYPE = "bf16"
TOKENS_PER_SAMPLE = 4096  # ado's reference space centre; the VRAM-budget CLI's own default (2048) is noted
BATCH_SIZE = 16  # global batch per optimizer step across all GPUs (ado's SFTTrainer meaning)
GRADIENT_ACCUMULATION_STEPS = 1
LORA_R = 8  # fms-hf-tuning / peft default rank
LORA_ALPHA = 16.0  # fms-hf-tuning default alpha (does not change memory)
OPTIMIZER = "adamw"
GRADIENT_CHECKPOINTING = True
ATTENTION = "flash"
GPU_MODEL = "NVIDIA-A100-80GB-PCIe"
# Training stack (Job.framework). Outside ado the default is plain transformers Trainer / TRL SFTTrainer;
# the ado experiments default to fms-hf-tuning, the stack behind ado's SFTTrainer measurements (their own
# property default in interfaces/ado/experiments.py). Behaviour per stack: estimators/theory/frameworks.py.
FRAMEWORK = "hf-trainer"
ADO_FRAMEWORK = "fms-hf-tuning"
# Job fields whose default depends on the framework (Job fills them when not given). optimizer_impl: what
# the stack's default optimizer does on CUDA. transformers >= 4.5x with torch >= 2.8 defaults to
# optim="adamw_torch_fused" (transformers 5.23 training_args.py, `default_optim`); fms-hf-tuning's measured
# rows ran adamw_torch = foreach (theory_notes "Variants"); torchtune and LitGPT configs construct
# torch.optim.AdamW with fused=True; bitsandbytes optimizers (Unsloth's adamw_8bit) have no foreach list;
# llm-foundry's decoupled_adamw (Composer DecoupledAdamW.adamw) updates one parameter at a time.
# lora_dropout: Answer.AI fsdp_qlora's train.py defaults to 0.1 (``lora_dropout: float = 0.1`` at 299f51a and
# 4cd6923, passed to peft's LoraConfig), and neither its benchmark commands nor its blog set it.
# Every other stack takes FRAMEWORK_JOB_DEFAULT; FRAMEWORK_JOB_DEFAULTS lists only the stacks that differ.
FRAMEWORK_JOB_DEFAULT: dict[str, object] = {"optimizer_impl": "fused"}
FRAMEWORK_JOB_DEFAULTS: dict[str, dict[str, object]] = {
    "fms-hf-tuning": {"optimizer_impl": "foreach"},
    "fsdp-qlora": {"optimizer_impl": "foreach", "lora_dropout": 0.1},
    "llm-foundry": {"optimizer_impl": "for-loop"},
}
# Loss kernel a framework uses when the Job asks for none (Job.effective_loss_kernel; sources in frameworks.py).
FRAMEWORK_LOSS_KERNEL: dict[str, str] = {"litgpt": "chunked", "torchtune": "chunked", "unsloth": "fused-ce",
                                         "llm-foundry": "fused-ce", "trl": "fused-linear-ce"}

# --- recommender -------------------------------------------------------------------------------------
ESTIMATOR = "hybrid"  # theory x learned correction; falls back as FALLBACK says
MAX_OOM_RISK = 0.05  # design §5: accept a placement when P(OOM) <= 5 %
MAX_GPUS = 64  # largest placement searched unless the caller says otherwise
MAX_GPUS_LIMIT = 4096  # the largest max_gpus any interface accepts (CLI, REST, page, ado: bounded work per request)
NUMBER_GPUS_LIMIT = 65536  # the largest number_gpus a Placement (and ado's number_gpus property) accepts
GPUS_PER_NODE = 8  # GPUs per worker (node) searched; also the most a worker may have (Placement.gpus_per_worker)
# IBM ado-autoconf's own defaults, kept where a caller uses IBM's names (its 2.1.2 signatures and README):
IBM_MAX_GPUS = 8  # min_gpu_recommender's max_gpus ("no recommendation" beyond one 8-GPU node)
IBM_AVOID_OOM_MAX_GPUS = 64  # avoid_oom_recommender's max_gpus

# --- names every layer shares ---------------------------------------------------------------------
# The per-GPU memory parts of a text model, in the order every table and plot shows them (MemoryEstimate's
# ``<part>_bytes`` fields); STATE_PARTS are those a training step's tensors are counted in (no overhead).
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")
STATE_PARTS = MEMORY_PARTS[:-1]

# --- where shipped files live ------------------------------------------------------------------------
_PACKAGE = Path(__file__).resolve().parent
MODELS_ENV = "AUTOCONF_MODELS"  # overrides the learned-model folder
DATA_ENV = "AUTOCONF_DATA"  # overrides the measurement table


def bundled(folder: str, installed_as: str) -> Path:
    """A top-level folder of the repository, or its copy inside an installed wheel.

    An editable install (or a source checkout) reads ``<repo>/<folder>``; a wheel ships the same files as
    ``autoconf/<installed_as>`` (setup.py maps them), so both installs answer from identical files.
    """
    inside = _PACKAGE / installed_as
    return inside if inside.is_dir() else _PACKAGE.parent / folder


def models_dir() -> Path:
    """``$AUTOCONF_MODELS`` if set, else the shipped ``AutoGluonModels/``."""
    env = os.environ.get(MODELS_ENV)
    return Path(env) if env else bundled("AutoGluonModels", "AutoGluonModels")


def data_dir() -> Path:
    """The shipped measurement folder (``data/`` in the repository)."""
    return bundled("data", "measured_data")


def measurements_path() -> Path:
    """``$AUTOCONF_DATA`` if set, else the shipped ``measurements.csv``."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else data_dir() / "measurements.csv"
