"""``autoconf-gpu`` entry point: a table of subcommand -> module, each module one verb.

Each verb module defines ``add_parser(subparsers) -> None`` and ``run(args) -> int``. Every problem
with the user's input or files becomes one line on stderr and exit code 2 (typed errors, I/O errors,
unparsable CSV/JSON, bad encodings, numbers too large); an unexpected exception is one line and exit
code 1, with the traceback only under ``--debug``. Nothing here knows any formula.
"""

from __future__ import annotations

import argparse
import csv
import errno
import importlib
import json
import logging
import math
import sys
import traceback

from pydantic import ValidationError

from autoconf import __version__
from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS_LIMIT
from autoconf.errors import AutoconfError, InvalidInputError, NotBuiltError, describe

# subcommand -> module under autoconf.interfaces.cli (one module per verb)
COMMANDS: dict[str, str] = {
    "estimate": "estimate",
    "sweep": "sweep",
    "catalog": "catalog",
    "accuracy": "accuracy",
    "deepspeed": "deepspeed",
    "plan": "plan",
    "serve": "serve",
    "tokens": "tokens",
    "probe": "probe", "measure": "measure",
    "recommend": "recommend", "models": "models",
    "data": "data", "check": "check", "mcp": "mcp",
}
PROG = "autoconf-gpu"
USAGE_EXIT = 2  # argparse's convention: a problem with the input
BUG_EXIT = 1  # an unexpected exception: a bug, reported in one line
# Search bounds shared by every verb that has them (recommend, sweep): the same limits as the REST API.
BOUNDS = {"max_gpus": (1, MAX_GPUS_LIMIT), "gpus_per_node": (1, GPUS_PER_NODE)}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{PROG}: error: {_one_line(message)}\n")
        raise SystemExit(USAGE_EXIT)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every verb, or with ``only`` one (verb modules import what they need, so a
    run of one verb does not pay for the imports of the others)."""
    parser = _Parser(
        prog=PROG,
        description="Will an LLM fine-tuning job fit, on how many GPUs and workers, how fast, how long, at what cost?",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for verb, module in COMMANDS.items():
        if only is None or verb == only:
            importlib.import_module(f"autoconf.interfaces.cli.{module}").add_parser(subparsers)
    return parser


def _one_line(text: str, limit: int = 400) -> str:
    """A message as one line of bounded length (file names and values can hold newlines)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def check_bounds(args: argparse.Namespace) -> None:
    """Refuse search bounds that would make the search run away (``--max-gpus 10**9``, ``--gpus-per-node 0``)."""
    for name, (low, high) in BOUNDS.items():
        value = getattr(args, name, None)
        if value is not None and not low <= value <= high:
            flag = "--" + name.replace("_", "-")
            raise InvalidInputError(flag, f"must be an integer from {low} to {high}; got {value}")


def check_values(argv: list[str], args: argparse.Namespace) -> None:
    """Refuse what argparse lets through: ``--flag=--`` (argparse turns it into an empty list) and non-finite
    numbers (``float`` accepts nan, inf and 1e999) in any flag of any verb."""
    for token in argv:
        if token.startswith("--") and token.endswith("=--"):
            raise InvalidInputError(token.split("=", 1)[0], "needs a value; got '--'")
    for name, value in vars(args).items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise InvalidInputError(f"--{name.replace('_', '-')}", f"must be a finite number; got {value}")


def check_config(args: argparse.Namespace) -> None:
    """Read a ``--model``/``--config`` that names a local config.json once, here, so that an odd file
    (a list, missing or mistyped keys) is one line naming the flag rather than an error deep inside."""
    from pathlib import Path

    from autoconf.catalog import get_architecture

    for name in ("config", "model", "params", "gpu"):
        if getattr(args, name, None) is not None and not str(getattr(args, name)).strip():
            raise InvalidInputError(f"--{name}", "must not be empty")
    for name in ("config", "model"):
        value = getattr(args, name, None)
        if not isinstance(value, str) or not (value.endswith(".json") or Path(value).is_file()):
            continue
        try:
            get_architecture(value)  # the catalogue's parser: every problem of the file is a typed error
        except AutoconfError as exc:
            raise InvalidInputError(f"--{name}", exc.message) from None  # named by the flag the user typed


def user_error(exc: BaseException) -> str | None:
    """The one-line message of an error caused by the input or the environment, or None for a bug."""
    if isinstance(exc, ValidationError):
        return describe(exc)
    if isinstance(exc, (AutoconfError, NotBuiltError)):
        return str(exc)
    if isinstance(exc, OSError):
        where = f" {exc.filename!r}" if exc.filename else ""
        what = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or type(exc).__name__)
        return f"cannot use{where}: {what}"
    if isinstance(exc, UnicodeError):
        return f"input is not valid UTF-8 text ({type(exc).__name__} at byte {getattr(exc, 'start', '?')})"
    if isinstance(exc, (json.JSONDecodeError, csv.Error)):
        return f"input could not be parsed: {exc}"
    if isinstance(exc, RecursionError):
        return "input is nested too deeply to read"
    if isinstance(exc, (OverflowError, MemoryError)):
        return f"a number or size is too large to compute with ({type(exc).__name__}: {exc})"
    if isinstance(exc, ValueError) and type(exc).__module__.startswith("pandas"):
        return f"input could not be parsed as CSV: {exc}"  # EmptyDataError, ParserError
    return None


def _report(exc: BaseException, debug: bool) -> int:
    message = user_error(exc)
    if message is not None:
        sys.stderr.write(f"{PROG}: error: {_one_line(message)}\n")
        if debug:
            traceback.print_exception(exc)
        return USAGE_EXIT
    if debug:
        traceback.print_exception(exc)
    sys.stderr.write(f"{PROG}: internal error: {_one_line(f'{type(exc).__name__}: {exc}')} "
                     "(run with --debug for the traceback)\n")
    return BUG_EXIT


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    verb = next((a for a in argv if not a.startswith("-")), None)
    debug = "--debug" in argv
    try:
        args = build_parser(verb if verb in COMMANDS else None).parse_args(argv)
        args.argv = list(argv)  # which flags were typed (--from: a typed flag beats the file)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
        check_values(argv, args)
        check_bounds(args)
        check_config(args)
        module = importlib.import_module(f"autoconf.interfaces.cli.{COMMANDS[args.command]}")
        return int(module.run(args) or 0)
    except SystemExit as exc:  # argparse (--help, usage errors) and verbs that exit on purpose
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else USAGE_EXIT)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130  # 128 + SIGINT, the shell's convention
    except Exception as exc:  # noqa: BLE001 - the one place every error becomes one line
        return _report(exc, debug)


if __name__ == "__main__":
    raise SystemExit(main())
