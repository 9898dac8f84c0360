"""Rank traces (autoconf/estimators/traced/dist.py) run in a serving subprocess and cached on disk.

No torch here: the trace runs in a serving subprocess (``python -m autoconf.estimators.traced.dist --serve``,
one per process, so a crash inside a dispatch mode cannot take the caller down and only its first trace
pays the imports) and its JSON summary and allocation events are cached (next to the fits) by everything
they depend on (``_key``). ``reserved_peak`` replays a cached trace's events through the caching allocator.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from autoconf.estimators.traced.allocator import Replay, replay
from autoconf.estimators.traced.cache import cache_dir
from autoconf.estimators.traced.fit import TRACE_TIMEOUT_S, TraceFailed

RANK_VERSION = 3  # part of the cache key: bump when the rank trace changes meaning
# per spec key, the version of its meaning, part of the cache key of the specs that carry it (a bump re-traces
# those only): ``keep_output`` 2, the output held through the update (1 dropped it, before rank_step.py honoured it)
FEATURE_VERSIONS = {"keep_output": 2}


def _key(spec: dict[str, Any]) -> str:
    structure = {**spec, "arch": {k: v for k, v in spec["arch"].items() if k != "name"}}
    versions = {pkg: metadata.version(pkg) for pkg in ("torch", "transformers", "peft")}
    payload: dict[str, Any] = {"spec": structure, "version": RANK_VERSION, "versions": versions}
    features = {k: v for k, v in FEATURE_VERSIONS.items() if k in spec}
    if features:  # absent where no versioned key is used: earlier cache keys stay valid
        payload["features"] = features
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


class _Worker:
    """One serving trace worker per process (``python -m autoconf.estimators.traced.dist --serve``), so only
    the first rank trace pays the imports; restarted after an error, a timeout or ``RESTART_AFTER`` traces
    (fake-tensor caches grow). A lock serialises callers (the API answers requests in threads)."""

    RESTART_AFTER = 32

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.served = 0
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        # stderr is discarded (library warnings would fill a pipe); errors come back as a JSON line
        return subprocess.Popen([sys.executable, "-m", "autoconf.estimators.traced.dist", "--serve"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, env=env)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, spec_path: Path, out_path: Path, timeout_s: float, name: str) -> dict[str, Any]:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None or self.served >= self.RESTART_AFTER:
                self.stop()
                self.proc, self.served = self._start(), 0
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(f"{spec_path} {out_path}\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
            line = self.proc.stdout.readline() if ready else ""
            self.served += 1
            if not line:
                self.stop()
                raise TraceFailed(f"rank trace of {name} took more than {timeout_s:.0f} s" if not ready
                                  else f"rank trace worker for {name} exited")
            answer: dict[str, Any] = json.loads(line)
            if "error" in answer:
                self.stop()
                raise TraceFailed(f"rank trace of {name} failed: {answer['error']}")
            return answer


_WORKER = _Worker()
atexit.register(_WORKER.stop)


def trace_ranks(spec: dict[str, Any], timeout_s: float = TRACE_TIMEOUT_S) -> dict[str, Any]:
    """The summary of ``spec``'s rank trace: from the disk cache or the serving worker. Its allocation
    events are cached beside it (``events_path``)."""
    path = cache_dir() / f"rank-{_key(spec)}.json"
    events = path.with_suffix(".npz")
    if path.is_file() and events.is_file():
        try:
            found: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return {**found, "events_path": str(events)}
        except (OSError, ValueError):
            pass
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="autoconf-rank-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.npz"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        summary = _WORKER.run(spec_path, out_path, timeout_s, spec["arch"]["name"])
        os.replace(out_path, events.with_suffix(f".{os.getpid()}.tmp.npz"))
    os.replace(events.with_suffix(f".{os.getpid()}.tmp.npz"), events)
    tmp_path = path.with_suffix(f".{os.getpid()}.tmp")
    tmp_path.write_text(json.dumps(summary), encoding="utf-8")
    os.replace(tmp_path, path)
    return {**summary, "events_path": str(events)}


@functools.lru_cache(maxsize=64)
def reserved_peak(events_path: str, capacity: int, expandable: bool) -> Replay:
    """The allocator replay of a cached rank trace on a GPU whose allocator may reserve ``capacity`` bytes."""
    import numpy as np

    with np.load(events_path) as data:
        pairs = data["events"].tolist()
    return replay([(int(k), int(n), int(st)) for k, n, st in pairs], capacity=capacity, expandable=expandable)
