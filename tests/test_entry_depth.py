"""Issue 26: from each entry point to the formula, at most 4 files name a Job field's word (bench/entry_depth.py).

The bench runs one job with ``fused_loss`` through the CLI, both REST bodies, ado and the sweep in this process;
the 4 are the theory's three files that read the word and ``schema/job.py``, where the field and its metadata live.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_no_entry_point_names_the_word_beyond_the_schema_and_the_theory() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "entry_depth.py"), "--check"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    named = [line.split(":", 1)[1].split() for line in done.stdout.splitlines() if "named " in line and ":" in line]
    assert len(named) == 5  # CLI, REST flat and nested, ado, sweep
    assert all(set(files) <= {"schema/job.py", "estimators/theory/loss.py", "estimators/theory/rows.py",
                              "estimators/theory/throughput.py"} for files in named)
