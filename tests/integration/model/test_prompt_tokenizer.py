"""The reference prompt with the checkpoint's real (tiny, locally trained) tokenizer: segment-wise ids."""
from transformers import AutoTokenizer

from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.model.prompt import PromptEncoder
from tests.unit.model.test_prompt import OPTION_TEXTS, QUESTION_TEXTS, REQUEST


def test_real_tokenizer_is_applied_segment_by_segment(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    req = parse_request(REQUEST, EngineConfig())
    out = PromptEncoder(tok, 64_000).encode(req)
    # the segments, listed by hand; each tokenized alone
    segs = [("<|im_start|>system\nRead the complete state and schema. Decide every field jointly. Each answer must be "
             "exactly one of that field's allowed options.<|im_end|>\n<|im_start|>user\nSTATE:\n"),
            '{"list":[1,"é"],"n":1.0,"ok":true,"ticket":"Fan rattles"}', "\n\nSCHEMA FIELDS:\n"]
    for k, (qid, qtype, qtext, opts) in enumerate(zip(["rattle", "team", "sev"], ["noul", "choice", "score"],
                                                      QUESTION_TEXTS, OPTION_TEXTS, strict=True), start=1):
        segs += [f"\nFIELD {k}\nID: {qid}\nTYPE: {qtype}\nINSTRUCTION: ", qtext, "\nALLOWED OPTIONS:\n"]
        for j, o in enumerate(opts, start=1):
            segs += [f"OPTION {j}: ", o, "\n"]
        segs.append("END FIELD\n")
    segs.append("\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:")
    expected = [i for s in segs for i in tok(s, add_special_tokens=False).input_ids]
    assert out.input_ids == expected
    assert out.input_ids[:1] == [tok.convert_tokens_to_ids("<|im_start|>")]
    joined = tok("".join(segs), add_special_tokens=False).input_ids
    assert joined != expected           # why segment-wise tokenization matters: joins merge differently
    for (s, e), q in zip(out.spans.question_spans, QUESTION_TEXTS, strict=True):
        assert out.input_ids[s:e] == tok(q, add_special_tokens=False).input_ids
