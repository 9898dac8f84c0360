"""Hostile inputs shared by tests/test_hostile_*.py and bench/fuzz.py (issue 27).

``HostileHub`` is a loopback HTTP server that answers ``/{org}/{name}/resolve/{rev}/config.json`` the way a
broken or malicious hub would, chosen by the repository name: ``giant`` (an endless body, no length),
``giant-length`` (announces 5 GB), ``drip`` (one byte every ``drip_s``), ``silent`` (accepts, never answers),
``loop`` (redirects to itself), ``invalid`` (not JSON), ``list`` (a JSON list), ``slowheaders`` (drips the
status line), and ``good`` (a real config, Llama-3.2-1B's). It counts the requests per path.
``hostile_configs()`` are config.json bodies that once made HTTP 500s or out-of-memory; ``GET_PATHS`` try to
leave the GET routes' folders.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

LLAMA_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": True,
            "max_position_embeddings": 131072}  # meta-llama/Llama-3.2-1B config.json (size keys)
HUB_MODES = ("giant", "giant-length", "drip", "silent", "loop", "invalid", "list", "slowheaders")
LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}  # Llama-3.1-8B config.json


GET_PATHS = ["/static/../../../../etc/passwd", "/static/..%2f..%2f..%2fapp.py", "/static/%2e%2e/%2e%2e/paths.py",
             "/docs-assets/..%2f..%2f..%2fetc%2fpasswd", "/api/models?x=" + "%00" * 100, "/healthz/../api/gpus",
             "/static/" + "a" * 5000]
SOURCE_MARKS = ("root:", "def allowed_path", "from __future__")  # /etc/passwd or server source in an answer


def hostile_configs() -> dict[str, bytes]:
    """Raw config.json bodies that once answered HTTP 500 (or exhausted memory), by name."""
    def dump(value: Any) -> bytes:
        return json.dumps(value).encode()

    return {
        "model_type list": dump({**LLAMA, "model_type": ["llama"]}),
        "model_type object": dump({**LLAMA, "model_type": {"llama": 1}}),
        "_autoconf.aliases 5": dump({**LLAMA, "_autoconf": {"aliases": 5}}),
        "5000-digit integer": dump(LLAMA)[:-1] + b', "x": ' + b"9" * 5000 + b"}",
        "nested 100000": b"[" * 100_000 + b"]" * 100_000,
        "num_hidden_layers 10**14": dump({**LLAMA, "num_hidden_layers": 10**14}),
        "lone surrogate": dump(LLAMA)[:-1] + b', "name": "\\ud800"}',
        "not JSON": b"{model_type: llama",
        "a list": b"[1, 2]",
        "unsupported type": dump({**LLAMA, "model_type": "no-such-family"}),
        "missing keys": dump({"model_type": "llama"}),
        "NaN": dump(LLAMA)[:-1] + b', "rope_theta": NaN}',
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: ClassVar[Counter[str]] = Counter()
    drip_s: ClassVar[float] = 0.3
    stop: ClassVar[threading.Event] = threading.Event()

    def do_GET(self) -> None:  # http.server's method name
        self.seen[self.path] += 1
        mode = self.path.lstrip("/").split("/")[1] if self.path.count("/") >= 2 else ""
        if mode == "silent":
            self.stop.wait(120)
            return
        if mode == "slowheaders":
            with contextlib.suppress(OSError):
                for byte in b"HTTP/1.1 200 OK\r\n":
                    if self.stop.wait(self.drip_s):
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
            return
        if mode == "loop":
            self._head(302, {"Location": self.path, "Content-Length": "0"})
            return
        if mode in ("giant", "drip"):
            self._head(200, {"X-Repo-Commit": "a" * 40})  # no length: the body ends when the socket does
            chunk, pause = (b" " * 65536, 0.0) if mode == "giant" else (b" ", self.drip_s)
            try:
                for _ in range(200_000):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    if self.stop.wait(pause) if pause else self.stop.is_set():
                        return
            except OSError:
                return
            return
        bodies = {"giant-length": b"{}", "invalid": b"{not json", "list": b"[1, 2]", "good": json.dumps(LLAMA_1B).encode()}
        if mode not in bodies:
            self._head(404, {"X-Error-Code": "RepoNotFound", "Content-Length": "0"})
            return
        body = bodies[mode]
        length = str(5 * 10**9) if mode == "giant-length" else str(len(body))
        self._head(200, {"Content-Length": length, "X-Repo-Commit": "b" * 40, "Content-Type": "application/json"})
        with contextlib.suppress(OSError):
            self.wfile.write(body)

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class HostileHub:
    """``with HostileHub() as hub: hub.url`` — the endpoint to set as HF_ENDPOINT; ``hub.seen`` its requests."""

    def __init__(self, drip_s: float = 0.3) -> None:
        self.drip_s = drip_s

    def __enter__(self) -> HostileHub:
        handler = type("Handler", (_Handler,), {"seen": Counter(), "drip_s": self.drip_s,
                                                "stop": threading.Event()})
        self.handler = handler
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self

    @property
    def seen(self) -> Counter[str]:
        return self.handler.seen

    def __exit__(self, *exc: object) -> None:
        self.handler.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
        time.sleep(0)


def tree_rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants (the traced pool and its tracing worker), KiB."""
    from autoconf.interfaces.api.pool import descendants

    total = 0
    for one in (pid, *descendants(pid)):
        with contextlib.suppress(OSError, ValueError, StopIteration):
            text = Path(f"/proc/{one}/status").read_text(encoding="utf-8")
            total += int(next(line for line in text.splitlines() if line.startswith("VmRSS:")).split()[1])
    return total
