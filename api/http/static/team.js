// omni-decide workbench, the team's parts of Review: who is reviewing (a name asked once when the server has no
// keys), an item's history, comments and flags, the filters and the address that names every view
// (#review/QUEUE/ITEM?filters), a queue's guidelines, the shortcut overlay and the agreement table of Report.
// Builds elements and reads forms; knows nothing of fetch or the API's paths (the caller passes what it fetched).

import { $, el, pct, when } from "./dom.js";

// ------------------------------------------------------------------------------------------------ who
export const NAME_STORE = "omni.reviewer";
export const NAME_PATTERN = "[^\\s]{1,64}";   // as a keys file's NAME: 1 to 64 characters, no spaces

export function storedName() { return localStorage.getItem(NAME_STORE) || ""; }

// The name dialog: resolves with the name saved (kept in this browser), or "" when cancelled.
export function askName(current = "") {
  const dialog = $("#name-dialog");
  const input = $("#name-input");
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const name = input.value.trim();
      if (dialog.returnValue === "save" && new RegExp(`^${NAME_PATTERN}$`).test(name)) {
        localStorage.setItem(NAME_STORE, name);
        resolve(name);
      } else resolve("");
    }, { once: true });
    input.value = current;
    dialog.showModal();
  });
}

export function showWho(who, onRename) {
  const button = $("#who");
  button.hidden = false;
  button.textContent = `${who.name} · ${who.role}`;
  button.title = who.keys ? "named by your API key" : "your name on labels and comments: click to change it";
  button.disabled = Boolean(who.keys);
  button.onclick = who.keys ? null : onRename;
}

// ------------------------------------------------------------------------------------------------ an item's trail
const shown = (label) => (label === null || label === undefined ? "—" : String(label));

export function historyBlock(item) {
  const changes = item.history || [];
  return el("details", { class: "trail history", "data-history": String(changes.length) },
    el("summary", { text: `History (${changes.length} ${changes.length === 1 ? "change" : "changes"})` }),
    changes.length ? el("ol", {}, changes.map((h) => el("li", { "data-event": h.id, "data-action": h.action || "label" },
      el("time", { datetime: h.at, title: h.at, text: when(h.at) }), " · ", el("strong", { text: h.reviewer }),
      ` · ${h.question}: ${shown(h.old)} → ${shown(h.new)}${h.action === "revert" ? " (undone)" : ""}`)))
      : el("p", { class: "hint", text: "No label given yet." }));
}

export function flagsBlock(item) {
  const flags = item.flags || [];
  const skips = item.skips || [];
  if (!flags.length && !skips.length) return null;
  return el("div", { class: "flags", role: "note" },
    flags.map((f) => el("p", { class: "flag", "data-flag": f.id }, el("strong", { text: "Flagged" }),
      ` by ${f.reviewer} (${when(f.at)}): ${f.reason}`)),
    skips.map((s) => el("p", { class: "hint skip-note", "data-skip": s.id },
      `Skipped by ${s.reviewer} (${when(s.at)})${s.reason ? `: ${s.reason}` : ""}`)));
}

// A one-field form that must not be sent empty: `field` is the input, `onSend(text)` may throw (shown in the form).
function requiredTextForm(cls, field, label, emptyMessage, onSend, buttons, attrs = {}) {
  const error = el("p", { class: "error", role: "alert" });
  return el("form", { class: cls, ...attrs, onsubmit: async (e) => {
    e.preventDefault();
    error.textContent = "";
    const text = field.value.trim();
    if (!text) { error.textContent = emptyMessage; field.focus(); return; }
    try { await onSend(text); } catch (err) { error.textContent = err.message; }
  } },
  el("label", { for: field.id, class: "block", text: label }), field, el("div", { class: "row" }, ...buttons), error);
}

export function commentsBlock(item, onComment, maxChars) {
  const comments = item.comments || [];
  const box = el("textarea", { id: "comment-text", rows: 2, maxlength: maxChars ? String(maxChars) : null,
    placeholder: "A note for the team: what is unclear, what you saw" });
  const form = requiredTextForm("comment-form", box, "Comment", "write a comment first", onComment,
    [el("button", { type: "submit", text: "Add comment" })]);
  return el("section", { class: "trail comments", "aria-label": "Comments" },
    el("h3", { text: `Comments (${comments.length})` }),
    comments.length ? el("ol", { class: "comment-list" }, comments.map((c) => el("li", { "data-comment": c.id },
      el("p", { class: "meta" }, el("strong", { text: c.reviewer }), " · ", el("time", { datetime: c.at, title: c.at, text: when(c.at) })),
      el("p", { class: "text", text: c.text })))) : null,
    form);
}

// The flag form: a reason is required; resolves when flagged, hides on cancel.
export function flagForm(onFlag) {
  const input = el("input", { type: "text", id: "flag-reason", maxlength: "500", required: true,
    placeholder: "why: unclear media, a question that does not fit, …" });
  const form = requiredTextForm("flag-form", input, "Flag this item: reason", "say why you flag it", onFlag,
    [el("button", { type: "submit", class: "primary", text: "Flag" }),
      el("button", { type: "button", text: "Cancel", onclick: () => { form.hidden = true; } })], { hidden: true });
  return form;
}

// ------------------------------------------------------------------------------------------------ filters + address
export const FILTERS = ["question", "answer", "min_confidence", "max_confidence", "outcome", "reviewer", "state"];

export function readFilters() {
  const params = new URLSearchParams();
  for (const name of FILTERS) {
    const value = ($(`#filter-${name}`).value || "").trim();
    if (value) params.set(name, value);
  }
  return params;
}

export function writeFilters(params) {
  for (const name of FILTERS) $(`#filter-${name}`).value = params.get(name) || "";
}

// The address of a Review view: #review/QUEUE/ITEM?order=…&filters (queue and item as the API names them)
export function reviewHash(queue, key, params) {
  const path = ["#review", queue, key].filter(Boolean).map((part, i) => (i ? encodeURIComponent(part) : part)).join("/");
  const query = params.toString();
  return query ? `${path}?${query}` : path;
}

export function parseReviewHash(hash) {
  if (!hash.startsWith("#review")) return null;
  const [path, query = ""] = hash.split("?");
  const [, queue = "", key = ""] = path.split("/").map((part) => decodeURIComponent(part));
  return { queue, key, params: new URLSearchParams(query) };
}

// The filter form's suggestions: the questions of the item shown and the answers of the question picked.
export function suggest(item) {
  if (!item) return;
  const known = new Set([...$("#filter-questions").options].map((o) => o.value));
  for (const q of item.questions) {
    if (!known.has(q.id)) $("#filter-questions").append(el("option", { value: q.id }));
  }
  const picked = item.questions.find((q) => q.id === $("#filter-question").value);
  $("#filter-answers").replaceChildren(...(picked ? picked.options.map((o) => el("option", { value: o.id })) : []));
}

// ------------------------------------------------------------------------------------------------ guidelines
// The server renders the markdown with raw HTML escaped and unsafe links refused; the page parses that HTML inert
// (a template's content runs no script and loads nothing) and keeps only text-level elements and safe links.
const KEEP = new Set(["P", "H1", "H2", "H3", "H4", "H5", "H6", "UL", "OL", "LI", "STRONG", "EM", "CODE", "PRE",
  "BLOCKQUOTE", "A", "HR", "BR", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "DEL"]);

export function guidelinesNodes(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  const clean = (node) => {
    for (const child of [...node.childNodes]) {
      if (child.nodeType === Node.TEXT_NODE) continue;
      if (child.nodeType !== Node.ELEMENT_NODE || !KEEP.has(child.tagName)) { child.replaceWith(document.createTextNode(child.textContent || "")); continue; }
      for (const attr of [...child.attributes]) {
        const safeLink = child.tagName === "A" && attr.name === "href" && /^(https?:|mailto:|#)/i.test(attr.value);
        if (!safeLink) child.removeAttribute(attr.name);
      }
      if (child.tagName === "A") { child.setAttribute("rel", "noopener noreferrer"); child.setAttribute("target", "_blank"); }
      clean(child);
    }
  };
  clean(template.content);
  return [...template.content.childNodes];
}

// ------------------------------------------------------------------------------------------------ shortcuts
export const SHORTCUTS = [
  ["Ctrl+Enter", "Ask (on the Ask page)"],
  ["1 – 9", "pick that answer for the current question"],
  ["Enter or a", "accept the model's answer"],
  ["j / ↓", "next question"], ["k / ↑", "previous question"],
  ["n", "next item"], ["p", "previous item"],
  ["Delete", "clear the current question's label"],
  ["s", "skip the item (it goes to the end of your list)"],
  ["f", "flag the item, with a reason"],
  ["c", "write a comment"],
  ["v", "reveal the next shielded (blurred, grey, muted) medium of the item"],
  ["Ctrl+Z or ⌘Z", "undo your last label, skip or flag"],
  ["e", "show or hide the evidence's heat maps and boxes (when evidence is shown)"],
  ["?", "show these shortcuts"], ["Esc", "close this list"],
];

export function shortcutRows() {
  return SHORTCUTS.map(([keys, what]) => el("tr", {}, el("th", { scope: "row" },
    keys.split(/( or | \/ | – |\+)/).map((part) => (/^( or | \/ | – |\+)$/.test(part) ? part : el("kbd", { text: part })))),
  el("td", { text: what })));
}

// ------------------------------------------------------------------------------------------------ agreement
export function agreementBlock(data) {
  const rows = Object.entries(data.questions || {});
  const fmt = (v, digits = 3) => (typeof v === "number" && Number.isFinite(v) ? v.toFixed(digits) : "–");
  const method = { cohen: "Cohen's κ", fleiss: "Fleiss' κ" };
  return el("section", { class: "agreement", "aria-labelledby": "agreement-title" },
    el("h3", { id: "agreement-title", text: `Agreement between reviewers (${data.k} per item)` }),
    el("p", { class: "hint", text: "κ: agreement beyond chance (Cohen's for two reviewers, Fleiss' for more); observed: the share of items the reviewers labelled alike; model: the share of reviewers' labels equal to the model's answer." }),
    rows.length ? el("div", { class: "table-scroll", tabindex: "0", role: "region", "aria-label": "agreement per question" }, el("table", { class: "compact metrics" },
      el("tr", {}, ["question", "items", "reviewers", "κ", "method", "observed", "model"].map((h) => el("th", { scope: "col", text: h }))),
      rows.map(([qid, q]) => el("tr", { "data-agreement": qid }, el("th", { scope: "row", text: qid }),
        el("td", { class: "num", text: String(q.items) }), el("td", { class: "num", text: String(q.reviewers) }),
        el("td", { class: "num", "data-kappa": fmt(q.kappa), text: fmt(q.kappa) }), el("td", { text: method[q.method] || "–" }),
        el("td", { class: "num", text: typeof q.observed === "number" ? pct(q.observed) : "–" }),
        el("td", { class: "num", text: typeof q.model === "number" ? pct(q.model) : "–" })))))
      : el("p", { class: "hint", text: "No item has labels from two reviewers yet." }));
}
