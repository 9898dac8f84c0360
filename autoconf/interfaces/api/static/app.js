/* The autoconf-gpu page: builds the job form from /api/form (the fields' metadata), reads it, calls the REST
   routes (/api/estimate, /api/recommend, /api/sweep) and shows their answers; a 422's message goes beside the
   field it names. No library, no build step. */
"use strict";

const $ = (id) => document.getElementById(id);
const NUMBER = /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/;
const COMPARE_DEFAULTS = { number_gpus: "1, 2, 4, 8" };  // a field with choices compares all of them
const PREFERRED_GPUS = ["NVIDIA-A100-80GB-PCIe", "NVIDIA-H100-80GB-HBM3", "L40S", "NVIDIA-L40S", "NVIDIA-L4"];

class InputError extends Error {
  constructor(detail) { super("invalid input"); this.detail = detail; }
}

/* ---- the form, built from /api/form ------------------------------------------------------------ */
let FORM_FIELDS = [];  // the served list of fields, kept for the command lines of the answer
/* One control per field of the served list (autoconf/interfaces/api/form.py): choices as a select, a boolean as a
   checkbox, a boolean whose default is the framework profile's as default / on / off, a number with its bounds,
   step and unit, a list of words as comma-separated text. Its id is f-<name>, its message's err-<name>. */
function control(f) {
  const tag = ["select", "tristate"].includes(f.control) ? "select" : "input";
  const input = document.createElement(tag);
  input.id = `f-${f.name}`;
  input.name = f.name;
  input.dataset.control = f.control;
  input.title = f.help;
  const start = f.start !== undefined ? f.start : (f.main ? f.default : null);
  if (f.control === "tristate") {
    input.innerHTML = '<option value="">default (the stack\'s)</option><option value="true">on</option><option value="false">off</option>';
  } else if (f.control === "select") {
    const blank = f.main ? "" : `<option value="">default${f.default === null ? "" : ` (${esc(f.default)})`}</option>`;
    input.innerHTML = blank + f.choices.map((c) => `<option value="${esc(c)}">${esc(c)}</option>`).join("");
  } else if (f.control === "checkbox") {
    input.type = "checkbox";
    input.dataset.default = String(f.default);
    input.checked = f.default;
  } else {
    input.type = f.control === "number" ? "number" : "text";
    if (f.control === "number") {
      input.step = f.step;
      if (f.min !== undefined) input.min = f.min;
      if (f.max !== undefined) input.max = f.max;
      input.inputMode = f.step === 1 ? "numeric" : "decimal";
    }
    const shown = Array.isArray(f.default) ? f.default.join(", ") : f.default;
    input.placeholder = shown === null ? "default" : String(shown);
  }
  if (f.required) input.required = true;
  if (start !== null && f.control !== "checkbox") input.value = String(start);
  return input;
}

function fieldBlock(f) {
  const div = document.createElement("div");
  const input = control(f);
  div.className = `field ${f.control}${f.control === "list" || f.source || (f.control === "text" && !f.suggestions) ? " wide" : ""}`;
  const label = document.createElement("label");
  label.htmlFor = input.id;
  label.title = f.help;
  const unit = f.unit && !f.label.toLowerCase().includes(f.unit.toLowerCase()) ? f.unit : "";  // not "GPUs GPUs"
  label.innerHTML = `${esc(f.label)}${unit ? ` <small>${esc(unit)}</small>` : ""}`;
  if (f.control === "checkbox") label.prepend(input, " ");
  div.append(label);
  if (f.control !== "checkbox") div.append(input);
  if (f.source) div.dataset.source = f.source;
  const words = f.suggestions || (f.source === "models" ? [] : null);
  if (words) {
    const list = document.createElement("datalist");
    list.id = `list-${f.name}`;
    list.innerHTML = words.map((w) => `<option value="${esc(w)}">${esc(w)}</option>`).join("");
    input.setAttribute("list", list.id);
    div.append(list);
  }
  if (f.main) {
    const hint = document.createElement("div");
    hint.className = "hint";
    hint.textContent = f.help;
    div.append(hint);
  }
  const err = document.createElement("div");
  err.className = "err";
  err.id = `err-${f.name}`;
  div.append(err);
  return div;
}

/* The main fields above "Advanced", the others in one fieldset per group (the CLI's headings), in field order. */
function buildForm(fields) {
  FORM_FIELDS = fields;
  const groups = new Map();
  for (const f of fields) {
    if (f.main) { $("fields-main").append(fieldBlock(f)); continue; }
    if (!groups.has(f.group)) {
      const set = document.createElement("fieldset");
      set.dataset.group = f.group;
      set.innerHTML = `<legend>${esc(f.group)}</legend><div class="grid"></div>`;
      $("fields-advanced").append(set);
      groups.set(f.group, set.querySelector(".grid"));
    }
    groups.get(f.group).append(fieldBlock(f));
  }
  if ($("f-model")) $("f-model").closest(".field").after($("config-upload"));
  const dims = $("c-dim"), known = [...dims.options].map((o) => o.value);
  for (const f of fields.filter((x) => x.control === "select" && x.choices.length && !known.includes(x.name))) {
    dims.add(new Option(f.label, f.name));  // compare across any field with choices
  }
}

/* A value as the API should get it: numbers as numbers, booleans as booleans, lists as lists. */
function typed(el) {
  if (el.dataset.control === "checkbox") return el.checked;
  const raw = el.value.trim();
  if (el.dataset.control === "tristate") return raw === "true";
  if (el.dataset.control === "list") return raw.split(",").map((v) => v.trim()).filter((v) => v !== "");
  return NUMBER.test(raw) ? Number(raw) : raw;
}

/* Whether the control holds a value to send: not empty, a checkbox not at its default (the API's defaults apply). */
function given(el) {
  if (el.dataset.control === "checkbox") return String(el.checked) !== el.dataset.default;
  return el.value.trim() !== "";
}

function controls() {
  return $("job").querySelectorAll("input[name], select[name]");
}

/* The flat body of the form (fields left empty are left out: the API's defaults apply). */
function jobBody() {
  const body = {};
  for (const el of controls()) {
    if (given(el) && el.name !== "number_gpus") body[el.name] = typed(el);
  }
  return body;
}

function gpuCount() {
  const raw = $("f-number_gpus").value.trim().toLowerCase();
  return raw === "" || raw === "recommend" ? "recommend" : typed($("f-number_gpus"));
}

async function post(url, body) {
  let res;
  try {
    res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  } catch (err) {
    throw new Error(`the server could not be reached (${err.message})`);
  }
  const text = await res.text();
  let data = null;
  try { data = JSON.parse(text); } catch (_) { /* not JSON: reported below */ }
  if (res.status === 422 && data && Array.isArray(data.detail)) throw new InputError(data.detail);
  if (!res.ok || data === null) throw new Error(`${url} answered HTTP ${res.status}: ${text.slice(0, 300)}`);
  return data;
}

function clearErrors() {
  document.querySelectorAll(".err").forEach((el) => { el.textContent = ""; el.hidden = el.classList.contains("box"); });
  document.querySelectorAll(".invalid").forEach((el) => el.classList.remove("invalid"));
}

/* The message of each 422 entry beside its field (the last name in `loc` with an input), else in the form's box. */
function showInputErrors(detail, prefixes = ["f-"]) {
  for (const d of detail) {
    const names = (d.loc || []).filter((p) => typeof p === "string").reverse();
    let target = null, input = null;
    for (const name of names) {
      for (const prefix of prefixes) {
        if ($(prefix + name) && $("err-" + (prefix === "f-" ? "" : prefix) + name)) {
          input = $(prefix + name); target = $("err-" + (prefix === "f-" ? "" : prefix) + name); break;
        }
      }
      if (target) break;
    }
    const box = target || $("form-error");
    const line = document.createElement("div");
    line.className = "msg";
    line.textContent = target ? d.msg : `${(d.loc || []).join(".")}: ${d.msg}`;
    box.appendChild(line);
    if (Array.isArray(d.suggestions) && d.suggestions.length && input) box.appendChild(suggestionLinks(input, d.suggestions));
    box.hidden = false;
    if (input) input.classList.add("invalid");
  }
  const first = document.querySelector(".invalid");
  if (first && first.closest("details")) first.closest("details").open = true;
}

function suggestionLinks(input, names) {
  const span = document.createElement("div");
  span.className = "suggestions";
  span.append("did you mean: ");
  names.forEach((name) => {
    const a = document.createElement("button");
    a.type = "button"; a.className = "link"; a.textContent = name;
    a.addEventListener("click", () => { input.value = name; $("job").requestSubmit(); });
    span.append(a, " ");
  });
  return span;
}

function showFailure(err, status) {
  if (err instanceof InputError) {
    const prefixes = { "sweep-status": ["s-", "f-"], "compare-status": ["c-", "f-"] }[status.id] || ["f-"];
    showInputErrors(err.detail, prefixes);
    status.textContent = "The input needs a change: see the message beside the field.";
  } else {
    $("page-error").textContent = String(err.message || err);
    $("page-error").hidden = false;
    status.textContent = "No answer: see the message above.";
  }
}

function put(id, value, text) {
  const el = $(id);
  el.dataset.value = value === null || value === undefined ? "" : String(value);
  el.textContent = text;
}

function hours(seconds) {
  if (seconds < 3600) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(2)} h`;
}

function recText(rec) {
  if (!rec.can_recommend) return `none: ${rec.reason}`;
  return `${rec.number_gpus} GPU${rec.number_gpus > 1 ? "s" : ""} = ${rec.workers} worker${rec.workers > 1 ? "s" : ""} × ${rec.gpus} GPU${rec.gpus > 1 ? "s" : ""}`;
}

/* Fewest GPUs (always), then the estimate at the given count, or at the recommended one. */
async function answerFor(body, count) {
  const rec = (await post("/api/recommend", count === "recommend" ? body : { ...body, number_gpus: count })).results[0];
  const n = count === "recommend" ? (rec.can_recommend ? rec.number_gpus : 1) : count;
  const estBody = { ...body, number_gpus: n };
  const est = (await post("/api/estimate", estBody)).results[0];
  return { rec, est, estBody };
}

function renderAnswer({ rec, est, estBody }) {
  const m = est.memory, p = est.placement;
  $("answer-title").textContent = `${est.job.model} · ${est.job.method} · ${est.job.tokens_per_sample} tokens × batch ${est.job.batch_size}`;
  $("bar").innerHTML = stackedBar(m);
  put("out-total", m.total_memory_gib, m.total_memory_gib.toFixed(2));
  put("out-phase", m.peak_phase, m.peak_phase);
  put("out-capacity", m.capacity_gib, m.capacity_gib.toFixed(2));
  put("out-fits", m.fits, m.fits ? "yes" : "NO");
  $("out-fits").className = m.fits ? "good" : "bad";
  put("out-risk", m.oom_risk, m.oom_risk.toFixed(3));
  put("out-placement", p.number_gpus, `${p.number_gpus} × ${p.gpu_model} (${p.workers} worker${p.workers > 1 ? "s" : ""}, ${p.strategy})`);
  put("out-rec", rec.number_gpus, recText(rec));
  const tp = est.throughput, t = est.time, c = est.cost;
  put("out-tps", tp ? tp.tokens_per_second : null, tp ? Math.round(tp.tokens_per_second).toLocaleString("en-US") : "—");
  put("out-time", t ? t.time_seconds : null, t ? `${hours(t.time_seconds)} for ${t.tokens.toExponential(2)} tokens` : "— (give samples per epoch)");
  put("out-cost", c ? c.cost_usd : null, c ? `$${c.cost_usd.toFixed(2)} (${c.gpu_hours.toFixed(1)} GPU-h × $${c.price_per_gpu_hour_usd.toFixed(2)}, ${c.price_source})` : "—");
  put("out-estimator", est.estimator, est.estimator + (est.model_version ? ` ${est.model_version}` : ""));
  const notes = [...new Set([...(est.notes || []), ...(m.notes || []), ...(rec.notes || [])])];
  $("out-notes").innerHTML = notes.map((n) => `<li>${esc(n)}</li>`).join("");
  $("repro-cli").textContent = cliCommands(estBody);
  $("repro-curl").textContent = curlCommands(estBody);
  $("repro-body").textContent = JSON.stringify(estBody, null, 2);
  $("repro-link").href = $("repro-link").textContent = formLink();
  $("answer").hidden = false;
}

function shellQuote(value) {
  const text = String(value);
  return /^[\w@%+=:,./-]+$/.test(text) ? text : `'${text.replace(/'/g, "'\\''")}'`;
}

/* Fields `autoconf-gpu estimate` spells its own way (the VRAM-budget CLI's, docs/dialects.md); each other Job field
   is `--<field-name>` on both verbs, generated from the same metadata as this form (interfaces/cli/stack.py). */
const ESTIMATE_OWN = ["model", "gpu_model", "tokens_per_sample", "batch_size", "gradient_accumulation_steps", "method",
  "lora_r", "gradient_checkpointing"];
const RECOMMEND_OPTIONS = ["max_gpus", "gpus_per_node", "max_oom_risk"];

function flag(name, value) {
  const dashed = name.replace(/_/g, "-");
  if (value === true || value === false) return [value ? `--${dashed}` : `--no-${dashed}`];
  return [`--${dashed}`, ...(Array.isArray(value) ? value : [value]).map(shellQuote)];
}

function jobFields(b, skip) {
  return FORM_FIELDS.filter((f) => f.part === "job" && b[f.name] !== undefined && !skip.includes(f.name))
    .flatMap((f) => flag(f.name, b[f.name]));
}

/* `autoconf-gpu estimate` (per-device batch × dp × grad. accumulation = the global batch) and `recommend`. */
function cliCommands(b) {
  const est = b.estimator || "hybrid", ga = b.gradient_accumulation_steps || 1;
  const tp = b.tp || 1, pp = b.pp || 1, dp = Math.max(1, Math.floor(b.number_gpus / (tp * pp)));
  const perDevice = b.batch_size / (dp * ga);
  const e = ["autoconf-gpu estimate", "--model", shellQuote(b.model), "--gpu", shellQuote(b.gpu_model),
    "--seq-len", b.tokens_per_sample || 4096, "--dp", dp, "--estimator", est];
  if (Number.isInteger(perDevice)) e.push("--per-device-batch", perDevice);
  if (ga > 1) e.push("--grad-accum", ga);
  if (tp > 1) e.push("--tp", tp);
  if (pp > 1) e.push("--pp", pp);
  if (b.method === "lora" || b.method === "qlora") e.push(`--${b.method}`);
  if (b.lora_r) e.push("--lora-rank", b.lora_r);
  if (b.strategy) e.push("--strategy", shellQuote(b.strategy));
  if (b.offload && b.offload !== "none") e.push("--cpu-offload-optimizer", ...(b.offload === "optimizer+params" ? ["--cpu-offload-params"] : []));
  if (b.gradient_checkpointing === false) e.push("--no-grad-checkpoint");
  e.push(...jobFields(b, ESTIMATE_OWN));
  const r = ["autoconf-gpu recommend", "--gpu", shellQuote(b.gpu_model), ...jobFields(b, []), "--estimator", est];
  for (const key of RECOMMEND_OPTIONS) if (b[key] !== undefined) r.push(...flag(key, b[key]));
  const notes = [];
  if (!Number.isInteger(perDevice)) notes.push(`# batch ${b.batch_size} is not a multiple of dp × grad. accumulation: the CLI needs a per-device batch`);
  const left = FORM_FIELDS.filter((f) => f.part === "placement" && b[f.name] !== undefined
    && !["gpu_model", "number_gpus", "tp", "pp", "strategy", "offload"].includes(f.name)).map((f) => f.name);
  if (left.length) notes.push(`# not on the command line (send them in the REST body): ${left.join(", ")}`);
  return [...notes, e.join(" "), r.join(" ")].join("\n");
}

function curlCommands(body) {
  const json = shellQuote(JSON.stringify(body));
  const origin = window.location.origin;
  return `curl -s ${origin}/api/estimate -H 'content-type: application/json' -d ${json}\n`
    + `curl -s ${origin}/api/recommend -H 'content-type: application/json' -d ${json}`;
}

/* The form's non-empty fields as a URL fragment: a link that fills the form and answers again. */
function formLink() {
  const params = new URLSearchParams();
  for (const el of controls()) {
    if (given(el)) params.set(el.name, el.dataset.control === "checkbox" ? String(el.checked) : el.value.trim());
  }
  return `${window.location.origin}/#${params.toString()}`;
}

/* Fill the form from a link made by formLink(); true when the link named a model (then the page answers). */
function fillFromLink() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  for (const [name, value] of params) {
    const el = $("job").querySelector(`[name="${CSS.escape(name)}"]`);
    if (el && el.dataset.control === "checkbox") el.checked = value === "true";
    else if (el && el.type !== "file") el.value = value;
  }
  if ([...params.keys()].some((k) => k !== "model" && k !== "gpu_model" && $(`f-${k}`) && $(`f-${k}`).closest("details"))) {
    $("advanced").open = true;
  }
  return params.has("model");
}

async function onSubmit(event) {
  event.preventDefault();
  history.replaceState(null, "", formLink());
  showView("answer");
  clearErrors();
  const view = $("view-answer"), status = $("answer-status");
  view.dataset.state = "working";
  status.textContent = "Estimating…";
  try {
    renderAnswer(await answerFor(jobBody(), gpuCount()));
    status.textContent = "";
    view.dataset.state = "done";
  } catch (err) {
    $("answer").hidden = true;
    showFailure(err, status);
    view.dataset.state = "error";
  }
}

/* ---- comparison ------------------------------------------------------------------------------------ */
function compareValues() {
  return $("c-values").value.split(",").map((v) => v.trim()).filter((v) => v !== "").slice(0, 8);
}

async function runCompare() {
  clearErrors();
  const view = $("view-compare"), status = $("compare-status"), dim = $("c-dim").value;
  view.dataset.state = "working";
  status.textContent = "Comparing…";
  try {
    const base = jobBody(), count = gpuCount();
    const columns = [];
    for (const value of compareValues()) {
      const v = NUMBER.test(value) ? Number(value) : value;
      const body = dim === "number_gpus" ? base : { ...base, [dim]: v };
      columns.push({ label: value, ...(await variant(body, dim === "number_gpus" ? v : count, dim, value)) });
    }
    $("compare").innerHTML = compareTable(columns);
    status.textContent = `${columns.length} variants of the job, by ${$("c-dim").selectedOptions[0].text}.`;
    view.dataset.state = "done";
  } catch (err) {
    showFailure(err, status);
    view.dataset.state = "error";
  }
}

/* One column's answer; an error about the varied field goes beside the list of values, naming the value. */
async function variant(body, count, dim, value) {
  try {
    return await answerFor(body, count);
  } catch (err) {
    if (!(err instanceof InputError)) throw err;
    throw new InputError(err.detail.map((d) => ((d.loc || []).includes(dim)
      ? { ...d, loc: ["values"], msg: `${value}: ${d.msg}` } : d)));
  }
}

function compareTable(columns) {
  const top = Math.max(...columns.map((c) => Math.max(c.est.memory.total_memory_gib, c.est.memory.capacity_gib))) * 1.08;
  const rows = [
    ["placement", (c) => [c.est.placement.number_gpus, `${c.est.placement.number_gpus} × ${c.est.placement.gpu_model}`]],
    ["total", (c) => [c.est.memory.total_memory_gib, `${c.est.memory.total_memory_gib.toFixed(2)} GiB`]],
    ["capacity", (c) => [c.est.memory.capacity_gib, `${c.est.memory.capacity_gib.toFixed(2)} GiB`]],
    ["fits", (c) => [c.est.memory.fits, `${c.est.memory.fits ? "yes" : "NO"} · risk ${c.est.memory.oom_risk.toFixed(3)}`]],
    ["rec", (c) => [c.rec.number_gpus, recText(c.rec)]],
    ["tps", (c) => [c.est.throughput ? c.est.throughput.tokens_per_second : "", c.est.throughput ? Math.round(c.est.throughput.tokens_per_second).toLocaleString("en-US") : "—"]],
    ["time", (c) => [c.est.time ? c.est.time.time_seconds : "", c.est.time ? hours(c.est.time.time_seconds) : "—"]],
    ["cost", (c) => [c.est.cost ? c.est.cost.cost_usd : "", c.est.cost ? `$${c.est.cost.cost_usd.toFixed(2)}` : "—"]],
  ];
  const names = { placement: "Placement", total: "Peak per GPU", capacity: "Capacity", fits: "Fits", rec: "Fewest GPUs",
    tps: "Tokens/s", time: "Time", cost: "Cost" };
  let html = `<table class="compare"><tr><th></th>${columns.map((c) => `<th>${esc(c.label)}</th>`).join("")}</tr>`;
  html += `<tr><th>Memory</th>${columns.map((c) => `<td>${stackedBar(c.est.memory, { width: 190, compact: true, scaleMax: top })}</td>`).join("")}</tr>`;
  for (const [key, cell] of rows) {
    html += `<tr><th>${names[key]}</th>${columns.map((c, i) => {
      const [value, text] = cell(c);
      return `<td id="cmp-${i}-${key}" data-value="${esc(value)}">${esc(text)}</td>`;
    }).join("")}</tr>`;
  }
  return html + "</table>";
}

/* ---- sweep --------------------------------------------------------------------------------------- */
function listOf(id) {
  return $(id).value.split(",").map((v) => v.trim()).filter((v) => v !== "").map((v) => (NUMBER.test(v) ? Number(v) : v));
}

/* The form's job (every Job field it holds), GPU and sharding, the search's options, over the two axes. */
function sweepBody() {
  const b = jobBody();
  const body = {};
  for (const f of FORM_FIELDS) {
    const keep = f.part === "job" || ["gpu_model", "strategy", "estimator", "max_gpus", "gpus_per_node", "max_oom_risk"].includes(f.name);
    if (keep && b[f.name] !== undefined) body[f.name] = b[f.name];
  }
  return { ...body, tokens_per_sample: listOf("s-tokens_per_sample"), batch_size: listOf("s-batch_size") };
}

async function runSweep() {
  clearErrors();
  const view = $("view-sweep"), status = $("sweep-status");
  view.dataset.state = "working";
  status.textContent = "Sweeping…";
  try {
    const body = sweepBody();
    const data = await post("/api/sweep", body);
    $("heatmap").innerHTML = heatmap(data);
    $("sweep-repro").textContent = `curl -s ${window.location.origin}/api/sweep -H 'content-type: application/json' -d ${shellQuote(JSON.stringify(body))}`;
    status.textContent = `${body.model} · ${body.method || "full"} on ${body.gpu_model} (estimator ${data.estimator}): fewest GPUs per cell.`;
    view.dataset.state = "done";
  } catch (err) {
    showFailure(err, status);
    view.dataset.state = "error";
  }
}

/* ---- set-up -------------------------------------------------------------------------------------- */
function showView(name) {
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.view === name);
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== `view-${name}`;
}

function setCompareDefaults() {
  const dim = $("c-dim").value;
  const field = FORM_FIELDS.find((f) => f.name === dim && f.choices && f.choices.length);
  if (field) {
    $("c-values").value = field.choices.join(", ");
  } else if (dim === "gpu_model") {
    const known = [...$("f-gpu_model").options].map((o) => o.value);
    $("c-values").value = PREFERRED_GPUS.filter((g) => known.includes(g)).slice(0, 3).join(", ") || known.slice(0, 3).join(", ");
  } else {
    $("c-values").value = COMPARE_DEFAULTS[dim];
  }
}

/* The form from /api/form, then the catalogue's names into the controls whose field names a source. */
async function loadForm() {
  const json = (url) => fetch(url).then((r) => (r.ok ? r.json() : Promise.reject(new Error(`${url} answered HTTP ${r.status}`))));
  try {
    buildForm((await json("/api/form")).fields);
    const [models, gpus] = await Promise.all([json("/api/models"), json("/api/gpus")]);
    const names = models.models.flatMap((m) => [m.name, ...m.aliases]);
    for (const list of document.querySelectorAll('[data-source="models"] datalist')) {
      list.innerHTML = [...new Set(names)].map((n) => `<option value="${esc(n)}">`).join("");
    }
    for (const select of document.querySelectorAll('[data-source="gpus"] select')) {
      const preferred = PREFERRED_GPUS.find((g) => gpus.gpus.some((x) => x.name === g));
      select.innerHTML = gpus.gpus.map((g) => `<option value="${esc(g.name)}">${esc(g.name)} (${g.memory_gib.toFixed(0)} GiB)</option>`).join("");
      select.value = preferred || gpus.gpus[0].name;
    }
  } catch (err) {
    $("page-error").textContent = `The form or the catalogue could not be loaded: ${err.message}`;
    $("page-error").hidden = false;
  }
  setCompareDefaults();
  document.body.dataset.ready = "1";
  if (fillFromLink()) $("job").requestSubmit();
}

async function onConfigFile() {
  clearErrors();
  const file = $("f-config").files[0];
  if (!file) return;
  try {
    const res = await fetch("/api/config", { method: "POST", headers: { "content-type": "application/json" }, body: await file.text() });
    const data = await res.json();
    if (res.status === 422) throw new InputError(data.detail);
    if (!res.ok) throw new Error(`/api/config answered HTTP ${res.status}`);
    $("f-model").value = data.model;
    $("config-info").textContent = `${file.name}: ${data.model_type}, ${(data.total_params / 1e9).toFixed(2)} B parameters`;
  } catch (err) {
    showFailure(err, $("answer-status"));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("job").addEventListener("submit", onSubmit);
  $("c-run").addEventListener("click", () => { showView("compare"); runCompare(); });
  $("s-run").addEventListener("click", () => { showView("sweep"); runSweep(); });
  $("c-dim").addEventListener("change", setCompareDefaults);
  $("f-config").addEventListener("change", onConfigFile);
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showView(tab.dataset.view));
  window.addEventListener("error", (e) => { $("page-error").textContent = `Page error: ${e.message}`; $("page-error").hidden = false; });
  loadForm();
});
