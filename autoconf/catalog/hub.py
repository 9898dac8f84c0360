"""A hub id's config.json from the local Hugging Face cache, or downloaded (config.json only), bounded.

The cache is read without huggingface_hub (snapshot layout ``models--org--name/snapshots/<commit>/``
with ``refs/<revision>`` naming the commit), under HF_HUB_CACHE, else HF_HOME/hub, else
XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.

The download is one ``GET {HF_ENDPOINT}/{id}/resolve/{revision}/config.json`` made here with the
standard library (issue 27: huggingface_hub has no total deadline nor byte limit), bounded on every side:
connecting and each read wait at most ``CONNECT_TIMEOUT_S`` / ``READ_TIMEOUT_S``, the whole download
(redirects included) is cut at ``TOTAL_TIMEOUT_S`` by closing the socket, the body is refused past
``MAX_CONFIG_BYTES``, at most ``MAX_REDIRECTS`` redirects are followed, and the content must be a JSON
object before it is written (atomically) into the cache. One download per id at a time: a lock file in
the cache serialises threads and processes, and a waiter finds the first one's file (or, if it failed
meanwhile, its reason). Every
failure is ``HubUnavailable`` with one short reason, never a response body. HF_ENDPOINT, HF_HUB_OFFLINE,
HF_TOKEN (sent to the endpoint's host only), HTTPS_PROXY/HTTP_PROXY and the three timeouts
(``AUTOCONF_HUB_TIMEOUT_S``, total; connect and read are capped by it) are read at call time.

Quick and quiet without a network: HF_HUB_OFFLINE is checked first; then the endpoint's host name is
resolved once per process (at most RESOLVE_TIMEOUT_S), so a host that cannot be resolved fails in about a
second with that cause; and a repository that could not be fetched is not asked for again for
FAILURE_MEMORY_S (a sweep pays once per distinct name; a server tries again after it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urljoin, urlsplit

if TYPE_CHECKING:  # imported where used: resolving a catalogue name never pays for http.client and ssl
    import http.client

try:
    import fcntl
except ImportError:  # not POSIX: the lock below serialises this process's threads only
    fcntl = None  # type: ignore[assignment]

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
REVISION = re.compile(r"^[\w.-]{1,128}$")  # a branch, tag or commit: no slashes, no URL syntax
DEFAULT_ENDPOINT = "https://huggingface.co"
CONNECT_TIMEOUT_S = 5.0  # a hub that does not accept the connection in 5 s is down for our purpose
READ_TIMEOUT_S = 5.0  # longest silence between two reads
TOTAL_TIMEOUT_S = 10.0  # a config.json is kilobytes: 10 s is generous even over a slow link
TIMEOUT_ENV = "AUTOCONF_HUB_TIMEOUT_S"
MAX_CONFIG_BYTES = 1 * 2**20  # the largest configs (long id2label maps) are tens of KB
MAX_REDIRECTS = 5  # the hub redirects a renamed repository once; 5 leaves room for a proxy or mirror
CHUNK = 16 * 1024
RESOLVE_TIMEOUT_S = 1.0  # a resolver that has not answered in a second is treated as no network
FAILURE_MEMORY_S = 60.0  # a failed id is not asked for again this long (a sweep; a server retries after it)
_FAILED: dict[tuple[str, str | None, str, int], tuple[float, str]] = {}  # (repo, rev, endpoint, token hash) -> when, why
_RESOLVED: dict[str, str | None] = {}  # host -> None if it resolves, else why not
_THREADS = contextlib.nullcontext() if os.name == "posix" else threading.Lock()  # flock covers threads on POSIX


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


def total_timeout_s() -> float:
    try:
        value = float(os.environ.get(TIMEOUT_ENV, TOTAL_TIMEOUT_S))
    except ValueError:
        return TOTAL_TIMEOUT_S
    return value if 0 < value <= 600 else TOTAL_TIMEOUT_S


def _folder(repo_id: str) -> Path:
    return cache_dir() / f"models--{repo_id.replace('/', '--')}"


def cached_config(repo_id: str, revision: str | None = None) -> Path | None:
    """The cached config.json of ``repo_id`` at ``revision`` (a branch/tag in refs/, or a commit)."""
    folder = _folder(repo_id)
    rev = revision or "main"
    commit = rev
    if not COMMIT.match(rev):
        ref = folder / "refs" / rev
        if not ref.is_file():
            return None
        commit = ref.read_text(encoding="utf-8").strip()
    path = folder / "snapshots" / commit / "config.json"
    return path if path.is_file() else None


@contextlib.contextmanager
def _one_at_a_time(repo_id: str) -> Iterator[None]:
    """An exclusive lock per id (flock: threads and processes alike). The holder's failure is written into
    the lock file, so that those who waited for it get the same reason at once instead of a second download."""
    locks = cache_dir() / ".autoconf-locks"
    locks.mkdir(parents=True, exist_ok=True)
    asked = time.time()
    with _THREADS, open(locks / f"{repo_id.replace('/', '--')}.lock", "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.seek(0)
            stamp, _, reason = handle.read(4096).decode("utf-8", "replace").partition(" ")
            if reason and stamp.replace(".", "", 1).isdigit() and float(stamp) >= asked:
                raise HubUnavailable(reason)  # failed while we waited: the same answer, no new download
            try:
                yield
            except HubUnavailable as why:
                handle.truncate(0)
                handle.write(f"{time.time():.6f} {why}".encode())
                handle.flush()
                raise
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


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
    """Download ``repo_id``'s config.json into the cache (bounded; see the module docstring); a failure is
    remembered for FAILURE_MEMORY_S, so a sweep asks for a name once."""
    if offline():
        raise HubUnavailable("offline: HF_HUB_OFFLINE is set")
    endpoint = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    key = (repo_id, revision, endpoint, hash(os.environ.get("HF_TOKEN") or ""))
    failed = _FAILED.get(key)
    if failed is not None and time.monotonic() - failed[0] < FAILURE_MEMORY_S:
        raise HubUnavailable(failed[1])
    try:
        return _download(repo_id, revision, endpoint)
    except HubUnavailable as exc:
        _FAILED[key] = (time.monotonic(), str(exc))
        raise


def _download(repo_id: str, revision: str | None, endpoint: str) -> Path:
    why = host_problem(endpoint)
    if why is not None:
        raise HubUnavailable(why)
    if not HUB_ID.match(repo_id) or (revision is not None and not REVISION.match(revision)):
        raise HubUnavailable("not a hub id (org/name) and revision")
    rev = revision or "main"
    with _one_at_a_time(repo_id):
        cached = cached_config(repo_id, revision)
        if cached is not None:  # another thread or process fetched it while we waited
            return cached
        url = f"{endpoint}/{quote(repo_id)}/resolve/{quote(rev, safe='')}/config.json"
        data, commit = fetch(url, os.environ.get("HF_TOKEN") or None)
        return _store(repo_id, rev, data, commit)


def _store(repo_id: str, revision: str, data: bytes, commit: str | None) -> Path:
    """Write a checked config.json into the cache's snapshot layout, atomically (temp file, rename)."""
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        raise HubUnavailable("the hub's config.json is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise HubUnavailable("the hub's config.json is not a JSON object")
    commit = commit if commit and COMMIT.match(commit) else hashlib.sha1(data).hexdigest()  # noqa: S324 - a name
    folder = _folder(repo_id)
    target = folder / "snapshots" / commit / "config.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".config.json.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    if not COMMIT.match(revision):
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        ref_tmp = folder / "refs" / f".{revision}.{os.getpid()}.tmp"
        ref_tmp.write_text(commit, encoding="utf-8")
        os.replace(ref_tmp, folder / "refs" / revision)
    return target


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection for ``url`` (through HTTP(S)_PROXY when set) and the request target to send."""
    import http.client
    import urllib.request

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HubUnavailable(f"HF_ENDPOINT must be an http(s) URL; got scheme '{parts.scheme}'")
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname):
        via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if parts.scheme == "https":
            tunnel = http.client.HTTPSConnection(via.hostname or "", via.port or 80, timeout=timeout)
            tunnel.set_tunnel(parts.hostname, parts.port or 443)
            return tunnel, target
        return http.client.HTTPConnection(via.hostname or "", via.port or 80, timeout=timeout), url
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return kind(parts.hostname, parts.port, timeout=timeout), target


def _error(status: int, code: str) -> HubUnavailable:
    reasons = {"GatedRepo": "a gated repository: set HF_TOKEN to a token that has access",
               "RevisionNotFound": "no such revision on the hub",
               "EntryNotFound": "the repository has no config.json",
               "RepoNotFound": "no such repository on the hub (a private one needs HF_TOKEN)"}
    if code in reasons:
        return HubUnavailable(reasons[code])
    if status in (401, 403, 404):
        return HubUnavailable(reasons["RepoNotFound"])
    return HubUnavailable(f"the hub answered HTTP {status}")


def fetch(url: str, token: str | None = None) -> tuple[bytes, str | None]:
    """GET ``url`` within the bounds of the module docstring: (body, X-Repo-Commit) or HubUnavailable."""
    total = total_timeout_s()
    deadline = time.monotonic() + total
    origin = urlsplit(url).netloc
    for _ in range(MAX_REDIRECTS + 1):
        headers = {"User-Agent": "autoconf-gpu", "Accept-Encoding": "identity"}
        if token and urlsplit(url).netloc == origin:
            headers["Authorization"] = f"Bearer {token}"
        status, location, commit, body = _get_once(url, headers, deadline, total)
        if status in (301, 302, 303, 307, 308) and location:
            url = urljoin(url, location)
            continue
        if status != 200:
            raise _error(status, commit or "")
        return body, commit
    raise HubUnavailable(f"the hub redirected more than {MAX_REDIRECTS} times (a redirect loop?)")


def _get_once(url: str, headers: dict[str, str], deadline: float, total: float) -> tuple[int, str, str | None, bytes]:
    """One request: (status, Location, X-Repo-Commit or X-Error-Code, body of a 200)."""
    import http.client
    import socket

    left = deadline - time.monotonic()
    if left <= 0:
        raise HubUnavailable(f"the hub did not answer within {total:g} s")
    conn, target = _connection(url, min(CONNECT_TIMEOUT_S, left))
    timer = threading.Timer(left, _cut, args=(conn,))  # the total deadline, whatever the server drips
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(min(READ_TIMEOUT_S, max(deadline - time.monotonic(), 0.01)))
        conn.request("GET", target, headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            code = response.getheader("X-Error-Code") or ""
            return response.status, response.getheader("Location") or "", code, b""
        length = response.getheader("Content-Length") or ""
        if length.isdigit() and int(length) > MAX_CONFIG_BYTES:
            raise HubUnavailable(f"the hub's config.json is larger than {MAX_CONFIG_BYTES} bytes")
        chunks, size = [], 0
        while chunk := response.read1(CHUNK):
            size += len(chunk)
            if size > MAX_CONFIG_BYTES:
                raise HubUnavailable(f"the hub's config.json is larger than {MAX_CONFIG_BYTES} bytes")
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise HubUnavailable(f"the hub did not send config.json within {total:g} s")
        if time.monotonic() > deadline:
            raise HubUnavailable(f"the hub did not send config.json within {total:g} s")
        return 200, "", response.getheader("X-Repo-Commit"), b"".join(chunks)
    except HubUnavailable:
        raise
    except (OSError, http.client.HTTPException) as exc:
        if time.monotonic() >= deadline - 0.05:
            raise HubUnavailable(f"the hub did not send config.json within {total:g} s") from None
        if isinstance(exc, (socket.timeout, TimeoutError)):
            raise HubUnavailable(f"the hub was silent for more than {READ_TIMEOUT_S:g} s") from None
        raise HubUnavailable(f"the hub could not be reached: {type(exc).__name__}") from None
    finally:
        timer.cancel()
        conn.close()


def _cut(conn: http.client.HTTPConnection) -> None:
    """End a download at its deadline: shutting the socket wakes a read blocked in another thread."""
    import socket

    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
