"""``autoconf-gpu check`` as a launch guard, run from a shell: exit 0 fits, 1 does not fit, 2 bad input.

Cases are chosen so the answer is known without the estimator: a 70B model's bf16 weights alone (~131 GiB)
exceed one 80 GB GPU, while a 135M-parameter model's whole training state is well under 1 GiB. The
"fewest GPUs" and "largest micro-batch" it suggests are checked by asking the guard again with them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
GUARD = f"{sys.executable} -m autoconf.interfaces.cli check --estimator theory"


def _shell(command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env, timeout=300,
                          check=False)


def test_fits_is_exit_0() -> None:
    done = _shell(f"{GUARD} --model HuggingFaceTB/SmolLM2-135M --method lora --seq-len 1024 --gpu A100-80GB "
                  "&& echo launched")
    assert done.returncode == 0 and done.stdout.startswith("FITS:") and "launched" in done.stdout, done.stderr


@pytest.mark.slow
def test_does_not_fit_is_exit_1_with_the_fewest_gpus_and_the_largest_micro_batch() -> None:
    config = FIXTURES / "torchtune/70B_full.yaml"  # full fine-tuning of Llama 3.1 70B, batch 2 per device
    done = _shell(f"{GUARD} --from {config} --gpu A100-80GB --gpus 1 --json")
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["fits"] is False and answer["number_gpus"] == 1 and answer["micro_batch"] == 2
    assert answer["largest_micro_batch"] == 0  # the weights alone do not fit one GPU
    fewest = answer["fewest_gpus"]
    assert fewest is not None and fewest > 2
    at_fewest = _shell(f"{GUARD} --from {config} --gpu A100-80GB --gpus {min(fewest, 8)} --nodes {max(fewest // 8, 1)}")
    assert at_fewest.returncode == 0, at_fewest.stdout
    below = fewest - 1 if fewest <= 8 else fewest - 8
    fewer = _shell(f"{GUARD} --from {config} --gpu A100-80GB --gpus {min(below, 8)} --nodes {max(below // 8, 1)}")
    assert fewer.returncode == 1


@pytest.mark.slow
def test_the_largest_micro_batch_fits_and_one_more_does_not() -> None:
    config = FIXTURES / "torchtune/8B_lora_single_device.yaml"
    done = _shell(f"{GUARD} --from {config} --gpu A100-40GB --per-device-batch 64 --json")
    assert done.returncode == 1, done.stderr
    micro = json.loads(done.stdout)["largest_micro_batch"]
    assert 1 <= micro < 64
    assert _shell(f"{GUARD} --from {config} --gpu A100-40GB --per-device-batch {micro}").returncode == 0
    assert _shell(f"{GUARD} --from {config} --gpu A100-40GB --per-device-batch {micro + 1}").returncode == 1


@pytest.mark.parametrize(("argv", "named"), [
    ("--from /no/such/train.yaml", "--from"),
    ("--model llama3.1-8b --gpus 0", "number_gpus"),
    ("--model llama3.1-8b --gpu NoSuchGPU", "NoSuchGPU"),
    ("--model llama3.1-8b --per-device-batch 0", "batch_size"),
    ("--gpu A100-80GB", "--model"),
])
def test_bad_input_is_exit_2_in_one_line(argv: str, named: str) -> None:
    done = _shell(f"{GUARD} {argv}")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert named in done.stderr and not done.stdout
