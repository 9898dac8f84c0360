"""Job flags shared by ``estimate`` and ``recommend``, generated from the Job's fields: ``--framework`` and every
field the verb does not spell itself.

A verb declares its own flags first (the VRAM-budget CLI's spellings, docs/dialects.md), then calls
``add_job_arguments``: each Job field without a flag of its name gets ``--<field-name>`` with the field's type,
choices and description (booleans as ``--x``, ``--x WORD`` with any word of schema.TRUE_WORDS / FALSE_WORDS, or
``--no-x``, as the VRAM-budget CLI's switches). A flag left out takes the Job's default or the framework
profile's value (docs/frameworks.md); a new Job field is a flag here without an edit.
"""

from __future__ import annotations

import argparse
import typing
from collections.abc import Iterable
from typing import Any

from autoconf import defaults
from autoconf.interfaces.cli.dialect import BoolWord
from autoconf.schema import ALIASES, Framework, Job, field_metadata, is_flag, not_none
from autoconf.schema.words import _choices

GROUPS = field_metadata("group")  # field -> its flags' heading (the Job's metadata), else the training stack's
GENERATED = "_job_flags"  # the Namespace attribute listing the generated flags' fields


def _flag(name: str) -> dict[str, Any]:
    """argparse keywords of the flag of the Job field ``name``."""
    info = Job.model_fields[name]
    annotation = not_none(info.annotation)
    words = _choices(info.annotation)
    if is_flag(info.annotation):
        return {"action": BoolWord}
    if words:
        return {"choices": words}
    if typing.get_origin(annotation) is tuple:
        return {"nargs": "+", "metavar": name.upper()}
    return {"type": annotation if annotation in (int, float) else str}


def _aliases(name: str) -> list[str]:
    """The other spellings of the Job field ``name`` (schema.ALIASES: the VRAM-budget CLI's, the data tables')."""
    return [alias for alias, field in ALIASES.items() if field == name]


def add_job_arguments(p: argparse.ArgumentParser, skip: Iterable[str] = ()) -> None:
    """``--framework`` and a flag per Job field that ``p`` has no flag for (nor ``skip`` names)."""
    p.add_argument("--framework", choices=typing.get_args(Framework), default=defaults.FRAMEWORK,
                   help="training stack (default %(default)s); see docs/frameworks.md")
    known = set(p._option_string_actions) | {a.dest for a in p._actions}  # noqa: SLF001 - argparse has no public view
    fields = [n for n in Job.model_fields if f"--{n.replace('_', '-')}" not in known and n not in known and n not in skip]
    stack = p.add_argument_group("training stack and job settings (default: the Job's or the framework profile's)")
    groups = {"training stack": stack}
    for name in fields:
        title = GROUPS.get(name, "training stack")
        group = groups.setdefault(title, p.add_argument_group(title))
        text = (Job.model_fields[name].description or "").replace("%", "%%")
        spellings = [f"--{word.replace('_', '-')}" for word in (name, *_aliases(name))]
        group.add_argument(*(s for s in spellings if s not in known), dest=name, default=None, help=text, **_flag(name))
    p.set_defaults(**{GENERATED: tuple(fields)})


def stack_fields(args: argparse.Namespace) -> dict[str, Any]:
    """Job fields from the generated flags that were given (None = not given: the Job or the profile decides)."""
    out: dict[str, Any] = {"framework": args.framework}
    for name in getattr(args, GENERATED, ()):
        value = getattr(args, name)
        if value is not None:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out
