"""Helpers of the HTTP tests: the real app around the real DecisionEngine with a FakeModel behind it."""
from __future__ import annotations

import time

from omni.serve.engine import DecisionEngine
from tests.unit.fake_model import FakeModel

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
    """`with served(**settings) as (client, engine):` a TestClient around create_app, ready; `engine.model` is the
    FakeModel (pass `model=` for one with gates, or `engine=` for any engine)."""

    def __init__(self, model: FakeModel | None = None, engine=None, wait: bool = True, **settings):
        from fastapi.testclient import TestClient

        from api.http.app import create_app

        self.settings = settings_with(**settings)
        self.engine = engine or DecisionEngine(self.settings.engine, model or FakeModel(self.settings.engine))
        self.app = create_app(self.settings, self.engine)
        self.client = TestClient(self.app, raise_server_exceptions=False)
        self.wait = wait

    def __enter__(self):
        self.client.__enter__()
        if self.wait:
            wait_ready(self.client)
        return self.client, self.engine

    def __exit__(self, *exc):
        model = self.engine.model
        if isinstance(model, FakeModel):
            for gate in (model.release, model.load_gate, model.forward_gate):
                if gate is not None:
                    gate.set()
        return self.client.__exit__(*exc)
