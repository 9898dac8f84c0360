"""Which server files a REST client may name: only regular files under ``serve --data-dir DIR``.

With no data directory (the default) every client path is refused with a 422 that says how to enable
them; clients can upload the content instead (a config object as ``model``, texts as ``texts``). A
path is resolved first (``..`` and every symlink), then must lie under the resolved data directory,
be a regular file (not a folder, FIFO, device or socket) and be at most ``MAX_FILE_BYTES``. Messages
name the client's path and the rule broken, never anything read from a file.

Hub ids (``org/name``) are downloaded only under ``serve --allow-hub`` (guard.py, through the bounded
client of autoconf/catalog/hub.py); otherwise they are unknown models like any other name.

The serve command passes its options to the server process (and to each uvicorn worker) through
environment variables, read on every call so that the policy is the one the operator started with.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from autoconf.errors import InvalidInputError

DATA_DIR_ENV = "AUTOCONF_API_DATA_DIR"  # set by `autoconf-gpu serve --data-dir DIR`
ALLOW_HUB_ENV = "AUTOCONF_API_ALLOW_HUB"  # "1" under `autoconf-gpu serve --allow-hub`
MAX_FILE_ENV = "AUTOCONF_API_MAX_FILE_BYTES"
MAX_FILE_BYTES = 64 * 2**20  # a dataset or config larger than this is refused (bounded work per request)
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux
DATASET_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
ENABLE_HINT = ("reading server files is disabled; start the server with `autoconf-gpu serve --data-dir DIR` to "
               "allow files under DIR, or send the content in the body (a config object as model, texts as texts)")


class PathNotAllowedError(InvalidInputError):
    """A client-sent path the operator did not allow (outside --data-dir, or no --data-dir at all)."""


def data_dir() -> Path | None:
    """The resolved data directory the operator allowed, or None (every path refused)."""
    raw = os.environ.get(DATA_DIR_ENV, "")
    return Path(raw).resolve() if raw else None


def allow_hub() -> bool:
    """Whether the operator lets clients name hub ids that the server downloads (``serve --allow-hub``)."""
    return os.environ.get(ALLOW_HUB_ENV, "") == "1"


def max_file_bytes() -> int:
    raw = os.environ.get(MAX_FILE_ENV, "")
    return int(raw) if raw.isdigit() else MAX_FILE_BYTES


def _show(raw: str) -> str:
    return repr(raw if len(raw) <= 120 else raw[:119] + "…")


def allowed_path(raw: str, field: str = "path") -> Path:
    """The resolved regular file ``raw`` names under the data directory, or PathNotAllowedError.

    A relative path is taken relative to the data directory. Resolution follows every symlink and
    ``..`` before the check, so a link inside the folder that points out of it is refused too.
    """
    root = data_dir()
    if root is None:
        raise PathNotAllowedError(field, ENABLE_HINT)
    if not isinstance(raw, str) or not raw or len(raw) > MAX_PATH_CHARS or "\x00" in raw:
        raise PathNotAllowedError(field, f"must be a file path of 1 to {MAX_PATH_CHARS} characters")
    try:
        resolved = (root / Path(raw).expanduser()).resolve()
    except (OSError, RuntimeError, ValueError):  # symlink loops, undecodable names
        raise PathNotAllowedError(field, f"cannot be resolved; got {_show(raw)}") from None
    if not resolved.is_relative_to(root):
        raise PathNotAllowedError(field, "must lie under the server's --data-dir (after resolving links); "
                                  f"got {_show(raw)}")
    try:
        info = resolved.stat()
    except OSError:
        raise PathNotAllowedError(field, f"no such file under the server's --data-dir; got {_show(raw)}") from None
    if not stat.S_ISREG(info.st_mode):
        raise PathNotAllowedError(field, f"must be a regular file (not a folder, FIFO or device); got {_show(raw)}")
    if info.st_size > max_file_bytes():
        raise PathNotAllowedError(field, f"must be at most {max_file_bytes()} bytes; got {info.st_size} bytes")
    return resolved


def looks_like_path(value: str, suffixes: tuple[str, ...] = DATASET_SUFFIXES) -> bool:
    """A value a server would read as a file: absolute, relative with ./ ../ ~, or ending in a file suffix."""
    text = value.strip()
    return text.startswith(("/", ".", "~", "\\")) or text.lower().endswith(suffixes)
