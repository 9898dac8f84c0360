"""Build ``data/measurements.csv`` and ``data/kernel_measurements.csv`` from every shared external source.

Runs ``convert_fms.py`` (fms-acceleration, unchanged) and one converter per other source folder of
``shared/data/external/`` (``convert_<source>.py``), adds the extra columns (data/README.md, "Columns added")
and writes the table deterministically: the fms rows first in their converter's order, then the other
sources sorted by source, file, row number; floats in Python's shortest round-trip form; "\\n" line ends.
Running it twice gives byte-identical files (tests/test_data_external.py checks the committed copies).

    python data/build_measurements.py [--external DIR] [--output data/measurements.csv]
                                      [--kernel-output data/kernel_measurements.csv]
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import COLUMNS, EXTERNAL, EXTRA_COLUMNS, INT_COLUMNS, to_frame

DEFAULT_OUTPUT = HERE / "measurements.csv"
DEFAULT_KERNELS = HERE / "kernel_measurements.csv"
CONVERTERS = ("convert_ms_swift", "convert_ms_swift_examples", "convert_fsdp_qlora", "convert_liger",
              "convert_torchao", "convert_llm_foundry", "convert_nemo", "convert_axolotl", "convert_dgxc",
              "convert_internevo", "convert_fms_fsdp", "convert_flash_attention", "convert_nanotron")


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def fms_rows(external: Path) -> pd.DataFrame:
    """convert_fms.py's table plus the extra columns; scored = what autoconf.accuracy scores today."""
    table = _module("convert_fms").convert(external / "fms-acceleration")
    reasons = pd.Series("", index=table.index, dtype=object)
    reasons = reasons.mask(table.duplicate_of != "", "copy of an earlier file version (duplicate_of)")
    reasons = reasons.mask(table.model_name == "", reasons.str.cat(["model not catalogued"] * len(table), sep="; "))
    reasons = reasons.mask(table.status == "failed", reasons.str.cat(
        ["no result and below 90 % memory (cause unknown)"] * len(table), sep="; "))
    for col in EXTRA_COLUMNS:
        if col not in table:  # convert_fms.py fills double_quant (its bnb plugin's loader setting)
            table[col] = ""
    table["label_strength"] = "measured"
    table["unscored_reason"] = reasons.str.strip("; ")
    table["scored"] = (table.unscored_reason == "").astype(int)
    table["upstream"] = "github.com/foundation-model-stack/fms-acceleration (commit in source_ref)"
    for col in INT_COLUMNS:
        if col in EXTRA_COLUMNS:
            table[col] = pd.to_numeric(table[col].replace("", None)).astype("Int64")
    return table[COLUMNS]


def _order(ref: str) -> tuple[str, int, str]:
    file, _, rest = ref.partition("#row=")
    number = re.match(r"\d+", rest)
    return file, int(number.group(0)) if number else -1, rest


def external_rows(external: Path) -> pd.DataFrame:
    rows = []
    for name in CONVERTERS:
        module = _module(name)
        rows += module.convert(external / module.SOURCE)
    frame = to_frame(rows)
    key = frame.source_ref.map(_order)
    frame = frame.assign(_f=key.str[0], _r=key.str[1], _s=key.str[2])
    frame = frame.sort_values(["source", "_f", "_r", "_s"], kind="stable").drop(columns=["_f", "_r", "_s"])
    if frame.source_ref.duplicated().any():
        raise ValueError("duplicate source_ref: " + ", ".join(frame.source_ref[frame.source_ref.duplicated()]))
    return frame.reset_index(drop=True)


def build(external: Path = EXTERNAL) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measurements, kernel measurements)."""
    table = pd.concat([fms_rows(external), external_rows(external)], ignore_index=True)
    kernels = _module("convert_liger").kernel_rows(external / "liger-kernel")
    return table, kernels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--external", type=Path, default=EXTERNAL, help="shared/data/external folder")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--kernel-output", type=Path, default=DEFAULT_KERNELS)
    args = parser.parse_args(argv)
    table, kernels = build(args.external)
    table.to_csv(args.output, index=False, lineterminator="\n")
    kernels.to_csv(args.kernel_output, index=False, lineterminator="\n")
    counts = table.groupby("source").agg(rows=("source", "size"), scored=("scored", "sum"))
    print(f"wrote {len(table)} rows ({int(table.scored.sum())} scored) to {args.output}")
    print(counts.to_string())
    print(f"wrote {len(kernels)} kernel rows to {args.kernel_output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
