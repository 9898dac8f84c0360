"""The ``autoconf_grid`` operator and the new recommenders through the real ``ado`` CLIs, in temporary contexts.

``ado create space`` + ``ado create operation -f sweep/operation_grid.yaml`` + the CSV export on the
36-point sweep/space_small.yaml: every row must equal the decorated experiment called directly (the
same answers random_walk stores, see test_ado_run.py). A second operation with ``onlyUnmeasured``
must skip all 36 points. The operator's private assumption (ado hands a function operator no
operation id; it finds its own running operation among the space's operations) is checked by the
first run storing its rows under that operation. ``sweep/space_objectives.yaml`` runs the avoid-OOM
and throughput recommenders through the operator, and ``run_experiment examples/objectives.yaml``
(started first, in the background, because each ado command pays ~20 s of Ray start and shutdown
waits) runs them through ado's custom-experiments actuator; both must equal the Python calls.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

pytest.importorskip("ado")

from autoconf.interfaces.ado import experiments  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench._ado_env import ado_env  # noqa: E402

BIN = Path(sys.executable).parent
INPUTS = ["model_name", "method", "gpu_model", "tokens_per_sample", "batch_size"]
OUTPUTS = ["can_recommend", "gpus", "workers", "number_gpus", "reason", "answered_by"]
NUMBERS = ["peak_memory_gib", "oom_risk", "tokens_per_second"]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def objectives_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    """`run_experiment examples/objectives.yaml`, started at once so that it overlaps the grid tests."""
    env = ado_env(tmp_path_factory.mktemp("run"))
    proc = subprocess.Popen([str(BIN / "run_experiment"), str(ROOT / "examples" / "objectives.yaml")], env=env,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc
    if proc.poll() is None:
        proc.terminate()
        proc.communicate(timeout=60)


def _blocks(stdout: str) -> dict[str, dict[str, str]]:
    """run_experiment's 'Result:' blocks, by experiment: one 'name value' pair per line."""
    out = {}
    for block in stdout.split("Result:")[1:]:
        pairs = (line.split(None, 1) for line in block.split("dtype:")[0].splitlines() if line.strip() not in ("", "["))
        values = {p[0]: (p[1].strip() if len(p) > 1 else "") for p in pairs}
        out[values["experiment_id"].split(".")[-1]] = values
    return out


def _outputs(experiment: str) -> set[str]:
    return {p.identifier for p in getattr(experiments, experiment)._experiment.targetProperties}


def _same(stored: dict[str, Any], direct: dict[str, Any], where: str, rel: float = 1e-9, tol: float = 0.0) -> None:
    """A stored/printed row equals the direct answer (its declared outputs): numbers to 1e-9, the rest as text."""
    name = str(stored.get("experiment_id", "")).split(".")[-1]
    for key, value in direct.items():
        if key not in _outputs(name):
            continue
        if isinstance(value, int | float):  # ado may store 1 as 1.0, and the boolean can_recommend as 1/0
            assert float(stored[key]) == pytest.approx(float(value), rel=rel, abs=tol), (where, key)
        else:
            assert str(stored[key]) == str(value), (where, key)


def _ado(args: list[str], env: dict[str, str], cwd: Path) -> str:
    proc = subprocess.run([str(BIN / "ado"), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _operation(tmp_path: Path, **parameters: object) -> Path:
    config = yaml.safe_load((ROOT / "sweep" / "operation_grid.yaml").read_text())
    config["operation"]["parameters"].update(parameters)
    path = tmp_path / f"op-{len(list(tmp_path.glob('op-*')))}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_grid_operator_matches_direct_calls(tmp_path: Path, objectives_run: subprocess.Popen[str]) -> None:
    env = ado_env(tmp_path)
    _ado(["create", "space", "-f", str(ROOT / "sweep" / "space_small.yaml")], env, tmp_path)
    first = _ado(["create", "operation", "-f", str(_operation(tmp_path, batchSize=10)), "--use-latest", "space"],
                 env, tmp_path)
    assert "'answered': 36, 'skipped': 0" in first and "exit_state: success" in first
    out = tmp_path / "results.csv"
    _ado(["show", "measurements", "space", "--use-latest", "-o", "csv", "--output-file", str(out)], env, tmp_path)
    frame = pd.read_csv(out, keep_default_na=False)
    assert len(frame) == 36 and frame["identifier"].is_unique
    assert (frame["experiment_id"] == "custom_experiments.min_gpu_recommender").all()
    for row in frame.to_dict(orient="records"):
        direct = experiments.min_gpu_recommender(**{k: row[k] for k in INPUTS})
        for key in OUTPUTS:  # ado stores the boolean can_recommend as 1/0
            shown = int(direct[key]) if isinstance(direct[key], bool) else direct[key]
            assert str(row[key]) == str(shown), (row["identifier"], key)
        for key in NUMBERS:
            assert (row[key] == "") == (key not in direct), (row["identifier"], key)
            if key in direct:
                assert float(row[key]) == pytest.approx(direct[key], rel=1e-9), (row["identifier"], key)
    approximate = frame[frame["model_name"] == "granite-13b-v2"]  # answered, its approximation stated
    assert approximate["reason"].str.contains("approximate architecture").all()
    again = _ado(["create", "operation", "-f", str(_operation(tmp_path, onlyUnmeasured=True)), "--use-latest",
                  "space"], env, tmp_path)
    assert "'answered': 0, 'skipped': 36" in again


def test_grid_operator_objectives(tmp_path: Path) -> None:
    env = ado_env(tmp_path)
    _ado(["create", "space", "-f", str(ROOT / "sweep" / "space_objectives.yaml")], env, tmp_path)
    _ado(["create", "operation", "-f", str(ROOT / "sweep" / "operation_grid.yaml"), "--use-latest", "space"],
         env, tmp_path)
    out = tmp_path / "results.csv"
    _ado(["show", "measurements", "space", "--use-latest", "-o", "csv", "--output-file", str(out)], env, tmp_path)
    frame = pd.read_csv(out, keep_default_na=False)
    assert sorted(frame["experiment_id"].value_counts().items()) == [
        ("custom_experiments.avoid_oom_recommender", 32), ("custom_experiments.throughput_recommender", 32)]
    inputs = {"avoid_oom_recommender": [*INPUTS[:4], "per_device_train_batch_size", "number_gpus"],
              "throughput_recommender": INPUTS}
    for row in frame.to_dict(orient="records"):
        name = row["experiment_id"].split(".")[-1]
        direct = getattr(experiments, name)(**{k: row[k] for k in inputs[name]})
        _same(row, direct, row["identifier"])


@pytest.mark.parametrize("experiment", ["avoid_oom_recommender", "throughput_recommender"])
def test_run_experiment_objectives_match_direct_calls(objectives_run: subprocess.Popen[str], experiment: str) -> None:
    if objectives_run.poll() is None or not hasattr(objectives_run, "printed"):
        stdout, stderr = objectives_run.communicate(timeout=300)
        assert objectives_run.returncode == 0, f"{stdout[-3000:]}\n{stderr[-3000:]}"
        objectives_run.printed = _blocks(stdout)  # type: ignore[attr-defined]
    printed = objectives_run.printed[experiment]  # type: ignore[attr-defined]
    entity = yaml.safe_load((ROOT / "examples" / "objectives.yaml").read_text())["entity"]
    names = getattr(experiments, experiment)._experiment
    wanted = {p.identifier for p in [*names.requiredProperties, *names.optionalProperties]}
    direct = getattr(experiments, experiment)(**{k: v for k, v in entity.items() if k in wanted})
    assert printed["valid"] == "True" and direct["can_recommend"] == 1
    # run_experiment prints pandas' 6 decimals (an oom_risk of 5e-8 prints as 0.0)
    _same(printed, {k: v for k, v in direct.items() if k != "reason"}, experiment, rel=1e-6, tol=1e-6)
