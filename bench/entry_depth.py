"""How many files of ``autoconf/`` a user's word crosses from each entry point to the formula that reads it.

    python bench/entry_depth.py

One job goes through each entry point in this process (CLI ``estimate``, REST ``/api/estimate`` with the flat and the
nested body, ado's ``resource_estimate``, ``autoconf-gpu sweep``). A profile hook (``sys.setprofile`` and
``threading.setprofile``, as the REST route answers in a worker thread) records the files of ``autoconf/`` on the
call stack at two moments: when the Job is built from the words (``schema.job.Job._framework_defaults``, the
first Python code of Job's validation) and when the theory formula reading the word runs
(``loss.loss_bytes_per_token`` reads ``fused_loss``). ``stack`` is the union of the two stacks, plus the
module that declares the route for REST (its handler runs on another thread than the answer): the files the word
is carried through. ``named`` is the files whose functions ran and that name the word (``fused_loss`` or ``--fused-loss``): the
files someone writes the word in, the ones a change to it touches. The figures on the way out are not counted.
The target (issue 26) is ``named`` <= 4 for every entry point; the theory's own files are 3 of those 4
(``loss.py``, ``rows.py``, ``throughput.py``) and ``schema/job.py``, whose field metadata is the one table of how
each entry point spells and offers a field, the fourth. ``--check`` exits 1 above the target.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PACKAGE = ROOT / "autoconf"
MOMENTS = {("schema/job.py", "_framework_defaults"), ("schema.py", "_framework_defaults"),
           ("estimators/theory/loss.py", "loss_bytes_per_token")}
JOB = {"model": "llama3.1-8b", "method": "lora", "gpu_model": "NVIDIA-A100-80GB-PCIe", "tokens_per_sample": 2048,
       "batch_size": 8, "fused_loss": True}


def _relative(filename: str) -> str | None:
    path = Path(filename)
    return str(path.relative_to(PACKAGE)) if path.is_relative_to(PACKAGE) else None


def stacks_of(run: Callable[[], Any]) -> tuple[set[str], set[str]]:
    """The files of autoconf/ on the stack at each moment of MOMENTS while ``run`` runs, and every file of autoconf/
    whose code ran."""
    found: set[str] = set()
    ran: set[str] = set()

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        where = _relative(frame.f_code.co_filename)
        if where is not None and frame.f_code.co_name != "<module>":  # a function ran (not just an import)
            ran.add(where)
        if where is None or (where, frame.f_code.co_name) not in MOMENTS:
            return
        current: FrameType | None = frame
        while current is not None:
            if (name := _relative(current.f_code.co_filename)) is not None:
                found.add(name)
            current = current.f_back

    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return found, ran


def _cli() -> None:
    from autoconf.interfaces.cli import main

    main(["estimate", "--model", JOB["model"], "--method", "lora", "--gpu", JOB["gpu_model"], "--seq-len", "2048",
          "--per-device-batch", "8", "--fused-loss", "--json"])


def _rest(body: dict[str, Any]) -> Callable[[], Any]:
    def run() -> None:
        from fastapi.testclient import TestClient

        from autoconf.interfaces.api.app import app

        with TestClient(app) as client:
            assert client.post("/api/estimate", json=body).status_code == 200

    return run


NESTED = {"estimator": {"method": "theory"}, "configs": [{
    "hf_training": {"per_device_train_batch_size": 8}, "infra": {"numGpusPerPod": 1, "gpuModel": "A100"},
    "fm": {"base_model_path": "llama3.1-8b", "max_seq_length": 2048, "technique": "lora", "torch_dtype": "bfloat16",
           "fused_loss": True}}]}


def _ado() -> None:
    from autoconf.interfaces.ado import experiments

    experiments.resource_estimate(model_name=JOB["model"], method="lora", gpu_model=JOB["gpu_model"],
                                  tokens_per_sample=2048, batch_size=8, number_gpus=1, estimator="theory",
                                  fused_loss=True)


def _sweep() -> None:
    from autoconf.interfaces.cli import main

    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "in.csv"
        source.write_text("model,method,gpu_model,tokens_per_sample,batch_size,fused_loss,number_gpus\n"
                          "llama3.1-8b,lora,NVIDIA-A100-80GB-PCIe,2048,8,true,1\n")
        main(["sweep", "--input", str(source), "--output", str(Path(folder) / "out.csv"), "--estimator", "theory"])


ENTRIES: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
    "CLI estimate": (_cli, ()),
    "REST flat body": (_rest({**JOB, "estimator": "theory"}), ("interfaces/api/app.py",)),
    "REST nested body": (_rest(NESTED), ("interfaces/api/app.py",)),
    "ado resource_estimate": (_ado, ()),
    "sweep": (_sweep, ()),
}


FIELD = "fused_loss"
TARGET = 4  # issue 26: from each entry point to the formula, at most 4 files
THEORY = "estimators/theory/"  # the formula's own files: the same behind every entry point


def _names(path: str) -> bool:
    text = (PACKAGE / path).read_text(encoding="utf-8")
    return FIELD in text or FIELD.replace("_", "-") in text


def measure() -> dict[str, tuple[list[str], list[str]]]:
    """Entry point -> (stack files, named files)."""
    out = {}
    for entry, (run, extra) in ENTRIES.items():
        stack, ran = stacks_of(run)
        out[entry] = (sorted(stack | set(extra)), sorted(f for f in ran | set(extra) if _names(f)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 if an entry point's named count is above {TARGET}")
    args = parser.parse_args()
    found = measure()
    print(f"named: the files that ran and name {FIELD} (or --{FIELD.replace('_', '-')}): target <= {TARGET}\n"
          f"stack: the files on the call stack from the entry point to the formula (entry side + theory's files)\n")
    print(f"{'entry point':<24}{'named':>6}  {'<= ' + str(TARGET):<6}{'stack':>6} = {'entry side':>10} + theory")
    for entry, (stack, named) in found.items():
        theory = sum(f.startswith(THEORY) for f in stack)
        verdict = "yes" if len(named) <= TARGET else "NO"
        print(f"{entry:<24}{len(named):>6}  {verdict:<6}{len(stack):>6} = {len(stack) - theory:>10} + {theory}")
    print()
    for entry, (stack, named) in found.items():
        print(f"{entry:<24}stack {len(stack):>2}: {' '.join(stack)}")
        print(f"{'':<24}named {len(named):>2}: {' '.join(named)}")
    return 1 if args.check and any(len(named) > TARGET for _, named in found.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
