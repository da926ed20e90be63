"""The Clef reference prompt, checked against expectations written out by hand from clef-reference §2."""
import re

import pytest

from omni.contract.config import EngineConfig
from omni.contract.errors import ContextTooLong
from omni.contract.request import parse_request
from omni.model.prompt import PromptEncoder, render

SPECIALS = ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]
SPECIAL_IDS = {s: 1_000_000 + i for i, s in enumerate(SPECIALS)}


class CharTokenizer:
    """One token per character (code point), chat markers as single tokens — as in the reference's own test."""

    def __call__(self, texts, add_special_tokens=False, return_offsets_mapping=False):
        assert add_special_tokens is False
        if isinstance(texts, str):          # one text with offsets, as the state is read (no specials in states)
            ids = self.encode(texts)
            return {"input_ids": ids, "offset_mapping": [(i, i + 1) for i in range(len(ids))]}
        return {"input_ids": [self.encode(t) for t in texts]}

    @staticmethod
    def encode(text):
        pattern = "(" + "|".join(map(re.escape, SPECIALS)) + ")"
        ids = []
        for piece in re.split(pattern, text):
            ids.extend([SPECIAL_IDS[piece]] if piece in SPECIAL_IDS else [ord(c) for c in piece])
        return ids

    @staticmethod
    def decode(ids):
        inverse = {v: k for k, v in SPECIAL_IDS.items()}
        return "".join(inverse.get(i) or chr(i) for i in ids)


REQUEST = {
    "state": {"ticket": "Fan rattles", "n": 1.0, "ok": True, "list": [1, "é"]},
    "questions": {
        "rattle": {"type": "noul", "instructions": "Is a rattle audible?", "criteria": {"false": None}},
        "team": {"type": "choice", "criteria": {"ß-team": {"when": "hardware"}, "Ärger": None, "alpha": "first"}},
        "sev": {"type": "score", "instructions": {"question": "How bad?"}, "criteria": ["none", "major"]},
    },
}

EXPECTED = (
    "<|im_start|>system\nRead the complete state and schema. Decide every field jointly. Each answer must be exactly "
    "one of that field's allowed options.<|im_end|>\n<|im_start|>user\nSTATE:\n"
    '{"list":[1,"é"],"n":1.0,"ok":true,"ticket":"Fan rattles"}'
    "\n\nSCHEMA FIELDS:\n"
    "\nFIELD 1\nID: rattle\nTYPE: noul\nINSTRUCTION: Is a rattle audible?\nALLOWED OPTIONS:\n"
    'OPTION 1: {"description":"The proposition is true or the answer is yes.","option_id":"true"}\n'
    'OPTION 2: {"option_id":"false"}\n'
    "END FIELD\n"
    "\nFIELD 2\nID: team\nTYPE: choice\nINSTRUCTION: team\nALLOWED OPTIONS:\n"
    'OPTION 1: {"description":"first","option_id":"alpha"}\n'
    'OPTION 2: {"option_id":"Ärger"}\n'
    'OPTION 3: {"description":{"when":"hardware"},"option_id":"ß-team"}\n'
    "END FIELD\n"
    "\nFIELD 3\nID: sev\nTYPE: score\nINSTRUCTION: {\"question\":\"How bad?\"}\nALLOWED OPTIONS:\n"
    'OPTION 1: {"description":"none","option_id":"0"}\n'
    'OPTION 2: {"description":"major","option_id":"1"}\n'
    "END FIELD\n"
    "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:"
)
QUESTION_TEXTS = ["Is a rattle audible?", "team", '{"question":"How bad?"}']
OPTION_TEXTS = [
    ['{"description":"The proposition is true or the answer is yes.","option_id":"true"}', '{"option_id":"false"}'],
    ['{"description":"first","option_id":"alpha"}', '{"option_id":"Ärger"}',
     '{"description":{"when":"hardware"},"option_id":"ß-team"}'],
    ['{"description":"none","option_id":"0"}', '{"description":"major","option_id":"1"}'],
]


def encode(request=REQUEST, max_tokens=64_000, media=(), **over):
    req = parse_request({**request, **over}, EngineConfig())
    return PromptEncoder(CharTokenizer(), max_tokens).encode(req, media)


def test_ids_equal_the_hand_written_prompt():
    out = encode()
    assert out.input_ids == CharTokenizer.encode(EXPECTED)
    assert out.state_tokens_dropped == 0


def test_spans_cover_exactly_instructions_and_option_semantics():
    out = encode()
    text = lambda s: CharTokenizer.decode(out.input_ids[s[0]:s[1]])
    assert [text(s) for s in out.spans.question_spans] == QUESTION_TEXTS
    assert [[text(s) for s in q] for q in out.spans.option_spans] == OPTION_TEXTS
    assert out.spans.question_types == (0, 1, 2)
    # boundaries derived by hand: the first question span starts right after "INSTRUCTION: " of FIELD 1
    start = len(CharTokenizer.encode(EXPECTED[:EXPECTED.index("Is a rattle audible?")]))
    assert out.spans.question_spans[0] == (start, start + len("Is a rattle audible?"))


def test_array_state_and_string_state_render():
    assert render([1, {"b": 2, "a": None}]) == '[1,{"a":null,"b":2}]'
    assert render("plain \"text\"") == 'plain "text"'
    assert render({"big": 12345678901234567890, "f": 1e-05}) == '{"big":12345678901234567890,"f":1e-05}'
    out = encode(state=["x", 2])
    assert '\nSTATE:\n["x",2]\n\nSCHEMA' in CharTokenizer.decode(out.input_ids)


def test_media_ids_go_right_after_state_marker_and_shift_spans():
    media = CharTokenizer.encode("<|vision_start|><|image_pad|><|image_pad|><|vision_end|>\n")
    plain, with_media = encode(), encode(media=media)
    decoded = CharTokenizer.decode(with_media.input_ids)
    assert decoded == EXPECTED.replace("STATE:\n", "STATE:\n<|vision_start|><|image_pad|><|image_pad|><|vision_end|>\n")
    assert with_media.spans.question_spans[0][0] == plain.spans.question_spans[0][0] + len(media)


def test_state_tail_is_truncated_to_fit_and_reported():
    full = len(encode().input_ids)
    out = encode(max_tokens=full - 10)
    assert len(out.input_ids) == full - 10 and out.state_tokens_dropped == 10
    state = '{"list":[1,"é"],"n":1.0,"ok":true,"ticket":"Fan rattles"}'
    assert "STATE:\n" + state[:-10] + "\n\nSCHEMA FIELDS:" in CharTokenizer.decode(out.input_ids)
    assert [CharTokenizer.decode(out.input_ids[s:e]) for s, e in out.spans.question_spans] == QUESTION_TEXTS


def test_truncate_false_refuses_instead():
    full = len(encode().input_ids)
    with pytest.raises(ContextTooLong) as info:
        encode(max_tokens=full - 1, truncate=False)
    assert info.value.issues[0].loc == ("state",) and info.value.needed_tokens == full


def test_schema_too_long_by_itself_is_an_error():
    state_len = len('{"list":[1,"é"],"n":1.0,"ok":true,"ticket":"Fan rattles"}')
    fixed = len(encode().input_ids) - state_len
    assert len(encode(max_tokens=fixed).input_ids) == fixed          # fits with an empty state
    with pytest.raises(ContextTooLong, match=f"schema requires {fixed} tokens before state; maximum is {fixed - 1}"):
        encode(max_tokens=fixed - 1)
