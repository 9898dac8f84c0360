#!/usr/bin/env bash
# The wheel, not the source tree: build it, install it into a fresh venv in an empty folder (no checkout
# beside it), then run the README's first command and one ado experiment from that install. Both must be
# answered by the hybrid estimator from the AutoGluonModels version shipped inside the wheel.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python -m pip wheel -q --no-deps -w "$work/dist" "$repo"
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$work/dist"/autoconf_gpu-*.whl "ado-core==2.3.0" "typer<0.29"
cd "$work"   # nothing of the repository is reachable from here
answer="$("$work/venv/bin/autoconf-gpu" recommend --model llama3.1-8b --method lora --gpu NVIDIA-A100-80GB-PCIe \
  --tokens-per-sample 4096 --batch-size 16)"
echo "$answer"
grep -q "estimator hybrid" <<<"$answer" || { echo "wheel: recommend was not answered by the hybrid estimator"; exit 1; }
"$work/venv/bin/python" - <<'PY'
import autoconf, pathlib
from autoconf.defaults import models_dir, measurements_path
assert "site-packages" in autoconf.__file__, autoconf.__file__
assert all((models_dir() / v / "card.json").is_file() for v in ("1.0.0", "2.0.0")), models_dir()
assert measurements_path().is_file(), measurements_path()
print("wheel: package at", pathlib.Path(autoconf.__file__).parent)
PY
# IBM ado-autoconf's import path answers from the wheel too (docs/dialects.md §3)
"$work/venv/bin/python" - <<'PY'
from autoconf.min_gpu_recommender import min_gpu_recommender
found = min_gpu_recommender(model_name="llama-7b", method="lora", gpu_model="NVIDIA-A100-80GB-PCIe",
                            tokens_per_sample=8192, batch_size=16, model_version="4.0.0")
assert found["can_recommend"] is True and found["answered_by"].startswith("hybrid@"), found
print("wheel: autoconf.min_gpu_recommender", {k: found[k] for k in ("can_recommend", "gpus", "workers")})
PY
cp "$repo/examples/simple.yaml" "$work/simple.yaml"
out="$("$work/venv/bin/run_experiment" "$work/simple.yaml" 2>&1)"
grep -E "answered_by|can_recommend" <<<"$out"
grep -qE "answered_by +hybrid@" <<<"$out" || { echo "wheel: ado's run_experiment was not answered by hybrid"; exit 1; }
echo "wheel check passed"
