"""A fresh traced-estimator disk cache per test module, so that every trace in it runs for real."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module", autouse=True)
def fresh_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Point AUTOCONF_CACHE at a new folder for the importing module (import this name to use it)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AUTOCONF_CACHE", str(tmp_path_factory.mktemp("autoconf-cache")))
    yield
    mp.undo()
