"""Hybrid and learned outputs before vs after a refactor: dump them once from the old code, compare the new code.

    python bench/learned_identity.py --write /work/cache/learned_baseline    # with the code before the change
    python bench/learned_identity.py --check /work/cache/learned_baseline    # with the code after it
    python bench/learned_identity.py --sample DUMP_DIR tests/fixtures/learned_identity_sample.json

The sibling of bench/theory_identity.py for the two estimators built on the AutoGluon models (the installed default
version, numpy fast path). For ``hybrid`` and ``learned`` each, every figure (relative difference ≤ 1e-9; text,
phases, notes and errors exactly) of:

* every row of ``data/measurements.csv``: ``estimate(job, placement)`` (the one-row path: memory, notes, tokens/s)
  and the sweep columns of all rows at their own placement (``recommend_frame`` with ``number_gpus``), and searched
  over GPU counts (without it);
* the 3,960-point seed sweep: ``autoconf-gpu sweep --estimator NAME`` over ``space_frame()`` (a fresh CLI process;
  the CSV cell by cell);
* the 500 random jobs of bench/theory_identity.py: ``recommend_frame`` with and without ``number_gpus``;
* the seed space and the random jobs searched in strict mode (refused outside the version's training domain).

The dump is a pickle outside the repository; nothing here reads the code under test to make expected values.
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: `--write` may run an older tree

from autoconf.errors import describe
from autoconf.estimators.contract import get_estimator
from autoconf.evaluation.data import load_measurements, row_to_inputs
from autoconf.evaluation.space import space_frame
from autoconf.recommend.frame import recommend_frame
from bench.theory_identity import RTOL, compare, random_set

ESTIMATORS = ("hybrid", "learned")
ERRORS = (ValueError, TypeError, ArithmeticError)
DUMP = "learned_outputs.pkl"


def answer(name: str, job: Any, place: Any, version: str | None = None) -> dict[str, Any] | str:  # noqa: ANN401
    """One row through ``estimate``: every memory field and notes, and tokens/s (or the error text)."""
    try:
        est = get_estimator(name, version).estimate(job, place)
    except ERRORS as exc:
        return "error: " + describe(exc, with_input=False)
    out = est.memory.model_dump(mode="json")
    out["tokens_per_second"] = None if est.throughput is None else est.throughput.tokens_per_second
    return out


def measured_words() -> tuple[list[Any], pd.DataFrame]:
    """(Job, Placement) of every measured row (or its input error), and the same rows as words of a sweep frame."""
    pairs: list[Any] = []
    for row in load_measurements().to_dict(orient="records"):
        try:
            pairs.append(row_to_inputs(row))
        except ERRORS as exc:
            pairs.append("input: " + describe(exc, with_input=False))
    words = [{**j.model_dump(exclude_none=True), **p.model_dump(exclude_none=True)}
             for j, p in (x for x in pairs if not isinstance(x, str))]
    return pairs, pd.DataFrame(words)


def _sweep_csv(frame: pd.DataFrame, name: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.csv", Path(tmp) / "out.csv"
        frame.to_csv(src, index=False)
        subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "sweep", "--input", str(src), "--output",
                        str(dst), "--estimator", name], check=True, capture_output=True)
        return dst.read_text(encoding="utf-8")


def dump() -> dict[str, Any]:
    out: dict[str, Any] = {}
    pairs, measured = measured_words()
    frame = pd.DataFrame(random_set())
    space = space_frame()
    for name in ESTIMATORS:
        est = get_estimator(name)
        out[f"{name}_measurements"] = [p if isinstance(p, str) else answer(name, *p) for p in pairs]
        out[f"{name}_measurements_given_csv"] = recommend_frame(measured, est).to_csv(index=False)
        out[f"{name}_measurements_search_csv"] = recommend_frame(
            measured.drop(columns=["number_gpus"]), est).to_csv(index=False)
        out[f"{name}_sweep_csv"] = _sweep_csv(space, name)
        out[f"{name}_random_given_csv"] = recommend_frame(frame, est).to_csv(index=False)
        out[f"{name}_random_search_csv"] = recommend_frame(frame.drop(columns=["number_gpus"]), est).to_csv(
            index=False)
        out[f"{name}_strict_csv"] = recommend_frame(pd.concat([space, frame.drop(columns=["number_gpus"])]), est,
                                                    strict=True).to_csv(index=False)
    return out


def csv_rows(text: str) -> tuple[list[str], list[list[str]]]:
    """(header, cells of each row) of a CSV text, every cell as written (a quoted cell may hold commas)."""
    frame = pd.read_csv(io.StringIO(text), keep_default_na=False, dtype=str)
    return list(frame.columns), [list(row) for row in frame.itertuples(index=False)]


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)  # v != v: NaN


def write_sample(dump_dir: Path, target: Path) -> int:
    """Every 60th measured row, every 10th random job, every 99th seed-sweep row and every 89th strict-mode row
    of a dump, inputs and outputs."""
    old = pickle.loads((dump_dir / DUMP).read_bytes())  # noqa: S301 - our own dump
    words = random_set()
    space = space_frame()
    sample: dict[str, Any] = {"source": "outputs of the hybrid and learned estimators before the columns path, "
                                        f"dumped by bench/learned_identity.py --write {dump_dir}"}
    for name in ESTIMATORS:
        header, rows = csv_rows(old[f"{name}_sweep_csv"])
        random_header, given = csv_rows(old[f"{name}_random_given_csv"])
        strict_header, strict = csv_rows(old[f"{name}_strict_csv"])
        searched = pd.concat([space, pd.DataFrame(words).drop(columns=["number_gpus"])]).to_dict(orient="records")
        sample[name] = {
            "measurements": [{"row": i, "answer": old[f"{name}_measurements"][i]}
                             for i in range(0, len(old[f"{name}_measurements"]), 60)],
            "sweep_header": header,
            "sweep": [{"words": space.iloc[i].to_dict(), "cells": rows[i]} for i in range(0, len(rows), 99)],
            "random_header": random_header,
            "random": [{"words": words[i], "cells": given[i]} for i in range(0, len(words), 10)],
            "strict_header": strict_header,
            "strict": [{"words": {k: v for k, v in searched[i].items() if not _missing(v)}, "cells": strict[i]}
                       for i in range(0, len(strict), 89)],
        }
    target.write_text(json.dumps(sample, indent=1, default=lambda v: v.item()) + "\n", encoding="utf-8")
    print(f"wrote {target}: per estimator {len(sample['hybrid']['measurements'])} measured rows, "
          f"{len(sample['hybrid']['sweep'])} sweep rows, {len(sample['hybrid']['random'])} random jobs")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="folder to dump the current code's outputs into")
    group.add_argument("--check", type=Path, help="folder of a previous dump to compare the current code with")
    group.add_argument("--sample", type=Path, nargs=2, metavar=("DUMP_DIR", "JSON"),
                       help="write a small sample of a dump (inputs and outputs) for tests/test_learned_identity.py")
    args = parser.parse_args(argv)
    if args.sample:
        return write_sample(args.sample[0], args.sample[1])
    new = dump()
    if args.write:
        args.write.mkdir(parents=True, exist_ok=True)
        (args.write / DUMP).write_bytes(pickle.dumps(new))
        counts = {k: len(v) if isinstance(v, list) else len(v.splitlines()) for k, v in new.items()}
        print(f"wrote {args.write / DUMP}: {counts}")
        return 0
    old = pickle.loads((args.check / DUMP).read_bytes())  # noqa: S301 - our own dump
    bad = compare(old, new)
    exact = sum(old[k] == new[k] for k in old)
    print(f"{len(old)} sets, {exact} identical as dumped; {len(bad)} differences beyond {RTOL:g} relative")
    for line in bad[:40]:
        print("  ", line)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
