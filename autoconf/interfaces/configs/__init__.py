"""Readers of the users' own training configs: axolotl, torchtune, LLaMA-Factory, TRL / Transformers
training arguments (with an accelerate or DeepSpeed config beside them), fms-hf-tuning, LitGPT and ms-swift
command lines, each mapped to our Job and Placement with ``framework`` set (``--from FILE``).
"""

from autoconf.interfaces.configs.common import FromFile, build_inputs
from autoconf.interfaces.configs.detect import FORMATS, read_config, read_configs

__all__ = ["FORMATS", "FromFile", "build_inputs", "read_config", "read_configs"]
