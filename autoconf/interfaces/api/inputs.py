"""Request bodies of the REST API (no FastAPI here): the flat Job+Placement body and the nested EstimateInput.

The nested form follows the resource-estimator design (foundation-model-stack/fm-training-estimator,
adrs/001-estimator-api.md): ``estimator{method}`` and ``configs[{hf_training, fm, data, infra, peft_lora}]``,
with that document's defaults (fp32 weights, technique full, max_seq_length 2048, 1 pod, A100 80 GB).
Sections keep keys we do not use (``hf_training`` is all of HF's TrainingArguments). Each body becomes a
list of ``Resolved`` inputs: a Job, a Placement and the options of time, cost, tokens and recommend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, create_model

from autoconf.catalog import canonical_gpu, get_gpu
from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MAX_GPUS_LIMIT, MAX_OOM_RISK
from autoconf.errors import AutoconfError, InvalidInputError
from autoconf.recommend.by_objective import Objective
from autoconf.schema import EstimatorName, Framework, Job, Placement, Words, job_and_placement

MAX_CONFIGS = 64  # bounds the work one request can ask for


class RequestOptions(Words):
    """Options beside the Job and Placement fields of a flat body (words read as schema.read_word reads them)."""

    estimator: EstimatorName | None = Field(None, description="theory | learned | hybrid (default) | traced.")
    model_version: str | None = Field(None, description="Learned-model version (learned/hybrid).")
    token_budget: float | None = Field(
        None, gt=0, le=1e16, description="Total tokens to train on (overrides the rest).")
    dataset_tokens: float | None = Field(None, gt=0, le=1e16, description="Tokens per epoch after padding/packing.")
    num_samples: int | None = Field(
        None, gt=0, le=10**12, description="Samples per epoch, each padded to tokens_per_sample.")
    epochs: float = Field(1.0, gt=0, le=10_000, description="Passes over the dataset.")
    num_checkpoints: int | None = Field(
        None, ge=0, le=100_000, description="Checkpoints written (default: one per epoch).")
    price_per_gpu_hour_usd: float | None = Field(None, ge=0, le=1e6, description="Overrides the catalogued price.")
    provider: str | None = Field(
        None, max_length=64, description="Pick a catalogued provider's price (aws, lambda, ...).")
    dataset_path: str | None = Field(None, max_length=4096, description="Local JSONL/CSV/Parquet file on the server.")
    text_field: str | None = Field(None, max_length=256, description="Text field of the dataset records.")
    tokenizer_path: str | None = Field(None, max_length=4096, description="Local tokenizer.json for exact counts.")
    texts: list[str] | None = Field(None, max_length=10_000, description="Texts to count instead of a dataset file.")
    max_gpus: int = Field(MAX_GPUS, ge=1, le=MAX_GPUS_LIMIT, description="Recommend: largest placement tried.")
    gpus_per_node: int = Field(GPUS_PER_NODE, ge=1, le=GPUS_PER_NODE, description="Recommend: GPUs per worker.")
    max_oom_risk: float = Field(MAX_OOM_RISK, ge=0, le=1, description="Recommend: acceptable out-of-memory risk.")
    strict: bool = Field(False, description="Recommend: refuse outside the learned model's training domain.")
    objective: Objective = Field("min-gpus", description="Recommend: min-gpus | avoid-oom (keep number_gpus if it "
                                 "fits) | throughput (fastest GPUs x accumulation at the global batch).")
    from_config: str | list[str] | None = Field(
        None, description="The content of your training config (axolotl, torchtune, LLaMA-Factory, LitGPT, TRL / "
        "Transformers JSON or YAML, fms-hf-tuning JSON, an ms-swift command line), or a list: the config and the "
        "accelerate / DeepSpeed config beside it. It fills the Job and Placement fields the body leaves out "
        "(model and gpu_model included); fields in the body win.")


_FLAT_FIELDS = {**Job.model_fields, **Placement.model_fields, **RequestOptions.model_fields}
FlatBody = create_model(  # type: ignore[call-overload]  # pydantic's overloads cannot type **field definitions
    "FlatBody",
    __base__=Words,
    __doc__="Flat body: every Job and Placement field plus the request options.",
    **{name: (info.annotation, info) for name, info in _FLAT_FIELDS.items()},
)


def _seed_example() -> dict[str, Any]:
    """The resource-estimator design's example body, as its ADR writes it (comments removed)."""
    return {
        "estimator": {"base_data_path": "data.csv", "method": "theory", "token_estimation_version": 0},
        "configs": [{
            "hf_training": {"output_dir": "./output"},
            "fm": {"base_model_path": "ibm-granite/granite-3b-code-base", "flash_attention_v2": "false",
                   "lora_config": None, "max_seq_length": 2048, "block_size": 2048,
                   "data_config_file": "data_config.json", "prompt_tuning_config": None,
                   "torch_dtype": "float32", "technique": "full"},
            "data": {"te_approach": 0, "dataset": None, "dataset_text_field": "text", "dataset_split": "test",
                     "dataset_config_name": None},
            "infra": {"numGpusPerPod": 1, "numPods": 1, "gpu_memory_in_gb": 80, "gpuModel": "A100"},
            "peft_lora": {"r": 4, "lora_alpha": 8, "lora_dropout": 0.1, "target_modules": "[q_proj, v_proj]"},
        }],
    }


def seed_example() -> dict[str, Any]:
    """A fresh copy of the design's example body."""
    return _seed_example()


class _Section(Words):
    model_config = ConfigDict(extra="allow", protected_namespaces=())


class EstimatorSection(_Section):
    method: EstimatorName = Field("hybrid", description="theory | learned | hybrid | traced.")
    base_data_path: str | None = None
    token_estimation_version: int | str | None = None
    model_version: str | None = None


class HFSection(_Section):
    per_device_train_batch_size: int = Field(8, gt=0, le=65536)
    gradient_accumulation_steps: int = Field(1, ge=1, le=4096)
    num_train_epochs: float = Field(3.0, gt=0, le=10_000)
    max_steps: int = Field(-1, ge=-1, le=10**9)
    gradient_checkpointing: bool = False
    bf16: bool = False
    fp16: bool = False


class FMSection(_Section):
    base_model_path: str = Field("ibm-granite/granite-3b-code-base", min_length=1, max_length=4096)
    flash_attention_v2: bool = False
    max_seq_length: int = Field(2048, gt=0, le=2_097_152)
    torch_dtype: Literal["float32", "float16", "bfloat16", "fp32", "fp16", "bf16"] = "float32"
    technique: str = Field("full", max_length=32)
    packing: bool = False
    framework: Framework = Field("fms-hf-tuning", description="Training stack (this body describes fms-hf-tuning).")


TE_APPROACHES = {  # data.te_approach: how the tokens of an epoch are counted from data.dataset
    0: "padded: every sample costs max_seq_length tokens (SFTTrainer without packing)",
    1: "packed: the dataset's own tokens, packed into max_seq_length sequences (no padding)",
}


class DataSection(_Section):
    dataset: str | None = Field(None, max_length=4096, description="Local JSONL/CSV/Parquet file on the server.")
    dataset_text_field: str = Field("text", max_length=256, description="Field holding each record's text.")
    te_approach: Literal[0, 1] = Field(
        0, description="Token estimation: " + "; ".join(f"{k} = {v}" for k, v in TE_APPROACHES.items()) + ".")


class InfraSection(_Section):
    numGpusPerPod: int = Field(0, ge=0, le=8)
    numPods: int = Field(1, ge=1, le=8192)
    gpu_memory_in_gb: int = Field(80, gt=0, le=4096)
    gpuModel: str = Field("A100", min_length=1, max_length=128)


class PeftLoraSection(_Section):
    r: int = Field(4, gt=0, le=4096)
    lora_alpha: float = Field(8, gt=0)
    lora_dropout: float = Field(0.1, ge=0, lt=1)
    target_modules: str | list[str] = "[q_proj, v_proj]"


class ConfigSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hf_training: HFSection = Field(default_factory=HFSection)
    fm: FMSection = Field(default_factory=FMSection)
    data: DataSection = Field(default_factory=DataSection)
    infra: InfraSection = Field(default_factory=InfraSection)
    peft_lora: PeftLoraSection = Field(default_factory=PeftLoraSection)


class EstimateInput(BaseModel):
    """Nested body of the resource-estimator design (``job_configs``/``estimator_metadata`` accepted too)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_seed_example()]})
    estimator: EstimatorSection = Field(
        default_factory=EstimatorSection, validation_alias=AliasChoices("estimator", "estimator_metadata")
    )
    configs: list[ConfigSection] = Field(
        min_length=1, max_length=MAX_CONFIGS, validation_alias=AliasChoices("configs", "job_configs")
    )


@dataclass
class Resolved:
    """One configuration to answer, whatever the body's form."""

    job: Job
    placement: Placement
    options: RequestOptions
    prefix: str = ""  # where this config sits in the body, for error locations
    notes: list[str] = field(default_factory=list)
    auto_gpus: bool = False  # nested infra.numGpusPerPod = 0: the answer picks the GPUs per pod
    te_approach: int = 0  # nested data.te_approach (TE_APPROACHES)


# Where each Job/Placement field comes from in the nested form (for error locations).
NESTED_FIELD = {
    "model": "fm.base_model_path", "method": "fm.technique", "dtype": "fm.torch_dtype",
    "tokens_per_sample": "fm.max_seq_length", "batch_size": "hf_training.per_device_train_batch_size",
    "gradient_accumulation_steps": "hf_training.gradient_accumulation_steps", "gpu_model": "infra.gpuModel",
    "number_gpus": "infra.numGpusPerPod", "gpus_per_worker": "infra.numGpusPerPod", "lora_r": "peft_lora.r",
    "lora_alpha": "peft_lora.lora_alpha", "lora_dropout": "peft_lora.lora_dropout",
    "lora_target_modules": "peft_lora.target_modules", "dataset": "data.dataset",
}
DTYPES = {"float32": "fp32", "fp32": "fp32", "float16": "fp16", "fp16": "fp16", "bfloat16": "bf16", "bf16": "bf16"}


def located(exc: AutoconfError, prefix: str, nested: bool) -> AutoconfError:
    """The same error, its field renamed to where it sits in the request body."""
    name = NESTED_FIELD.get(exc.field, exc.field) if nested else exc.field
    exc.field = f"{prefix}.{name}" if prefix else name
    return exc


def _field_of(exc: ValidationError) -> InvalidInputError:
    """First error as an InvalidInputError; a model-level check names its field first ('number_gpus must ...')."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if not where:
        first = message.split(" ", 1)[0]
        where = first if first in _FLAT_FIELDS else "body"
    return InvalidInputError(where, message)


def check_one_shape(body: dict[str, Any]) -> None:
    """A body is flat or nested, never both (checked before anything in it is looked up)."""
    if "configs" in body or "job_configs" in body:
        flat = sorted(k for k in body if k in _FLAT_FIELDS and k not in EstimateInput.model_fields)
        if flat:
            raise InvalidInputError("body", f"mixes the nested shape (configs) with flat fields {', '.join(flat)}; "
                                    "send one shape: put them inside configs[] or drop configs")


def parse_body(body: Any) -> list[Resolved]:
    """Flat or nested body -> resolved inputs (pydantic/Autoconf errors propagate as 422s)."""
    if not isinstance(body, dict):
        raise InvalidInputError("body", f"must be a JSON object; got {type(body).__name__}")
    check_one_shape(body)
    if "configs" in body or "job_configs" in body:
        return _nested(EstimateInput.model_validate(body))
    notes: list[str] = []
    if body.get("from_config"):
        body, notes = _with_config(body)
    values = FlatBody.model_validate(body).model_dump(exclude_unset=True)
    values.pop("from_config", None)
    try:
        job, placement = job_and_placement(values)
    except ValidationError as exc:  # model-level checks (tp·pp must divide number_gpus, ...)
        raise _field_of(exc) from None
    options = RequestOptions(**{k: v for k, v in values.items() if k in RequestOptions.model_fields})
    return [Resolved(job, placement, options, notes=notes)]


def _with_config(body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The body with its ``from_config`` read into the fields it leaves out, and a note of what was read."""
    from autoconf.interfaces.configs.common import FIELD_KNOBS
    from autoconf.interfaces.configs.detect import MAX_BYTES, read_texts
    from autoconf.interfaces.configs.frame import row_fields

    texts = body["from_config"] if isinstance(body["from_config"], list) else [body["from_config"]]
    if not all(isinstance(t, str) for t in texts) or len(texts) > 4 or sum(map(len, texts)) > MAX_BYTES:
        raise InvalidInputError("from_config", "must be a config's text, or a list of at most 4 texts of 1 MiB in all")
    try:
        found = read_texts(texts)
        fields = row_fields(found, {"gpu_model": body.get("gpu_model"), "number_gpus": body.get("number_gpus")})
    except AutoconfError as exc:
        raise InvalidInputError("from_config", exc.message.removeprefix("<content>: ")) from None
    report = found.report({FIELD_KNOBS[k] for k in body if k in FIELD_KNOBS and body[k] is not None})
    note = (f"from_config ({report['format']}, framework {report['framework']}): read "
            + "; ".join(f"{k} <- {v}" for k, v in report["read"].items())
            + (f"; defaulted: {', '.join(report['defaulted'])}" if report["defaulted"] else "")
            + (f"; no effect on memory or speed: {', '.join(report['no_effect'])}" if report["no_effect"] else ""))
    fields["lora_target_modules"] = list(fields["lora_target_modules"])  # JSON has lists, not tuples
    return {**fields, **{k: v for k, v in body.items() if v is not None}}, [note, *report["notes"]]


def _nested(data: EstimateInput) -> list[Resolved]:
    out = []
    for index, config in enumerate(data.configs):
        prefix = f"configs.{index}"
        try:
            out.append(_config(config, data.estimator, prefix))
        except AutoconfError as exc:
            raise located(exc, prefix, nested=True) from None
        except ValidationError as exc:  # a Job/Placement check on values the sections allowed
            raise located(_field_of(exc), prefix, nested=True) from None
    return out


def _gpu_name(infra: InfraSection, notes: list[str]) -> str:
    """gpuModel, refined by gpu_memory_in_gb where the catalogue has that variant ('A100' + 40 -> A100-40GB)."""
    try:
        return canonical_gpu(f"{infra.gpuModel}-{infra.gpu_memory_in_gb}GB")
    except AutoconfError:
        name = canonical_gpu(infra.gpuModel)
    memory_gb = get_gpu(name).memory_bytes / 1e9
    if abs(memory_gb - infra.gpu_memory_in_gb) > 0.1 * infra.gpu_memory_in_gb:
        notes.append(f"infra.gpu_memory_in_gb={infra.gpu_memory_in_gb} differs from {name} ({memory_gb:.0f} GB); "
                     "the catalogue's capacity is used")
    return name


def _config(config: ConfigSection, est: EstimatorSection, prefix: str) -> Resolved:
    hf, fm, infra, lora = config.hf_training, config.fm, config.infra, config.peft_lora
    notes: list[str] = []
    per_pod = infra.numGpusPerPod or 1  # 0: discovered when answering (answers.discover_gpus)
    gpus = per_pod * infra.numPods
    technique = fm.technique.strip().lower()
    if technique not in ("full", "lora", "qlora"):
        raise InvalidInputError("method", f"must be full, lora or qlora; got '{fm.technique}'")
    dtype = DTYPES[fm.torch_dtype]
    if dtype == "fp32" and (hf.bf16 or hf.fp16):
        dtype = "amp-bf16" if hf.bf16 else "amp-fp16"  # fp32 master weights + autocast
    # keys of hf_training (HF TrainingArguments) and fm named as a Job field mean that field (the sections' own names
    # below win): a new Job field is read from the nested body without an edit here
    origin = {k: (f"{name}.{k}", v) for name, section in (("hf_training", hf), ("fm", fm))
              for k, v in (section.model_extra or {}).items() if k in Job.model_fields}
    try:
        job, placement = job_and_placement({  # the one way in, from this body's section names
            **{k: v for k, (_, v) in origin.items()},
            "model": fm.base_model_path, "method": technique, "dtype": dtype, "tokens_per_sample": fm.max_seq_length,
            "batch_size": hf.per_device_train_batch_size * gpus * hf.gradient_accumulation_steps,
            "gradient_accumulation_steps": hf.gradient_accumulation_steps,
            "gradient_checkpointing": hf.gradient_checkpointing,
            "attention": "flash" if fm.flash_attention_v2 else "sdpa", "packing": fm.packing,
            "framework": fm.framework, "lora_r": lora.r, "lora_alpha": lora.lora_alpha,
            "lora_dropout": lora.lora_dropout, "lora_target_modules": lora.target_modules,
            "gpu_model": _gpu_name(infra, notes), "number_gpus": gpus, "gpus_per_worker": per_pod})
    except ValidationError as exc:  # named where the body has it (a section's key of a Job field's name)
        error = _field_of(exc)
        error.field = origin[error.field][0] if error.field in origin else error.field
        raise error from None
    budget = None
    if hf.max_steps > 0:
        budget = float(hf.max_steps) * job.batch_size * job.tokens_per_sample
    path = config.data.dataset
    options = RequestOptions(
        estimator=est.method, model_version=est.model_version, token_budget=budget, epochs=hf.num_train_epochs,
        dataset_path=path, text_field=config.data.dataset_text_field if path else None,
        gpus_per_node=infra.numGpusPerPod or 8,
    )
    return Resolved(job, placement, options, prefix, notes, auto_gpus=infra.numGpusPerPod == 0,
                    te_approach=config.data.te_approach)
