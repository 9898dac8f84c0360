"""Uploaded config.json objects (``POST /api/config``, or a config object sent as ``model``): checked, then kept.

An upload is parsed and checked in full before anything is written (issue 27): the bounds of
autoconf/catalog/config_bounds.py, then the catalogue's own parser; a refused upload leaves no file.
An accepted one is stored content-addressed (``config-<sha256[:32]>.json``: the same content is one
file, whoever sends it) in a private folder (0700, ours), within a quota: at most ``MAX_FILES`` files
and ``MAX_TOTAL_BYTES`` bytes, each kept ``TTL_S`` seconds after its last use; beyond the quota the
least recently used go first. A client can name a stored upload by the ``model`` string the upload
answered; no other file qualifies.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from autoconf.catalog.architecture import Architecture
from autoconf.catalog.config_bounds import check_config
from autoconf.catalog.config_parse import parse_config
from autoconf.errors import AutoconfError, InvalidInputError

MAX_CONFIG_BYTES = 256 * 1024  # a Hugging Face config.json is a few KB; larger uploads are refused
MAX_FILES = 256  # distinct configs kept at once (a team's worth; the oldest go first)
MAX_TOTAL_BYTES = 16 * 2**20  # 16 MiB for all of them
TTL_S = 24 * 3600.0  # an upload unused for a day is deleted
CONFIG_HINT = ("must be a Hugging Face config.json object with a supported model_type and its size keys "
               "(hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size)")
_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def upload_dir() -> Path:
    """A private folder (0700, ours) for uploads: one fixed name per user, so that the same upload gets
    the same name in every worker and run; a fresh random one if that name is not safe."""
    fixed = Path(os.environ.get("AUTOCONF_API_UPLOAD_DIR") or Path(tempfile.gettempdir())
                 / f"autoconf-api-uploads-{os.getuid()}")
    try:
        fixed.mkdir(mode=0o700, exist_ok=True)
        info = fixed.lstat()
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
            return fixed.resolve()
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="autoconf-api-uploads-")).resolve()


def check_upload(config: Any, field: str, detailed: bool = True) -> Architecture:
    """The architecture of an uploaded config, or InvalidInputError naming ``field``; writes nothing.
    ``detailed``: the parser's own message (``POST /api/config``), else one generic line (a config object
    sent as ``model``, whose errors are worded like those of a server file)."""
    if not isinstance(config, dict):
        raise InvalidInputError(field, f"must be a JSON object (a config.json); got {type(config).__name__}")
    try:
        check_config(config, "uploaded config")
        return parse_config(config, "uploaded config", name="uploaded config")
    except AutoconfError as exc:  # the parser's own message (the key, the type, the supported families)
        if not detailed:
            raise InvalidInputError(field, f"{CONFIG_HINT} ({type(exc).__name__})") from None
        raise InvalidInputError(field, exc.message) from None
    except Exception as exc:  # noqa: BLE001 - whatever else a hostile config trips is the client's 422
        raise InvalidInputError(field, f"{CONFIG_HINT} ({type(exc).__name__})") from None


def _expire(folder: Path, incoming: int) -> None:
    """Delete uploads past their TTL, then the least recently used until ``incoming`` more bytes fit."""
    now = time.time()
    kept = []
    for path in folder.glob("config-*.json"):
        with contextlib.suppress(OSError):
            info = path.lstat()
            if now - info.st_mtime > TTL_S or not stat.S_ISREG(info.st_mode):
                path.unlink()
            else:
                kept.append((info.st_mtime, info.st_size, path))
    kept.sort()
    total = sum(size for _, size, _ in kept)
    while kept and (len(kept) + 1 > MAX_FILES or total + incoming > MAX_TOTAL_BYTES):
        _, size, path = kept.pop(0)
        with contextlib.suppress(OSError):
            path.unlink()
        total -= size


def store_config(config: Any, field: str = "config", detailed: bool = True) -> tuple[Path, Architecture]:
    """Check ``config`` (InvalidInputError naming ``field``), then keep it; (its file, its architecture)."""
    arch = check_upload(config, field, detailed)
    text = json.dumps(config, sort_keys=True, ensure_ascii=True)
    if len(text) > MAX_CONFIG_BYTES:
        raise InvalidInputError(field, f"must be at most {MAX_CONFIG_BYTES // 1024} KB as JSON; got {len(text)} bytes")
    folder = upload_dir()
    path = folder / f"config-{hashlib.sha256(text.encode()).hexdigest()[:32]}.json"
    with _LOCK:
        if path.is_file() and not path.is_symlink():
            os.utime(path)  # used again: its TTL starts over
            return path, arch
        _expire(folder, len(text))
        tmp = folder / f".upload-{os.getpid()}-{threading.get_ident()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return path, arch


def uploaded_config(raw: str) -> Path | None:
    """The stored upload ``raw`` names (a ``model`` an upload answered), else None: only regular files of
    the private folder qualify, resolved first, so a client can never name any other file this way."""
    try:
        path = Path(raw).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    inside = path.parent == upload_dir() and path.name.startswith("config-") and path.suffix == ".json"
    try:
        return path if inside and stat.S_ISREG(path.lstat().st_mode) else None
    except OSError:
        return None
