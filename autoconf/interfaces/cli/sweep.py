"""``autoconf-gpu sweep``: a CSV of Job/Placement columns in, every estimate column and the recommendation out.

Design §8 (batch columns).

The output is written atomically: into a temporary file in the output's folder, renamed over the
target only when complete, so an interrupted or failed run leaves the previous file as it was and no
truncated one. An existing file is replaced only if it is a previous sweep output (recognised by its
header) or with ``--force``, so a mistyped ``--output`` cannot destroy an unrelated file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
from pathlib import Path

import pandas as pd

from autoconf.errors import InvalidInputError
from autoconf.estimators.contract import get_estimator
from autoconf.estimators.frame import OUTPUT_COLUMNS
from autoconf.interfaces.cli.recommend import add_search_arguments

HEADER_BYTES = 1 << 16  # how much of an existing file is read to recognise a sweep header
RAY_ADDRESS = re.compile(r"^(auto|local|(ray://)?[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5})$")
WRITE_CHUNK = 10_000  # rows per to_csv chunk (bounds the memory of the text being written)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("sweep", help="batch estimates: CSV of configurations in, estimates out")
    p.add_argument("--input", required=True,
                   help="CSV with Job/Placement columns (model or model_name, method, gpu_model, ...) and/or a `from` "
                   "column naming a training config per row (files joined by +, relative to the CSV)")
    p.add_argument("--output", required=True, help="CSV to write (input columns + estimate columns)")
    p.add_argument("--force", action="store_true", help="replace --output even if it is not a previous sweep output")
    add_search_arguments(p)
    p.add_argument("--plot", metavar="FILE", help="also draw the fewest-GPU heat map (model × GPU) to FILE.png or .svg")
    p.add_argument("--workers", type=int, default=1,
                   help="Ray workers to spread the rows over (for the traced estimator; default 1: in-process)")
    p.add_argument("--ray-address", help="attach to this Ray cluster instead of starting a local one (--workers > 1)")


def _progress_bar(done: int, total: int) -> None:
    """A one-line bar on stderr, only when stderr is a terminal (never in logs or pipes)."""
    filled = int(30 * done / max(total, 1))
    sys.stderr.write(f"\rsweep [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} rows")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def is_sweep_output(path: Path) -> bool:
    """True if ``path`` starts with a header holding every output column of a sweep."""
    try:
        with path.open("rb") as handle:
            first = handle.read(HEADER_BYTES).split(b"\n", 1)[0].decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return set(OUTPUT_COLUMNS) <= {c.strip().strip('"') for c in first.rstrip("\r").split(",")}


def check_output(path: Path, force: bool) -> None:
    """Refuse an output that is a folder, lies in a missing folder, or would replace a file that is not ours."""
    if path.is_dir():
        raise InvalidInputError("--output", f"must be a file path; {str(path)!r} is a directory")
    if path.exists() and not path.is_file():  # a device or FIFO is never replaced, even with --force
        raise InvalidInputError("--output", f"must be a regular file; {str(path)!r} is a device, FIFO or socket")
    if not path.parent.is_dir():
        raise InvalidInputError("--output", f"the folder {str(path.parent)!r} does not exist")
    if (path.exists() or path.is_symlink()) and not force and not is_sweep_output(path):
        raise InvalidInputError("--output", f"{str(path)!r} exists and is not a previous sweep output; "
                                "choose another path or pass --force to replace it")


def write_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` as CSV to a temporary file beside ``path``, then rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, _mode(path))
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            frame.to_csv(handle, index=False, chunksize=WRITE_CHUNK, lineterminator="\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)  # a symlink at ``path`` is replaced, never followed
    except BaseException:  # KeyboardInterrupt included: the previous output stays, the partial file goes
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _mode(path: Path) -> int:
    """The permissions the output would have had if written in place (mkstemp's file is 0600)."""
    if path.is_file() and not path.is_symlink():
        return path.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def check_ray_address(address: str | None) -> None:
    """A Ray address as ``ray.init`` takes it: auto, local, host:port or ray://host:port (else exit 2)."""
    if address is not None and not RAY_ADDRESS.match(address.strip()):
        raise InvalidInputError("--ray-address", f"must be auto, local, HOST:PORT or ray://HOST:PORT; got {address!r}")


def run(args: argparse.Namespace) -> int:
    from autoconf.recommend.frame import recommend_frame

    check_ray_address(args.ray_address)
    output = Path(args.output)
    check_output(output, args.force)
    frame = pd.read_csv(args.input, encoding="utf-8")
    from autoconf.interfaces.configs.frame import expand_frame

    frame = expand_frame(frame, Path(args.input).resolve().parent)  # a `from` column: training configs per row
    estimator = get_estimator(args.estimator, args.model_version)
    search = dict(max_gpus=args.max_gpus, gpus_per_node=args.gpus_per_node, max_oom_risk=args.max_oom_risk,
                  strict=args.strict)
    if args.workers > 1 or args.ray_address:
        from autoconf.recommend.parallel import recommend_frame_parallel

        out = recommend_frame_parallel(frame, args.estimator, args.model_version, workers=max(args.workers, 1),
                                       ray_address=args.ray_address, **search)
    else:
        out = recommend_frame(frame, estimator, progress=_progress_bar if sys.stderr.isatty() else None,
                              **search)
    write_atomic(out, output)
    if args.plot:
        from autoconf.interfaces.cli.plots import plot_sweep

        plot_sweep(out, args.plot)
    bad = int(out["error"].notna().sum())
    note = f" ({bad} with errors, see the error column)" if bad else ""
    sys.stderr.write(f"{len(out)} rows written to {args.output}{note}\n")
    return 0
