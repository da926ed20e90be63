"""A long state is tokenized only as far as the context can hold it, and is cut at the same token as a tokenization
of the whole text would cut it (the tiny checkpoint's byte-level BPE with Qwen's pre-tokenizer)."""
from __future__ import annotations

import json
import random

import pytest

from omni.model.prompt import CUT_MARGIN_CHARS, READ_WHOLE_CHARS_PER_TOKEN, PromptEncoder
from preprocess.loader import load_processor_parts

WORDS = ["fan", "rattle", "grinding", "unit", "Serial", "no.", "4711", "ß-team", "Ärger", "🙂", "\n", "  ", "--", "é"]


@pytest.fixture(scope="module")
def encoder(tiny_dir):
    return PromptEncoder(load_processor_parts(tiny_dir).tokenizer, 64_000)


def texts(seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    prose = " ".join(rng.choice(WORDS) for _ in range(60_000))
    record = json.dumps({"log": [{"line": i, "text": rng.choice(WORDS) * rng.randint(1, 5)} for i in range(8_000)]},
                        ensure_ascii=False, separators=(",", ":"))
    runs = "".join(rng.choice(["a" * rng.randint(1, 3000), " " * rng.randint(1, 50), "9" * 40, "\n\n"])
                   for _ in range(400))
    return {"prose": prose, "compact json": record, "long runs": runs}


@pytest.mark.parametrize("budget", [1, 37, 900])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_kept_tokens_and_dropped_characters_equal_a_whole_tokenization(encoder, budget, seed):
    for name, text in texts(seed).items():
        whole = encoder.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        assert len(whole["input_ids"]) > budget and len(text) > READ_WHOLE_CHARS_PER_TOKEN * budget + CUT_MARGIN_CHARS
        state = encoder.state_tokens(text, budget)
        assert state.ids == whole["input_ids"][:budget], name
        assert state.dropped_chars == len(text) - whole["offset_mapping"][budget - 1][1], name
        assert not state.exact and state.total_tokens > budget


def test_the_estimate_of_dropped_tokens_is_close_for_ordinary_text(encoder):
    text = texts(3)["prose"]
    exact = len(encoder.tokenizer(text, add_special_tokens=False)["input_ids"])
    state = encoder.state_tokens(text, 900)
    assert abs(state.total_tokens - exact) / exact < 0.15


def test_work_follows_the_budget_not_the_text(encoder, monkeypatch):
    seen = []
    real = encoder.tokenizer

    class Recording:
        def __call__(self, text, **kwargs):
            seen.append(len(text) if isinstance(text, str) else sum(map(len, text)))
            return real(text, **kwargs)

    monkeypatch.setattr(encoder, "tokenizer", Recording())
    huge = texts(0)["prose"] * 40                           # ~16 MB
    state = encoder.state_tokens(huge, 500)
    assert len(state.ids) == 500 and max(seen) <= 4 * (READ_WHOLE_CHARS_PER_TOKEN * 500 + CUT_MARGIN_CHARS)


def test_a_state_that_fits_is_read_whole_and_counted_exactly(encoder):
    text = texts(0)["prose"][:3000]
    ids = encoder.tokenizer(text, add_special_tokens=False)["input_ids"]
    state = encoder.state_tokens(text, len(ids) + 5)
    assert state.ids == ids and state.exact and state.dropped_tokens == 0 and state.dropped_chars == 0
    short = text[:1000]                                     # under 8 x 10 + 2,048 characters: read whole
    short_ids = encoder.tokenizer(short, add_special_tokens=False)["input_ids"]
    cut = encoder.state_tokens(short, 10)
    assert cut.exact and cut.dropped_tokens == len(short_ids) - 10 and cut.ids == short_ids[:10]
