// omni-decide workbench: the appeals queue (Review tab). Each pending appeal with the decision it contests (its
// outcome, answers and bank match), the caller's reason, and Uphold / Reverse with a note; decided ones below.
// Knows the appeals routes only (/v1/appeals); nothing of the review queues, the items or the Ask page.
import { $, el, when } from "./dom.js";

// `call(path, options)` is the page's JSON fetch (keys, reviewer name, errors as exceptions).
export async function load(section, call) {
  let appeals;
  try { appeals = (await call("/v1/appeals")).appeals; } catch { section.hidden = true; return; }   // appeals off
  section.hidden = false;
  const pending = appeals.filter((a) => a.state === "pending");
  const decided = appeals.filter((a) => a.state !== "pending");
  $("#appeals-title", section).textContent = `Appeals (${pending.length} pending)`;
  $("#appeals-list", section).replaceChildren(...(pending.length ? pending.map((a) => card(a, section, call))
    : [el("li", { class: "hint", text: "No appeal is waiting." })]));
  $("#appeals-decided", section).replaceChildren(...decided.map((a) => el("li", { "data-appeal": a.request_id },
    `${a.request_id}: ${a.result} by ${a.decided_by} (${when(a.decided_at)})${a.note ? ` — ${a.note}` : ""}`)));
}

function card(appeal, section, call) {
  const d = appeal.decision || {};
  const outcome = d.x_outcome ? `outcome ${d.x_outcome.overall}${d.x_outcome.by === "bank" ? " (by a hash bank)" : ""}` : "no outcome";
  const answers = Object.entries(d.answers || {}).map(([q, a]) => `${q}: ${answerText(a)}`).join(" · ");
  const noteId = `appeal-note-${appeal.request_id}`;
  const note = el("input", { type: "text", id: noteId, maxlength: "2000", size: "28", autocomplete: "off" });
  const status = el("p", { class: "error", role: "alert" });
  const decide = async (result) => {
    try {
      await call(`/v1/appeals/${encodeURIComponent(appeal.request_id)}/decision`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ result, ...(note.value.trim() ? { note: note.value.trim() } : {}) }) });
    } catch (e) { status.textContent = e.message; return; }
    await load(section, call);
  };
  return el("li", { class: "appeal", "data-appeal": appeal.request_id },
    el("h3", { text: `Decision ${appeal.request_id}` }),
    el("p", { text: `Appealed by ${appeal.appealed_by} (${when(appeal.appealed_at)}): “${appeal.reason}”` }),
    el("p", { class: "hint", text: `${outcome}${d.decided_at ? `, decided ${when(d.decided_at)}` : ""}${d.x_match ? `; bank ${d.x_match.bank}: ${d.x_match.label}` : ""}` }),
    answers ? el("p", { class: "answers-line", text: answers }) : null,
    el("div", { class: "row wrap", role: "group", "aria-label": `decide the appeal of ${appeal.request_id}` },
      el("label", { for: noteId, text: "Note" }), note,
      el("button", { type: "button", class: "uphold", onclick: () => decide("upheld") }, "Uphold"),
      el("button", { type: "button", class: "reverse", onclick: () => decide("reversed") }, "Reverse")),
    status);
}

function answerText(answer) {
  if (!answer || typeof answer !== "object") return "?";
  if (answer.type === "noul") return answer.noul >= 0.5 ? `yes (${answer.noul})` : `no (${answer.noul})`;
  if (answer.type === "choice") return `${answer.choice} (${answer.confidence})`;
  const probabilities = answer.probabilities || {};
  const best = Object.keys(probabilities).sort((a, b) => probabilities[b] - probabilities[a])[0];
  return `level ${best} (${answer.confidence})`;
}
