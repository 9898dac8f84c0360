"""``autoconf-gpu sweep``: a CSV of Job/Placement columns in, every estimate column out (design §8)."""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from autoconf.estimators import ESTIMATORS, get_estimator


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sweep", help="batch estimates: CSV of configurations in, estimates out")
    p.add_argument("--input", required=True, help="CSV with Job/Placement columns (model or model_name, method, gpu_model, ...)")
    p.add_argument("--output", required=True, help="CSV to write (input columns + estimate columns)")
    p.add_argument("--estimator", default="theory", help=f"{' | '.join(ESTIMATORS)} (default %(default)s)")
    p.add_argument("--model-version", help="learned-model version (learned/hybrid)")


def run(args: argparse.Namespace) -> int:
    frame = pd.read_csv(args.input)
    out = get_estimator(args.estimator, args.model_version).estimate_frame(frame)
    out.to_csv(args.output, index=False)
    bad = int(out["error"].notna().sum())
    sys.stderr.write(f"{len(out)} rows written to {args.output}" + (f" ({bad} with errors, see the error column)" if bad else "") + "\n")
    return 0
