"""What the stack-driver test modules share for their trace tests: a driver run in a subprocess as the estimator runs
it, one phase of its summary, and the check that the trace on fake tensors is the same code's on real CPU tensors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from autoconf.estimators.traced.stacks.memory import DRIVERS, SHARED_ENVIRONMENT, STACK_PATH


def run_worker(module: str, spec: dict[str, Any], tmp: Path, name: str, env: dict[str, str]) -> dict[str, Any]:
    """``python -m module NAME.json NAME.npz`` in ``tmp``: the summary line it prints (the run must succeed)."""
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", module, str(path), str(tmp / f"{name}.npz")], capture_output=True,
                          text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def drive(stack: str, spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """The stack's driver with the environment the estimator gives it (stacks/memory.py trace_stack): the STACK_PATH
    directories after the caller's path, for a stack installed into a directory of its own."""
    env = dict(os.environ)
    dirs = [d for d in os.environ.get(STACK_PATH, "").split(os.pathsep) if d]
    if dirs and stack not in SHARED_ENVIRONMENT:
        env["PYTHONPATH"] = os.pathsep.join([*filter(None, [os.environ.get("PYTHONPATH")]), *dirs])
    return run_worker(DRIVERS[stack], spec, tmp, stack, env)


def phase(summary: dict[str, Any], step: int, name: str) -> dict[str, Any]:
    """The summary's entry for phase ``name`` of step ``step`` (0: the load)."""
    return next(p for p in summary["phases"] if p["step"] == step and p["phase"] == name)


def check_fake_equals_real(fake: dict[str, Any], real: dict[str, Any]) -> None:
    """The trace on fake tensors equals the same code's on real CPU tensors (``real`` in the spec), phase by phase,
    and its allocations replay to the same reserved peak."""
    assert fake["phases"] == real["phases"]
    assert fake["reserved_peak"] == real["reserved_peak"]
