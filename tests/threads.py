"""Running test code in a thread of its own: `in_thread(fn, *args, seconds=...)` (a bound turns a hang into a
failure) and `asyncio_run(coro)`.

A pytest worker that ran a browser test holds Playwright's sync API, whose event loop stays "running" in the main
thread (in a greenlet): asyncio.run there fails with "cannot be called from a running event loop", so coroutines are
run in a thread of their own."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def in_thread(fn: Callable[..., T], *args: Any, seconds: float | None = None, **kwargs: Any) -> T:
    """fn(*args, **kwargs) in a daemon thread -> its result (its exception re-raised here); past `seconds` the test
    fails instead of hanging."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread)
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"test-{getattr(fn, '__name__', 'fn')}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} still running after {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["result"]


def asyncio_run(coro: Coroutine[Any, Any, T]) -> T:
    return in_thread(asyncio.run, coro)
