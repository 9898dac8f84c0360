"""A real ``autoconf-gpu serve`` subprocess on a free loopback port, for the REST tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def serve(*options: str, timeout: float = 60, env: dict[str, str] | None = None) -> Iterator[httpx.Client]:
    """Start the server with ``options`` (e.g. --data-dir DIR) and extra ``env``, wait for /healthz, yield a
    client, stop it."""
    port = free_port()
    cmd = [sys.executable, "-m", "autoconf.interfaces.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
           *options]
    log = tempfile.NamedTemporaryFile(prefix="autoconf-serve-", suffix=".log", delete=False)  # noqa: SIM115
    # stderr to a file: a full pipe would stall the server
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + timeout
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=timeout) as http:
            while True:
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {Path(log.name).read_text(encoding='utf-8')}")
                time.sleep(0.2)
            http.server_pid = proc.pid  # type: ignore[attr-defined]  # for RSS checks
            yield http
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
