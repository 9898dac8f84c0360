"""resolve_model's order (catalogue -> local path -> HF cache -> download) with a real cache tree and the
real huggingface_hub talking to a loopback HTTP server that answers as the hub does; bad configs give
one-line typed errors that never echo the file's content."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from autoconf.catalog import (
    ConfigError,
    MissingConfigKeyError,
    ModelNotAvailableError,
    UnsupportedModelTypeError,
    get_architecture,
    resolve_model,
)
from autoconf.errors import InvalidInputError, UnknownModelError

# the shape keys of meta-llama/Llama-3.2-1B's config.json (1,235,814,400 parameters, tied embeddings)
LLAMA_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
            "tie_word_embeddings": True, "max_position_embeddings": 131072}
LLAMA_1B_PARAMS = 1_235_814_400
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_test_token_not_a_secret"


@pytest.fixture(autouse=True)
def _hub_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_ENDPOINT", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")


def _snapshot(cache: Path, repo: str, config: object, ref: str = "main", commit: str = COMMIT) -> Path:
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / ref).write_text(commit, encoding="utf-8")
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return snap / "config.json"


@pytest.mark.parametrize(
    ("spelling", "name"),
    [("llama3.1-8b", "llama3.1-8b"), ("META-LLAMA/Llama-3.1-8B", "llama3.1-8b"),
     ("meta-llama/Llama-3.1-8B-Instruct", "llama3.1-8b"), ("meta-llama/Meta-Llama-3.1-8B", "llama3.1-8b"),
     ("meta-llama/Llama-2-7b-chat-hf", "llama2-7b"), ("Llama-2-7b-hf", "llama2-7b"), ("llama-2-7b", "llama2-7b")],
)
def test_catalogue_names_hub_ids_and_their_variants(spelling: str, name: str) -> None:
    found = resolve_model(spelling)
    assert (found.how, found.architecture.name) == ("catalogue", name)
    assert found.config["model_type"] == "llama" and "_autoconf" not in found.config


def test_local_file_and_folder(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    path = tmp_path / "m" / "config.json"
    path.write_text(json.dumps(LLAMA_1B), encoding="utf-8")
    for given in (str(path), str(tmp_path / "m")):
        found = resolve_model(given)
        assert found.how == "local" and found.origin == str(path) and found.config == LLAMA_1B
        assert found.architecture.total_params == LLAMA_1B_PARAMS


def test_hf_cache_snapshot_with_refs_and_revision(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    _snapshot(cache, "someorg/tiny-llama", LLAMA_1B)
    other = "fedcba9876543210fedcba9876543210fedcba98"
    _snapshot(cache, "someorg/tiny-llama", {**LLAMA_1B, "num_hidden_layers": 8}, ref="v1", commit=other)
    found = resolve_model("someorg/tiny-llama")
    assert found.how == "cache" and COMMIT in found.origin
    assert found.architecture.total_params == LLAMA_1B_PARAMS
    assert resolve_model("someorg/tiny-llama", revision="v1").architecture.num_layers == 8
    assert resolve_model("someorg/tiny-llama", revision=other).architecture.num_layers == 8


def test_offline_still_reads_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _snapshot(tmp_path / "hub", "someorg/cached-offline", LLAMA_1B)
    assert resolve_model("someorg/cached-offline").how == "cache"


def test_a_folder_without_config_json_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="holds no config.json"):
        resolve_model(str(tmp_path))


def test_hf_home_is_the_cache_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    _snapshot(tmp_path / "home" / "hub", "someorg/homed", LLAMA_1B)
    assert resolve_model("someorg/homed").how == "cache"


class _Hub(BaseHTTPRequestHandler):
    """Answers ``/{repo}/resolve/{revision}/config.json`` as huggingface.co does: HEAD with the
    X-Repo-Commit / ETag / Content-Length headers huggingface_hub requires, then GET the bytes."""

    files: ClassVar[dict[str, bytes]] = {}
    gated: ClassVar[set[str]] = set()
    seen: ClassVar[list[tuple[str, str, str]]] = []

    def _answer(self, body: bool) -> None:
        repo, _, rest = self.path.lstrip("/").partition("/resolve/")
        auth = self.headers.get("Authorization", "")
        self.seen.append((self.command, self.path, auth))
        revision, _, filename = rest.partition("/")
        if repo in self.gated and auth != f"Bearer {TOKEN}":
            return self._error(401, "GatedRepo", "Access to this repository is restricted.")
        if repo not in self.files or filename != "config.json" or revision not in ("main", COMMIT):
            return self._error(404, "RepoNotFound", "Repository not found")
        data = self.files[repo]
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')  # an etag, not security
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _error(self, status: int, code: str, message: str) -> None:
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:  # http.server's method names
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Hub]]:
    _Hub.files = {"someorg/served": json.dumps(LLAMA_1B).encode(), "gatedorg/locked": json.dumps(LLAMA_1B).encode()}
    _Hub.gated, _Hub.seen = {"gatedorg/locked"}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield _Hub
    server.shutdown()
    thread.join()


def test_download_fetches_config_json_only_then_reads_the_cache(hub: type[_Hub], tmp_path: Path) -> None:
    found = resolve_model("someorg/served")
    assert found.how == "download" and found.architecture.total_params == LLAMA_1B_PARAMS
    files = {(method, path) for method, path, _ in hub.seen if "/resolve/" in path}  # (the client also asks /api/...)
    assert files == {("GET", "/someorg/served/resolve/main/config.json")}  # one bounded GET (catalog/hub.py)
    assert found.origin.startswith(str(tmp_path / "hub"))
    assert resolve_model("someorg/served").how == "cache"


def test_gated_repo_needs_hf_token(hub: type[_Hub], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelNotAvailableError, match="gated repository: set HF_TOKEN"):
        resolve_model("gatedorg/locked")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert resolve_model("gatedorg/locked").how == "download"
    assert hub.seen[-1][2] == f"Bearer {TOKEN}"


def test_missing_repo_on_the_hub(hub: type[_Hub]) -> None:
    with pytest.raises(ModelNotAvailableError, match="no such repository"):
        resolve_model("someorg/absent")


def test_offline_and_not_found_is_one_line_naming_the_three_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError) as info:
        get_architecture("someorg/not-cached-anywhere")
    message = str(info.value)
    assert isinstance(info.value, UnknownModelError) and "\n" not in message
    assert "someorg/not-cached-anywhere" in message and "offline" in message
    assert "catalogue name" in message and "config.json" in message and "HF_HUB_CACHE" in message


def test_unknown_bare_name_keeps_its_suggestions() -> None:
    with pytest.raises(UnknownModelError, match="closest: llama3.1-8b"):
        resolve_model("llama3.1-8c")


SECRET = "do-not-echo-this-value"


@pytest.mark.parametrize(
    ("text", "error", "expected"),
    [
        ('{"model_type": "llama",\n  "hidden_size": ' + f'"{SECRET}"\n  oops', ConfigError, "line 3 column 3"),
        (json.dumps([SECRET]), ConfigError, "must be a JSON object; got a JSON array"),
        (json.dumps(SECRET), ConfigError, "got a JSON string"),
        (json.dumps({"model_type": "t5", "d_model": SECRET}), UnsupportedModelTypeError, "got 't5'"),
        (json.dumps({k: v for k, v in LLAMA_1B.items() if k != "vocab_size"}), MissingConfigKeyError, "'vocab_size'"),
        (json.dumps({"hidden_size": 8}), MissingConfigKeyError, "'model_type'"),
        (json.dumps({"model_type": "llava", "text_config": [SECRET]}), ConfigError, "'text_config' must be a JSON object"),
    ],
)
def test_bad_configs_are_typed_one_line_errors(tmp_path: Path, text: str, error: type, expected: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(error) as info:
        resolve_model(str(path))
    message = str(info.value)
    assert expected in message and str(path) in message
    assert SECRET not in message and "\n" not in message


def test_unsupported_type_names_the_supported_families(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "t5"}), encoding="utf-8")
    with pytest.raises(UnsupportedModelTypeError) as info:
        resolve_model(str(path))
    assert all(f in str(info.value) for f in ("llama", "deepseek_v3", "granitemoehybrid", "mllama"))


def test_approximate_architecture_is_flagged_and_answered() -> None:
    found = resolve_model("granite-8b-japanese")
    arch = found.architecture
    assert arch.approximate and arch.approximation_reason and arch.answerable
    assert get_architecture("granite-8b-japanese") == arch  # answered, the flag travels with it
