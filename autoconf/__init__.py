"""autoconf: will an LLM fine-tuning job fit, on how many GPUs, how fast, how long, at what cost?"""

__version__ = "0.1.0"
