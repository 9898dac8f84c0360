"""``autoconf-gpu serve``: run the REST API with uvicorn (OpenAPI at /docs).

Options reach the app (and each of ``--workers`` processes) as environment variables read by
autoconf/interfaces/api/paths.py, guard.py and app.py: which folder clients may name files in, the
largest body and the longest computation of one request, whether hub ids may be downloaded, and the
traced estimator's pool (processes, queue, memory per process).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from autoconf.errors import InvalidInputError

MAX_WORKERS = 64


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("serve", help="serve the REST API and the web page at / (FastAPI + uvicorn)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default %(default)s)")
    p.add_argument("--data-dir", type=Path, help="the only folder whose files clients may name (default: none; "
                   "paths in requests are refused and content must be sent in the body)")
    p.add_argument("--max-body-bytes", type=int, default=1_000_000, help="largest request body (default %(default)s)")
    p.add_argument("--timeout-s", type=float, default=30.0,
                   help="longest computation of one request (default %(default)s)")
    p.add_argument("--allow-hub", action="store_true", help="let clients name Hugging Face hub ids (org/name): "
                   "the server downloads their config.json, bounded in size and time (default: refused)")
    p.add_argument("--traced-workers", type=int, default=1, help="processes for traced estimates (default %(default)s)")
    p.add_argument("--traced-queue", type=int, default=32,
                   help="traced requests that may wait for a process; more are answered 503 (default %(default)s)")
    p.add_argument("--worker-memory-mb", type=int, default=8192,
                   help="address-space limit of each traced process, MiB (default %(default)s; 0: none)")


def _environment(args: argparse.Namespace) -> dict[str, str]:
    from autoconf.interfaces.api import guard, paths, pool

    if not 0 < args.port < 65536:
        raise InvalidInputError("--port", f"must be from 1 to 65535; got {args.port}")
    if not 1 <= args.workers <= MAX_WORKERS:
        raise InvalidInputError("--workers", f"must be from 1 to {MAX_WORKERS}; got {args.workers}")
    if args.max_body_bytes < 1 or not 0 < args.timeout_s <= 86_400:
        raise InvalidInputError("--max-body-bytes/--timeout-s", "must be positive (timeout at most a day)")
    if not 1 <= args.traced_workers <= MAX_WORKERS or not 0 <= args.traced_queue <= 4096:
        raise InvalidInputError("--traced-workers/--traced-queue", f"must be 1 to {MAX_WORKERS} and 0 to 4096; "
                                f"got {args.traced_workers} and {args.traced_queue}")
    if not 0 <= args.worker_memory_mb <= 2**20:
        raise InvalidInputError("--worker-memory-mb", f"must be from 0 to {2**20}; got {args.worker_memory_mb}")
    env = {guard.MAX_BODY_ENV: str(args.max_body_bytes), "AUTOCONF_API_TIMEOUT_S": str(args.timeout_s),
           paths.DATA_DIR_ENV: "", paths.ALLOW_HUB_ENV: "1" if args.allow_hub else "",
           pool.WORKERS_ENV: str(args.traced_workers), pool.QUEUE_ENV: str(args.traced_queue),
           pool.WORKER_MEMORY_ENV: str(args.worker_memory_mb)}
    if args.data_dir is not None:
        if not args.data_dir.is_dir():
            raise InvalidInputError("--data-dir", f"must be an existing folder; got {str(args.data_dir)!r}")
        env[paths.DATA_DIR_ENV] = str(args.data_dir.resolve())
    return env


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        print("autoconf-gpu serve needs the api extra: pip install 'autoconf-gpu[api]'")
        return 2
    os.environ.update(_environment(args))
    uvicorn.run("autoconf.interfaces.api.app:app", host=args.host, port=args.port, log_level=args.log_level,
                workers=args.workers)
    return 0
