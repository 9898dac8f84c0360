"""The web page and /docs in a real headless Chromium against a real `autoconf-gpu serve` on loopback.

The numbers the page shows must be the REST answer for the same body; a bad model name gets the API's message
(and its closest names) beside the field; /docs renders with nothing but loopback reachable. Chromium and
ChromeDriver are Debian's packages (`apt-get install -y chromium chromium-driver`): where they are missing these
tests FAIL with that line, they never skip.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from autoconf.schema import Job, Placement

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._browser import chromium, find_browser, requested_urls, serve  # noqa: E402

pytestmark = pytest.mark.slow  # a real Chromium against a real server
GPU = "NVIDIA-A100-80GB-PCIe"
# (form fields, GPUs): the body the page sends must be exactly these fields plus number_gpus
JOBS: list[tuple[dict[str, Any], int | str]] = [
    ({"model": "llama3.1-8b", "method": "lora", "gpu_model": GPU, "tokens_per_sample": 2048, "batch_size": 16,
      "estimator": "theory", "num_samples": 10000}, 2),
    ({"model": "mistral-7b-v0.1", "method": "full", "gpu_model": GPU, "tokens_per_sample": 4096, "batch_size": 32,
      "estimator": "theory", "num_samples": 5000, "epochs": 2}, "recommend"),
]
LOCAL_SCHEMES = ("chrome", "chrome-untrusted", "data", "about", "blob", "devtools")


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serve() as url:
        yield url


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    try:
        find_browser()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    with chromium() as drv:
        yield drv


def _wait(driver: Any, view: str, timeout: float = 60) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    def state(d: Any) -> str | bool:
        value = d.find_element("id", f"view-{view}").get_attribute("data-state")
        return value if value in ("done", "error") else False

    return str(WebDriverWait(driver, timeout).until(state))


def _open(driver: Any, base: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base}/")
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    driver.execute_script("document.getElementById('advanced').open = true")


def _fill(driver: Any, fields: dict[str, Any], gpus: int | str) -> None:
    from selenium.webdriver.support.ui import Select

    for name, value in {**fields, "number_gpus": gpus}.items():
        el = driver.find_element("id", f"f-{name}")
        if el.tag_name == "select":
            Select(el).select_by_value(str(value).lower() if isinstance(value, bool) else str(value))
        elif el.get_attribute("type") == "checkbox":
            if el.is_selected() is not value:
                el.click()
        else:
            el.clear()
            el.send_keys(str(value))


def _value(driver: Any, element_id: str) -> tuple[str, str]:
    el = driver.find_element("id", element_id)
    return el.get_attribute("data-value"), el.text


def _only_loopback(urls: list[str]) -> list[str]:
    return [u for u in urls if urlparse(u).scheme not in LOCAL_SCHEMES and urlparse(u).hostname != "127.0.0.1"]


@pytest.mark.parametrize("fields, gpus", JOBS)
def test_answer_equals_the_rest_answer(driver: Any, base: str, fields: dict[str, Any], gpus: int | str) -> None:
    _open(driver, base)
    _fill(driver, fields, gpus)
    driver.find_element("id", "submit").click()
    assert _wait(driver, "answer") == "done"
    rec = httpx.post(f"{base}/api/recommend", json=fields, timeout=60).json()["results"][0]
    body = {**fields, "number_gpus": rec["number_gpus"] if gpus == "recommend" else gpus}
    sent = driver.find_element("id", "repro-body").get_attribute("textContent")
    assert json.loads(sent) == body  # the page sent exactly this body
    est = httpx.post(f"{base}/api/estimate", json=body, timeout=60).json()["results"][0]
    mem, tp, wall, cost = est["memory"], est["throughput"], est["time"], est["cost"]
    expected = {
        "out-total": (mem["total_memory_gib"], f"{mem['total_memory_gib']:.2f}"),
        "out-capacity": (mem["capacity_gib"], f"{mem['capacity_gib']:.2f}"),
        "out-risk": (mem["oom_risk"], f"{mem['oom_risk']:.3f}"),
        "out-tps": (tp["tokens_per_second"], f"{round(tp['tokens_per_second']):,}"),
        "out-time": (wall["time_seconds"], None),
        "out-cost": (cost["cost_usd"], f"${cost['cost_usd']:.2f}"),
        "out-rec": (rec["number_gpus"], f"{rec['number_gpus']} GPU"),
        "out-placement": (body["number_gpus"], f"{body['number_gpus']} × {GPU}"),
    }
    for element_id, (number, text) in expected.items():
        shown_value, shown_text = _value(driver, element_id)
        assert float(shown_value) == pytest.approx(number, rel=1e-12), element_id
        assert text is None or shown_text.startswith(text), (element_id, shown_text, text)
    assert _value(driver, "out-fits")[1] == ("yes" if mem["fits"] else "NO")
    assert _value(driver, "out-phase")[1] == mem["peak_phase"]
    parts = driver.find_elements("css selector", "#bar rect.part")
    assert {p.get_attribute("data-part") for p in parts} == {k for k in
                                                            ("weights", "gradients", "optimizer", "activations",
                                                             "logits", "overhead") if mem[f"{k}_gib"] > 0}
    assert _only_loopback(requested_urls(driver)) == []


def test_bad_model_gets_the_api_message_beside_the_field(driver: Any, base: str) -> None:
    fields = {**JOBS[0][0], "model": "llama3.1-8B-instruct-typo"}
    _open(driver, base)
    _fill(driver, fields, 2)
    driver.find_element("id", "submit").click()
    assert _wait(driver, "answer") == "error"
    detail = httpx.post(f"{base}/api/estimate", json=fields, timeout=60).json()["detail"][0]
    beside = driver.find_element("id", "err-model")
    assert detail["msg"] in beside.text and "llama3.1-8b" in detail["suggestions"]
    links = [b.text for b in beside.find_elements("css selector", "button.link")]
    assert links == detail["suggestions"]
    assert "invalid" in driver.find_element("id", "f-model").get_attribute("class")
    assert not driver.find_element("id", "page-error").is_displayed()  # no stack trace, no blank page
    beside.find_element("css selector", "button.link").click()  # the first suggestion answers
    assert _wait(driver, "answer") == "done"
    assert driver.find_element("id", "f-model").get_attribute("value") == detail["suggestions"][0]


# Number controls are <input type=number> with the field's bounds (the browser then takes no letters), but the page
# leaves the checking to the API: out-of-bounds and fractional values reach it and its message shows beside the field.
@pytest.mark.parametrize("field, bad", [("tokens_per_sample", "-1"), ("batch_size", "2.5"), ("lora_dropout", "1"),
                                        ("number_gpus", "3")])
def test_bad_numbers_get_the_api_message(driver: Any, base: str, field: str, bad: str) -> None:
    fields = {**JOBS[0][0], "tp": 2} if field == "number_gpus" else {**JOBS[0][0], field: bad}
    _open(driver, base)
    _fill(driver, fields, bad if field == "number_gpus" else 2)
    driver.find_element("id", "submit").click()
    assert _wait(driver, "answer") == "error"
    body = {**fields, "number_gpus": int(bad) if field == "number_gpus" else 2}
    body = {k: json.loads(v) if isinstance(v, str) and k in (field, "number_gpus") else v for k, v in body.items()}
    res = httpx.post(f"{base}/api/estimate", json=body, timeout=60)
    assert res.status_code == 422
    detail = res.json()["detail"][0]
    assert detail["loc"][-1] == field
    assert detail["msg"] in driver.find_element("id", f"err-{field}").text


def test_compare_across_gpus(driver: Any, base: str) -> None:
    from selenium.webdriver.support.ui import Select

    fields, gpus = JOBS[0]
    names = [GPU, "NVIDIA-H100-80GB-HBM3"]
    _open(driver, base)
    _fill(driver, fields, gpus)
    driver.find_element("id", "tab-compare").click()
    Select(driver.find_element("id", "c-dim")).select_by_value("gpu_model")
    box = driver.find_element("id", "c-values")
    box.clear()
    box.send_keys(", ".join(names))
    driver.find_element("id", "c-run").click()
    assert _wait(driver, "compare") == "done"
    for i, name in enumerate(names):
        body = {**fields, "gpu_model": name, "number_gpus": gpus}
        est = httpx.post(f"{base}/api/estimate", json=body, timeout=60).json()["results"][0]
        assert float(_value(driver, f"cmp-{i}-total")[0]) == pytest.approx(est["memory"]["total_memory_gib"], rel=1e-12)
        assert float(_value(driver, f"cmp-{i}-capacity")[0]) == pytest.approx(est["memory"]["capacity_gib"], rel=1e-12)
        assert float(_value(driver, f"cmp-{i}-cost")[0]) == pytest.approx(est["cost"]["cost_usd"], rel=1e-12)


SWEEP_JOBS = [{"model": "llama3.1-8b", "method": "full", "gpu_model": GPU, "estimator": "theory"},
              {"model": "llama3.1-8b", "method": "lora", "gpu_model": GPU, "estimator": "theory", "attention": "eager",
               "lora_target_modules": "q_proj, k_proj, v_proj, o_proj", "packing": True}]


@pytest.mark.parametrize("form", SWEEP_JOBS, ids=["full", "lora-advanced"])
def test_sweep_heat_map_matches_recommend(driver: Any, base: str, form: dict[str, Any]) -> None:
    """Each cell of the heat map is the fewest GPUs that /api/recommend gives for that cell's job (every field of
    the form, Advanced ones included)."""
    tokens, batches = [1024, 8192], [8, 64]
    fields = {k: [w.strip() for w in v.split(",")] if k == "lora_target_modules" else v for k, v in form.items()}
    _open(driver, base)
    _fill(driver, form, "recommend")
    driver.find_element("id", "tab-sweep").click()
    for element_id, values in (("s-tokens_per_sample", tokens), ("s-batch_size", batches)):
        box = driver.find_element("id", element_id)
        box.clear()
        box.send_keys(", ".join(map(str, values)))
    driver.find_element("id", "s-run").click()
    assert _wait(driver, "sweep") == "done"
    cells = driver.find_elements("css selector", "#heatmap g.cell")
    shown = {(int(c.get_attribute("data-tokens")), int(c.get_attribute("data-batch"))):
             int(c.get_attribute("data-gpus")) for c in cells}
    assert set(shown) == {(t, b) for t in tokens for b in batches}
    for (t, b), n in shown.items():
        body = {**fields, "tokens_per_sample": t, "batch_size": b}
        rec = httpx.post(f"{base}/api/recommend", json=body, timeout=60).json()["results"][0]
        assert n == rec["number_gpus"], (t, b)


def test_docs_render_offline(driver: Any, base: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    requested_urls(driver)  # forget earlier requests
    driver.get(f"{base}/docs")
    WebDriverWait(driver, 30).until(lambda d: len(d.find_elements("css selector", ".opblock")) > 0)
    title = driver.find_element("css selector", ".swagger-ui .info .title").text
    assert title.startswith("autoconf-gpu")
    paths = httpx.get(f"{base}/openapi.json", timeout=30).json()["paths"]
    shown = {e.text for e in driver.find_elements("css selector", ".opblock-summary-path")}
    assert {"/api/estimate", "/api/recommend", "/api/sweep"} <= shown <= set(paths)
    urls = requested_urls(driver)
    assert any(u.endswith("/openapi.json") for u in urls) and _only_loopback(urls) == []


def test_page_served_with_its_assets(base: str) -> None:
    """The page and every asset it names come from the server itself (no CDN)."""
    html = httpx.get(f"{base}/", timeout=30).text
    for asset in ("/static/style.css", "/static/charts.js", "/static/app.js", "/static/favicon.svg"):
        assert asset in html
        assert httpx.get(f"{base}{asset}", timeout=30).status_code == 200
    assert "http://" not in html and "https://" not in html


# Llama-3.1-8B's config.json (the keys we read). Parameters by hand: embeddings 2 × 128256 × 4096 (untied)
# + 32 layers × (q,o 2 × 4096² + k,v 2 × 4096 × 1024 + MLP 3 × 4096 × 14336 + 2 norms × 4096) + final norm 4096
# = 8,030,261,248, the published count of Llama 3.1 8B.
LLAMA31_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
              "max_position_embeddings": 131072, "tie_word_embeddings": False, "rms_norm_eps": 1e-5}


def test_uploaded_config_json_is_answered(driver: Any, base: str, tmp_path: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA31_8B))
    _open(driver, base)
    _fill(driver, {k: v for k, v in JOBS[0][0].items() if k != "model"}, 2)
    driver.find_element("id", "f-config").send_keys(str(config))
    WebDriverWait(driver, 30).until(lambda d: d.find_element("id", "config-info").text != "")
    assert "llama, 8.03 B parameters" in driver.find_element("id", "config-info").text
    kept = httpx.post(f"{base}/api/config", content=config.read_bytes(), timeout=30).json()
    assert kept["total_params"] == 8_030_261_248
    assert driver.find_element("id", "f-model").get_attribute("value") == kept["model"]
    driver.find_element("id", "submit").click()
    assert _wait(driver, "answer") == "done"
    body = {**JOBS[0][0], "model": kept["model"], "number_gpus": 2}
    est = httpx.post(f"{base}/api/estimate", json=body, timeout=60).json()["results"][0]
    assert float(_value(driver, "out-total")[0]) == pytest.approx(est["memory"]["total_memory_gib"], rel=1e-12)


@pytest.mark.parametrize("content, words", [(b"[1, 2]", "must be a JSON object"), (b"{not json", "must be a JSON"),
                                            (b'{"model_type": "llama"}', "missing the required key")])
def test_bad_config_upload_is_422(base: str, content: bytes, words: str) -> None:
    res = httpx.post(f"{base}/api/config", content=content, timeout=30)
    assert res.status_code == 422
    detail = res.json()["detail"][0]
    assert detail["loc"] == ["config"] and words in detail["msg"]


@pytest.mark.parametrize("change, loc", [({"tokens_per_sample": list(range(1, 12))}, ["tokens_per_sample"]),
                                         ({"batch_size": []}, ["batch_size"]),
                                         ({"model": "llama3.1-8bx"}, ["model"]),
                                         ({"gpu_model": "H900"}, ["gpu_model"]),
                                         ({"attention": "flsh"}, ["attention"]),
                                         ({"warmup_ratio": 0.1}, ["warmup_ratio"])])
def test_sweep_route_rejects_with_the_field(base: str, change: dict[str, Any], loc: list[str]) -> None:
    body = {"model": "llama3.1-8b", "gpu_model": GPU, "tokens_per_sample": [1024], "batch_size": [8], **change}
    res = httpx.post(f"{base}/api/sweep", json=body, timeout=60)
    assert res.status_code == 422, res.text
    detail = res.json()["detail"][0]
    assert detail["loc"] == loc
    if "model" in change:
        assert "llama3.1-8b" in detail["suggestions"]


def test_link_reproduces_the_answer(driver: Any, base: str) -> None:
    """The reproduce block's link, opened afresh, fills the form and shows the same numbers."""
    fields, gpus = JOBS[1]
    _open(driver, base)
    _fill(driver, fields, gpus)
    driver.find_element("id", "submit").click()
    assert _wait(driver, "answer") == "done"
    shown = {k: _value(driver, k) for k in ("out-total", "out-rec", "out-tps", "out-cost", "out-placement")}
    body = driver.find_element("id", "repro-body").get_attribute("textContent")
    link = driver.find_element("id", "repro-link").get_attribute("href")
    assert urlparse(link).hostname == "127.0.0.1" and "model=mistral-7b-v0.1" in link
    driver.get("about:blank")
    driver.get(link)
    assert _wait(driver, "answer") == "done"
    assert {k: _value(driver, k) for k in shown} == shown
    assert driver.find_element("id", "repro-body").get_attribute("textContent") == body


def test_docs_without_swagger_assets_list_the_routes(driver: Any) -> None:
    """Without fastapi-offline installed, /docs is the package's own page listing /openapi.json's routes."""
    from selenium.webdriver.support.ui import WebDriverWait

    with serve(prelude="import sys; sys.modules['fastapi_offline'] = None") as plain:
        requested_urls(driver)
        driver.get(f"{plain}/docs")
        WebDriverWait(driver, 30).until(lambda d: len(d.find_elements("css selector", "tr.opblock")) > 0)
        shown = {e.text for e in driver.find_elements("css selector", "tr.opblock code")}
        paths = set(httpx.get(f"{plain}/openapi.json", timeout=30).json()["paths"])
        assert shown == paths
        assert _only_loopback(requested_urls(driver)) == []


def test_compare_bad_gpu_name_beside_the_values(driver: Any, base: str) -> None:
    fields, gpus = JOBS[0]
    _open(driver, base)
    _fill(driver, fields, gpus)
    driver.find_element("id", "tab-compare").click()
    box = driver.find_element("id", "c-values")
    box.clear()
    box.send_keys(f"{GPU}, H900")
    driver.find_element("id", "c-run").click()
    assert _wait(driver, "compare") == "error"
    detail = httpx.post(f"{base}/api/recommend", json={**fields, "gpu_model": "H900", "number_gpus": gpus},
                        timeout=60).json()["detail"][0]
    assert detail["loc"] == ["gpu_model"]
    assert f"H900: {detail['msg']}" in driver.find_element("id", "err-c-values").text
    assert driver.find_element("id", "err-gpu_model").text == ""  # the form's own GPU is fine


CONTROLS = {"select": ("select", None), "tristate": ("select", None), "checkbox": ("input", "checkbox"),
            "number": ("input", "number"), "list": ("input", "text"), "text": ("input", "text")}


def test_every_served_field_has_its_control(driver: Any, base: str) -> None:
    """The form is built from /api/form: each served field is a control of its kind with its bounds, in its group."""
    fields = httpx.get(f"{base}/api/form", timeout=30).json()["fields"]
    assert {f["name"] for f in fields} >= {*Job.model_fields, *Placement.model_fields}
    _open(driver, base)
    for f in fields:
        el = driver.find_element("id", f"f-{f['name']}")
        tag, kind = CONTROLS[f["control"]]
        assert (el.tag_name, el.get_attribute("type") if kind else None) == (tag, kind), f["name"]
        assert el.get_attribute("name") == f["name"] and el.get_attribute("title") == f["help"]
        for key in ("min", "max", "step"):
            if key in f:
                assert el.get_attribute(key) == str(f[key]), (f["name"], key)
        where = "fields-main" if f["main"] else "fields-advanced"
        assert driver.execute_script(f"return !!arguments[0].closest('#{where}')", el), f["name"]
        if not f["main"]:
            group = driver.execute_script("return arguments[0].closest('fieldset').dataset.group", el)
            assert group == f["group"], f["name"]
        if f["control"] == "checkbox":
            assert el.is_selected() is f["default"], f["name"]


# A Job field the schema does not have, added in the server process before the app is built.
NEW_FIELD = """
from pydantic import Field
import autoconf.interfaces.api.form as form
class NewJob(form.Job):
    warmup_ratio: float = Field(0.0, ge=0, le=1, description="Fraction of steps with a rising learning rate.",
                                json_schema_extra={"unit": "fraction"})
form.Job = NewJob
"""


def test_a_new_job_field_appears_on_the_page(driver: Any) -> None:
    """A Job field with no page edit is a control of the training stack's group and is sent under its name (the
    real REST body does not know it yet: its 422 shows beside the new control)."""
    with serve(prelude=NEW_FIELD) as other:
        _open(driver, other)
        el = driver.find_element("id", "f-warmup_ratio")
        assert (el.get_attribute("type"), el.get_attribute("min"), el.get_attribute("max")) == ("number", "0", "1")
        assert driver.execute_script("return arguments[0].closest('fieldset').dataset.group", el) == "training stack"
        label = driver.find_element("css selector", "label[for=f-warmup_ratio]").text
        assert label == "warmup ratio fraction"
        _fill(driver, {**JOBS[0][0], "warmup_ratio": 0.1}, 2)
        driver.find_element("id", "submit").click()
        assert _wait(driver, "answer") == "error"
        assert "warmup_ratio=0.1" in driver.current_url
        assert "Extra inputs are not permitted" in driver.find_element("id", "err-warmup_ratio").text


# Advanced controls of each kind: a select, a checkbox, a default/on/off select, a list, a number.
ADVANCED = {"attention": "sdpa", "packing": True, "double_quant": False, "lora_target_modules": "q_proj, k_proj, v_proj",
            "lora_alpha": 32}


def test_advanced_controls_and_the_command_lines(driver: Any, base: str) -> None:
    """Each kind of control sends its field typed as the API reads it, and the answer's command lines (flags
    generated from the same fields) give the CLI the same job, placement and memory as the REST answer."""
    import shlex
    import subprocess

    fields, gpus = JOBS[0]
    _open(driver, base)
    _fill(driver, {**fields, **ADVANCED}, gpus)
    driver.find_element("id", "submit").click()
    assert _wait(driver, "answer") == "done"
    sent = json.loads(driver.find_element("id", "repro-body").get_attribute("textContent"))
    assert sent == {**fields, **ADVANCED, "lora_target_modules": ["q_proj", "k_proj", "v_proj"], "number_gpus": gpus}
    est = httpx.post(f"{base}/api/estimate", json=sent, timeout=60).json()["results"][0]
    rec = httpx.post(f"{base}/api/recommend", json=sent, timeout=60).json()["results"][0]
    estimate, recommend = driver.find_element("id", "repro-cli").get_attribute("textContent").splitlines()
    run = [sys.executable, "-m", "autoconf.interfaces.cli"]
    cli_est = json.loads(subprocess.run([*run, *shlex.split(estimate)[1:], "--json"], capture_output=True, text=True,
                                        check=True, timeout=120).stdout)
    assert cli_est["job"] == est["job"] and cli_est["placement"]["number_gpus"] == gpus
    assert cli_est["memory"]["peak_bytes"] == pytest.approx(est["memory"]["total_memory_gib"] * 2**30, rel=1e-9)
    cli_rec = json.loads(subprocess.run([*run, *shlex.split(recommend)[1:], "--json"], capture_output=True, text=True,
                                        check=True, timeout=120).stdout)
    assert cli_rec["number_gpus"] == rec["number_gpus"] and cli_rec["estimate"]["job"] == est["job"]


def test_compare_across_a_field_with_choices(driver: Any, base: str) -> None:
    """Compare offers every field with choices (from /api/form) and fills in all its choices."""
    from selenium.webdriver.support.ui import Select

    fields, gpus = JOBS[0]
    _open(driver, base)
    _fill(driver, fields, gpus)
    driver.find_element("id", "tab-compare").click()
    Select(driver.find_element("id", "c-dim")).select_by_value("attention")
    assert driver.find_element("id", "c-values").get_attribute("value") == "flash, sdpa, eager"
    driver.find_element("id", "c-run").click()
    assert _wait(driver, "compare") == "done"
    for i, name in enumerate(("flash", "sdpa", "eager")):
        body = {**fields, "attention": name, "number_gpus": gpus}
        est = httpx.post(f"{base}/api/estimate", json=body, timeout=60).json()["results"][0]
        assert float(_value(driver, f"cmp-{i}-total")[0]) == pytest.approx(est["memory"]["total_memory_gib"], rel=1e-12)
