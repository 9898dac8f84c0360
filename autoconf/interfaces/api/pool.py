"""The traced estimator's worker pool under load (issue 27): bounded workers, a bounded queue, 503 when full.

A traced estimate is seconds of Python-heavy CPU, so it runs in a child process (spawned: forking a threaded
server is unsafe) to keep the event loop and the GIL free. The pool holds ``workers`` slots, each one
single-process executor running one request at a time; at most ``queue`` more requests wait for a slot.
A request beyond that, or one that waited longer than its timeout, is answered 503 with ``Retry-After``
(seconds: the recent mean service time × the requests ahead, per worker). A request over its timeout
ends its own slot's process and that process's descendants only (the other slots' requests go on) and is answered 422 ``timeout``; a
process that dies under a request (killed, out of memory) is replaced and the request retried once on the
fresh one, then answered 422. Memory is bounded by the number of processes and each process's address
space limit (``WORKER_MEMORY_ENV``, applied in the child before any work), and each process is replaced
after ``TASKS_PER_CHILD`` requests so that caches cannot grow without end. No FastAPI here.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import os
import resource
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKERS_ENV = "AUTOCONF_API_TRACED_WORKERS"  # `serve --traced-workers`
QUEUE_ENV = "AUTOCONF_API_TRACED_QUEUE"  # `serve --traced-queue`
WORKER_MEMORY_ENV = "AUTOCONF_API_WORKER_MEMORY_MB"  # `serve --worker-memory-mb`
WORKERS = 1  # one traced estimate saturates a core; more only on a machine with cores to spare
QUEUE = 32  # requests that may wait (each holds only its body, <= 1 MB); one that waits past its timeout gets 503
WORKER_MEMORY_MB = 8192  # address space of one traced process: torch's import maps ~3 GB, a trace ~1-2 GB more
TASKS_PER_CHILD = 200  # a process is replaced after this many requests (bounds cached traces)


class Busy(Exception):
    """The pool is full (or a request waited past its timeout); ``retry_after`` in whole seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"busy; retry after {retry_after} s")
        self.retry_after = retry_after


class Failed(Exception):
    """A request's process stopped twice (out of memory or killed); answered 422."""


def _env_int(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name, "")
    return min(max(int(raw), low), high) if raw.isdigit() else default


def _limit_memory(megabytes: int) -> None:
    """In the child, before any work: cap its address space so that one request cannot exhaust the host."""
    if megabytes > 0:
        limit = megabytes * 2**20
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, deepest first (Linux /proc; elsewhere none)."""
    children: dict[int, list[int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat_file.parent.name))
    out: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        out.append(child)
        stack.extend(children.get(child, []))
    return out[::-1]


@dataclass
class _Slot:
    executor: ProcessPoolExecutor | None = None

    def get(self) -> ProcessPoolExecutor:
        if self.executor is None:
            memory = _env_int(WORKER_MEMORY_ENV, WORKER_MEMORY_MB, 0, 2**20)
            self.executor = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_limit_memory, initargs=(memory,),
                                                max_tasks_per_child=TASKS_PER_CHILD)
        return self.executor

    def stop(self) -> None:
        """End this slot's process and its descendants (the traced estimator's tracing worker) now; the
        executor has no public way to kill a running task."""
        if self.executor is None:
            return
        processes = list(getattr(self.executor, "_processes", {}).values())
        pids = [pid for process in processes if process.pid for pid in (*descendants(process.pid), process.pid)]
        self.executor.shutdown(wait=False, cancel_futures=True)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        self.executor = None


@dataclass
class Pool:
    """Slots and their queue; one per server process, used from its event loop only."""

    workers: int = WORKERS
    queue: int = QUEUE
    slots: list[_Slot] = field(default_factory=list)
    free: asyncio.Queue[_Slot] | None = None
    admitted: int = 0
    mean_s: float = 5.0  # recent mean service time (exponential average), for Retry-After

    def retry_after(self) -> int:
        return max(1, math.ceil(self.mean_s * max(self.admitted, 1) / self.workers))

    async def run(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Any:
        """``fn(*args)`` in a slot's process within ``timeout`` seconds (waiting included); raises Busy,
        TimeoutError (it ran past the timeout) or Failed (its process stopped twice)."""
        if self.free is None:
            self.slots = [_Slot() for _ in range(self.workers)]
            self.free = asyncio.Queue()
            for slot in self.slots:
                self.free.put_nowait(slot)
        if self.admitted >= self.workers + self.queue:
            raise Busy(self.retry_after())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self.admitted += 1
        try:
            try:
                slot = await asyncio.wait_for(self.free.get(), timeout)
            except TimeoutError:
                raise Busy(self.retry_after()) from None
            try:
                return await self._on(slot, fn, args, deadline)
            finally:
                self.free.put_nowait(slot)
        finally:
            self.admitted -= 1

    async def _on(self, slot: _Slot, fn: Callable[..., Any], args: tuple[Any, ...], deadline: float) -> Any:
        loop = asyncio.get_running_loop()
        for attempt in (1, 2):
            started = loop.time()
            left = deadline - started
            if left <= 0:
                raise Busy(self.retry_after())
            try:
                result = await asyncio.wait_for(loop.run_in_executor(slot.get(), fn, *args), left)
            except TimeoutError:
                slot.stop()
                raise
            except BrokenExecutor:
                slot.stop()  # replaced on the next get(); this request is retried once on the fresh process
                if attempt == 2:
                    raise Failed("the traced estimator's process stopped twice on this request") from None
                continue
            self.mean_s = 0.8 * self.mean_s + 0.2 * (loop.time() - started)
            return result
        raise Failed("unreachable")  # the loop returns or raises

    def stop(self) -> None:
        for slot in self.slots:
            slot.stop()


_POOL: Pool | None = None


def pool() -> Pool:
    global _POOL
    if _POOL is None:
        _POOL = Pool(workers=_env_int(WORKERS_ENV, WORKERS, 1, 64), queue=_env_int(QUEUE_ENV, QUEUE, 0, 4096))
    return _POOL
