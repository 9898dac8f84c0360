"""``autoconf-gpu models list|show|build``: the learned-model versions in AutoGluonModels/ (design §6)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from autoconf.defaults import models_dir
from autoconf.estimators.learned import versions as V


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("models", help="learned-model versions: list, show, build")
    sub = p.add_subparsers(dest="models_command", required=True)
    sub.add_parser("list", help="installed versions with their data, held-out scores and size")
    show = sub.add_parser("show", help="a version's card (manifest-verified)")
    show.add_argument("version", nargs="?", default="latest", help="version (default: newest)")
    show.add_argument("--json", action="store_true", help="print the whole card.json")
    build = sub.add_parser("build", help="train and seal a version from data/ (deterministic, a few minutes)")
    build.add_argument("version", help="version to (re)build, e.g. 1.0.0")
    build.add_argument("--data", type=Path, help="measurements CSV (default: data/measurements.csv)")
    build.add_argument("--output", type=Path, help="folder holding the versions (default: AutoGluonModels/)")
    build.add_argument("--force", action="store_true", help="replace the version if it already exists")


def _score(card: dict[str, Any], metric: str) -> str:
    held = card.get("held_out", {}).get(metric, {})
    theory, hybrid = held.get("theory", {}), held.get("hybrid", {})
    if not theory:
        return "n/a"
    nan = float("nan")
    return f"{hybrid.get('median_abs_error_pct', nan):.1f} vs {theory.get('median_abs_error_pct', nan):.1f}"


def _list() -> int:
    versions = V.list_versions()
    if not versions:
        print(f"no versions in {models_dir()}; build one with `autoconf-gpu models build 1.0.0`")
        return 0
    print(f"{'version':<9}{'date':<22}{'rows':>6}  {'smi % hybrid vs theory':<24}{'tok/s %':<14}{'MiB':>5}  manifest")
    for version in versions:
        folder = V.version_dir(version)
        try:
            V.verify(folder)
            state = "verified"
        except V.IntegrityError:
            state = "TAMPERED (refused)"
        try:
            card = V.read_card(version, check=False)
        except V.IntegrityError:
            card, state = {}, "TAMPERED (refused)"
        print(f"{version:<9}{card.get('date', '?'):<22}{card.get('data', {}).get('rows_used', 0):>6}  "
              f"{_score(card, 'nvidia_smi'):<24}{_score(card, 'tokens_per_second'):<14}"
              f"{V.folder_bytes(folder) / 2**20:>5.1f}  {state}")
    return 0


def _show(version: str, as_json: bool) -> int:
    card = V.read_card(version)
    if as_json:
        print(json.dumps(card, indent=1))
        return 0
    lines = [f"version {card['version']} ({card['date']}), manifest verified",
             f"build: {card['build_command']} ({card['build_seconds']} s, seed {card['seed']})",
             f"data: {card['data']['path']} sha256 {card['data']['sha256'][:16]}… ({card['data']['rows']} rows, "
             f"{card['data']['rows_used']} used)",
             f"training domain: {json.dumps(card['training_domain'])}",
             f"correction domain: {json.dumps(card['correction_domain'])}",
             "hybrid corrections (grouped held-out median abs % error, theory -> corrected):"]
    for name, c in card["hybrid"]["corrections"].items():
        # 1.x: one decision for every stack; 2.x: one per framework that has training rows, and one for the rest
        decisions = ([(f"  {fw}", d) for fw, d in c["frameworks"].items() if d.get("rule", "").startswith("trained")]
                     + [("  any other stack", c["unseen"])]) if "frameworks" in c else [("", c)]
        for label, d in decisions:
            if d.get("theory_median_abs_error_pct") is not None and "corrected_median_abs_error_pct" in d:
                lines.append(f"  {name + label:<34} {'applied' if d['applied'] else 'not applied':<12} "
                             f"{d['theory_median_abs_error_pct']:.2f} -> {d['corrected_median_abs_error_pct']:.2f}")
            elif label:
                lines.append(f"  {name + label:<34} {'applied' if d['applied'] else 'not applied':<12} "
                             f"{d.get('why', '')}")
    lines.append(f"environment: {json.dumps(card['environment'])}")
    print("\n".join(lines))
    return 0


def _build(args: argparse.Namespace) -> int:
    from autoconf.evaluation.build import build_version

    V.check_version(args.version)  # before any import or training: a version is never a path
    start = time.time()
    command = f"autoconf-gpu models build {args.version}" + (f" --data {args.data}" if args.data else "")
    folder = build_version(args.version, data=args.data, root=args.output, command=command, force=args.force)
    sys.stderr.write(f"built {folder} in {time.time() - start:.0f} s ({V.folder_bytes(folder) / 2**20:.1f} MiB)\n")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.models_command == "list":
        return _list()
    if args.models_command == "show":
        return _show(args.version, args.json)
    return _build(args)
