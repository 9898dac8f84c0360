"""Catalogue of model architectures and GPU specs (data files + loaders), each row with its source."""

from autoconf.catalog.architecture import Architecture, Linear
from autoconf.catalog.gpus import GPUSpec, canonical_gpu, get_gpu, list_gpus
from autoconf.catalog.models import (
    architecture_from_config,
    architecture_from_params,
    canonical_name,
    get_architecture,
    list_models,
    model_row,
    parse_param_count,
)

__all__ = [
    "Architecture", "GPUSpec", "Linear", "architecture_from_config", "architecture_from_params",
    "canonical_gpu", "canonical_name", "get_architecture", "get_gpu", "list_gpus", "list_models",
    "model_row", "parse_param_count",
]
