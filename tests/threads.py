"""asyncio_run(coro): asyncio.run in a thread of its own, for tests that drive a coroutine.

A pytest worker that ran a browser test holds Playwright's sync API, whose event loop stays "running" in the main
thread (in a greenlet): asyncio.run there fails with "cannot be called from a running event loop"."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def asyncio_run(coro: Coroutine[Any, Any, T]) -> T:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread)
            box["error"] = exc

    thread = threading.Thread(target=target, name="test-asyncio")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
