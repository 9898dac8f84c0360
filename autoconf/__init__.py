"""autoconf: will an LLM fine-tuning job fit, on how many GPUs, how fast, how long, at what cost?

IBM's ado-autoconf plugin is also a package named ``autoconf``; its users import
``autoconf.min_gpu_recommender``, ``autoconf.throughput_recommender``, ``autoconf.model_paths`` and
``autoconf.utils`` (with its submodules). Those names are aliases of the modules of
``autoconf.interfaces.ado.ibm`` (docs/dialects.md §3): a finder placed first on ``sys.meta_path`` loads the
real module and registers the *same* module object under the IBM name, so ``unittest.mock.patch`` on an IBM
path patches the module our code reads. Nothing is imported until an alias is imported: ``import autoconf``
stays cheap and never imports ado.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

__version__ = "0.2.0"  # the one place: pyproject.toml, /healthz, --version and the ado operator read it

# IBM's top-level module names -> where they live here (one layer: interfaces).
IBM_MODULES = ("min_gpu_recommender", "throughput_recommender", "model_paths", "utils")
_TARGET = f"{__name__}.interfaces.ado.ibm"


class _IbmAliasLoader(importlib.abc.Loader):
    """Hands back the already-imported real module, so both names share one module object."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.target)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """The real module has run already; give it back its own spec (the import system set the alias's)."""
        module.__spec__ = self.real_spec


class _IbmAliasFinder(importlib.abc.MetaPathFinder):
    """``autoconf.<IBM name>[.sub...]`` -> ``autoconf.interfaces.ado.ibm.<IBM name>[.sub...]``."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        parts = fullname.split(".")
        if len(parts) < 2 or parts[0] != __name__ or parts[1] not in IBM_MODULES:
            return None
        real = ".".join([_TARGET, *parts[1:]])
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _IbmAliasLoader(real))


if not any(isinstance(finder, _IbmAliasFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _IbmAliasFinder())
