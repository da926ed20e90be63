"""The media and prefix caches are exact: with them on, every answer equals the cache-off answer (1e-5, float32,
tiny checkpoint) for text, image, audio and heard video, single and batched, hits and misses mixed in one batch,
after evictions and under concurrent requests. A corrupt file never becomes a cache entry."""
from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import pytest

from fixtures.media import image_bytes, video_bytes, wav_bytes
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.serve.engine import DecisionEngine
from preprocess.errors import CorruptMedia

TOL = 1e-5
QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the label visible?"},
             "next": {"type": "choice", "instructions": "What next?", "criteria": {"ship": None, "rework": "Fix it",
                                                                                  "scrap": None}},
             "severity": {"type": "score", "criteria": ["none", "minor", "major"]}}
OTHER_QUESTIONS = {"noisy": {"type": "noul", "instructions": "Is it noisy?"},
                   "grade": {"type": "score", "instructions": "Grade it", "criteria": ["a", "b", "c", "d"]}}


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@pytest.fixture(scope="module")
def media():
    return {"image": [data_url("image/png", image_bytes("PNG", "RGB", 96, 64))],
            "audio": [data_url("audio/wav", wav_bytes(1.0, 16000, 1))],
            "video": [data_url("video/mp4", video_bytes(seconds=2.0, width=64, height=64))]}


def body(kind: str, media, questions=QUESTIONS, state="Unit 7 on the bench.") -> dict:
    slot = {"image": "images", "audio": "audio", "video": "videos"}
    return {"state": state, "questions": questions, **({slot[kind]: media[kind]} if kind in slot else {})}


def engine(tiny_dir, **config) -> DecisionEngine:
    return DecisionEngine(EngineConfig(model_path=str(tiny_dir), probability_decimals=8, **config)).load()


@pytest.fixture(scope="module")
def off(tiny_dir):
    return engine(tiny_dir, media_cache_mb=0, prefix_cache_mb=0)


def answers(engine_, bodies):
    return [d.answers for d in engine_.decide_batch([parse_request(b, engine_.config) for b in bodies])]


def assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for qid, answer in want.items():
        for key, value in answer.items():
            if isinstance(value, float):
                assert got[qid][key] == pytest.approx(value, abs=TOL), (qid, key)
            elif isinstance(value, dict):
                for option, p in value.items():
                    expected = pytest.approx(p, abs=TOL) if isinstance(p, float) else p
                    assert got[qid][key][option] == expected, (qid, key, option)
            else:
                assert got[qid][key] == value, (qid, key)


@pytest.mark.parametrize("kind", ["text", "image", "audio", "video"])
def test_single_requests_equal_cache_off_on_miss_and_on_hit(tiny_dir, off, media, kind):
    on = engine(tiny_dir)
    want = answers(off, [body(kind, media)])[0]
    first = on.decide(parse_request(body(kind, media), on.config))
    assert first.cache.get("prefix") == "miss"
    second = on.decide(parse_request(body(kind, media, OTHER_QUESTIONS), on.config))   # same prefix, new questions
    assert second.cache["prefix"] == "hit"
    if kind != "text":
        assert second.cache["media"] == "hit"
    if kind == "video":
        assert second.tokens_by_modality["video_audio"] > 0          # the soundtrack was heard
    assert_close(first.answers, want)
    assert_close(second.answers, answers(off, [body(kind, media, OTHER_QUESTIONS)])[0])


def test_a_batch_mixing_hits_and_misses_equals_cache_off(tiny_dir, off, media):
    on = engine(tiny_dir)
    answers(on, [body("image", media), body("video", media)])                         # warm two prefixes
    bodies = [body("image", media, OTHER_QUESTIONS), body("text", media), body("video", media, OTHER_QUESTIONS),
              body("audio", media), body("image", media, state="Another unit."), body("video", media)]
    got = on.decide_batch([parse_request(b, on.config) for b in bodies])
    assert [d.cache.get("prefix") for d in got] == ["hit", "miss", "hit", "miss", "miss", "hit"]
    for decision, want in zip(got, answers(off, bodies), strict=True):
        assert_close(decision.answers, want)


def test_answers_stay_exact_after_evictions(tiny_dir, off, media):
    small = engine(tiny_dir, prefix_cache_mb=0.35, media_cache_mb=0.05)              # room for about one prefix
    bodies = [body(kind, media, questions) for questions in (QUESTIONS, OTHER_QUESTIONS)
              for kind in ("text", "image", "audio", "video")]
    for _ in range(2):
        for b, want in zip(bodies, answers(off, bodies), strict=True):
            assert_close(small.decide(parse_request(b, small.config)).answers, want)
    stats = small.cache_stats()
    assert stats["prefix"].evictions > 0 and stats["prefix"].bytes <= stats["prefix"].budget_bytes
    assert stats["media"].bytes <= stats["media"].budget_bytes


def test_concurrent_requests_on_the_serving_path_equal_cache_off(tiny_dir, off, media):
    on = DecisionEngine(EngineConfig(model_path=str(tiny_dir), probability_decimals=8, max_wait_ms=2)).start()
    try:
        bodies = [body(kind, media, questions, state)
                  for state in ("Unit 7 on the bench.", "Unit 8.") for questions in (QUESTIONS, OTHER_QUESTIONS)
                  for kind in ("text", "image", "video")] * 2
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda b: on.submit(parse_request(b, on.config)).result(120), bodies))
        wanted = answers(off, bodies[:len(bodies) // 2])
        for decision, want in zip(got, wanted + wanted, strict=True):
            assert_close(decision.answers, want)
        assert on.cache_stats()["prefix"].hits > 0
    finally:
        on.stop()


def test_a_corrupt_file_is_never_cached_and_never_poisons_another_request(tiny_dir, off, media):
    on = engine(tiny_dir)
    good = video_bytes(seconds=2.0, width=64, height=64)
    broken = {"state": "s", "questions": QUESTIONS, "videos": [data_url("video/mp4", good[: len(good) // 3])]}
    for _ in range(2):
        with pytest.raises(CorruptMedia):
            on.decide(parse_request(broken, on.config))
    assert on.cache_stats()["media"].entries == 0
    assert_close(on.decide(parse_request(body("video", media), on.config)).answers, answers(off, [body("video", media)])[0])


def test_a_media_cache_hit_skips_decoding(tiny_dir, media, monkeypatch):
    import omni.model.media as media_module

    on = engine(tiny_dir, prefix_cache_mb=0)
    decoded = []
    real = media_module.decode_item
    monkeypatch.setattr(media_module, "decode_item", lambda *a, **k: decoded.append(1) or real(*a, **k))
    on.decide(parse_request(body("image", media), on.config))
    on.decide(parse_request(body("image", media, state="another state, same photo"), on.config))
    assert len(decoded) == 1 and on.cache_stats()["media"].hits == 1


def test_isolated_answers_equal_one_question_requests(tiny_dir, off, media):
    on = engine(tiny_dir)
    for kind in ("text", "video"):
        isolated = {**body(kind, media), "x_isolation": "isolated"}
        got = on.decide(parse_request(isolated, on.config)).answers
        for qid, question in QUESTIONS.items():
            alone = answers(off, [body(kind, media, {qid: question})])[0]
            assert_close({qid: got[qid]}, alone)


def test_isolated_answers_do_not_depend_on_the_other_questions(tiny_dir, media):
    on = engine(tiny_dir, isolation="isolated")                  # the server default
    base = on.decide(parse_request(body("image", media), on.config)).answers
    variants = [dict(reversed(list(QUESTIONS.items()))),                                   # reordered
                {"visible": QUESTIONS["visible"], "next": QUESTIONS["next"]},              # one removed
                {**QUESTIONS, **OTHER_QUESTIONS},                                          # more added
                {"visible": QUESTIONS["visible"], "renamed": QUESTIONS["next"], "severity": QUESTIONS["severity"]}]
    for questions in variants:
        got = on.decide(parse_request(body("image", media, questions), on.config)).answers
        for qid in set(got) & set(base):
            assert_close({qid: got[qid]}, {qid: base[qid]})
    renamed = on.decide(parse_request(body("image", media, variants[3]), on.config)).answers
    assert_close({"visible": renamed["visible"]}, {"visible": base["visible"]})
    joint = engine(tiny_dir).decide(parse_request({**body("image", media), "x_isolation": "joint"}, on.config))
    # joint answers differ: there the questions see each other
    assert abs(joint.answers["visible"]["noul"] - base["visible"]["noul"]) > 1e-4


def test_isolated_mode_with_caches_off_is_the_same(tiny_dir, off, media):
    isolated = {**body("audio", media), "x_isolation": "isolated"}
    on = engine(tiny_dir)
    assert_close(off.decide(parse_request(isolated, off.config)).answers,
                 on.decide(parse_request(isolated, on.config)).answers)
