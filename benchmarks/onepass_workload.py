"""onepass workload: the small random checkpoint's shapes, a ~500-token moderation state, 1–64 typed questions,
the JSON answer a generator would have to write, and an arithmetic cost model (MACs) for (a) / (b) / (c), also
swept over longer states.

Used by `benchmarks/onepass.py`; knows nothing of timing or reporting.
"""
from __future__ import annotations

import json

from omni.model.prompt import render

# ≥256 hidden, ≥4 layers, ≥8 experts; mrope_section sums to head_dim / 2.
TEXT = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
            "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 512,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [8, 4, 4],
                             "interleaved": True, "mrope_interleaved": True}}
HEAD = {"width": 128, "heads": 4, "feedforward": 256, "layers": 2, "routing_layers": 1}

JSON_INSTRUCTION = ("\nAnswer every field above in one JSON object that maps each field ID to its answer: true or "
                    "false for a noul field, the chosen option_id for a choice field, the level number for a score "
                    "field. Output only the JSON object.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")

# ------------------------------------------------------------------------------------------------------ workload
AREAS = (
    ("harassment", "targeted harassment or bullying of a person"),
    ("hate_speech", "attacks on people for a protected attribute"),
    ("self_harm", "encouragement or depiction of self-harm"),
    ("violent_threat", "a threat of violence against someone"),
    ("sexual_content", "explicit sexual content"),
    ("spam", "unsolicited advertising or repeated promotional posting"),
    ("scam", "an attempt to defraud or phish other users"),
    ("personal_data", "someone's private personal data (address, phone, ID numbers)"),
    ("impersonation", "someone pretending to be another person or an official account"),
    ("misinformation", "false claims presented as fact that could cause harm"),
    ("illegal_goods", "offers to buy or sell illegal goods or services"),
    ("extremism", "praise or recruitment for violent extremist groups"),
    ("minor_safety", "content that puts a minor at risk"),
    ("copyright", "pirated or infringing copyrighted material"),
    ("profanity", "profanity or slurs"),
    ("off_topic", "content unrelated to the forum's topic"),
)
SEVERITY = ["None: nothing of the kind", "Low: borderline or ambiguous", "Medium: clear but limited",
            "High: clear and harmful", "Critical: immediate danger or legal exposure"]
ACTIONS = {"allow": "Leave the content up", "label": "Add a warning label", "restrict": "Limit its reach",
           "remove": "Remove the content", "escalate": "Send it to a human reviewer now"}
TARGETS = {"nobody": "No one in particular", "author": "The author themselves", "user": "Another forum user",
           "public_figure": "A public figure", "group": "A group of people"}

MESSAGES = (
    ("mod_queue", ("Reported post in #payments-help, thread 'Checkout keeps failing after update', "
                   "3 reports in 20 min.")),
    ("user_8812", "Our checkout returns errors and orders are stuck since this morning. Anyone else seeing this?"),
    ("user_1270", "Same here. Support told me to wait, but it has been six hours and customers are angry."),
    ("user_4409", ("DM me, I can fix your store for $50 in gift cards, I work for the payments team (not really "
                   "official but trust me).")),
    ("user_8812", "Is that legit? The official support page says they never ask for gift cards."),
    ("user_4409", "Whatever. People like you are the reason this forum is useless, go back to where you came from."),
    ("user_3391", "Reported. Also the status page now says a partial outage in the EU region, ETA two hours."),
    ("user_1270", "Thanks. If anyone needs it, the workaround is to disable the new wallet button in settings."),
    ("user_4409", "Last chance for the fix, my number is in my profile, call me before the price goes up."),
    ("user_7720", "Please stop spamming. Mods, this account posted the same offer in five other threads today."),
    ("user_8812", "Disabled the wallet button and orders go through again. Refunds for the stuck ones still pending."),
    ("user_3391", "Outage resolved according to the status page. Stuck orders should be replayed automatically."),
)


def moderation_body(n_questions: int) -> dict:
    """A System One body with `n_questions` questions: per policy area a noul, a score, and two choices."""
    questions: dict[str, dict] = {}
    for area, what in AREAS:
        questions[area] = {"type": "noul", "instructions": f"Does the thread contain {what}?"}
        questions[f"{area}_severity"] = {"type": "score", "criteria": SEVERITY,
                                         "instructions": f"How severe is the {area.replace('_', ' ')}?"}
        questions[f"{area}_action"] = {"type": "choice", "instructions": f"What should moderation do about the "
                                       f"{area.replace('_', ' ')}?", "criteria": ACTIONS}
        questions[f"{area}_target"] = {"type": "choice", "instructions": f"Who is the {area.replace('_', ' ')} aimed "
                                       f"at?", "criteria": TARGETS}
    ids = list(questions)[:n_questions]
    return {"model": "clef-omni", "questions": {k: questions[k] for k in ids}}


def build_state(tokenizer, target_tokens: int) -> tuple[dict, int]:
    """A moderation record rendered to about `target_tokens` tokens (messages repeat, the last one is cut)."""
    def count(state) -> int:
        return len(tokenizer(render(state), add_special_tokens=False)["input_ids"])

    state = {"platform": "merchant community forum", "thread_id": "t-48213", "messages": []}
    k = 0
    while count(state) < target_tokens:
        author, text = MESSAGES[k % len(MESSAGES)]
        state["messages"].append({"from": author, "text": text})
        k += 1
    last = state["messages"][-1]
    full = last["text"]
    lo, hi = 0, len(full)                   # longest prefix of the last message that stays within the target
    while lo < hi:
        mid = (lo + hi + 1) // 2
        last["text"] = full[:mid]
        lo, hi = (mid, hi) if count(state) <= target_tokens else (lo, mid - 1)
    last["text"] = full[:lo]
    return state, count(state)


def json_answer(questions) -> str:
    """What a correct generated answer looks like: {"harassment": true, "harassment_severity": 2, ...}."""
    answer = {}
    for k, q in enumerate(questions):
        if q.type == "noul":
            answer[q.id] = k % 2 == 0
        elif q.type == "choice":
            answer[q.id] = q.options[k % len(q.options)].id
        else:
            answer[q.id] = k % len(q.options)
    return json.dumps(answer)


# ------------------------------------------------------------------------------------------------- cost model
# Qwen3-Omni-30B-A3B thinker text shapes (clef-reference §1.2), for the what-if column only.
REAL_TEXT = {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                 "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "vocab_size": 152064}


def macs(shape: dict, tokens_a: int, tokens_b: list[int], tokens_c: int, new_c: int) -> dict:
    """Multiply-accumulates of (a), (b), (c) for a decoder of `shape` (causal attention, top-k MoE, no head).

    A model of arithmetic only: it ignores per-call and per-step overheads and memory bandwidth, which is what
    dominates decoding (c) on real hardware, so it is a lower bound on what (c) costs relative to (a).
    """
    h, layers = shape["hidden_size"], shape["num_hidden_layers"]
    q, kv = shape["num_attention_heads"] * shape["head_dim"], shape["num_key_value_heads"] * shape["head_dim"]
    per_token = layers * (h * q + 2 * h * kv + q * h + h * shape["num_experts"]
                          + shape["num_experts_per_tok"] * 3 * h * shape["moe_intermediate_size"])

    def prefill(t: int) -> float:
        return t * per_token + layers * q * t * (t + 1)          # QK^T and PV over the causal triangle

    a = prefill(tokens_a)
    b = sum(prefill(t) for t in tokens_b)
    lm = h * shape["vocab_size"]
    c = prefill(tokens_c) + lm + sum(per_token + layers * 2 * q * (tokens_c + s) + lm for s in range(1, new_c))
    return {"b/a": round(b / a, 2), "c/a": round(c / a, 2), "attention_share_a": round(
        layers * q * tokens_a * (tokens_a + 1) / a, 2)}


def state_sweep(last: dict, state_tokens: int, vocab_size: int) -> list[dict]:
    """What-if, arithmetic only: the MAC model of `last` (a result row) with a longer state (e.g. media), both shapes.

    `last` needs "tokens" ({"a", "c_prompt", "c_new"}) and "_tokens_b" (each split pass's prompt length); every
    prompt grows by the same number of state tokens.
    """
    sweep = []
    for state_size in (500, 2000, 8000, 32000):
        grow = state_size - state_tokens
        b_tokens = [t + grow for t in last["_tokens_b"]]
        sweep.append({"state_tokens": state_size, "tokens_a": last["tokens"]["a"] + grow,
                      "this_checkpoint": macs(TEXT | {"vocab_size": vocab_size},
                                              last["tokens"]["a"] + grow, b_tokens,
                                              last["tokens"]["c_prompt"] + grow, last["tokens"]["c_new"]),
                      "qwen3_omni_30b_a3b": macs(REAL_TEXT, last["tokens"]["a"] + grow, b_tokens,
                                                 last["tokens"]["c_prompt"] + grow, last["tokens"]["c_new"])})
    return sweep
