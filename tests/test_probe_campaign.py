"""The in-process campaign (``measure --in-process``) and the probe's loss kernels, on CPU.

Expected losses come from torch's own cross-entropy over the whole fp32 logits and from transformers'
loss (independent of the chunking code); the campaign is run as a real CLI process on a tiny model.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from autoconf.evaluation.data import row_to_inputs  # noqa: E402
from autoconf.interfaces.probe.campaign import dominated, group_key  # noqa: E402
from autoconf.interfaces.probe.losses import IGNORE, chunked_cross_entropy, loss_of, shifted_labels  # noqa: E402
from autoconf.schema import Job  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("batch", "seq", "vocab", "ignored"), [(1, 16, 32, 0), (2, 24, 50, 3), (3, 8, 7, 5)])
def test_chunked_cross_entropy_equals_whole_logits(batch: int, seq: int, vocab: int, ignored: int) -> None:
    torch.manual_seed(0)
    hidden = torch.randn(batch, seq, 12)
    head = torch.nn.Linear(12, vocab, bias=False)
    labels = torch.randint(0, vocab, (batch, seq))
    labels[:, :ignored] = IGNORE
    expected = torch.nn.functional.cross_entropy(head(hidden).float().reshape(-1, vocab), labels.reshape(-1),
                                                 ignore_index=IGNORE)  # mean over scored tokens
    assert chunked_cross_entropy(hidden, head, labels).item() == pytest.approx(expected.item(), rel=1e-5)


def test_shifted_labels_match_next_token() -> None:
    batch = torch.tensor([[5, 6, 7]])
    assert shifted_labels(batch).tolist() == [[6, 7, IGNORE]]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["full", "lora"])
def test_chunked_loss_equals_transformers_loss(method: str) -> None:
    from autoconf.catalog import get_architecture
    from autoconf.interfaces.probe.step import build_model

    job = Job(model="tiny-llama-test", method=method, tokens_per_sample=32, batch_size=2, attention="sdpa",
              dtype="fp32", gradient_checkpointing=False)
    torch.manual_seed(0)
    model = build_model(job, get_architecture(job.model), "cpu")
    batch = torch.randint(0, 512, (2, 32))
    hf = loss_of(model, batch, job.model_copy(update={"loss_kernel": "hf"}))
    chunked = loss_of(model, batch, job.model_copy(update={"loss_kernel": "chunked"}))
    assert chunked.item() == pytest.approx(hf.item(), rel=1e-5)


def _job(tokens: int, batch: int) -> Job:
    return Job(model="tiny-llama-test", tokens_per_sample=tokens, batch_size=batch)


@pytest.mark.parametrize(("tokens", "batch", "expected"), [
    (512, 4, True),    # the OOM point itself
    (1024, 4, True),   # more tokens, same batch
    (512, 8, True),    # same tokens, larger batch
    (256, 8, False),   # fewer tokens: not implied
    (1024, 2, False),  # smaller batch: not implied
])
def test_dominated_by_an_oom(tokens: int, batch: int, expected: bool) -> None:
    assert dominated(_job(tokens, batch), [_job(512, 4)]) is expected


def test_group_key_ignores_only_tokens_and_batch() -> None:
    assert group_key(_job(512, 4)) == group_key(_job(4096, 16))
    assert group_key(_job(512, 4)) != group_key(_job(512, 4).model_copy(update={"gradient_checkpointing": False}))


GRID = """name: test-campaign
settings: {device: cpu, model: tiny-llama-test, dtype: bf16, attention: sdpa, warmup_steps: 1, probe_steps: 1}
grids:
  - {method: [full, lora], loss_kernel: [hf, chunked], tokens_per_sample: [32], per_device_batch: [1, 2]}
"""


def _measure(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, str]]]:
    grid, out = tmp_path / "grid.yaml", tmp_path / "rows.csv"
    grid.write_text(GRID)
    done = subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "measure", "--grid", str(grid),
                           "--out", str(out), "--in-process", *extra], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, check=False)
    rows = list(csv.DictReader(out.open())) if out.exists() else []
    return done, rows


@pytest.mark.slow
def test_campaign_writes_a_row_per_point(tmp_path: Path) -> None:
    done, rows = _measure(tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(rows) == 8 and {r["status"] for r in rows} == {"ok"}
    assert {r["loss_kernel"] for r in rows} == {"", "chunked"}
    assert all("--in-process" in r["source_ref"] and float(r["tokens_per_second"]) > 0 for r in rows)
    job, placement = row_to_inputs(rows[-1] | {"gpu_model": "NVIDIA-H100-80GB-HBM3"})
    assert job.framework == "hf-trainer" and placement.number_gpus == 1
    # resumable: a second run finds every point already measured
    again, rows_again = _measure(tmp_path)
    assert again.returncode == 0 and len(rows_again) == 8 and "no point left" in again.stderr


@pytest.mark.slow
def test_campaign_budget_stops_starting_points(tmp_path: Path) -> None:
    done, rows = _measure(tmp_path, "--budget-s", "0.001")
    assert done.returncode == 0, done.stderr
    assert rows == [] and "8 out of time" in done.stderr


@pytest.mark.parametrize("budget", ["0", "-5"])
def test_campaign_budget_must_be_positive(tmp_path: Path, budget: str) -> None:
    done, _ = _measure(tmp_path, "--budget-s", budget)
    assert done.returncode == 2 and "budget_s" in done.stderr and len(done.stderr.strip().splitlines()) == 1


class _StubNvml:
    """Just enough of pynvml for NvmlPeak (a unit test of our sampler: NVML needs a GPU)."""

    def __init__(self) -> None:
        self.used, self.closed = 1000 * 2**20, False

    def nvmlInit(self) -> None: ...  # noqa: N802 (pynvml's names)

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.closed = True

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:  # noqa: N802
        return type("Info", (), {"used": self.used})()


def test_nvml_peak_is_the_peak_above_the_first_reading() -> None:
    import time

    from autoconf.interfaces.probe.nvml import NvmlPeak

    nvml = _StubNvml()
    with NvmlPeak(nvml, "0") as meter:
        nvml.used = 5000 * 2**20  # the job's peak
        time.sleep(0.05)
        nvml.used = 3000 * 2**20
        time.sleep(0.05)
        assert meter.reading() == (4000 * 2**20, "")
        meter.reset()  # the peak restarts at what is in use now
        time.sleep(0.05)
        assert meter.reading() == (2000 * 2**20, "")
    assert nvml.closed
