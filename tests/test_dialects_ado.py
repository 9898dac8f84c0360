"""IBM's ado plugin recipe, "Example programmatic usage with validation", as an older README writes it (version
1.1.0, with ado's own package rename orchestrator -> ado), prints IBM's dict; `import autoconf` stays free of
ado. IBM 2.1.2's own README and tests run in tests/test_ibm_dropin.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

# reference/ibm-ado-autoconf-readme.md, section 2, verbatim but for `orchestrator.` -> `ado.` (ado-core 2.x).
RECIPE = '''
from orchestrator.schema.reference import (
    ExperimentReference,
)
from orchestrator.schema.point import SpacePoint
from orchestrator.modules.actuators.registry import ActuatorRegistry
from autoconf.min_gpu_recommender import (
    min_gpu_recommender,
)

configuration = {
    "model_name": "llama-7b",
    "method": "lora",
    "gpu_model": "NVIDIA-A100-80GB-PCIe",
    "tokens_per_sample": 8192,
    "batch_size": 16,
    "model_version": "1.1.0",
}

measured_properties=min_gpu_recommender(**configuration)
print(measured_properties)
'''.replace("from orchestrator.", "from ado.")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_ibm_recipe_prints_ibms_dict() -> None:
    res = _python(RECIPE + "\nprint('GPUS', measured_properties['gpus'], measured_properties['workers'])\n")
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith("{'can_recommend': True, 'gpus': ")  # IBM 2.1.2 README: {'can_recommend': True, ...}
    gpus, workers = (int(x) for x in res.stdout.split("GPUS", 1)[1].split())
    assert gpus >= 1 and workers >= 1
    assert "model_version 1.1.0 is IBM ado-autoconf's" in first  # IBM's version name, said in the reason


def test_import_autoconf_does_not_import_ado() -> None:
    res = _python("import sys, autoconf\n"
                  "print(any(k == 'ado' or k.startswith('ado.') for k in sys.modules))\n"
                  "import autoconf.min_gpu_recommender as m, autoconf.interfaces.ado.ibm.min_gpu_recommender as real\n"
                  "print(m is real, m.min_gpu_recommender.__name__)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True", "min_gpu_recommender"]
