// omni-decide workbench: Ask (media + questions -> probability bars), Review (a queue, most uncertain first; labels
// saved as they are given), Report (an `omni eval` report). Plain ES modules, no dependencies, no external URLs.
// Talks to the server only through its public API (/v1/systemone, /v1/models, /v1/review/...), with the API key the
// user typed once (kept in localStorage) when the server asks for one.

import { $, el, pct, when } from "./dom.js";
import * as team from "./team.js";
import * as evidence from "./evidence.js";
import * as appeals from "./appeals.js";

const KEY_STORE = "omni.apiKey";

// ------------------------------------------------------------------------------------------------ API + key
async function api(path, options = {}, retried = false) {
  const headers = new Headers(options.headers || {});
  const key = localStorage.getItem(KEY_STORE);
  if (key) headers.set("Authorization", `Bearer ${key}`);
  const name = team.storedName();          // who labels and comments when the server has no keys (ignored with keys)
  if (name) headers.set("X-Omni-Reviewer", encodeURIComponent(name));   // any script: header values are Latin-1
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401 && !retried && (await askForKey())) return api(path, options, true);
  return response;
}

async function json(path, options) {
  const response = await api(path, options);
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

class ApiError extends Error {
  constructor(status, body) {
    super(describe(status, body));
    this.status = status;
    this.body = body;
  }
}

function describe(status, body) {
  const detail = body && body.detail;
  if (Array.isArray(detail)) return detail.map((d) => `${(d.loc || []).slice(1).join(".") || "request"}: ${d.msg}`).join("\n");
  if (detail && detail.message) return `${status}: ${detail.message}`;
  return `the server answered ${status}`;
}

function askForKey() {
  const dialog = $("#key-dialog");
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const key = $("#key-input").value.trim();
      if (dialog.returnValue === "save" && key) {
        localStorage.setItem(KEY_STORE, key);
        resolve(true);
      } else resolve(false);
    }, { once: true });
    $("#key-input").value = "";
    dialog.showModal();
  });
}

async function blobUrl(path) {
  const response = await api(path);
  if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
  return URL.createObjectURL(await response.blob());
}

// ------------------------------------------------------------------------------------------------ tabs
function setupTabs() {
  const tabs = [...document.querySelectorAll("[role=tab]")];
  // `record`: a tab the reviewer chose gets its own history entry (the back button returns to the one before);
  // a tab shown because the address changed (a typed #hash, back, forward) only follows it.
  const show = (tab, record = true) => {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      $(`#${t.getAttribute("aria-controls")}`).hidden = !on;
    }
    if (record) tab.focus();
    if (tab.id === "tab-review") {
      if (record) review.open().then(() => review.record(false));
      else review.follow();                // the address names a queue, filters, an item: show them
    }
    if (tab.id === "tab-report") report.open();
    const hash = `#${tab.getAttribute("aria-controls")}`;
    if (record && location.hash !== hash) history.pushState(null, "", hash);
  };
  const fromAddress = () => tabs.find((t) => `#${t.getAttribute("aria-controls")}` === location.hash.split(/[/?]/)[0])
    || (location.hash ? null : tabs[0]);
  const follow = () => { const tab = fromAddress(); if (tab) show(tab, false); };
  window.addEventListener("hashchange", follow);
  window.addEventListener("popstate", follow);
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => show(tab));
    tab.addEventListener("keydown", (e) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
      if (step) { e.preventDefault(); show(tabs[(i + step + tabs.length) % tabs.length]); }
    });
  });
  const start = fromAddress();
  if (start && location.hash) show(start, false);
}

// ------------------------------------------------------------------------------------------------ Ask: media
const SLOT_OF = { image: "images", audio: "audio", video: "videos" };
const EXT_KIND = { png: "image", jpg: "image", jpeg: "image", webp: "image", gif: "image", bmp: "image",
  wav: "audio", mp3: "audio", flac: "audio", ogg: "audio", m4a: "audio", aac: "audio",
  mp4: "video", webm: "video", mov: "video", mkv: "video" };
const LIMIT_OF = { images: "images", audio: "audio", videos: "videos" };
const ask = { media: [], limits: null };

function kindOf(file) {
  const major = (file.type || "").split("/")[0];
  if (SLOT_OF[major]) return major;
  return EXT_KIND[(file.name.split(".").pop() || "").toLowerCase()] || null;
}

function addFiles(files) {
  for (const file of files) {
    const kind = kindOf(file);
    ask.media.push({ file, kind, slot: kind ? SLOT_OF[kind] : null, url: URL.createObjectURL(file), error: "" });
  }
  checkMediaLimits();
  renderMedia();
}

function checkMediaLimits() {
  const seen = { images: 0, audio: 0, videos: 0 };
  const limits = ask.limits || {};
  for (const m of ask.media) {
    m.error = "";
    if (!m.slot) { m.error = "not a photo, audio clip or video this page knows (png, jpeg, webp, gif, bmp, wav, mp3, flac, ogg, mp4, webm)"; continue; }
    seen[m.slot] += 1;
    const most = limits[LIMIT_OF[m.slot]];
    if (most !== undefined && seen[m.slot] > most) m.error = `at most ${most} ${m.slot} per request (this server's limit)`;
    const bytes = limits[{ images: "image_bytes", audio: "audio_bytes", videos: "video_bytes" }[m.slot]];
    if (bytes && m.file.size > bytes) m.error = `${(m.file.size / 1048576).toFixed(1)} MiB is over this server's ${(bytes / 1048576).toFixed(0)} MiB limit for one ${m.kind}`;
  }
}

function renderMedia() {
  const list = $("#media-list");
  list.replaceChildren();
  const index = { images: 0, audio: 0, videos: 0 };
  ask.media.forEach((m, i) => {
    m.place = m.slot ? `${m.slot}[${index[m.slot]++}]` : null;
    const preview = m.kind === "image" ? el("img", { src: m.url, alt: `preview of ${m.file.name}` })
      : m.kind === "audio" ? el("audio", { src: m.url, controls: true, "aria-label": `play ${m.file.name}` })
      : m.kind === "video" ? el("video", { src: m.url, controls: true, "aria-label": `play ${m.file.name}` }) : null;
    list.append(el("li", { class: `media-card${m.error ? " failed" : ""}`, "data-place": m.place || "" },
      el("span", { class: "name", text: `${m.place || "?"} · ${m.file.name} · ${(m.file.size / 1024).toFixed(0)} KiB` }),
      el("button", { type: "button", "aria-label": `remove ${m.file.name}`, text: "Remove",
        onclick: () => { URL.revokeObjectURL(m.url); ask.media.splice(i, 1); checkMediaLimits(); renderMedia(); } }),
      preview ? el("div", { class: "preview" }, preview) : null,
      el("p", { class: "error media-error", role: "alert", text: m.error })));
  });
}

function setupDrop() {
  const drop = $("#drop");
  $("#files").addEventListener("change", (e) => { addFiles(e.target.files); e.target.value = ""; });
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); addFiles(e.dataTransfer.files); });
}

// ------------------------------------------------------------------------------------------------ Ask: questions
const PRESETS = {
  inspection: {
    state: "Review the installation: a photo of the unit, an audio recording of it running, and a video of the fan.",
    questions: {
      label_visible: { type: "noul", instructions: "Is the model and serial number label visible in the photo?" },
      sounds_normal: { type: "noul", instructions: "Does the unit sound like it is running smoothly, without rattling or grinding?" },
      fan_running: { type: "noul", instructions: "Is the fan running in the video?" },
      severity: { type: "score", instructions: "How severe is any fault?", criteria: ["none", "minor", "major"] },
      next_step: { type: "choice", instructions: "What should happen next?",
        criteria: { ship: "The unit passes inspection", rework: "Fix and re-inspect", scrap: null } },
    },
  },
  moderation: {
    state: "A user post with its attachments, as submitted.",
    questions: {
      allowed: { type: "noul", instructions: "Is this post allowed under the community guidelines?" },
      category: { type: "choice", instructions: "What kind of problem does it have, if any?",
        criteria: { none: "No problem", spam: "Spam or scam", harassment: "Harassment or hate", violence: "Violence or threats", adult: "Adult content" } },
      severity: { type: "score", instructions: "How severe is the problem?", criteria: ["none", "low", "medium", "high"] },
    },
  },
};

function questionCard(id = "", q = { type: "noul" }) {
  const type = el("select", { "aria-label": "type" },
    ["noul", "choice", "score"].map((t) => el("option", { value: t, text: t, selected: t === q.type })));
  const criteria = q.type === "choice" ? Object.entries(q.criteria || {}).map(([k, v]) => (v === null ? k : `${k}: ${v}`)).join("\n")
    : q.type === "score" ? (q.criteria || []).join("\n") : "";
  const options = el("textarea", { rows: 3, "aria-label": "answers", class: "criteria", placeholder: "" });
  options.value = criteria;
  const hint = el("p", { class: "hint criteria-hint" });
  const sync = () => {
    const t = type.value;
    options.hidden = t === "noul";
    hint.textContent = t === "choice" ? "One answer per line: id, or id: description" : t === "score" ? "One level per line, lowest first" : "Answers: true / false";
  };
  type.addEventListener("change", sync);
  const instructions = el("textarea", { rows: 2, "aria-label": "instructions", class: "instructions", placeholder: "The question, in words" });
  instructions.value = typeof q.instructions === "string" ? q.instructions : q.instructions ? JSON.stringify(q.instructions) : "";
  const card = el("li", { class: "question" },
    el("div", { class: "row" },
      el("input", { type: "text", value: id, "aria-label": "question id", class: "qid", placeholder: "question_id" }), type,
      el("button", { type: "button", text: "Remove", "aria-label": `remove question ${id}`, onclick: () => card.remove() })),
    instructions, options, hint);
  sync();
  return card;
}

function questionsFromEditor() {
  const questions = {};
  for (const card of document.querySelectorAll("#questions .question")) {
    const id = $(".qid", card).value.trim();
    const type = $("select", card).value;
    const q = { type };
    const instructions = $(".instructions", card).value.trim();
    if (instructions) q.instructions = instructions;
    const lines = $(".criteria", card).value.split("\n").map((l) => l.trim()).filter(Boolean);
    if (type === "choice") q.criteria = Object.fromEntries(lines.map((l) => {
      const at = l.indexOf(":");
      return at < 0 ? [l, null] : [l.slice(0, at).trim(), l.slice(at + 1).trim() || null];
    }));
    if (type === "score") q.criteria = lines;
    if (id) questions[id] = q;
  }
  return questions;
}

function loadQuestions(questions) {
  $("#questions").replaceChildren(...Object.entries(questions || {}).map(([id, q]) => questionCard(id, q)));
}

function currentRequest() {
  if (!$("#raw-editor").hidden) {
    const raw = JSON.parse($("#raw-json").value);   // SyntaxError: shown by the caller
    return raw;
  }
  const text = $("#state").value;
  let state = text;
  if (/^\s*[{[]/.test(text)) { try { state = JSON.parse(text); } catch { state = text; } }
  const model = $("#ask-model").value;
  return { state, questions: questionsFromEditor(), ...(model && model !== ask.baseModel ? { model } : {}) };
}

function toggleRaw() {
  const button = $("#toggle-raw");
  const toRaw = $("#raw-editor").hidden;
  $("#raw-error").textContent = "";
  if (toRaw) {
    $("#raw-json").value = JSON.stringify(currentRequest(), null, 2);
  } else {
    let raw;
    try { raw = JSON.parse($("#raw-json").value); } catch (e) { $("#raw-error").textContent = `not valid JSON: ${e.message}`; return; }
    $("#state").value = typeof raw.state === "string" ? raw.state : JSON.stringify(raw.state ?? "", null, 2);
    loadQuestions(raw.questions);
  }
  $("#raw-editor").hidden = !toRaw;
  $("#question-editor").hidden = toRaw;
  button.setAttribute("aria-pressed", String(toRaw));
}

// ------------------------------------------------------------------------------------------------ Ask: submit
async function submitAsk(event) {
  event.preventDefault();
  $("#ask-error").textContent = "";
  let body;
  try { body = currentRequest(); } catch (e) { $("#ask-error").textContent = `the raw JSON is not valid: ${e.message}`; return; }
  checkMediaLimits();
  renderMedia();
  if (ask.media.some((m) => m.error)) { $("#ask-error").textContent = "fix or remove the files marked above"; return; }
  if ($("#ask-evidence").checked && body.x_evidence === undefined) body.x_evidence = true;
  const form = new FormData();
  form.append("request", new Blob([JSON.stringify(body)], { type: "application/json" }), "request.json");
  const sent = { images: [], audio: [], videos: [] };     // the evidence is drawn over the files as they were sent
  for (const m of ask.media) { form.append(m.slot, m.file, m.file.name); sent[m.slot].push(m.file); }
  const button = $("#ask-button");
  button.disabled = true;
  $("#ask-status").textContent = "asking…";
  const started = performance.now();
  try {
    const response = await api("/v1/systemone", { method: "POST", body: form });
    const answer = await response.json().catch(() => null);
    if (!response.ok) { showAskError(response.status, answer); markStale(); return; }
    $("#answers").classList.remove("stale");
    renderAnswers(body.questions || {}, answer);
    renderDetails(answer, response.headers.get("server-timing") || "");
    evidence.render($("#evidence"), answer.x_evidence, { state: body.state, source: (slot, i) => sent[slot][i] });
    const top = $("#answers").getBoundingClientRect().top;
    if (top < 0 || top > window.innerHeight * 0.8) $("#answers").scrollIntoView({ block: "start" });   // one column
    const by = answer.model && answer.model !== ask.baseModel ? ` by ${answer.model}` : "";
    $("#ask-status").textContent = `answered${by} in ${((performance.now() - started) / 1000).toFixed(2)} s · request ${response.headers.get("x-request-id") || ""}`;
  } catch (e) {
    $("#ask-error").textContent = `the request failed: ${e.message}`;
    markStale();
  } finally {
    button.disabled = false;
    if ($("#ask-status").textContent === "asking…") $("#ask-status").textContent = "";
  }
}

// After a failed Ask the answers on screen belong to the request before: say so, on the page and to screen readers.
function markStale() {
  const answers = $("#answers");
  if (!answers.querySelector(".answer") || answers.classList.contains("stale")) return;
  answers.classList.add("stale");
  answers.prepend(el("p", { class: "stale-note", role: "status", text: "Out of date: these answers are for the previous request, not the one that failed." }));
}

function showAskError(status, body) {
  const detail = body && body.detail;
  const general = [];
  if (Array.isArray(detail)) {
    for (const d of detail) {
      const loc = (d.loc || []).slice(1);
      const card = loc.length >= 2 ? document.querySelector(`.media-card[data-place="${loc[0]}[${loc[1]}]"]`) : null;
      if (card) { card.classList.add("failed"); $(".media-error", card).textContent = d.msg; } else general.push(`${loc.join(".") || "request"}: ${d.msg}`);
    }
  } else general.push(describe(status, body));
  $("#ask-error").textContent = general.join("\n") || `the server refused a file (${status}): see the file marked above`;
  $("#ask-status").textContent = "";
}

function optionsOf(question, answer) {
  if (answer.type === "noul") return [["true", answer.noul], ["false", 1 - answer.noul]];
  const labels = question.type === "score" ? (question.criteria || []) : [];
  return Object.entries(answer.probabilities || {}).map(([id, p]) => [id, p, labels[Number(id)]]);
}

function answerCard(id, question, answer) {
  const options = optionsOf(question || {}, answer);
  const best = Math.max(...options.map((o) => o[1]));
  const confidence = answer.confidence ?? best;
  const extra = answer.type === "score" ? ` · score ${answer.score}` : answer.type === "choice" ? ` · ${answer.choice}` : "";
  return el("article", { class: "answer", "data-question": id },
    el("h3", {}, el("span", { text: id }), el("span", { class: "confidence", text: `confidence ${pct(confidence)}${extra}` })),
    options.map(([option, p, level]) => el("div", { class: `bar${p === best ? " best" : ""}`, "data-question": id, "data-option": option, "data-probability": String(p) },
      el("span", { class: "label", text: level ? `${option} · ${level}` : option }),
      el("span", { class: "track", role: "meter", "aria-valuemin": "0", "aria-valuemax": "1", "aria-valuenow": String(p), "aria-label": `${id}: ${option}` },
        el("span", { class: "fill", style: { width: `${(100 * p).toFixed(2)}%` } })),
      el("span", { class: "value", text: pct(p) }))));
}

function renderAnswers(questions, response) {
  const cards = Object.entries(response.answers || {}).map(([id, answer]) => answerCard(id, questions[id], answer));
  $("#answers").replaceChildren(...cards);
}

function renderDetails(response, serverTiming) {
  const usage = response.x_usage || {};
  $("#tokens").replaceChildren(...Object.entries(usage).map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { class: "num", text: String(v) }))),
    el("tr", {}, el("th", { text: "total" }), el("td", { class: "num", text: String((response.usage || {}).input_tokens ?? "") })));
  const rows = serverTiming.split(",").map((s) => s.trim()).filter(Boolean).map((entry) => {
    const [name, ...params] = entry.split(";").map((s) => s.trim());
    const dur = params.find((p) => p.startsWith("dur="));
    const desc = params.find((p) => p.startsWith("desc="));
    return el("tr", { "data-timing": name }, el("th", { text: name }),
      el("td", { class: "num", text: dur ? `${Number(dur.slice(4)).toFixed(1)} ms` : desc ? desc.slice(5).replaceAll('"', "") : "" }));
  });
  $("#timings").replaceChildren(...rows);
  $("#ask-details").hidden = false;
}

// ------------------------------------------------------------------------------------------------ Review
const review = {
  queues: [], queue: null, items: [], index: -1, item: null, question: 0, opened: null, urls: [],
  undoStack: [],             // the page's own actions, newest last: {event, queue, key, what}
  // the newest list load and the newest item load: an older one still in flight is dropped when it returns
  // (a new list supersedes an item still loading; an item does not supersede a list: back/forward fire both
  // popstate and hashchange, and the second follow shows the item while the first one's list loads)
  listTurn: 0, itemTurn: 0,
  maxCommentChars: null,

  open() {
    if (!this.opened) this.opened = (async () => {
      await ensureName();
      await this.loadQueues(team.parseReviewHash(location.hash));
      await appeals.load($("#appeals"), json);         // the appeals queue, when the server keeps appeals
    })();
    return this.opened;
  },

  // The address changed (typed, back, forward): show the queue, filters and item it names.
  async follow() {
    await this.open();
    const view = team.parseReviewHash(location.hash);
    if (!view) return;
    const sameList = (!view.queue || view.queue === this.queue) && view.params.toString() === this.viewParams().toString();
    if (!sameList) {
      if (view.queue && [...$("#queue").options].some((o) => o.value === view.queue)) $("#queue").value = view.queue;
      this.applyParams(view.params);
      await this.loadItems(view.key || null, false);
    } else if (view.key && (!this.item || this.item.key !== view.key)) {
      const at = this.items.findIndex((it) => it.key === view.key);
      if (at >= 0) await this.show(at, false);
      else await this.loadItems(view.key, false);
    }
  },

  viewParams() {
    const params = new URLSearchParams();
    if ($("#order").value !== "confidence") params.set("order", $("#order").value);
    if ($("#threshold").value && Number($("#threshold").value) !== 0.9) params.set("threshold", $("#threshold").value);
    if ($("#show-done").checked) params.set("done", "1");
    for (const [k, v] of team.readFilters()) params.set(k, v);
    return params;
  },

  applyParams(params) {
    $("#order").value = params.get("order") || "confidence";
    $("#threshold").value = params.get("threshold") || "0.9";
    $("#show-done").checked = params.get("done") === "1";
    team.writeFilters(params);
    const active = team.readFilters();
    $("#filter-summary").textContent = [...active].map(([k, v]) => `${k.replace("_", " ")}: ${v}`).join(" · ");
    if ([...active].length) $("#filters").open = true;
  },

  // This view's address: a new history entry for a step the reviewer took (push), else the current one replaced.
  record(push) {
    if ($("#review").hidden) return;
    const hash = team.reviewHash(this.queue, this.item && this.item.key, this.viewParams());
    if (location.hash !== hash) history[push ? "pushState" : "replaceState"](null, "", hash);
  },

  async loadQueues(view = null) {
    $("#review-error").textContent = "";
    try {
      this.queues = (await json("/v1/review/queues")).queues;
    } catch (e) { $("#review-error").textContent = e.message; return; }
    $("#queue").replaceChildren(...this.queues.map((q) => el("option", { value: q.id, text: queueLabel(q) })));
    if (view && view.queue && this.queues.some((q) => q.id === view.queue)) $("#queue").value = view.queue;
    if (view) this.applyParams(view.params);
    if (this.queues.length) await this.loadItems(view ? view.key || null : null, false);
    else $("#item").replaceChildren(el("p", { class: "hint", text: "No queues: start the server with --review-dir (and --review-batches)." }));
  },

  async refreshCounts() {
    let queues;
    try { queues = (await json("/v1/review/queues")).queues; } catch { return; }   // the next Reload says why
    this.queues = queues;
    for (const q of queues) {
      const option = [...$("#queue").options].find((o) => o.value === q.id);
      if (option) option.textContent = queueLabel(q);
      else $("#queue").append(el("option", { value: q.id, text: queueLabel(q) }));   // e.g. disagreements, once they exist
    }
  },

  async loadItems(keepKey = null, push = true) {
    const turn = ++this.listTurn;
    this.itemTurn += 1;
    const changed = this.queue !== $("#queue").value;
    this.queue = $("#queue").value;
    $("#review-error").textContent = "";
    renderFailures((this.queues || []).find((q) => q.id === this.queue));
    if (changed) this.loadGuidelines();
    const filters = team.readFilters();
    $("#filter-summary").textContent = [...filters].map(([k, v]) => `${k.replace("_", " ")}: ${v}`).join(" · ");
    const params = new URLSearchParams({ order: $("#order").value, threshold: $("#threshold").value || "0.9" });
    for (const [k, v] of filters) params.set(k, v);
    try {
      this.items = (await json(`/v1/review/queues/${encodeURIComponent(this.queue)}/items?${params}`)).items;
    } catch (e) {
      if (turn !== this.listTurn) return;
      $("#review-error").textContent = e.message; this.items = []; this.renderList(); return;
    }
    if (turn !== this.listTurn) return;      // a newer address or filter was followed while this list loaded
    const isDone = (it) => (it.state ? it.state === "done" : it.labelled >= it.questions);
    // an item in the disagreements queue is done by its k reviewers and waits for a decision: never hidden as done
    if (!$("#show-done").checked && !filters.get("state") && this.queue !== "disagreements") this.items = this.items.filter((it) => !isDone(it) || it.key === keepKey);
    this.index = -1;
    this.renderList();
    const at = keepKey ? this.items.findIndex((it) => it.key === keepKey) : -1;
    if (this.items.length) await this.show(at >= 0 ? at : 0, push);
    else {
      this.item = null;
      $("#item").replaceChildren(el("p", { class: "hint", text: filters.toString() ? "No item matches these filters." : "Nothing left to review in this queue." }));
      this.record(push);
    }
  },

  async loadGuidelines() {
    const aside = $("#guidelines");
    let data = null;
    try { data = await json(`/v1/review/queues/${encodeURIComponent(this.queue)}/guidelines`); } catch { data = null; }
    const html = data && data.html ? data.html : "";
    $("#guidelines-body").replaceChildren(...(html ? team.guidelinesNodes(html) : []));
    aside.hidden = !html;
    $(".columns.review").classList.toggle("with-guidelines", Boolean(html));
  },

  renderList() {
    $("#items").replaceChildren(...this.items.map((it, i) => el("li", {},
      // after a click the item has the focus, so Enter accepts the model's answer instead of opening the item again;
      // the item loads in the keys' queue, so a key pressed while it loads acts on it once it is shown
      el("button", { type: "button", "data-key": it.key, "aria-current": String(i === this.index),
        onclick: () => {
          $("#item").focus({ preventScroll: true });
          this.enqueue(() => this.show(i));
        } },
        el("span", { class: "conf", text: pct(it.confidence) }),
        el("span", { class: (it.state ? it.state === "done" : it.labelled >= it.questions) ? "done" : "", text: `${it.labelled}/${it.questions} labelled${it.flagged ? " · flagged" : ""}${it.skipped ? " · skipped" : ""}` }),
        el("span", { class: "preview", text: it.preview })))));
  },

  async show(index, push = true) {
    const turn = ++this.itemTurn;
    this.index = index;
    const key = this.items[index].key;
    for (const b of document.querySelectorAll("#items button")) b.setAttribute("aria-current", String(b.dataset.key === key));
    let item;
    try {
      item = await json(this.itemPath(key));
    } catch (e) { if (turn === this.itemTurn) $("#review-error").textContent = e.message; return; }
    if (turn !== this.itemTurn) return;      // another item or list was asked for while this one loaded
    this.item = item;
    for (const url of this.urls) URL.revokeObjectURL(url);
    this.urls = [];
    const firstOpen = this.item.questions.findIndex((q) => !(q.id in this.item.labels));
    this.question = firstOpen >= 0 ? firstOpen : 0;
    await this.renderItem();
    if (turn !== this.itemTurn) return;
    team.suggest(this.item);
    this.record(push);
  },

  itemPath(key, queue = this.queue) {
    return `/v1/review/queues/${encodeURIComponent(queue)}/items/${encodeURIComponent(key)}`;
  },

  async renderItem() {
    const item = this.item;
    const media = el("div", { class: "media" });
    const inSlot = {};                       // an item's media are numbered within their slot: images[0], audio[0]
    const urls = {};                         // and drawn again under their evidence, when the item has some
    const shield = item.shield || null;      // wellness: these media stay blurred, grey and muted until revealed
    for (const m of item.media) {
      const path = `${this.itemPath(item.key)}/media/${m.index}`;
      const label = `${m.slot}[${inSlot[m.slot] = (inSlot[m.slot] ?? -1) + 1}]`;
      const shielded = !!shield && shield.media.includes(m.index) && !shield.revealed.includes(m.index);
      const holder = el("figure", { "data-media": label, "data-index": String(m.index), class: shielded ? "shielded" : "" });
      media.append(holder);
      if (shielded) {
        holder.append(el("button", { type: "button", class: "reveal", onclick: () => this.enqueue(() => this.reveal(m.index)) },
          `Reveal ${label} `, el("kbd", { text: "v" })));
      }
      (urls[label] = blobUrl(path)).then((url) => {
        this.urls.push(url);
        const shown = m.kind === "image" ? el("img", { src: url, alt: label })
          : el(m.kind === "video" ? "video" : "audio", { src: url, controls: true, preload: "metadata", "aria-label": `play ${label}` });
        if (shielded && m.kind !== "image") shown.muted = true;
        holder.prepend(shown);
      }).catch((e) => holder.append(el("p", { class: "error", text: e.message })));
    }
    const state = typeof item.state === "string" ? item.state : JSON.stringify(item.state, null, 2);
    $("#item").replaceChildren(...[   // replaceChildren writes a null as the text "null": left out
      el("h2", { class: "panel-title", text: `Item ${item.key} · confidence ${pct(item.confidence)}` }),
      shield ? el("p", { class: "shield-note", id: "exposure" }, exposureText(shield.exposure)) : null,
      item.reasons && item.reasons.length ? el("p", { class: "reasons", "data-reasons": "" },
        `Sent to review by the policy: ${item.reasons.map((r) => r.bank ? `hash bank ${r.bank}: ${r.label} (${r.medium}, ${r.distance} bits)`
          : r.reason ? `${r.question} (${r.reason})`
          : `${r.question}: confidence ${pct(r.confidence)} below ${pct(r.auto_at)}`).join("; ")}`) : null,
      item.media.length ? media : null,
      el("div", { class: "state", text: state }),
      el("section", { id: "item-evidence", class: "evidence", "aria-labelledby": "item-evidence-title", hidden: true }),
      el("div", { id: "item-questions" }),
      el("div", { id: "item-trail" })].filter((child) => child !== null));
    evidence.render($("#item-evidence"), item.evidence, { state: item.state, source: (slot, i) => urls[`${slot}[${i}]`] });
    this.renderAnswers();
    this.renderTrail();
    // a new item starts at its title and media: scrolling only to its first question (as highlight does) would
    // leave what the reviewer judges above the screen
    this.highlight(false);
    if ($("#item").getBoundingClientRect().top < 0) $("#item").scrollIntoView({ block: "start" });
  },

  // Wellness: reveal one shielded medium of the current item (the server counts it; past the daily limit it says no).
  async reveal(index) {
    if (!this.item) return;
    const holder = index === undefined ? document.querySelector("#item figure.shielded")
      : document.querySelector(`#item figure.shielded[data-index="${index}"]`);
    if (!holder) return;
    const at = Number(holder.dataset.index);
    let body;
    try {
      body = await json(`${this.itemPath(this.item.key)}/media/${at}/reveal`, { method: "POST" });
    } catch (e) { $("#review-error").textContent = e.message; return; }
    holder.classList.remove("shielded");
    const button = $(".reveal", holder);
    if (button) button.remove();
    const player = holder.querySelector("audio, video");
    if (player) player.muted = false;
    this.item.shield.revealed.push(at);
    if (body.exposure && $("#exposure")) $("#exposure").textContent = exposureText(body.exposure);
    this.say(`Revealed ${holder.dataset.media}`);
  },

  renderAnswers() {
    $("#item-questions").replaceChildren(...this.item.questions.map((q, qi) => this.questionBlock(q, qi)));
  },

  // What the team left on this item: skip / flag / undo, flags, comments, the history of its labels.
  renderTrail() {
    const item = this.item;
    const flag = team.flagForm((reason) => this.flag(reason));
    $("#item-trail").replaceChildren(...[
      el("div", { class: "row item-actions", role: "group", "aria-label": "this item" },
        el("button", { type: "button", id: "skip-button", onclick: () => this.skip() }, "Skip ", el("kbd", { text: "s" })),
        el("button", { type: "button", id: "flag-button", "aria-expanded": "false", onclick: () => this.openFlag() }, "Flag… ", el("kbd", { text: "f" })),
        el("button", { type: "button", id: "undo-button", disabled: !this.undoStack.length, onclick: () => this.undo() }, "Undo ", el("kbd", { text: "Ctrl+Z" })),
        el("span", { id: "item-status", class: "status", role: "status" })),
      flag,
      team.flagsBlock(item),
      team.commentsBlock(item, (text) => this.comment(text), this.maxCommentChars),
      team.historyBlock(item)].filter((child) => child !== null));
  },

  questionBlock(q, qi) {
    const answer = answerOf(this.item, q.id);
    const probs = Object.fromEntries(optionsOf({ type: q.type, criteria: q.options.map((o) => o.description) }, answer).map(([id, p]) => [id, p]));
    const saved = this.item.labels[q.id];
    const by = ((this.item.labelled_by || {})[q.id] || []).join(", ");
    const own = (this.item.k || 1) > 1 && this.queue !== "disagreements" ? "your label: " : "saved: ";
    const status = saved === undefined ? "not labelled yet" : `${own}${saved} ${saved === q.model ? "(the model's answer)" : `(corrects the model's ${q.model})`}${by ? ` · by ${by}` : ""}`;
    const others = this.item.by_reviewer ? Object.entries(this.item.by_reviewer).filter(([, labels]) => q.id in labels) : [];
    return el("section", { class: "rq", "data-question": q.id, "data-index": String(qi) },
      el("h3", { text: `${qi + 1}. ${q.id}${instructionsOf(q.instructions)}` }),
      q.options.map((o) => answerBar(q.id, o, probs[o.id] ?? 0, q.model, q.type)),
      others.length ? el("p", { class: "reviewers", "data-reviewers": "" }, `Reviewers: ${others.map(([name, labels]) => `${name}: ${labels[q.id]}`).join(" · ")}`) : null,
      el("div", { class: "options", role: "group", "aria-label": `answers to ${q.id}` },
        q.options.map((o, oi) => el("button", { type: "button", "data-option": o.id, class: o.id === q.model ? "model" : "",
          "aria-pressed": String(saved === o.id), title: o.id === q.model ? "the model's answer" : "",
          onclick: () => this.label(qi, o.id) }, el("kbd", { text: String(oi + 1) }), el("span", { text: optionName(q, o) })))),
      el("p", { class: saved === undefined ? "hint" : `saved${saved !== q.model ? " corrected" : ""}`, "data-saved": saved ?? "", text: status }));
  },

  highlight(scroll = true) {
    document.querySelectorAll("#item .rq").forEach((block, i) => block.classList.toggle("current", i === this.question));
    const current = document.querySelector(`#item .rq[data-index="${this.question}"]`);
    if (current && scroll) current.scrollIntoView({ block: "nearest" });
  },

  // The item again from the server (labels, history, comments, flags), its media left as they are.
  async refresh() {
    if (!this.item) return;
    try { this.item = await json(this.itemPath(this.item.key)); } catch (e) { $("#review-error").textContent = e.message; return; }
    this.renderAnswers();
    this.renderTrail();
    this.highlight(false);
    const entry = this.items[this.index];
    if (entry && entry.key === this.item.key) {
      entry.labelled = Object.keys(this.item.labels).length;
      if (this.item.review_state) entry.state = this.item.review_state;
      entry.flagged = Boolean(this.item.flagged);
      this.renderList();
    }
  },

  say(text) { const status = $("#item-status"); if (status) status.textContent = text; },

  async label(qi, optionId) {
    const q = this.item.questions[qi];
    $("#review-error").textContent = "";
    let saved;
    try {
      saved = await json(`${this.itemPath(this.item.key)}/labels`,
        { method: "PUT", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ labels: { [q.id]: optionId } }) });
    } catch (e) { $("#review-error").textContent = e.message; return; }
    this.item.labels = saved.labels;
    for (const event of saved.events || []) this.undoStack.push({ event, queue: this.queue, key: this.item.key, what: `the label of ${q.id}` });
    const last = qi + 1 >= this.item.questions.length;
    if (optionId === null || !last || this.index + 1 >= this.items.length) {
      await this.refresh();                  // the history and who labelled it, as the server keeps them
      if (optionId !== null && !last) this.question = qi + 1;
      this.highlight();
    } else {
      const entry = this.items[this.index];
      entry.labelled = Object.keys(this.item.labels).length;
      if (saved.review_state) entry.state = saved.review_state;
      this.renderList();
      await this.show(this.index + 1);
    }
    this.refreshCounts();                    // the queue's "n/m reviewed" follows every label, not only a Reload
  },

  async skip() {
    if (!this.item) return;
    const key = this.item.key;
    try {
      const skip = await json(`${this.itemPath(key)}/skip`, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
      this.undoStack.push({ event: skip.id, queue: this.queue, key, what: `the skip of ${key}` });
    } catch (e) { $("#review-error").textContent = e.message; return; }
    const next = this.items[this.index + 1];
    await this.loadItems(next ? next.key : null, true);     // a skipped item goes to the end of the list
  },

  openFlag() {
    const form = $("#item-trail .flag-form");
    if (!form) return;
    form.hidden = false;
    $("#flag-button").setAttribute("aria-expanded", "true");
    $("#flag-reason").focus();
  },

  async flag(reason) {
    const key = this.item.key;
    const flag = await json(`${this.itemPath(key)}/flag`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ reason }) });
    this.undoStack.push({ event: flag.id, queue: this.queue, key, what: `the flag of ${key}` });
    await this.refresh();
    this.say(`Flagged: ${reason}`);
  },

  async comment(text) {
    await json(`${this.itemPath(this.item.key)}/comments`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ text }) });
    await this.refresh();
    this.say("Comment added");
  },

  // Ctrl+Z: the last label, skip or flag given in this page is reverted (the server records the revert).
  async undo() {
    const last = this.undoStack.pop();
    if (!last) { this.say("Nothing to undo"); return; }
    try {
      await json(`${this.itemPath(last.key, last.queue)}/undo`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ event: last.event }) });
    } catch (e) { $("#review-error").textContent = `could not undo ${last.what}: ${e.message}`; return; }
    if (last.queue !== this.queue) { $("#queue").value = last.queue; }
    if (!this.item || this.item.key !== last.key || last.queue !== this.queue) await this.loadItems(last.key, true);
    else await this.refresh();
    this.refreshCounts();
    this.say(`Undone: ${last.what}`);
    $("#review-error").textContent = "";
  },

  // Keys are handled in the order they were pressed: each waits for the one before (a label is saved, the next
  // question or item is shown) before it reads which question is current, however fast the reviewer types.
  keys: Promise.resolve(),

  onKey(e) {
    if ($("#review").hidden || e.altKey) return;
    if (e.target.closest("input, textarea, select, dialog")) return;
    const undo = (e.ctrlKey || e.metaKey) && !e.shiftKey && e.key.toLowerCase() === "z";
    if ((e.ctrlKey || e.metaKey) && !undo) return;
    const ours = undo || /^[1-9]$/.test(e.key) || ["a", "j", "k", "n", "p", "s", "f", "c", "v", "ArrowDown", "ArrowUp", "Delete"].includes(e.key)
      || (e.key === "Enter" && !e.target.closest("button"));
    if (!ours) return;
    e.preventDefault();
    const key = undo ? "undo" : e.key;
    this.enqueue(() => this.act(key));
  },

  // keys and item loads run one after another, in the order they came; an error is shown, the queue goes on
  enqueue(task) {
    this.keys = this.keys.then(task).catch((err) => { $("#review-error").textContent = err.message; });
  },

  async act(key) {
    if (key === "undo") { await this.undo(); return; }
    if (!this.item) return;
    const q = this.item.questions[this.question];
    const digit = /^[1-9]$/.test(key) ? Number(key) - 1 : -1;
    if (digit >= 0) { if (digit < q.options.length) await this.label(this.question, q.options[digit].id); }
    else if (key === "Enter" || key === "a") { if (q.model !== null) await this.label(this.question, q.model); }
    else if (key === "j" || key === "ArrowDown") { this.question = Math.min(this.question + 1, this.item.questions.length - 1); this.highlight(); }
    else if (key === "k" || key === "ArrowUp") { this.question = Math.max(this.question - 1, 0); this.highlight(); }
    else if (key === "n") { if (this.index + 1 < this.items.length) await this.show(this.index + 1); }
    else if (key === "p") { if (this.index > 0) await this.show(this.index - 1); }
    else if (key === "Delete") await this.label(this.question, null);
    else if (key === "s") await this.skip();
    else if (key === "f") this.openFlag();
    else if (key === "v") await this.reveal();
    else if (key === "c") { const box = $("#comment-text"); if (box) { box.scrollIntoView({ block: "nearest" }); box.focus(); } }
  },
};

function exposureText(exposure) {
  const limit = exposure && exposure.limit !== null && exposure.limit !== undefined ? ` of your daily limit of ${exposure.limit}` : "";
  return `Media shielded for your wellbeing: press v or a Reveal button to see one. Revealed today: ${exposure ? exposure.today : 0}${limit}.`;
}

function answerOf(item, id) { return (item.answers || {})[id] || {}; }

function optionName(q, o) {
  if (q.type === "score" && typeof o.description === "string") return `${o.id} · ${o.description}`;
  return o.id;
}

function queueLabel(queue) {
  const failed = queue.failed ? ` · ${queue.failed} ${queue.failed === 1 ? "line" : "lines"} failed` : "";
  return `${queue.name} (${queue.reviewed}/${queue.items} reviewed${failed})`;   // reviewed: every question labelled
}

// A batch's failed lines have no item to review: the page says which failed and why, above the list.
function renderFailures(queue) {
  const failures = (queue && queue.failures) || [];
  $("#queue-failures").replaceChildren(...(queue && queue.failed ? [
    el("p", { text: `${queue.failed} ${queue.failed === 1 ? "line" : "lines"} of ${queue.name} failed and ${queue.failed === 1 ? "has" : "have"} no answer to review:` }),
    el("ul", {}, failures.map((f) => el("li", { "data-line": String(f.line), text: `line ${f.line}: ${f.status} ${f.message}` })))] : []));
}

function instructionsOf(instructions) {
  if (instructions === null || instructions === undefined || instructions === "") return "";   // none: the id alone
  return ` — ${typeof instructions === "string" ? instructions : JSON.stringify(instructions)}`;
}

function answerBar(qid, option, p, model, type) {
  const level = type === "score" && typeof option.description === "string" ? option.description : "";
  return el("div", { class: `bar${option.id === model ? " best" : ""}`, "data-question": qid, "data-option": option.id, "data-probability": String(p) },
    el("span", { class: "label", text: level ? `${option.id} · ${level}` : option.id }),
    el("span", { class: "track", role: "meter", "aria-valuemin": "0", "aria-valuemax": "1", "aria-valuenow": String(p), "aria-label": `${qid}: ${option.id}` },
      el("span", { class: "fill", style: { width: `${(100 * p).toFixed(2)}%` } })),
    el("span", { class: "value", text: pct(p) }));
}

// ------------------------------------------------------------------------------------------------ Report
const report = {
  opened: false,
  async open() {
    if (this.opened) return;
    this.opened = true;
    this.agreement();
    try {
      const { reports } = await json("/v1/review/reports");
      $("#report-select").replaceChildren(...reports.map((r) => el("option", { value: r.id, text: r.name })));
      if (reports.length) await this.show(reports[0].id);
      else $("#report-body").replaceChildren(el("p", { class: "hint", text: "No reports: run `omni eval DATA --out DIR` and start the server with --review-reports DIR." }));
    } catch (e) { $("#report-error").textContent = e.message; }
  },
  // Agreement between reviewers on the review directory's labels (when the server reviews at all).
  async agreement() {
    let data;
    try { data = await json("/v1/review/agreement"); } catch (e) {
      $("#agreement").replaceChildren(...(e.status === 404 ? [] : [el("p", { class: "error", text: `agreement: ${e.message}` })]));
      return;
    }
    $("#agreement").replaceChildren(team.agreementBlock(data));
  },

  async show(id) {
    $("#report-error").textContent = "";
    let data;
    try { data = await json(`/v1/review/reports/${encodeURIComponent(id)}`); } catch (e) { $("#report-error").textContent = e.message; return; }
    const figures = el("div", { class: "report-figures" });
    for (const name of data.figures) {
      const img = el("img", { alt: name.replace(/\.png$/, "").replaceAll("_", " ") });
      figures.append(el("figure", {}, img, el("figcaption", { class: "hint", text: name })));
      blobUrl(`/v1/review/reports/${encodeURIComponent(id)}/figures/${encodeURIComponent(name)}`).then((url) => { img.src = url; })
        .catch((e) => figures.append(el("p", { class: "error", text: e.message })));
    }
    const m = data.metrics;
    $("#report-body").replaceChildren(el("h2", { class: "panel-title", text: data.name }),
      el("p", { class: "hint", text: `threshold / coverage: the lowest confidence whose auto-decided answers reach precision ${m.target_precision}, and the share of answers at or above it` }),
      el("h3", { text: "Per type" }), metricsTable(m.types || {}, false),
      el("h3", { text: "Per question" }), metricsTable(m.questions || {}, true),
      el("h3", { text: "Figures" }), figures,
      el("details", {}, el("summary", { text: "report.md" }), el("div", { class: "report-md", text: data.markdown })));
  },
};

function metricsTable(entries, withType) {
  const fmt = (v) => (typeof v === "number" && Number.isFinite(v) ? v.toFixed(3) : "–");
  const head = [withType ? "question" : "type", ...(withType ? ["type"] : []), "n", "accuracy", "macro-F1", "NLL", "Brier", "ECE", "threshold", "coverage"];
  return el("div", { class: "table-scroll", tabindex: "0", role: "region", "aria-label": withType ? "metrics per question" : "metrics per type" }, el("table", { class: "compact metrics" },
    el("tr", {}, head.map((h) => el("th", { scope: "col", text: h }))),
    Object.entries(entries).map(([name, q]) => el("tr", { "data-row": name },
      el("th", { scope: "row", text: name }), withType ? el("td", { text: q.type }) : null,
      el("td", { class: "num", text: String(q.count) }),
      [q.accuracy, q.macro_f1, q.nll, q.brier, q.ece, (q.precision_threshold || {}).threshold, (q.precision_threshold || {}).coverage]
        .map((v) => el("td", { class: "num", text: fmt(v) }))))));
}

// ------------------------------------------------------------------------------------------------ start
async function loadModel() {
  try {
    const models = await json("/v1/models");
    const card = models.models[0];
    ask.baseModel = card.name;
    showModels(models.models);
    ask.limits = card.limits && card.limits.inputs;
    $("#model-name").textContent = `${card.name}${card.tiny_default ? " · tiny demo model (not real answers)" : ""}`;
    $("#limits-hint").textContent = ask.limits ? `Up to ${ask.limits.images} photos, ${ask.limits.audio} audio clips and ${ask.limits.videos} videos.` : "";
    noteKeeping();
  } catch (e) {
    $("#model-name").textContent = e.status === 503 ? "the model is still loading…" : `model: ${e.message}`;
    if (e.status === 503) setTimeout(loadModel, 2000);
  }
}

// The base and the adapters served beside it: the Ask page answers with the one chosen (the request's `model`).
function showModels(cards) {
  const select = $("#ask-model");
  const chosen = select.value;
  select.replaceChildren(...cards.map((c, i) => el("option", {
    value: c.name, text: i === 0 ? `${c.name} (base)` : `${c.name}${c.mode ? ` · ${c.mode} adapter` : ""}` })));
  if (cards.some((c) => c.name === chosen)) select.value = chosen;
  $("#model-row").hidden = cards.length < 2;
}

// Who is reviewing: named by the API key, or (a server without keys) by the name asked once and kept here.
const who = { known: null };

async function whoami() {
  try { who.known = await json("/v1/whoami"); } catch { who.known = null; return null; }
  team.showWho(who.known, async () => { if (await team.askName(team.storedName())) await whoami(); });
  return who.known;
}

async function ensureName() {
  const me = who.known || (await whoami());
  if (me && !me.keys && !team.storedName() && (await team.askName())) await whoami();
}

function openShortcuts() {
  const dialog = $("#shortcuts-dialog");
  if (!dialog.open) dialog.showModal();
}

// Under `omni review` (or `omni serve --review-dir`) what is asked here is kept: the page says so, and where.
async function noteKeeping() {
  let queues;
  try { queues = (await json("/v1/review/queues")).queues; } catch { return; }   // review off: nothing is kept
  const kinds = new Set(queues.map((q) => q.kind));
  $("#keeping-note").textContent = kinds.has("policy")
    ? "This server keeps the requests its policy sends to review, with their media, in its review directory (Review tab, “to review (policy)”)."
    : kinds.has("kept") ? "This server keeps every request asked here, with its media and answers, in its review directory (Review tab, “kept decisions”); the same request answered the same way is kept once." : "";
}

function start() {
  setupTabs();
  setupDrop();
  evidence.install();
  $("#ask-form").addEventListener("submit", submitAsk);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !$("#ask").hidden) { e.preventDefault(); $("#ask-form").requestSubmit(); }
    else if (e.key === "?" && !e.ctrlKey && !e.metaKey && !e.altKey && !e.target.closest("input, textarea, select, dialog")) { e.preventDefault(); openShortcuts(); }
    else review.onKey(e);
  });
  $("#load-preset").addEventListener("click", () => {
    const preset = PRESETS[$("#preset").value];
    if (!preset) return;
    $("#state").value = preset.state;
    loadQuestions(preset.questions);
    if (!$("#raw-editor").hidden) $("#raw-json").value = JSON.stringify(currentRequest(), null, 2);
  });
  $("#toggle-raw").addEventListener("click", toggleRaw);
  $("#add-question").addEventListener("click", () => { const card = questionCard(); $("#questions").append(card); $(".qid", card).focus(); });
  $("#key-button").addEventListener("click", () => askForKey());
  for (const id of ["#queue", "#order", "#show-done"]) $(id).addEventListener("change", () => review.loadItems());
  $("#threshold").addEventListener("change", () => review.loadItems());
  $("#filter-form").addEventListener("submit", (e) => { e.preventDefault(); review.loadItems(); });
  for (const id of ["#filter-outcome", "#filter-state"]) $(id).addEventListener("change", () => review.loadItems());
  $("#filter-question").addEventListener("change", () => team.suggest(review.item));
  $("#filter-clear").addEventListener("click", () => { team.writeFilters(new URLSearchParams()); review.loadItems(); });
  $("#shortcut-rows").replaceChildren(...team.shortcutRows());
  $("#shortcuts-button").addEventListener("click", openShortcuts);
  $("#reload-queue").addEventListener("click", () => review.loadQueues());
  $("#report-select").addEventListener("change", (e) => report.show(e.target.value));
  loadQuestions({});
  loadModel();
  whoami();
}

start();
