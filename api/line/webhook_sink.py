"""The webhook sink: each unit's result to the existing signed webhooks (`api.http.webhooks.WebhookSender`).

`[[sink]] type = "webhook"`: `url`, `secret_file` (the HMAC key, read at start), `dead_letter` (JSONL path),
`on` (the published outcomes sent: act, review, pass, timeout, overload, error; all by default), `max_tries`,
`timeout_s`. The payload is `Result.payload()`, signed as every webhook is (`X-Omni-Signature`), with the unit id as
`Idempotency-Key`. `send` returns once the sender has queued it: the sender retries with backoff and, after
`max_tries`, keeps it in the dead-letter file (so a receiver that is down never holds the line); a full queue goes
straight to the dead-letter file, as it does for `omni serve`.
Knows nothing of the runner, the ledger or the model.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api.http.webhooks import WebhookConfig, WebhookError, WebhookSender
from api.line.config import LineContext
from api.line.config_reader import TableReader
from api.line.ports import ERROR, OVERLOAD, TIMEOUT, LineError, Result

KEYS = ("type", "url", "secret_file", "dead_letter", "on", "max_tries", "timeout_s")
ALL_OUTCOMES = ("act", "review", "pass", TIMEOUT, OVERLOAD, ERROR, "decided")


@dataclass(frozen=True)
class WebhookSinkConfig:
    url: str
    secret: str
    dead_letter: Path
    on: tuple[str, ...]
    max_tries: int
    timeout_s: float

    def build(self, context: LineContext) -> WebhookSink:
        return WebhookSink(self)

    def webhook_config(self) -> WebhookConfig:
        """The sender's config: every published outcome goes through; `on` is this sink's own filter."""
        return WebhookConfig(url=self.url, secret=self.secret, dead_letter_path=self.dead_letter,
                             on=frozenset({"act", "review", "pass"}), max_tries=self.max_tries,
                             timeout_s=self.timeout_s)


def parse_sink(reader: TableReader, table: dict[str, Any], where: str, context: LineContext) -> WebhookSinkConfig:
    reader.no_unknown_keys(table, KEYS, where)
    url = reader.string(table, "url", where)
    secret_path = reader.path(table, "secret_file", where, must_exist=True)
    secret = secret_path.read_text(encoding="utf-8").strip()
    if not secret:
        raise reader.error(where, "secret_file", f"{secret_path} is empty")
    on = reader.strings(table, "on", where, ALL_OUTCOMES)
    unknown = [outcome for outcome in on if outcome not in ALL_OUTCOMES]
    if unknown:
        raise reader.error(where, "on", f"{', '.join(unknown)}: not an outcome ({', '.join(ALL_OUTCOMES)})")
    config = WebhookSinkConfig(url=url, secret=secret, dead_letter=reader.path(table, "dead_letter", where),
                               on=tuple(on), max_tries=reader.integer(table, "max_tries", where, 6, low=1, high=100),
                               timeout_s=reader.number(table, "timeout_s", where, 10.0, low=0.1, high=600))
    try:
        config.webhook_config()
    except WebhookError as exc:
        raise reader.error(where, "url", str(exc)) from None
    return config


class WebhookSink:
    def __init__(self, config: WebhookSinkConfig):
        self.config = config
        self.name = f"webhook:{config.url}"
        self.sender = WebhookSender(config.webhook_config())
        self.skipped = 0

    async def start(self) -> None:
        try:
            self.sender.start()
        except WebhookError as exc:
            raise LineError(f"sink {self.name}: {exc}") from None

    async def send(self, result: Result) -> None:
        if result.published_outcome() not in self.config.on:
            self.skipped += 1
            return
        self.sender.offer(result.payload(), result.unit_id)   # False: already in the dead-letter file, not lost

    async def close(self) -> None:
        self.sender.stop()

    def stats(self) -> dict[str, float]:
        return {**self.sender.stats(), "skipped": self.skipped}
