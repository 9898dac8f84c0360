"""The stack behaviours the traced estimator follows are profile attributes with a source (frameworks.Profile)."""

from __future__ import annotations

import pytest

from autoconf.estimators.theory.frameworks import PROFILES

# Written out from docs/traced_vs_theory.md, not read from the profiles: train.py's held output (finding 23.5) and
# whole quant states (23.6); the FSDP1 stacks (finding 11: fms-hf-tuning; 23.7: fsdp-qlora's LoRA ranks) and
# fms-acceleration's peft QLoRA rows traced as FSDP1 ranks (22.1). From docs/traced.md: the rank traces follow the
# hf-trainer and peft stacks ("N GPUs"); DeepSpeed outside its engine is one HF replica (its stack table).
SET_BY = [
    ("holds_output", "holds_output", {"fsdp-qlora"}),
    ("whole_quant_states", "quant_states", {"fsdp-qlora"}),
    ("fsdp1", "fsdp1", {"fms-hf-tuning", "fsdp-qlora"}),
    ("fsdp1_qlora", "fsdp1_qlora", {"peft", "fsdp-qlora"}),  # finding 27.4: train.py flattens its Params4bit
    ("fsdp1_device_load", "fsdp1_device_load", {"fsdp-qlora"}),  # finding 27.4: train.py device_id and sync
    ("ddp_is_fsdp1_no_shard", "ddp_is_fsdp1_no_shard", {"fsdp-qlora"}),  # 27.4: --use_ddp is NO_SHARD
    ("accelerate_ranks", "accelerate_ranks", {"hf-trainer", "peft"}),
    ("hf_replica_fallback", "hf_replica_fallback", {"deepspeed"}),
]


@pytest.mark.parametrize("attribute, source, stacks", SET_BY)
def test_traced_behaviour_is_set_by_its_stacks_with_a_source(attribute: str, source: str, stacks: set[str]) -> None:
    assert {name for name, p in PROFILES.items() if getattr(p, attribute)} == stacks
    assert all(PROFILES[name].sources.get(source) for name in stacks)
