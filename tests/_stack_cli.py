"""What the stack-driver test modules share for their interface tests: one tiny LoRA job and the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

TINY = "tiny-llama-test"


@pytest.fixture(scope="module", name="cache")
def cache_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``cache``: the module's own trace cache (its first call traces, the rest read it); import this name to use it."""
    return {**os.environ, "AUTOCONF_CACHE": str(tmp_path_factory.mktemp("stack-cache"))}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", *args], capture_output=True, text=True,
                          env=env, timeout=600, check=False)


def estimate_args(framework: str) -> tuple[str, ...]:
    """``estimate`` of the tiny job (LoRA, 64 tokens, micro-batch 1) traced by ``framework``'s own code."""
    return ("estimate", "--model", TINY, "--seq-len", "64", "--per-device-batch", "1", "--lora", "--estimator",
            "traced", "--framework", framework)
