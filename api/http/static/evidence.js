// omni-decide workbench: where an answer came from (docs/evidence.md: a response's `x_evidence`, a review item's
// `evidence`), drawn over what was asked about: a heat map and the heaviest boxes over each photo (shown or hidden
// with a button or the "e" key), a video's timeline with its top moments (a click seeks the player there) and the
// boxes of the moment playing, an audio clip's (or a video's soundtrack's) heaviest windows on a bar under its
// player, the state with its heaviest spans marked, and each modality's share of the answer's attention.
// Builds elements from the evidence, the state and the media the caller hands it; knows nothing of fetch or the
// API's paths.

import { $, el, pct } from "./dom.js";

const SLOTS = [["images", "photo"], ["videos", "video"], ["audio", "audio clip"]];
const SHARES = [["prompt", "questions and prompt"], ["state", "state"], ["image", "photos"], ["video", "videos"],
  ["audio", "audio clips"], ["video_audio", "videos' sound"]];

// ------------------------------------------------------------------------------------------------ the overlay toggle
let overlaysShown = true;

export function setOverlays(on) {
  overlaysShown = on;
  document.body.classList.toggle("ev-overlays-off", !on);
  for (const button of document.querySelectorAll(".ev-toggle")) button.setAttribute("aria-pressed", String(on));
}

// "e" shows or hides the heat maps and boxes, when evidence is on screen and no field has the keys.
export function install() {
  document.addEventListener("keydown", (e) => {
    if (e.key !== "e" || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.target.closest("input, textarea, select, dialog, [contenteditable]")) return;
    const shown = [...document.querySelectorAll(".evidence:not([hidden]) .ev-toggle")].some((b) => b.offsetParent);
    if (!shown) return;
    e.preventDefault();
    setOverlays(!overlaysShown);
  });
}

// ------------------------------------------------------------------------------------------------ the panel
// `panel`: the element to fill (hidden when there is no evidence); `evidence`: the `x_evidence` object;
// `state`: the state as it was sent; `source(slot, index)`: that medium as a File/Blob, a URL, or a promise of one.
export function render(panel, evidence, { state = "", source = () => null } = {}) {
  for (const url of panel.evidenceUrls || []) URL.revokeObjectURL(url);
  panel.evidenceUrls = [];
  const questions = Object.entries((evidence && evidence.questions) || {});
  panel.hidden = !questions.length;
  if (!questions.length) { panel.replaceChildren(); return; }
  const players = new Map();                 // one player per medium, kept while another question is shown
  const player = (slot, index) => {
    const place = `${slot}[${index}]`;
    if (!players.has(place)) players.set(place, makePlayer(panel, slot, index, source));
    return players.get(place);
  };
  const id = (name) => `${panel.id}-${name}`;
  const pick = el("select", { id: id("question") },
    questions.map(([qid, q]) => el("option", { value: qid, text: `${qid} → ${q.answer}` })));
  const optionPick = el("select", { id: id("option") });
  const optionRow = el("span", { class: "ev-option" }, el("label", { for: id("option"), text: "for" }), optionPick);
  const body = el("div", { class: "ev-body" });
  const hasPictures = questions.some(([, q]) => (q.images || []).length || (q.videos || []).length);
  const show = () => {
    const q = evidence.questions[pick.value];
    const options = Object.keys(q.options || {});
    if (optionPick.dataset.question !== pick.value) {
      optionPick.replaceChildren(el("option", { value: "", text: `the answer (${q.answer})` }),
        ...options.map((o) => el("option", { value: o, text: o })));
      optionPick.dataset.question = pick.value;
    }
    optionRow.hidden = !options.length;
    const view = optionPick.value ? q.options[optionPick.value] : q;
    body.replaceChildren(...questionView(view, state, player));
    for (const media of players.values()) if (media.placeOverlay) media.placeOverlay();   // now that it is laid out
    panel.dataset.question = pick.value;
  };
  pick.addEventListener("change", show);
  optionPick.addEventListener("change", show);
  panel.replaceChildren(
    el("h3", { id: id("title"), text: "Evidence" }),
    el("p", { class: "hint", text: `Where the model looked when it scored the answer (${evidence.method || "routing attention"}): the share of its attention on each part of the request; darker is more.` }),
    el("div", { class: "row" }, el("label", { for: id("question"), text: "Question" }), pick, optionRow,
      hasPictures ? el("button", { type: "button", class: "ev-toggle", "aria-pressed": String(overlaysShown),
        onclick: () => setOverlays(!overlaysShown) }, "Heat map ", el("kbd", { text: "e" })) : null),
    body);
  show();
}

function questionView(q, state, player) {
  const parts = [shareBlock(q.share || {})];
  if (q.state) parts.push(stateBlock(q.state, state));
  for (const [slot, noun] of SLOTS) {
    for (const entry of q[slot] || []) {
      const place = `${slot}[${entry.index}]`;
      const media = player(slot, entry.index);
      const view = slot === "images" ? photoView(entry, media) : slot === "videos" ? videoView(entry, media) : audioView(entry, media);
      parts.push(el("figure", { class: "ev-media", "data-evidence": place },
        el("figcaption", { text: `${place} · ${noun}` }), ...view));
    }
  }
  return parts;
}

function shareBlock(share) {
  const rows = SHARES.filter(([key]) => typeof share[key] === "number");
  return el("div", { class: "ev-share", role: "group", "aria-label": "share of the attention" },
    rows.map(([key, name]) => el("div", { class: "bar", "data-share": key },
      el("span", { class: "label", text: name }),
      el("span", { class: "track", role: "meter", "aria-valuemin": "0", "aria-valuemax": "1", "aria-valuenow": String(share[key]), "aria-label": `share: ${name}` },
        el("span", { class: "fill", style: { width: `${(100 * share[key]).toFixed(2)}%` } })),
      el("span", { class: "value", text: pct(share[key]) }))));
}

// ------------------------------------------------------------------------------------------------ media
function makePlayer(panel, slot, index, source) {
  const place = `${slot}[${index}]`;
  const media = slot === "images" ? el("img", { alt: `${place}, with where the model looked` })
    : el(slot === "videos" ? "video" : "audio", { controls: true, preload: "metadata", "aria-label": `play ${place}` });
  media.dataset.place = place;
  Promise.resolve(source(slot, index)).then((found) => {
    if (found instanceof Blob) {
      const url = URL.createObjectURL(found);
      panel.evidenceUrls.push(url);
      media.src = url;
    } else if (found) media.src = found;
  }).catch(() => {});                        // the caller shows why a medium could not be loaded
  const overlay = () => media.placeOverlay && media.placeOverlay();     // the overlay of the question shown
  new ResizeObserver(overlay).observe(media);
  media.addEventListener(slot === "images" ? "load" : "loadedmetadata", overlay);
  if (slot !== "images") {
    const follow = () => followTime(media);
    media.addEventListener("timeupdate", follow);
    media.addEventListener("seeked", follow);
  }
  return media;
}

// The overlay covers exactly the picture the element shows (a video's frame is fitted inside its box).
function cover(overlay, media) {
  const place = () => {
    const natural = media.tagName === "VIDEO" ? [media.videoWidth, media.videoHeight] : null;
    let [x, y, w, h] = [media.offsetLeft, media.offsetTop, media.offsetWidth, media.offsetHeight];
    if (natural && natural[0] && natural[1]) {
      const scale = Math.min(w / natural[0], h / natural[1]);
      const [fw, fh] = [natural[0] * scale, natural[1] * scale];
      [x, y, w, h] = [x + (w - fw) / 2, y + (h - fh) / 2, fw, fh];
    }
    Object.assign(overlay.style, { left: `${x}px`, top: `${y}px`, width: `${w}px`, height: `${h}px` });
  };
  media.placeOverlay = place;
  place();
}

function boxNodes(boxes, width, height) {
  return boxes.map((b, rank) => el("div", { class: "ev-box", "data-rank": String(rank + 1), "data-weight": String(b.weight), style: {
    left: `${(100 * b.x0) / width}%`, top: `${(100 * b.y0) / height}%`,
    width: `${(100 * (b.x1 - b.x0)) / width}%`, height: `${(100 * (b.y1 - b.y0)) / height}%` } },
  el("span", { text: String(rank + 1) })));
}

function boxList(boxes) {
  return el("ol", { class: "ev-list" }, boxes.map((b) => el("li", {
    text: `x ${Math.round(b.x0)}–${Math.round(b.x1)}, y ${Math.round(b.y0)}–${Math.round(b.y1)} px · ${pct(b.weight)}` })));
}

function heatCanvas(heatmap) {
  const rows = heatmap.length;
  const cols = rows ? heatmap[0].length : 0;
  const canvas = el("canvas", { class: "ev-heat", width: String(Math.max(cols, 1)), height: String(Math.max(rows, 1)) });
  const most = Math.max(0, ...heatmap.flat());
  if (!rows || !cols || !(most > 0)) return canvas;
  const context = canvas.getContext("2d");
  const image = context.createImageData(cols, rows);
  heatmap.forEach((row, r) => row.forEach((w, c) => {
    const t = Math.sqrt(Math.max(w, 0) / most);     // square root: the lighter cells stay visible
    image.data.set([255, Math.round(215 * (1 - t)), 0, Math.round(170 * t)], 4 * (r * cols + c));
  }));
  context.putImageData(image, 0, 0);
  return canvas;
}

function photoView(entry, img) {
  const boxes = entry.boxes || [];
  const overlay = el("div", { class: "ev-overlay", "aria-hidden": "true" },
    heatCanvas(entry.heatmap || []), boxNodes(boxes, entry.width, entry.height));
  const frame = el("div", { class: "ev-frame" }, img, overlay);
  cover(overlay, img);
  return [frame, el("p", { class: "hint", text: `${entry.grid ? `${entry.grid.rows}×${entry.grid.cols} cells over ` : ""}${entry.width}×${entry.height} px; the heaviest regions:` }), boxList(boxes)];
}

function videoView(entry, video) {
  const overlay = el("div", { class: "ev-overlay", "aria-hidden": "true", "data-for": video.dataset.place });
  overlay.moments = { list: entry.moments || [], width: entry.width, height: entry.height };
  const frame = el("div", { class: "ev-frame" }, video, overlay);
  cover(overlay, video);
  const parts = [frame,
    timeBar(video, entry.seconds, entry.timeline || [], entry.moments || [], "the video's seconds"),
    seekButtons(video, entry.moments || [], "moment", "top moments")];
  const sound = entry.soundtrack;
  if (sound) {
    parts.push(el("p", { class: "hint", text: "Its soundtrack:" }),
      timeBar(video, sound.seconds, perSecond(sound.per_second || []), sound.windows || [], "the soundtrack's seconds"),
      seekButtons(video, sound.windows || [], "window", "the soundtrack's heaviest windows"));
  }
  queueMicrotask(() => followTime(video));
  return parts;
}

function audioView(entry, audio) {
  return [audio, timeBar(audio, entry.seconds, perSecond(entry.per_second || []), entry.windows || [], "the recording's seconds"),
    seekButtons(audio, entry.windows || [], "window", "heaviest windows")];
}

const perSecond = (weights) => weights.map((weight, s) => ({ start_s: s, end_s: s + 1, weight }));

// A bar as long as the medium: each span shaded by its weight, the marked ones outlined, where the player is; a
// click on it seeks there (the buttons under it do the same from the keyboard).
function timeBar(player, seconds, spans, marks, name) {
  const length = seconds || Math.max(1, ...spans.map((s) => s.end_s));
  const most = Math.max(0, ...spans.map((s) => s.weight));
  const at = (s) => `${(100 * Math.min(Math.max(s, 0), length)) / length}%`;
  const wide = (a, b) => `${(100 * (Math.min(b, length) - Math.min(a, length))) / length}%`;
  const bar = el("div", { class: "ev-time", "aria-hidden": "true", "data-seconds": String(length), title: `${name}: click to play from there` },
    spans.map((s) => el("span", { class: "ev-cell", "data-start": String(s.start_s), style: {
      left: at(s.start_s), width: wide(s.start_s, s.end_s), opacity: most > 0 ? String(0.08 + 0.92 * Math.sqrt(Math.max(s.weight, 0) / most)) : "0" } })),
    marks.map((m) => el("span", { class: "ev-mark", "data-start": String(m.start_s), style: { left: at(m.start_s), width: wide(m.start_s, m.end_s) } })),
    el("span", { class: "ev-playhead", "data-for": player.dataset.place }));
  bar.addEventListener("click", (e) => {
    const box = bar.getBoundingClientRect();
    seek(player, (length * (e.clientX - box.left)) / box.width);
  });
  return bar;
}

function seekButtons(player, spans, noun, name) {
  if (!spans.length) return null;
  return el("div", { class: "ev-seek", role: "group", "aria-label": name },
    spans.map((s, rank) => el("button", { type: "button", class: `ev-${noun}`, "data-start": String(s.start_s), "data-rank": String(rank + 1),
      onclick: () => seek(player, s.start_s) }, `▶ ${seconds(s.start_s)}–${seconds(s.end_s)} · ${pct(s.weight)}`)));
}

const seconds = (s) => `${Number(s).toFixed(s % 1 ? 2 : 0)} s`;

function seek(player, at) {
  player.currentTime = Math.max(0, at);
  followTime(player);
}

// The playheads of this player, and over a video the boxes of the moment playing.
function followTime(player) {
  const now = player.currentTime;
  const root = player.closest(".evidence") || document;
  for (const head of root.querySelectorAll(`.ev-playhead[data-for="${player.dataset.place}"]`)) {
    const length = Number(head.parentElement.dataset.seconds) || 1;
    head.style.left = `${(100 * Math.min(now, length)) / length}%`;
  }
  const overlay = $(`.ev-overlay[data-for="${player.dataset.place}"]`, root);
  if (!overlay || !overlay.moments) return;
  const { list, width, height } = overlay.moments;
  const moment = list.find((m) => now >= m.start_s && now < m.end_s);
  overlay.dataset.moment = moment ? String(moment.start_s) : "";
  overlay.replaceChildren(...(moment ? boxNodes(moment.boxes || [], width, height) : []));
}

// ------------------------------------------------------------------------------------------------ the state
// The state as the server rendered it for the model: a string as is, anything else compact key-sorted JSON with
// non-ASCII kept and numbers as Python writes them (spans index it in code points, as Python counts).
export function stateText(state) {
  return typeof state === "string" ? state : pyJson(state);
}

function pyJson(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return `[${value.map(pyJson).join(",")}]`;
  if (typeof value === "object") {
    const keys = Object.keys(value).sort(byCodePoint);
    return `{${keys.map((k) => `${JSON.stringify(k)}:${pyJson(value[k])}`).join(",")}}`;
  }
  if (typeof value === "number") return pyNumber(value);
  return JSON.stringify(value);
}

function byCodePoint(a, b) {
  const [x, y] = [Array.from(a, (c) => c.codePointAt(0)), Array.from(b, (c) => c.codePointAt(0))];
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

// The page sent an integral number without a point (an int on the server) and any other as a float: Python's
// repr writes a float's shortest digits with an exponent below 1e-4 and from 1e16 ("1e-05", "1.5e+16").
function pyNumber(x) {
  if (Number.isInteger(x) && Math.abs(x) < 1e21) return String(x);
  const [mantissa, exponent] = x.toExponential().split("e");
  const e = Number(exponent);
  if (e >= -4 && e < 16) return String(x);
  return `${mantissa}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
}

function stateBlock(evidence, state) {
  const chars = Array.from(stateText(state));
  const spans = [...(evidence.spans || [])].sort((a, b) => a.start - b.start);
  const matches = spans.every((s) => chars.slice(s.start, s.end).join("") === s.text);
  const heading = el("p", { class: "hint", text: `The state, its heaviest ${spans.length === 1 ? "span" : "spans"} marked${evidence.covered_chars < evidence.chars ? ` (the model read its first ${evidence.covered_chars} of ${evidence.chars} characters)` : ""}:` });
  if (!matches) {
    return el("div", { class: "ev-state-block" }, el("p", { class: "hint", text: "The heaviest parts of the state (this page renders the state differently from the server):" }),
      el("ol", { class: "ev-list" }, spans.map((s) => el("li", {}, el("mark", { text: s.text }), ` · ${pct(s.weight)}`))));
  }
  const nodes = [];
  let at = 0;
  for (const s of spans) {
    if (s.start < at) continue;                // overlapping spans: the first one is marked
    nodes.push(chars.slice(at, s.start).join(""),
      el("mark", { "data-start": String(s.start), "data-weight": String(s.weight), title: pct(s.weight), text: s.text }));
    at = s.end;
  }
  const covered = Math.max(at, Math.min(evidence.covered_chars ?? chars.length, chars.length));
  nodes.push(chars.slice(at, covered).join(""));
  if (covered < chars.length) nodes.push(el("span", { class: "ev-unread", title: "not read: cut to fit", text: chars.slice(covered).join("") }));
  return el("div", { class: "ev-state-block" }, heading,
    el("pre", { class: "ev-state", tabindex: "0", role: "region", "aria-label": "the state with the heaviest spans marked" }, nodes));
}
