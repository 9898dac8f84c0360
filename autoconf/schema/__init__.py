"""Pydantic types shared by every layer: the job, its placement, the estimates and the answer.

Names here are the contract of design §3: the CLI flags, REST bodies, ado properties and sweep
columns all reuse them. Units are in field names (``*_bytes``, ``*_gib``, ``*_seconds``, ``*_usd``).
Import them from ``autoconf.schema``; the modules behind it are an arrangement, not an interface:

* ``kinds``: the choice types (Literals), the stack names, GIB;
* ``words``: the one reading of a user's on/off and choice words (``read_word``) and the model bases;
* ``job`` and ``placement``: the inputs; ``job`` also holds ``job_and_placement``, the one way in, and the
  fields' metadata (``field_metadata``: where each field is offered, its aliases);
* ``estimates``: what each estimator returns (MemoryEstimate, ThroughputEstimate, ...);
* ``answer``: the one way out (``Answer``) and the outputs generated from its fields' metadata.
"""

from __future__ import annotations

from autoconf.schema.answer import Answer, sweep_arrays, sweep_columns
from autoconf.schema.estimates import (
    Calibration,
    CostEstimate,
    Estimate,
    MemoryEstimate,
    Recommendation,
    ThroughputEstimate,
    TimeEstimate,
)
from autoconf.schema.job import (
    ALIASES,
    PER_DEVICE_BATCH,
    Job,
    canonical_words,
    field_metadata,
    job_and_placement,
    job_of_words,
)
from autoconf.schema.kinds import (
    DEFAULT_LORA_TARGETS,
    FRAMEWORKS,
    GIB,
    Attention,
    DType,
    EstimatorName,
    Framework,
    LossKernel,
    Method,
    Offload,
    Optimizer,
    OptimizerImpl,
    Phase,
    Strategy,
)
from autoconf.schema.placement import Placement
from autoconf.schema.words import FALSE_WORDS, TRUE_WORDS, Words, is_flag, not_none, read_flag, read_word

__all__ = [
    "ALIASES", "Answer", "DEFAULT_LORA_TARGETS", "FALSE_WORDS", "FRAMEWORKS", "GIB", "PER_DEVICE_BATCH", "TRUE_WORDS", "Attention",
    "Calibration", "CostEstimate", "DType", "Estimate", "EstimatorName", "Framework", "Job", "LossKernel",
    "MemoryEstimate", "Method", "Offload", "Optimizer", "OptimizerImpl", "Phase", "Placement", "Recommendation",
    "Strategy", "ThroughputEstimate", "TimeEstimate", "Words", "canonical_words", "field_metadata", "is_flag",
    "job_and_placement",
    "job_of_words", "not_none", "read_flag", "read_word", "sweep_arrays", "sweep_columns",
]
