"""FakeEngine: the DecisionEngine surface (load/start/stop/ready/info/check_model/decide/submit/batcher), no model.

It runs the real serving shape — bounded admission, a bounded decode pool, the real MicroBatcher feeding one
"model" thread — so API tests exercise concurrency, overload, deadlines and failure isolation for real.
Fake media are recognised by magic bytes (see `media()`); what each request carried is kept in `seen`.
Knobs (by state text): "__boom__" fails its whole batch, "__slow_decode__" blocks in decode until
`slow_decode_release` is set, "__bug__" raises a plain RuntimeError in submit (an engine bug).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from omni.serve.batcher import MicroBatcher
from omni.contract.config import EngineConfig
from omni.serve.engine import DecisionEngine
from omni.contract.errors import DeadlineExceeded, NotReady, Overloaded
from omni.contract.types import Decision, DecisionRequest, Usage
from preprocess.errors import CorruptMedia, MediaTooLarge, UnsupportedMedia

MAGIC = {"image": b"\x89PNG\r\n\x1a\n", "audio": b"RIFF\x00\x00\x00\x00WAVE", "video": b"\x00\x00\x00\x18ftypmp42"}
TOKENS = {"image": 64, "audio": 32, "video": 128}


def media(kind: str, payload: bytes = b"pixels" * 8, corrupt: bool = False) -> bytes:
    """Bytes the fake accepts as `kind`; `corrupt=True` keeps the magic but breaks the body."""
    return MAGIC[kind] + (b"CORRUPT" if corrupt else payload)


class FakeEngine:
    def __init__(self, config: EngineConfig | None = None, *, start_gate: threading.Event | None = None,
                 fail_start: Exception | None = None, forward_gate: threading.Event | None = None):
        self.config = config or EngineConfig()
        self.start_gate, self.fail_start, self.forward_gate = start_gate, fail_start, forward_gate
        self.slow_decode_release = threading.Event()
        self.seen: list[DecisionRequest] = []
        self.stopped_with: list[bool] = []
        self._ready = False
        self._lock = threading.Lock()
        self._in_flight = 0
        self.loaded = False
        self._pool: ThreadPoolExecutor | None = None
        self._batcher: MicroBatcher | None = None

    # ---------------------------------------------------------------- lifecycle
    def load(self):
        if self.start_gate is not None:
            self.start_gate.wait(30)
        if self.fail_start is not None:
            raise self.fail_start
        self.loaded = True
        return self

    def start(self):
        self.load()
        c = self.config
        self._pool = ThreadPoolExecutor(c.decode_threads, thread_name_prefix="fake-decode")
        self._batcher = MicroBatcher(self._run, lambda item: item[1], max_batch_records=c.max_batch_records,
                                     max_batch_tokens=c.max_batch_tokens, max_wait_ms=c.max_wait_ms,
                                     max_queue=c.max_queue, name="fake-model")
        self._batcher.start()
        self._ready = True
        return self

    def stop(self, drain: bool = True, timeout_s: float | None = None) -> None:
        self._ready = False
        self.stopped_with.append(drain)
        self.slow_decode_release.set()
        if self._pool is not None:
            self._pool.shutdown(wait=drain)
        if self._batcher is not None:
            self._batcher.stop(drain=drain, timeout_s=timeout_s)

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def batcher(self):
        return self._batcher

    @property
    def info(self) -> dict:
        c = self.config
        return {"name": c.served_name, "description": "fake engine for API tests", "context_tokens":
                c.max_context_tokens, "tiny_default": c.model_path is None,
                "limits": {"inputs": {"questions": c.max_questions, "images": c.media.max_images}}}

    check_model = DecisionEngine.check_model  # the real alias rules (it reads only self.config)

    # ---------------------------------------------------------------- deciding
    def decide(self, request: DecisionRequest) -> Decision:
        return self._run([self._decode(request)])[0]

    def submit(self, request: DecisionRequest, deadline_s: float | None = None) -> Future:
        if not self._ready:
            raise NotReady("fake engine not started")
        if request.state == "__bug__":
            raise RuntimeError("secret internal detail /srv/model.py line 42")
        with self._lock:
            if self._in_flight >= self.config.max_queue:
                raise Overloaded("fake engine full", retry_after_s=2.5)
            self._in_flight += 1
        self.seen.append(request)
        deadline = time.monotonic() + (deadline_s if deadline_s is not None else self.config.request_timeout_s)
        outcome: Future = Future()
        outcome.add_done_callback(self._release)
        self._pool.submit(self._decode_then_queue, request, deadline, outcome)
        return outcome

    def _release(self, _):
        with self._lock:
            self._in_flight -= 1

    def _decode_then_queue(self, request: DecisionRequest, deadline: float, outcome: Future) -> None:
        if not outcome.set_running_or_notify_cancel():
            return  # the caller gave up before we started
        try:
            item = self._decode(request)
            if time.monotonic() > deadline:
                raise DeadlineExceeded("deadline passed during decode")
            queued = self._batcher.submit(item, deadline)
        except BaseException as exc:
            outcome.set_exception(exc)
            return
        queued.add_done_callback(lambda f: outcome.set_exception(f.exception()) if f.exception()
                                 else outcome.set_result(f.result()))

    def _decode(self, request: DecisionRequest) -> tuple[DecisionRequest, int, dict[str, int]]:
        if request.state == "__slow_decode__":
            self.slow_decode_release.wait(30)
        tokens = {"text": 10 + 5 * len(request.questions)}
        limits = self.config.media
        for ref in request.media:
            if len(ref.data) > limits.max_image_bytes:
                raise MediaTooLarge(ref.label, f"{len(ref.data)} bytes is over the limit")
            kind = next((k for k, magic in MAGIC.items() if ref.data.startswith(magic)), None)
            if kind is None or kind != ref.kind:
                raise UnsupportedMedia(ref.label, f"not a supported {ref.kind} format")
            if ref.data.endswith(b"CORRUPT"):
                raise CorruptMedia(ref.label, f"cannot decode this {ref.kind}")
            tokens[ref.kind] = tokens.get(ref.kind, 0) + TOKENS[ref.kind]
        return request, sum(tokens.values()), tokens

    def _run(self, items: list) -> list:
        if self.forward_gate is not None:
            self.forward_gate.wait(30)
        if any(req.state == "__boom__" for req, _, _ in items):
            raise RuntimeError("device fault in the fake forward")
        return [self._answer(req, n, tokens, len(items)) for req, n, tokens in items]

    def _answer(self, req: DecisionRequest, n_tokens: int, tokens: dict, batch_size: int) -> Decision:
        answers = {}
        for q in req.questions:
            ids = [o.id for o in q.options]
            p = round(1 / len(ids), 4)
            if q.type == "noul":
                answers[q.id] = {"type": "noul", "noul": 0.5}
            elif q.type == "choice":
                answers[q.id] = {"type": "choice", "choice": ids[0], "probabilities": {i: p for i in ids},
                                 "confidence": p}
            else:
                answers[q.id] = {"type": "score", "score": round(sum(range(len(ids))) * p, 4),
                                 "legend": {o.id: o.description for o in q.options},
                                 "probabilities": {i: p for i in ids}, "confidence": p}
        return Decision(model=self.config.served_name, answers=answers, usage=Usage(n_tokens, 0),
                        tokens_by_modality=dict(tokens), batch_size=batch_size,
                        timings_ms={"decode": 0.1, "queue": 0.2, "forward": 0.3})


# ---------------------------------------------------------------------- helpers for the API tests
BASIC_QUESTIONS = {"ok": {"type": "noul", "instructions": "Is it fine?"},
                   "team": {"type": "choice", "instructions": "Who?", "criteria": {"billing": None, "tech": "bugs"}},
                   "level": {"type": "score", "criteria": ["low", "mid", "high"]}}


def body(state="Fan rattles.", **extra) -> dict:
    return {"model": "jev-latest", "state": state, "questions": BASIC_QUESTIONS, **extra}


def settings_with(**values):
    from api.http.settings import Settings

    return Settings().with_values(values)


def wait_until(condition, seconds: float = 20.0, what: str = "condition") -> None:
    """Poll `condition()` until true; fail (never hang) after `seconds`. Not a timing assertion."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.005)
    raise AssertionError(f"{what} not reached within {seconds} s")


def wait_ready(client, seconds: float = 20.0) -> None:
    wait_until(lambda: client.get("/ready").status_code == 200, seconds, "ready")


class served:
    """`with served(engine=..., **settings) as (client, engine):` a TestClient around create_app, ready."""

    def __init__(self, engine: FakeEngine | None = None, wait: bool = True, **settings):
        from fastapi.testclient import TestClient

        from api.http.app import create_app

        self.settings = settings_with(**settings)
        self.engine = engine or FakeEngine(self.settings.engine)
        self.app = create_app(self.settings, self.engine)
        self.client = TestClient(self.app, raise_server_exceptions=False)
        self.wait = wait

    def __enter__(self):
        self.client.__enter__()
        if self.wait:
            wait_ready(self.client)
        return self.client, self.engine

    def __exit__(self, *exc):
        self.engine.slow_decode_release.set()
        if self.engine.forward_gate is not None:
            self.engine.forward_gate.set()
        return self.client.__exit__(*exc)
