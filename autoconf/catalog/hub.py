"""A hub id's config.json from the local Hugging Face cache, or downloaded (config.json only).

The cache is read without huggingface_hub (snapshot layout ``models--org--name/snapshots/<commit>/``
with ``refs/<revision>`` naming the commit), under HF_HUB_CACHE, else HF_HOME/hub, else
XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. The download goes through
huggingface_hub (an optional import) and honours HF_ENDPOINT, HF_HUB_OFFLINE and HF_TOKEN, read at
call time (huggingface_hub reads them once, at import).

Quick and quiet without a network: HF_HUB_OFFLINE is checked first; then the endpoint's host name is
resolved once per process (at most RESOLVE_TIMEOUT_S), so a host that cannot be resolved fails in about a
second with that cause, instead of huggingface_hub's retries; and a repository that could not be fetched
is not asked for again in the same process (a sweep pays once per distinct name).
"""

from __future__ import annotations

import os
import re
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
ETAG_TIMEOUT_S = 10.0  # huggingface_hub's own default for the metadata request
RESOLVE_TIMEOUT_S = 1.0  # a resolver that has not answered in a second is treated as no network
DEFAULT_ENDPOINT = "https://huggingface.co"
_FAILED: dict[tuple[str, str | None, str, int], str] = {}  # (repo, revision, endpoint, token hash) -> why not
_RESOLVED: dict[str, str | None] = {}  # host -> None if it resolves, else why not


class HubUnavailable(Exception):  # a reason, turned into ModelNotAvailableError by resolve
    """Why a config could not be fetched (a short reason, never a response body)."""


def cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def offline() -> bool:
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return any(flag.strip().lower() in ("1", "on", "yes", "true") for flag in flags)


def cached_config(repo_id: str, revision: str | None = None) -> Path | None:
    """The cached config.json of ``repo_id`` at ``revision`` (a branch/tag in refs/, or a commit)."""
    folder = cache_dir() / f"models--{repo_id.replace('/', '--')}"
    rev = revision or "main"
    commit = rev
    if not COMMIT.match(rev):
        ref = folder / "refs" / rev
        if not ref.is_file():
            return None
        commit = ref.read_text(encoding="utf-8").strip()
    path = folder / "snapshots" / commit / "config.json"
    return path if path.is_file() else None


def host_problem(endpoint: str) -> str | None:
    """Why the endpoint's host cannot be resolved (None if it can), asked once per host per process and
    given at most RESOLVE_TIMEOUT_S: a resolver that hangs without a network counts as unreachable."""
    host = urlsplit(endpoint).hostname or ""
    if host in _RESOLVED:
        return _RESOLVED[host]
    found: list[str | None] = []

    def ask() -> None:
        try:
            socket.getaddrinfo(host, None)
            found.append(None)
        except (OSError, UnicodeError) as exc:
            found.append(f"cannot resolve the hub's host '{host}' ({getattr(exc, 'strerror', None) or exc}): "
                         "no network or DNS; set HF_HUB_OFFLINE=1 to skip the hub")

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(RESOLVE_TIMEOUT_S)
    why = found[0] if found else (f"the hub's host '{host}' did not resolve within {RESOLVE_TIMEOUT_S:g} s: "
                                  "no network or DNS; set HF_HUB_OFFLINE=1 to skip the hub")
    _RESOLVED[host] = why
    return why


def download_config(repo_id: str, revision: str | None = None) -> Path:
    """Download ``repo_id``'s config.json into the cache; HubUnavailable says why not (remembered, so a
    name is asked for once per process)."""
    if offline():
        raise HubUnavailable("offline: HF_HUB_OFFLINE is set")
    endpoint = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    key = (repo_id, revision, endpoint, hash(os.environ.get("HF_TOKEN") or ""))
    if key in _FAILED:
        raise HubUnavailable(_FAILED[key])
    try:
        return _download(repo_id, revision, endpoint)
    except HubUnavailable as exc:
        _FAILED[key] = str(exc)
        raise


def _download(repo_id: str, revision: str | None, endpoint: str) -> Path:
    why = host_problem(endpoint)
    if why is not None:
        raise HubUnavailable(why)
    try:
        import huggingface_hub
        from huggingface_hub import errors
    except ImportError:
        raise HubUnavailable("huggingface_hub is not installed") from None
    try:
        path = huggingface_hub.hf_hub_download(
            repo_id, "config.json", revision=revision, cache_dir=cache_dir(), etag_timeout=ETAG_TIMEOUT_S,
            endpoint=endpoint, token=os.environ.get("HF_TOKEN") or None,
        )
    except errors.GatedRepoError:
        raise HubUnavailable("a gated repository: set HF_TOKEN to a token that has access") from None
    except errors.RevisionNotFoundError:
        raise HubUnavailable(f"no revision '{revision}' on the hub") from None
    except errors.RepositoryNotFoundError:
        raise HubUnavailable("no such repository on the hub (a private one needs HF_TOKEN)") from None
    except errors.LocalEntryNotFoundError:  # a subclass of EntryNotFoundError: the hub was not reached
        raise HubUnavailable("the hub could not be reached (connection failed)") from None
    except errors.EntryNotFoundError:
        raise HubUnavailable("the repository has no config.json") from None
    except (errors.HfHubHTTPError, errors.HFValidationError, OSError, ValueError) as exc:
        raise HubUnavailable(f"the hub could not be reached: {type(exc).__name__}") from None
    return Path(path)
