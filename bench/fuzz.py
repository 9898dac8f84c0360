"""Fuzz every surface (issue 16) and count what must never happen: tracebacks, HTTP 5xx, echoed file content.

The inputs and oracles are those of the test suite (tests/_fuzz.py), driven here at full size with a
fixed seed: CLI argument vectors through ``main(argv)`` in-process, REST bodies (schema-driven, random
JSON, raw hostile bytes) through a real socket to ``autoconf-gpu serve --data-dir`` whose files carry a
secret marker, direct calls of the two ado experiments, and issue 27's hostile scenario (bench/hostile.py:
every route and verb against files outside --data-dir, hostile uploads, a hostile hub, 20 parallel
traced). Writes the section ``fuzz`` of
docs/benchmarks.md (heading ``## Fuzz``), and the hostile scenario the section ``hostile``.

    python bench/fuzz.py [--inputs 10000] [--surfaces cli,rest,ado,hostile] [--no-write]
    # or one process per surface, then one report from their saved counts:
    python bench/fuzz.py --surfaces cli --save cli.json --no-write   # (rest, ado likewise, in parallel)
    python bench/fuzz.py --report-from cli.json rest.json ado.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bench._report import update_section  # noqa: E402
from tests import _fuzz as F  # noqa: E402

FAILURES = {"traceback": "tracebacks", "5xx": "HTTP 5xx", "echo": "echoed file contents"}


def _drive(strategy: st.SearchStrategy[Any], run: Callable[[Any], str], inputs: int) -> Counter[str]:
    """Run ``inputs`` generated examples (fixed seed) and count their outcomes."""
    counts: Counter[str] = Counter()

    @settings(max_examples=inputs, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(example: Any) -> None:
        outcome = run(example)
        if outcome != "ok" and outcome not in counts:
            print(f"first {outcome[:160]!r}: {example!r}"[:2000], file=sys.stderr, flush=True)
        counts[outcome] += 1

    one()
    return counts


def fuzz_cli(inputs: int) -> Counter[str]:
    folder = F.make_files(Path(tempfile.mkdtemp(prefix="autoconf-fuzz-cli-")))
    return _drive(F.cli_argv(folder), F.cli_outcome, inputs)


def fuzz_rest(inputs: int) -> Counter[str]:
    from autoconf.interfaces.api.app import app
    from tests._server import serve

    data = Path(tempfile.mkdtemp(prefix="autoconf-fuzz-data-"))
    (data / "config.json").write_text(json.dumps({"model_type": F.SECRET, F.SECRET: 1}))
    (data / "d.jsonl").write_text(json.dumps({F.SECRET: F.SECRET}) + "\n")
    strategy = st.tuples(st.sampled_from(F.POST_ROUTES), F.rest_bodies(app.openapi()))
    with serve("--data-dir", str(data)) as client:
        return _drive(strategy, lambda pair: F.rest_outcome(client, *pair), inputs)


def fuzz_ado(inputs: int) -> Counter[str]:
    import contextlib
    import io
    import logging

    logging.disable(logging.WARNING)  # ado logs (and prints) every value it refuses

    def run(call: tuple[str, dict[str, Any]]) -> str:
        with contextlib.redirect_stdout(io.StringIO()):
            outcome = F.ado_outcome(*call)
        return "traceback" if outcome.split(":", 1)[0].endswith(("Error", "Exception")) else outcome

    return _drive(F.ado_calls(), run, inputs)


def fuzz_hostile(inputs: int) -> Counter[str]:
    from bench import hostile

    return hostile.run(inputs)


SURFACES: dict[str, tuple[str, Callable[[int], Counter[str]]]] = {
    "cli": ("CLI argument vectors, in-process `main(argv)`", fuzz_cli),
    "rest": ("REST bodies over loopback (schema-driven, random JSON, raw bytes)", fuzz_rest),
    "ado": ("ado `min_gpu_recommender` / `resource_estimate`, direct calls", fuzz_ado),
    "hostile": ("issue 27 scenario (bench/hostile.py): files outside --data-dir on every route, hostile uploads, "
                "hostile hub, 20 parallel traced, CLI flags and configs", fuzz_hostile),
}


def report(results: dict[str, tuple[Counter[str], float]]) -> str:
    lines = ["## Fuzz", "",
             "`python bench/fuzz.py` (fixed seed; inputs and oracles of tests/_fuzz.py). A failure is a traceback "
             "(CLI or ado), an HTTP 5xx, an answer quoting a server file marked with a secret, or any other "
             "outcome than an answer or a clean one-line refusal (CLI exit 0/2, HTTP 200/413/422 without "
             "`internal_error`, ado answer or ado's own domain refusal).", "",
             "| surface | inputs | tracebacks | HTTP 5xx | echoed contents | other failures | seconds |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, (counts, seconds) in results.items():
        total = sum(counts.values())
        known = {k: counts.get(k, 0) for k in FAILURES}
        other = total - counts.get("ok", 0) - sum(known.values())
        lines.append(f"| {SURFACES[name][0]} | {total:,} | {known['traceback']} | {known['5xx']} | {known['echo']} | "
                     f"{other} | {seconds:.0f} |")
    lines += ["", f"Python {platform.python_version()}, {platform.machine()}, one process per surface on a shared "
              "machine (2 cores)."]
    return "\n".join(lines)


def report_hostile(counts: Counter[str], seconds: float) -> str:
    """The section ``hostile`` of docs/benchmarks.md: issue 27's scenario, its counts and its measurements."""
    from bench.hostile import metrics

    bad = {k: v for k, v in sorted(counts.items()) if k != "ok"}
    lines = ["## Hostile input (issue 27)", "",
             "`python bench/fuzz.py --surfaces hostile` (bench/hostile.py): one real server (`serve --data-dir D "
             "--allow-hub`, HF_ENDPOINT at a hostile loopback hub with a 2 s drip and the shipped 10 s deadline) "
             "takes GET paths that try to leave /static, every POST route with files outside D that exist and that "
             "do not, a symlink out, a sparse "
             "512 MiB .json; hostile uploads via /api/config and inline; hub ids served giant, giant-length, "
             "dripping, silent, redirect-looping, invalid, a list, slow headers (2 askers each); 20 parallel traced "
             "requests; then the CLI verbs with the issue's hostile flags and configs.", "",
             "| inputs | HTTP 5xx | echoed secret | existence leaked | files left by refused uploads | "
             "hub over 10 s + 1 | 'process stopped' | CLI not exit 2 / one line | seconds |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| {sum(counts.values())} | {counts.get('5xx', 0)} | {counts.get('echo', 0)} | {counts.get('leak', 0)} | "
             f"{counts.get('left', 0)} | {counts.get('slow', 0)} | {counts.get('stopped', 0)} | "
             f"{sum(v for k, v in counts.items() if k.startswith('exit') or k == 'overwritten')} | {seconds:.0f} |"]
    if metrics:
        lines += ["", f"/healthz p90 {metrics['healthz_p90_ms']:.0f} ms (worst {metrics['healthz_max_ms']:.0f} ms; "
                  f"{metrics['healthz_n']} probes, one every 50 ms throughout); resident memory of the server and its "
                  f"descendants (traced pool, tracing worker) peaked at {metrics['rss_peak_mib']:.0f} MiB; "
                  "the 20 parallel traced requests were "
                  f"answered {', '.join(f'{n} × HTTP {k}' for k, n in sorted(metrics['traced'].items()))}.",
                  "", "Seconds from request to 422 per hostile hub (2 askers each, at once; one download per id): "
                  + ", ".join(f"{mode} {max(times):.1f}" for mode, times in sorted(metrics.get('hub_s', {}).items()))
                  + "."]
    lines += ["", f"Other failures: {bad or 'none'}. Python {platform.python_version()}, {platform.machine()}, a "
              "shared machine (2 cores)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10_000, help="inputs per surface (default %(default)s)")
    parser.add_argument("--surfaces", default="cli,rest,ado,hostile")
    parser.add_argument("--output", default="docs/benchmarks.md")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--save", help="also write the counts as JSON here")
    parser.add_argument("--report-from", nargs="+", help="only report the counts saved by earlier --save runs")
    args = parser.parse_args(argv)
    results: dict[str, tuple[Counter[str], float]] = {}
    for saved in args.report_from or []:
        for name, (counts, seconds) in json.loads(Path(saved).read_text(encoding="utf-8")).items():
            results[name] = (Counter(counts), seconds)
    for name in [] if args.report_from else args.surfaces.split(","):
        start = time.perf_counter()
        counts = SURFACES[name][1](args.inputs)
        results[name] = (counts, time.perf_counter() - start)
        bad = {k: v for k, v in counts.items() if k != "ok"}
        print(f"{name}: {sum(counts.values())} inputs, failures {bad or 0}", flush=True)
    if args.save:
        Path(args.save).write_text(json.dumps({k: [dict(c), t] for k, (c, t) in results.items()}), encoding="utf-8")
    hostile = results.pop("hostile", None)
    if results:
        text = report(results)
        print(text)
        if not args.no_write:
            update_section(args.output, "fuzz", text)
    if hostile is not None:
        text = report_hostile(*hostile)
        print(text)
        if not args.no_write:
            update_section(args.output, "hostile", text)
        results["hostile"] = hostile
    failed = any(k != "ok" for counts, _ in results.values() for k in counts)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
