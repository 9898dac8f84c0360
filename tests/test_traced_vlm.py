"""The traced estimator builds a vision-language model (no *ForCausalLM) and trains it on text alone."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from autoconf.catalog import get_architecture  # noqa: E402
from autoconf.estimators.traced.job_spec import trace_spec  # noqa: E402
from autoconf.estimators.traced.model import meta_model  # noqa: E402
from autoconf.schema import Job  # noqa: E402


@pytest.mark.parametrize("model", ["qwen2-vl-2b"])
def test_vlm_builds_with_the_catalogue_parameter_count(model: str) -> None:
    arch = get_architecture(model)
    built = meta_model(trace_spec(Job(model=model, attention="sdpa"), arch))
    # the catalogue's exact count (autoconf/catalog: from the released config.json's shapes)
    assert sum(p.numel() for p in built.parameters()) == arch.total_params
    assert built.get_output_embeddings() is not None



@pytest.mark.parametrize("model", ["gemma-2-2b", "mpt-125m"])
def test_a_causal_lm_that_fails_to_build_keeps_its_own_reason(model: str) -> None:
    # transformers 5.x has no SDPA path for Gemma2ForCausalLM and MptForCausalLM; the trace reports that reason, not
    # the image-text-to-text factory's list of vision-language configs
    import torch
    import transformers

    from autoconf.estimators.traced.hf_config import hf_config

    spec = trace_spec(Job(model=model, attention="sdpa"), get_architecture(model))
    try:
        with torch.device("meta"):
            transformers.AutoModelForCausalLM.from_config(hf_config(spec["arch"], spec["attention"], False))
    except ValueError as exc:
        expected = str(exc)
    else:
        pytest.skip(f"this transformers builds {model} with SDPA")
    with pytest.raises(ValueError) as got:
        meta_model(spec)
    assert str(got.value) == expected
