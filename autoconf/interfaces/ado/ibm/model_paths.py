"""IBM ado-autoconf's model paths and version names, and how autoconf answers each version name.

IBM's classifier is version 4.0.0 in folder ``v4-0-0`` under ``DEFAULT_MODEL_ROOT``; a classifier the user
trained with IBM's tools there is loaded as IBM loads it. Without one, autoconf's estimators answer
(``engine.py``): every IBM version name is accepted and answered by autoconf's newest model version, and
the answer's ``reason`` says so.
"""

from __future__ import annotations

from pathlib import Path

MODEL_VERSION = "4.0.0"
MODEL_DIRECTORY = "v4-0-0"
# IBM's throughput regressor (throughput_recommender's model_version).
THROUGHPUT_MODEL_VERSION = "4.1.0"
# Every version name IBM's plugin has published (its AutoGluonModels folders, README and changelog).
IBM_VERSIONS = ("1.0.0", "1.1.0", "2.0.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0")
# IBM keeps generated models inside its package; so do we (absent unless the user puts one there).
DEFAULT_MODEL_ROOT = Path(__file__).parent / "models"


def model_path(model_root: Path | None = None) -> Path:
    """The folder of IBM's classifier 4.0.0 under ``model_root`` (default: DEFAULT_MODEL_ROOT)."""
    return (model_root or DEFAULT_MODEL_ROOT) / MODEL_DIRECTORY
