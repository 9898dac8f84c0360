"""Our min_gpu_recommender beside IBM ado-autoconf 2.1.2's on points of IBM's domain.

The points: a seeded sample of IBM's min_gpu_recommender domain (its 30 model names, full/lora, its four GPUs,
tokens and global batches in the powers of two its measurements use), model_version 4.0.0. Ours are answered
through ``autoconf.min_gpu_recommender`` (IBM's search: powers of two up to 8 GPUs). IBM's are answered by IBM's
own package in another interpreter (``--ibm-python``: a throw-away venv holding ``ado-autoconf==2.1.2``; never
install it beside autoconf-gpu, both are the package ``autoconf``), one call per point; a point IBM's package
cannot answer records its error. The report prints the agreement on can_recommend and on (gpus, workers).

    python -m venv /tmp/ibm && /tmp/ibm/bin/pip install ado-autoconf==2.1.2
    python bench/ibm_agreement.py --ibm-python /tmp/ibm/bin/python --output /tmp/agreement.csv

IBM's package trains its classifier on first use from its Hugging Face data set; where it has no classifier and
cannot train one (no Hub here), the script stops with IBM's error and prints no figure (docs/ado.md section 5).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import tempfile
from pathlib import Path

import pandas as pd

IBM_MODELS = (
    "allam-1-13b", "granite-13b-v2", "granite-20b-v2", "granite-3-8b", "granite-3.1-2b", "granite-3.1-3b-a800m-instruct",
    "granite-3.1-8b-instruct", "granite-34b-code-base", "granite-3b-code-base-128k", "granite-4.0-1b", "granite-4.0-350m",
    "granite-4.0-h-1b", "granite-4.0-h-micro", "granite-4.0-h-small", "granite-4.0-h-tiny", "granite-4.0-micro",
    "granite-7b-base", "granite-8b-code-base", "granite-8b-japanese", "llama-13b", "llama-7b", "llama2-70b", "llama3-70b",
    "llama3-8b", "llama3.1-405b", "llama3.1-70b", "llama3.1-8b", "mistral-123b-v2", "mistral-7b-v0.1",
    "mixtral-8x7b-instruct-v0.1",
)  # IBM ado-autoconf 2.1.2's ModelName domain
IBM_GPUS = ("L40S", "NVIDIA-A100-80GB-PCIe", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-PCIe")
TOKENS = (512, 1024, 2048, 4096, 8192)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
KEYS = ("can_recommend", "gpus", "workers")

IBM_CALLS = """
import json, sys
import autoconf
if hasattr(autoconf, "IBM_MODULES"):
    raise SystemExit(f"{autoconf.__file__} is autoconf-gpu, not IBM's ado-autoconf")
from autoconf.min_gpu_recommender import load_model, min_gpu_recommender
try:  # IBM's classifier: loaded, or trained on first use from its Hugging Face data set
    load_model(model_version="4.0.0")
except Exception as exc:
    print("UNAVAILABLE " + f"{type(exc).__name__}: {exc}"[:400], flush=True)
    raise SystemExit(0)
for line in sys.stdin:
    point = json.loads(line)
    try:
        found = min_gpu_recommender(**point)
        out = {k: found.get(k) for k in ("can_recommend", "gpus", "workers")}
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    print("ANSWER " + json.dumps(out), flush=True)
"""


def points(n: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    return [{"model_name": rng.choice(IBM_MODELS), "method": rng.choice(("full", "lora")),
             "gpu_model": rng.choice(IBM_GPUS), "tokens_per_sample": rng.choice(TOKENS),
             "batch_size": rng.choice(BATCHES), "model_version": "4.0.0"} for _ in range(n)]


def ours(pts: list[dict[str, object]]) -> list[dict[str, object]]:
    from autoconf.min_gpu_recommender import min_gpu_recommender

    return [{k: found.get(k) for k in (*KEYS, "reason")} for found in (min_gpu_recommender(**p) for p in pts)]


def ibms(pts: list[dict[str, object]], python: str) -> list[dict[str, object]]:
    # -I and a neutral folder: neither PYTHONPATH nor the working directory may put this checkout's autoconf first
    with tempfile.TemporaryDirectory() as neutral:
        proc = subprocess.run([python, "-I", "-c", IBM_CALLS], input="".join(json.dumps(p) + "\n" for p in pts),
                              capture_output=True, text=True, cwd=neutral, timeout=3600)
    unavailable = [line[12:] for line in proc.stdout.splitlines() if line.startswith("UNAVAILABLE ")]
    if unavailable:  # every point would end in the same error: none is answered, none is invented
        raise SystemExit(f"IBM's package has no classifier to answer with: {unavailable[0]}")
    found = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("ANSWER ")]
    if len(found) != len(pts):
        raise SystemExit(f"IBM's interpreter answered {len(found)} of {len(pts)} points:\n{proc.stderr[-3000:]}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ibm-python", required=True, help="python of a venv holding ado-autoconf==2.1.2")
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, help="CSV of every point with both answers")
    args = parser.parse_args()
    pts = points(args.points, args.seed)
    table = pd.concat([pd.DataFrame(pts), pd.DataFrame(ours(pts)).add_prefix("ours_"),
                       pd.DataFrame(ibms(pts, args.ibm_python)).add_prefix("ibm_")], axis=1)
    if args.output:
        table.to_csv(args.output, index=False)
    errors = table["ibm_error"].notna() if "ibm_error" in table else pd.Series(False, index=table.index)
    # a point IBM's package answered with an exception keeps its error; agreement counts answered points only
    print(f"{len(table)} points; IBM's package answered {int((~errors).sum())}")
    if errors.any():
        print("IBM's errors:", *sorted(set(table.loc[errors, "ibm_error"])), sep="\n  ")
    answered = table[~errors]
    if len(answered):
        same = answered["ours_can_recommend"].astype(bool) == answered["ibm_can_recommend"].astype(bool)
        both = answered["ours_can_recommend"].astype(bool) & answered["ibm_can_recommend"].astype(bool)
        layout = (answered["ours_gpus"] == answered["ibm_gpus"]) & (answered["ours_workers"] == answered["ibm_workers"])
        print(f"can_recommend agrees on {int(same.sum())} of {len(answered)} points; "
              f"where both recommend, gpus x workers agree on {int((layout & both).sum())} of {int(both.sum())}")


if __name__ == "__main__":
    main()
