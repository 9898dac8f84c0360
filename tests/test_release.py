"""The release is readable and says one version (issue 26): the version lives in ``autoconf.__version__`` alone and
pyproject, ``--version``, ``/healthz`` and the ado operator read it; the changelog has ``## Unreleased`` on top and a
dated heading per release, the newest being this version; the README stays short, keeps its two set-up commands,
and every docs page is in the docs index."""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from pathlib import Path

import autoconf
from autoconf.interfaces.cli import main

ROOT = Path(__file__).resolve().parents[1]
RELEASE = re.compile(r"^## (\d+\.\d+\.\d+) — (\d{4}-\d{2}-\d{2})\b", re.M)
# The two set-up commands, byte for byte (the wheel check and CI run them as written).
SETUP = (
    'python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/autoconf-gpu recommend --model llama3.1-8b '
    "--method lora --gpu NVIDIA-A100-80GB-PCIe --tokens-per-sample 4096 --batch-size 16",
    'python3 -m venv .venv && .venv/bin/pip install "torch==2.13.0" && .venv/bin/pip install -e ".[test]" && '
    ".venv/bin/python -m pytest -q -p no:cacheprovider",
)


def test_the_version_is_written_once() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "autoconf.__version__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--version"]) == 0
    assert out.getvalue().strip() == f"autoconf-gpu {autoconf.__version__}"


def test_changelog_has_unreleased_then_dated_releases_newest_first() -> None:
    text = (ROOT / "changelog.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## .*$", text, re.M)
    assert headings[0] == "## Unreleased"
    releases = RELEASE.findall(text)
    assert len(releases) == len(headings) - 1 >= 2  # every other top heading is a dated release
    assert releases[0][0] == autoconf.__version__
    versions = [tuple(map(int, v.split("."))) for v, _ in releases]
    assert versions == sorted(versions, reverse=True) and [d for _, d in releases] == sorted(
        (d for _, d in releases), reverse=True)


def test_readme_is_short_and_keeps_the_set_up_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    for command in SETUP:
        assert f"```bash\n{command}\n```" in text


def test_every_docs_page_is_in_the_index_and_every_link_resolves() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages <= set(re.findall(r"\(([\w_]+\.md)\)", index))
    for page in (ROOT / "README.md", *(ROOT / "docs").glob("*.md")):
        for link in re.findall(r"\]\(((?!https?:)[^)#]+)\)", page.read_text(encoding="utf-8")):
            assert (page.parent / link).exists(), f"{page.name}: {link}"
