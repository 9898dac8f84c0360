"""The hostile-input scenario of issue 27, driven by ``python bench/fuzz.py --surfaces hostile``.

One real server (``serve --data-dir D --allow-hub``, HF_ENDPOINT at tests/_hostile.py's hostile hub with a
2 s drip, the shipped 10 s download deadline) takes, while a poller times /healthz every 50 ms and a sampler
reads the resident memory of the server and its children:

- GET paths that try to leave /static and /docs-assets;
- every POST route (memory, time, tokens, cost, estimate, recommend, sweep) with ``model`` / ``dataset_path``
  naming files outside D that exist and that do not (an answer that differs between the two leaks existence),
  a symlink out of D, a sparse 512 MiB .json, and D's own config (answered);
- /api/config and inline ``model`` objects with tests/_hostile.py's hostile configs (no file may remain);
- hub ids served giant, giant-length, dripping, silent, redirect-looping, invalid, a list, slow headers;
- 20 parallel traced requests.

Then the CLI verbs with the issue's hostile flags and configs, in-process. Each input's outcome is ``ok`` or
the failure (``5xx``, ``echo``, ``leak``, ``left``, ``slow``, ``stopped``, ``exit N``).
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests._hostile import GET_PATHS, HUB_MODES, LLAMA, SOURCE_MARKS, HostileHub, hostile_configs, tree_rss_kib
from tests._server import serve

SECRET = "H0ST1LE-27-SECRET"
ROUTES = ("memory", "time", "tokens", "cost", "estimate", "recommend", "sweep")
HUB_DEADLINE_S = 10.0  # the shipped total deadline of a hub download (autoconf/catalog/hub.py)
metrics: dict[str, Any] = {}  # healthz and RSS figures of the last run, for the report


def _files(root: Path) -> tuple[Path, Path]:
    data, outside = root / "data", root / "outside"
    data.mkdir()
    outside.mkdir()
    (outside / "x.json").write_text(json.dumps({**LLAMA, "model_type": SECRET}))
    (outside / "d.jsonl").write_text(json.dumps({"text": SECRET}) + "\n")
    (data / "config.json").write_text(json.dumps(LLAMA))
    (data / "link.json").symlink_to(outside / "x.json")
    with open(data / "huge.json", "wb") as handle:
        handle.truncate(512 * 2**20)  # sparse
    return data, outside


def _body(route: str, **fields: Any) -> dict[str, Any]:
    if route == "sweep":
        return {"model": "llama3.1-8b", "gpu_model": "L40S", "tokens_per_sample": [1024], "batch_size": [8], **fields}
    return {"model": "llama3.1-8b", "gpu_model": "A100", "estimator": "theory", "batch_size": 8,
            "tokens_per_sample": 1024, **fields}


def _outcome(res: httpx.Response, ok: tuple[int, ...] = (200, 413, 422)) -> str:
    if res.status_code >= 500 and not (res.status_code == 503 and res.headers.get("retry-after")):
        return "5xx"
    if SECRET in res.text:
        return "echo"
    return "ok" if res.status_code in ok or res.status_code == 503 else f"status {res.status_code}"


class _Watch:
    """/healthz latencies every 50 ms and the peak RSS (KiB) of the server and its descendants."""

    def __init__(self, http: httpx.Client, pid: int) -> None:
        self.http, self.pid, self.took, self.peak_kib, self.stop = http, pid, [], 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            start = time.perf_counter()
            try:
                self.http.get("/healthz", timeout=5)
                self.took.append(time.perf_counter() - start)
            except httpx.HTTPError:
                self.took.append(5.0)
            self.peak_kib = max(self.peak_kib, tree_rss_kib(self.pid))


def _paths(http: httpx.Client, outside: Path, counts: Counter[str]) -> None:
    pairs = [(str(outside / "x.json"), str(outside / "absent.json")), ("../outside/x.json", "../outside/no.json"),
             ("/etc/passwd.json", "/etc/no-such.json"), (str(outside / "d.jsonl"), str(outside / "no.jsonl"))]
    for route in ROUTES:
        for there, absent in pairs:
            field = "dataset_path" if there.endswith(".jsonl") and route != "sweep" else "model"
            a = http.post(f"/api/{route}", json=_body(route, **{field: there}))
            b = http.post(f"/api/{route}", json=_body(route, **{field: absent}))
            same = a.status_code == b.status_code and a.text.replace(there, "P") == b.text.replace(absent, "P")
            counts[_outcome(a) if same else "leak"] += 1
        for name in ("link.json", "huge.json", "config.json"):
            counts[_outcome(http.post(f"/api/{route}", json=_body(route, model=name)))] += 1
    for path in GET_PATHS:
        res = http.get(path)
        counts["echo" if any(m in res.text for m in SOURCE_MARKS) else _outcome(res, (200, 404, 405, 422))] += 1


def _uploads(http: httpx.Client, store: Path, counts: Counter[str]) -> None:
    for raw in hostile_configs().values():
        for route, content in (("config", raw), ("memory", b'{"gpu_model":"A100","model":' + raw + b"}")):
            before = set(store.glob("*"))
            outcome = _outcome(http.post(f"/api/{route}", content=content, headers={"content-type": "application/json"}))
            counts[outcome if set(store.glob("*")) == before else "left"] += 1


def _hub(http: httpx.Client, counts: Counter[str]) -> None:
    def one(mode: str) -> None:
        start = time.monotonic()
        res = http.post("/api/sweep", json=_body("sweep", model=f"evil/{mode}"), timeout=60)
        took = time.monotonic() - start
        metrics.setdefault("hub_s", {}).setdefault(mode, []).append(round(took, 1))
        if took > HUB_DEADLINE_S + 1:
            print(f"slow hub answer, {mode}: {took:.1f} s: {res.text[:200]}", flush=True)
        counts[_outcome(res) if took <= HUB_DEADLINE_S + 1 else "slow"] += 1

    threads = [threading.Thread(target=one, args=(mode,)) for mode in HUB_MODES for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _traced(http: httpx.Client, counts: Counter[str]) -> None:
    body = _body("memory", model="llama3.2-1b", estimator="traced")
    answers: list[httpx.Response] = []
    threads = [threading.Thread(target=lambda: answers.append(http.post("/api/memory", json=body, timeout=120)))
               for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    metrics["traced"] = Counter(r.status_code for r in answers)
    for res in answers:
        counts["stopped" if "process stopped" in res.text else _outcome(res)] += 1


CLI_CASES = [["estimate", "--model", "llama3.1-8b", "--mlp-act-factor", "1e999"],
             ["plan", "--model", "llama3.1-8b", "--epochs", "nan"], ["estimate", "--grad-accum=--"],
             ["sweep", "--input", "IN", "--output", "OUT", "--ray-address", "1", "--workers", "2"],
             ["data", "import", "--format", "ado-sfttrainer", "IN", "--output", "OUT"]]


def _cli(root: Path, counts: Counter[str]) -> None:
    from autoconf.interfaces.cli import main

    source, target = root / "in.csv", root / "exists.csv"
    source.write_text("model,method,gpu_model,tokens_per_sample,batch_size\nllama3.1-8b,lora,A100,2048,16\n")
    target.write_text("keep\n")
    cases = [[str(source) if a == "IN" else str(target) if a == "OUT" else a for a in argv] for argv in CLI_CASES]
    for raw in hostile_configs().values():
        config = root / f"c{len(cases)}.json"
        config.write_bytes(raw)
        cases.append(["estimate", "--config", str(config), "--gpu", "A100"])
    for argv in cases:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        one_line = err.getvalue().count("\n") == 1 and "Traceback" not in err.getvalue()
        counts["ok" if code == 2 and one_line else f"exit {code}"] += 1
    counts["ok" if target.read_text() == "keep\n" else "overwritten"] += 1


def run(_inputs: int) -> Counter[str]:
    """The whole scenario once (its size is fixed: ``--inputs`` does not apply)."""
    counts: Counter[str] = Counter()
    root = Path(tempfile.mkdtemp(prefix="autoconf-hostile-"))
    data, outside = _files(root)
    store, cache = root / "uploads", root / "hf"
    with HostileHub(drip_s=2.0) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache), "AUTOCONF_API_UPLOAD_DIR": str(store),
               "HF_HUB_OFFLINE": "", "AUTOCONF_CACHE": str(root / "cold")}  # traced: a cold trace, no disk cache
        with serve("--data-dir", str(data), "--allow-hub", "--timeout-s", "120",
                   env=env) as http:
            watch = _Watch(http, http.server_pid)  # type: ignore[attr-defined]
            watch.thread.start()
            steps: list[Callable[[], None]] = [lambda: _paths(http, outside, counts),
                                               lambda: _uploads(http, store, counts), lambda: _hub(http, counts),
                                               lambda: _traced(http, counts)]
            for step in steps:
                step()
            watch.stop.set()
            watch.thread.join()
    _cli(root, counts)
    took = sorted(watch.took)
    metrics.update(healthz_n=len(took), healthz_p90_ms=1000 * took[int(0.9 * (len(took) - 1))],
                   healthz_max_ms=1000 * took[-1], rss_peak_mib=watch.peak_kib / 1024)
    if metrics["healthz_p90_ms"] >= 100:
        counts["healthz p90 >= 100 ms"] += 1
    return counts
