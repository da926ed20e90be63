"""The engine's serving path (`start` + `submit`) on the tiny checkpoint: which requests skip the decode pool."""
import base64

import pytest

from fixtures.media import image_bytes
from omni.contract.config import EngineConfig
from omni.contract.errors import ContextTooLong
from omni.contract.request import parse_request
from omni.serve.engine import DecisionEngine, text_chars
from preprocess.errors import CorruptMedia

QUESTIONS = {"ok": {"type": "noul", "instructions": "Fine?"},
             "team": {"type": "choice", "criteria": {"hvac": "Heating", "power": None}}}
WAIT_S = 60
FAILURES = {"corrupt image": (CorruptMedia, r"images\[0\]: the png header cannot be read"),
            "context too long": (ContextTooLong, "maximum context length is 2000")}


@pytest.fixture(scope="module")
def engines(tiny_dir):
    """Two started engines on one checkpoint: the default, and one that always uses the decode pool."""
    started = {limit: DecisionEngine(EngineConfig(model_path=str(tiny_dir), inline_prepare_max_chars=limit)).start()
               for limit in (4096, 0)}
    yield started
    for engine in started.values():
        engine.stop()


class PoolSpy:
    """Wraps an engine's decode pool and counts what it is given."""

    def __init__(self, engine):
        self.engine, self.pool, self.calls = engine, engine._decode_pool, 0

    def submit(self, *args, **kwargs):
        self.calls += 1
        return self.pool.submit(*args, **kwargs)

    def __enter__(self):
        self.engine._decode_pool = self
        return self

    def __exit__(self, *exc):
        self.engine._decode_pool = self.pool


def submit(engine, body):
    return engine.submit(parse_request(body, engine.config)).result(WAIT_S)


def test_small_text_requests_skip_the_pool_and_answer_the_same(engines):
    body = {"state": "Short ticket.", "questions": QUESTIONS}
    with PoolSpy(engines[4096]) as inline, PoolSpy(engines[0]) as pooled:
        a, b = submit(engines[4096], body), submit(engines[0], body)
    assert (inline.calls, pooled.calls) == (0, 1)
    assert a.answers == b.answers and a.usage == b.usage


@pytest.mark.parametrize("kind", ["long state", "long JSON state", "long instructions", "media"])
def test_large_or_media_requests_use_the_pool(engines, kind):
    questions = dict(QUESTIONS)
    body = {"state": "Short ticket.", "questions": questions}
    if kind == "long state":
        body["state"] = "x" * 5000
    elif kind == "long JSON state":
        body["state"] = {"log": ["line"] * 1200}
    elif kind == "long instructions":
        questions["ok"] = {"type": "noul", "instructions": "Is it fine? " * 400}
    else:
        body["images"] = ["data:image/png;base64," + base64.b64encode(image_bytes("PNG")).decode()]
    with PoolSpy(engines[4096]) as spy:
        decision = submit(engines[4096], body)
    assert spy.calls == 1 and set(decision.answers) == set(questions)


def test_inline_errors_end_the_future_like_pooled_ones(tiny_dir):
    body = {"state": "word " * 200, "truncate": False, "questions": QUESTIONS}   # 1,000 characters: inline
    for limit in (4096, 0):
        engine = DecisionEngine(EngineConfig(model_path=str(tiny_dir), inline_prepare_max_chars=limit,
                                             max_context_tokens=200)).start()
        try:
            future = engine.submit(parse_request(body, engine.config))
            with pytest.raises(ContextTooLong):
                future.result(WAIT_S)
            assert engine._in_flight == 0
        finally:
            engine.stop()


def test_text_chars_counts_strings_keys_and_scalars_and_stops_early():
    assert text_chars(None, 100) == 0
    assert text_chars("abc", 100) == 3
    assert text_chars({"ab": ["cd", 12, 1.5, True]}, 100) == 2 + 2 + 2 + 3 + 4
    assert text_chars(["x" * 10] * 1000, 25) <= 40        # stops soon after passing the limit


@pytest.fixture(scope="module")
def patient_engine(tiny_dir):
    """max_wait_ms of an hour: any request that waited for company would time out below."""
    engine = DecisionEngine(EngineConfig(model_path=str(tiny_dir), max_wait_ms=3_600_000,
                                         max_context_tokens=2000)).start()
    yield engine
    engine.stop()


@pytest.mark.parametrize("kind", ["text", "image", "corrupt image", "context too long"])
def test_a_lone_request_never_waits_for_company(patient_engine, kind):
    body = {"state": "Short ticket.", "questions": QUESTIONS}
    if kind == "context too long":
        body.update(state="word " * 2000, truncate=False)
    if kind.endswith("image"):
        data = image_bytes("PNG")[:40] if kind == "corrupt image" else image_bytes("PNG")
        body["images"] = ["data:image/png;base64," + base64.b64encode(data).decode()]
    future = patient_engine.submit(parse_request(body, patient_engine.config))
    if kind in FAILURES:
        error, message = FAILURES[kind]
        with pytest.raises(error, match=message) as failure:
            future.result(WAIT_S)
        assert not isinstance(failure.value, TimeoutError)
    else:
        assert set(future.result(WAIT_S).answers) == set(QUESTIONS)
    assert patient_engine.batcher._expected == 0     # every announcement was settled
    text = patient_engine.submit(parse_request({"state": "next", "questions": QUESTIONS}, patient_engine.config))
    assert set(text.result(WAIT_S).answers) == set(QUESTIONS)
