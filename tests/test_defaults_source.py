"""defaults.py is the one source of the search defaults, the GPU limits and the names every layer shares (issue 26).

Every module of the package is read with ``ast``: a parameter, pydantic Field or argparse flag for max_gpus,
gpus_per_node or max_oom_risk must take its default (and bound) from a name, not a retyped number; no module
but defaults.py assigns a number to a GPU limit; no literal list repeats the memory part names or the training
stack names. The checker is also run on a small bad module, to show it fails.
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

import autoconf
from autoconf import defaults
from autoconf.estimators.theory.frameworks import PROFILES
from autoconf.schema import FRAMEWORKS, Framework, MemoryEstimate

ROOT = Path(autoconf.__file__).parent
SEARCH = {"max_gpus", "gpus_per_node", "max_oom_risk"}  # defaults.MAX_GPUS, GPUS_PER_NODE, MAX_OOM_RISK
FLAGS = {"--max-gpus", "--gpus-per-node", "--max-oom-risk"}
LIMIT_NAMES = ("MAX_GPUS", "GPUS_LIMIT", "NUMBER_GPUS")
# Written out here, not read from the code: the parts and the stacks of issue 26's count.
PART_NAMES = {"weights", "gradients", "optimizer", "activations", "logits", "overhead"}
STACK_NAMES = {"hf-trainer", "fms-hf-tuning", "peft", "litgpt", "torchtune", "unsloth", "axolotl", "llama-factory",
               "ms-swift", "deepspeed", "fsdp-qlora", "llm-foundry", "torchtitan", "trl"}
OWNERS = {"defaults.py": "every name", "schema/kinds.py": "the Framework Literal"}


def _literal(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) or (isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant))


def _strings(node: ast.AST) -> set[str]:
    elts = getattr(node, "elts", [])
    return {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def problems(source: str, name: str) -> list[str]:
    """Defaults retyped in one module's source."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True),
                     *zip(args.kwonlyargs, args.kw_defaults, strict=True)]
            out += [f"{where}: parameter {a.arg} = a number" for a, d in pairs if a.arg in SEARCH and _literal(d)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in SEARCH:
            call = node.value
            if isinstance(call, ast.Call):
                # the default, and the upper bound of a GPU count (a risk's le=1 is a probability's, not a default)
                checked = ("default",) if node.target.id == "max_oom_risk" else ("default", "le")
                values = [*call.args[:1], *(k.value for k in call.keywords if k.arg in checked)]
                if any(_literal(v) for v in values):
                    out.append(f"{where}: Field of {node.target.id} with a number")
            elif _literal(call):
                out.append(f"{where}: {node.target.id} = a number")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flag = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            if flag in FLAGS and any(k.arg == "default" and _literal(k.value) for k in node.keywords):
                out.append(f"{where}: {flag} default = a number")
        elif isinstance(node, ast.Assign) and name != "defaults.py":
            for target in node.targets:
                if isinstance(target, ast.Name) and any(t in target.id for t in LIMIT_NAMES) and _literal(node.value):
                    out.append(f"{where}: {target.id} = a number (defaults.py has it)")
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and name != "defaults.py":
            if len(_strings(node) & PART_NAMES) >= 4:
                out.append(f"{where}: memory part names listed (defaults.MEMORY_PARTS)")
            if len(_strings(node) & STACK_NAMES) >= 3 and name != "schema/kinds.py":
                out.append(f"{where}: stack names listed (schema.FRAMEWORKS)")
    return out


def test_no_default_is_retyped_anywhere_in_the_package() -> None:
    found = [p for path in sorted(ROOT.rglob("*.py"))
             for p in problems(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert found == []


@pytest.mark.parametrize("bad, says", [
    ("def f(max_gpus: int = 64): ...", "parameter max_gpus"),
    ("def f(*, gpus_per_node=8): ...", "parameter gpus_per_node"),
    ("class B:\n    max_gpus: int = Field(64, ge=1, le=MAX_GPUS_LIMIT)", "Field of max_gpus"),
    ("class B:\n    max_gpus: int = Field(MAX_GPUS, ge=1, le=4096)", "Field of max_gpus"),
    ("p.add_argument('--max-oom-risk', type=float, default=0.05)", "--max-oom-risk default"),
    ("MAX_GPUS_LIMIT = 65536", "MAX_GPUS_LIMIT = a number"),
    ("PARTS = ('weights', 'gradients', 'optimizer', 'activations')", "memory part names"),
    ("KNOWN = ['peft', 'litgpt', 'unsloth']", "stack names"),
])
def test_the_checker_fails_on_a_retyped_default(bad: str, says: str) -> None:
    assert any(says in p for p in problems(bad, "bad.py"))


def test_the_checker_passes_names() -> None:
    good = ("def f(max_gpus: int = MAX_GPUS, gpus_per_node: int = GPUS_PER_NODE): ...\n"
            "class B:\n    max_oom_risk: float = Field(MAX_OOM_RISK, ge=0, le=1)\n")
    assert problems(good, "good.py") == []


def test_the_shared_names_agree_with_the_schema() -> None:
    assert set(defaults.MEMORY_PARTS) == PART_NAMES
    assert all(f"{p}_bytes" in MemoryEstimate.model_fields for p in defaults.MEMORY_PARTS)
    assert set(FRAMEWORKS) == set(typing.get_args(Framework)) == STACK_NAMES == set(PROFILES)
    assert set(defaults.FRAMEWORK_JOB_DEFAULTS) <= STACK_NAMES and {defaults.FRAMEWORK, defaults.ADO_FRAMEWORK} <= STACK_NAMES
    assert defaults.MAX_GPUS <= defaults.MAX_GPUS_LIMIT <= defaults.NUMBER_GPUS_LIMIT
