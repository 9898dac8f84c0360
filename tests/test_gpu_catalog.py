"""GPU catalogue rows for ado's SFTTrainer names and common training GPUs (autoconf/catalog/gpus.csv).

Expected values are the public figures quoted in each row's source: nvidia-smi memory totals (MiB)
and dense BF16 tensor peaks with FP32 accumulate from NVIDIA's datasheets and whitepapers, checked
here against the tensor-core arithmetic (cores × FMA per clock × 2 × boost clock) where possible.
"""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from autoconf.catalog import get_gpu

# name asked -> (catalogue name, memory MiB, dense BF16 TFLOPS or None)
EXPECTED = {
    "NVIDIA-H100-PCIe": ("NVIDIA-H100-PCIe", 81559, 756),           # ado SFTTrainer name
    "NVIDIA-H100-80GB-HBM3": ("NVIDIA-H100-80GB-HBM3", 81559, 989),  # ado SFTTrainer name
    "H100-80GB": ("NVIDIA-H100-80GB-HBM3", 81559, 989),              # llm-foundry's h100_80gb (variant not stated)
    "L40S": ("L40S", 46068, 362.05),                                 # ado SFTTrainer name
    "NVIDIA-A100-SXM4-80GB": ("NVIDIA-A100-SXM4-80GB", 81920, 312),  # ado SFTTrainer name
    "NVIDIA-A100-80GB-PCIe": ("NVIDIA-A100-80GB-PCIe", 81920, 312),  # ado SFTTrainer name
    "A100-SXM4-40GB": ("NVIDIA-A100-SXM4-40GB", 40960, 312),
    "A100-PCIE-40GB": ("NVIDIA-A100-PCIE-40GB", 40960, 312),
    "H200": ("NVIDIA-H200", 143771, 989),
    "B200": ("NVIDIA-B200", 179 * 1024, 2250),
    "L4": ("NVIDIA-L4", 23034, 121),
    "A10G": ("NVIDIA-A10G", 23028, None),
    "RTX 4090": ("NVIDIA-GeForce-RTX-4090", 24564, 165.2),
    "rtx-3090": ("NVIDIA-GeForce-RTX-3090", 24576, 71),
    "A6000": ("NVIDIA-RTX-A6000", 49140, 154.8),
    "RTX A5000": ("NVIDIA-RTX-A5000", 24564, 111.1),               # datasheet 222.2 sparse / 2; fsdp-qlora rows
    "NVIDIA RTX 6000 Ada Generation": ("NVIDIA-RTX-6000-Ada", 49140, 364.2),  # nvidia-smi's spelling
}
# Tensor-core arithmetic behind five of the peaks: (tensor cores, dense FP16 FMA per core per clock, boost GHz,
# FP32-accumulate rate factor: 1/2 on GeForce cards, 1 on professional ones).
ARITHMETIC = {
    "NVIDIA-GeForce-RTX-3090": (328, 128, 1.695, 0.5),
    "NVIDIA-RTX-A6000": (336, 128, 1.800, 1.0),
    "NVIDIA-GeForce-RTX-4090": (512, 128, 2.520, 0.5),
    "NVIDIA-RTX-A5000": (256, 128, 1.695, 1.0),
    "NVIDIA-RTX-6000-Ada": (568, 128, 2.505, 1.0),
}


@pytest.mark.parametrize("asked", sorted(EXPECTED))
def test_gpu_row(asked: str) -> None:
    name, mib, bf16 = EXPECTED[asked]
    gpu = get_gpu(asked)
    assert gpu.name == name
    assert gpu.memory_bytes == mib * 2**20
    assert gpu.bf16_tflops == (pytest.approx(bf16) if bf16 is not None else None)


@pytest.mark.parametrize("name", sorted(ARITHMETIC))
def test_peak_follows_the_tensor_core_arithmetic(name: str) -> None:
    cores, fma, ghz, accumulate = ARITHMETIC[name]
    assert get_gpu(name).bf16_tflops == pytest.approx(cores * fma * 2 * ghz * accumulate / 1000, rel=0.005)


def test_every_row_has_a_source() -> None:
    text = resources.files("autoconf.catalog").joinpath("gpus.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    assert rows and all(row["source"].strip() for row in rows)
    assert len({row["name"] for row in rows}) == len(rows)
