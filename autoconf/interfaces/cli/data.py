"""``autoconf-gpu data import``: measured runs from other tools into our measurements schema (data/README.md).

    autoconf-gpu data import --format ado-sfttrainer FILE [--output OUT.csv] [--with-ours]

FILE is the LLMFineTuningBench CSV or an ``ado show measurements … -o csv`` export of SFTTrainer
experiments (autoconf/evaluation/ado_import.py). ``--with-ours`` writes our measured rows first, so
that ``autoconf-gpu models build VERSION --data OUT.csv`` learns from both. An existing output is replaced
only with ``--force``, and always atomically (a temporary file renamed over it, as ``sweep`` writes).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from autoconf.errors import InvalidInputError

FORMATS = ("ado-sfttrainer",)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("data", help="import measured runs (ado SFTTrainer) into the measurements schema")
    verbs = p.add_subparsers(dest="data_command", required=True)
    imp = verbs.add_parser("import", help="convert a file of measured runs")
    imp.add_argument("file", type=Path, help="CSV to import")
    imp.add_argument("--format", required=True, choices=FORMATS, help="format of FILE")
    imp.add_argument("--output", type=Path, help="CSV to write (default: FILE's name + .measurements.csv, here)")
    imp.add_argument("--with-ours", action="store_true", help="also write autoconf's own measured rows first")
    imp.add_argument("--force", action="store_true", help="replace --output if it exists")


def check_target(path: Path, force: bool) -> None:
    """Refuse a folder, a missing folder, a device/FIFO (even with --force) and an existing file without --force."""
    if path.is_dir():
        raise InvalidInputError("--output", f"must be a file path; {str(path)!r} is a directory")
    if path.exists() and not path.is_file():
        raise InvalidInputError("--output", f"must be a regular file; {str(path)!r} is a device, FIFO or socket")
    if not path.parent.is_dir():
        raise InvalidInputError("--output", f"the folder {str(path.parent)!r} does not exist")
    if (path.exists() or path.is_symlink()) and not force:
        raise InvalidInputError("--output", f"{str(path)!r} exists; choose another path or pass --force to replace it")


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from autoconf.evaluation.ado_import import COLUMNS, import_sfttrainer
    from autoconf.evaluation.data import load_measurements
    from autoconf.interfaces.cli.sweep import write_atomic

    if not args.file.is_file():
        raise InvalidInputError("file", f"must be an existing CSV; got {args.file}")
    target = args.output or Path(f"{args.file.stem}.measurements.csv")
    check_target(target, args.force)  # before any work: a refused run writes nothing
    rows, skipped = import_sfttrainer(args.file)
    if rows.empty:
        raise InvalidInputError("file", f"has no importable rows ({len(skipped)} skipped: {'; '.join(skipped[:3])})")
    out = rows
    if args.with_ours:
        ours = load_measurements()
        out = pd.concat([ours.reindex(columns=list(COLUMNS)), rows], ignore_index=True)
    write_atomic(out, target)  # a temporary file beside the target, renamed over it when complete
    counts = ", ".join(f"{n} {s}" for s, n in rows["status"].value_counts().items())
    print(f"imported {len(rows)} rows ({counts}) from {args.file} -> {target}"
          + (f" after {len(out) - len(rows)} rows of ours" if args.with_ours else ""))
    for message in skipped[:10]:
        print(f"skipped {message}")
    if len(skipped) > 10:
        print(f"... and {len(skipped) - 10} more skipped rows")
    return 0
