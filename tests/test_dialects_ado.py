"""IBM's ado plugin recipe, "Example programmatic usage with validation", run as its README writes it with only
ado's own package rename (orchestrator -> ado); and `import autoconf` stays free of ado."""

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
def test_ibm_recipe_prints_ados_measured_values() -> None:
    res = _python(RECIPE + "\nimport ado.schema.observed_property as op\n"
                  "assert all(isinstance(v, op.ObservedPropertyValue) for v in measured_properties)\n"
                  "values = {v.property.targetProperty.identifier: v.value for v in measured_properties}\n"
                  "print('GPUS', values['gpus'], values['workers'], values['can_recommend'])\n")
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith("[value-") and "min_gpu_recommender-can_recommend:1" in first
    assert "min_gpu_recommender-gpus:" in first and "min_gpu_recommender-workers:" in first
    gpus, workers, can = (int(float(x)) for x in res.stdout.split("GPUS", 1)[1].split())
    assert can == 1 and gpus >= 1 and workers >= 1
    assert "model_version 1.1.0 is not installed here" in first  # IBM's version name, said in the reason


def test_import_autoconf_does_not_import_ado() -> None:
    res = _python("import sys, autoconf, autoconf.min_gpu_recommender as m\n"
                  "print(any(k == 'ado' or k.startswith('ado.') for k in sys.modules))\n"
                  "print(m.min_gpu_recommender.__name__, 'ado' in sys.modules)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "min_gpu_recommender", "True"]
