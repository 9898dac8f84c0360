"""Versions of the learned models in ``AutoGluonModels/<version>/``: listing, cards and the manifest.

Every file of a version is listed with its SHA-256 in ``MANIFEST.sha256`` (``sha256sum`` format,
so ``cd AutoGluonModels/1.0.0 && sha256sum -c MANIFEST.sha256`` checks it too). ``verify`` runs
before anything of a version is read: a changed, missing or unlisted file refuses the whole
version, because AutoGluon predictors are pickles and a pickle can run any code when loaded.

The manifest itself is not signed, so anyone who can write the folder can re-seal it. The default
numpy fast path never unpickles; before the AutoGluon backend unpickles anything, ``verify_pinned``
checks the manifest's own SHA-256 against ``PINNED_MANIFESTS`` (the versions shipped in this
package) or against ``$AUTOCONF_TRUSTED_MANIFESTS`` (versions the operator built and vouches for).
See docs/security.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from autoconf.defaults import models_dir
from autoconf.errors import InvalidInputError, NotBuiltError

MANIFEST = "MANIFEST.sha256"
CARD = "card.json"
MAX_VERSION_BYTES = 20 * 2**20  # issue 3: each version stays under 20 MB in the repository
VERSION_PATTERN = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")  # SemVer core only: never a path, never empty
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
TRUST_ENV = "AUTOCONF_TRUSTED_MANIFESTS"  # comma-separated SHA-256s of manifests the operator vouches for
# SHA-256 of each shipped version's MANIFEST.sha256 (``sha256sum AutoGluonModels/<v>/MANIFEST.sha256``).
# Update it in the same commit as a rebuilt version; tests/test_versions_trust.py checks it matches.
PINNED_MANIFESTS: dict[str, str] = {
    "1.0.0": "8b9ea533c1b5321c48ca73541aac1d36c5e7ff5129db5e902ac3a78cef9f9b1f",
    "2.0.0": "054178f1643c8992d4bccc484027a7516c4c17bfb7b26c1b6b5466fef0322a3f",
    "2.1.0": "a93f2c8dfd5b56ad67aae613a172eee471463891392dbf5b070ab51524fe9f59",
    "2.2.0": "451af871c63b4fd15fd21361445096a5f027f78f611cb24f789d4a776315eb9a",
    "2.3.0": "e27399cffbe79e0ed9fd798f6b7364f1b37fff244aac1713bc4677f2973fc164",
    "2.4.0": "c59bda0306f88f5c7763be176c527f680f9d8defe936213055931c31446cdf8d",
    "2.5.0": "01a7c60c87597959ddad3db1b43949a2ab4d99ff8e4dec1cdc4fdaf2a043fa4b",
}


class IntegrityError(NotBuiltError):
    """A version's files do not match its manifest: it is refused, not loaded."""


def check_version(version: str) -> str:
    """``version`` if it is MAJOR.MINOR.PATCH digits, else InvalidInputError (so it can never name a path)."""
    if not isinstance(version, str) or not VERSION_PATTERN.fullmatch(version):
        raise InvalidInputError("version", f"must be MAJOR.MINOR.PATCH digits such as 1.0.0; got {str(version)[:40]!r}")
    return version


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def list_versions(root: Path | None = None) -> list[str]:
    """Versions with a card, oldest first (SemVer order)."""
    base = root or models_dir()
    if not base.is_dir():
        return []
    names = (p.parent.name for p in base.glob(f"*/{CARD}"))
    return sorted((n for n in names if VERSION_PATTERN.fullmatch(n)), key=_semver)  # not build temp folders


def resolve(version: str | None, root: Path | None = None) -> str:
    """``version`` if installed, the newest one for None/'latest'; else a typed error listing them."""
    versions = list_versions(root)
    if version in (None, "", "latest"):
        if not versions:
            raise NotBuiltError(
                f"no learned model version in {root or models_dir()}; build one with `autoconf-gpu models build 1.0.0`"
            )
        return versions[-1]
    if version not in versions:
        known = ", ".join(versions) or "none installed"
        raise InvalidInputError("model_version", f"must be one of {known}; got {str(version)[:64]!r}")
    return str(version)


def version_dir(version: str, root: Path | None = None) -> Path:
    return (root or models_dir()) / check_version(version)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST and "__pycache__" not in p.parts)


def write_manifest(folder: Path) -> Path:
    """(Re)write ``MANIFEST.sha256`` for every file under ``folder``."""
    lines = [f"{sha256_file(p)}  {p.relative_to(folder).as_posix()}" for p in _files(folder)]
    target = folder / MANIFEST
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def read_manifest(folder: Path) -> dict[str, str]:
    path = folder / MANIFEST
    if not path.is_file():
        raise IntegrityError(f"{folder} has no {MANIFEST}: refusing to load it; "
                             f"rebuild with `autoconf-gpu models build {folder.name}`")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IntegrityError(f"model version {folder.name}: {MANIFEST} is unreadable ({type(exc).__name__}); "
                             "refusing to load it; rebuild with "
                             f"`autoconf-gpu models build {folder.name} --force`") from None
    entries = {}
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split(maxsplit=1)
        if not parts:
            continue
        if len(parts) != 2 or not _DIGEST.fullmatch(parts[0]):
            raise IntegrityError(f"model version {folder.name}: {MANIFEST} line {number} is not '<sha256>  <file>'; "
                                 "refusing to load it")
        entries[parts[1].strip().lstrip("*")] = parts[0]
    return entries


def verify_pinned(folder: Path) -> str:
    """The manifest's SHA-256 if it is pinned in this package or trusted via ``$AUTOCONF_TRUSTED_MANIFESTS``;
    else IntegrityError. Called before anything is unpickled (the manifest is not signed, so a
    re-sealed folder passes ``verify``; it cannot pass this)."""
    path = folder / MANIFEST
    digest = sha256_file(path) if path.is_file() else ""
    trusted = {d.strip().lower() for d in os.environ.get(TRUST_ENV, "").split(",") if d.strip()}
    if digest and (PINNED_MANIFESTS.get(folder.name) == digest or digest in trusted):
        return digest
    raise IntegrityError(f"model version {folder.name}: its {MANIFEST} (sha256 {digest[:16] or 'missing'}…) is not "
                         f"pinned in this package; the AutoGluon backend unpickles only pinned or trusted versions "
                         f"(add the full sha256 to ${TRUST_ENV} if you built it yourself; see docs/security.md)")


def verify(folder: Path) -> None:
    """Raise IntegrityError unless every file under ``folder`` matches the manifest exactly."""
    expected = read_manifest(folder)
    present = {p.relative_to(folder).as_posix(): p for p in _files(folder)}
    fix = f"restore it from git or rebuild with `autoconf-gpu models build {folder.name}`"
    for name, digest in expected.items():
        if name not in present:
            raise IntegrityError(f"model version {folder.name}: {name} is missing; {fix}")
        if sha256_file(present[name]) != digest:
            raise IntegrityError(f"model version {folder.name}: {name} does not match MANIFEST.sha256 "
                                 f"(tampered or corrupted); refusing to load it; {fix}")
    extra = sorted(set(present) - set(expected))
    if extra:
        raise IntegrityError(f"model version {folder.name}: {extra[0]} is not in MANIFEST.sha256; "
                             f"refusing to load it; {fix}")


def read_card(version: str, root: Path | None = None, check: bool = True) -> dict[str, Any]:
    """The card of an installed version (manifest-verified unless ``check`` is False)."""
    folder = version_dir(resolve(version, root), root)
    if check:
        verify(folder)
    try:
        card: dict[str, Any] = json.loads((folder / CARD).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IntegrityError(f"model version {folder.name}: {CARD} is unreadable ({type(exc).__name__})") from None
    if not isinstance(card, dict):
        raise IntegrityError(f"model version {folder.name}: {CARD} must be a JSON object")
    return card


def folder_bytes(folder: Path) -> int:
    manifest = folder / MANIFEST
    return sum(p.stat().st_size for p in _files(folder)) + (manifest.stat().st_size if manifest.exists() else 0)
