"""IBM ado-autoconf's ``JobConfig``: one job as its classifier sees it (model name mapped on input)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field

from autoconf.interfaces.ado.ibm.utils.config_mapper import map_valid_model_name


class JobConfig(BaseModel):
    """model_name (family-mapped), method, gpu_model, tokens_per_sample, global batch_size, number_gpus."""

    model_name: Annotated[str, BeforeValidator(map_valid_model_name)]
    method: str
    gpu_model: str
    tokens_per_sample: int = Field(ge=1, description="Max sequence length")
    batch_size: int = Field(ge=1, description="Global batch size")
    is_valid: int | None = Field(None, description="Ground truth (1 = the job ran); never used to predict.")
    number_gpus: int | None = Field(None, ge=1, description="Number of GPUs used")
