"""Backlogs: a JSONL file of requests → an output file with one record per line, answered by an engine-like backend
with a bounded number of lines in flight; rerunning the same command resumes.

The runner reads the input lazily (lines numbered from 1, split on "\\n" only; blank lines skipped), hands each
pending line to `concurrency` worker threads, and each worker asks the backend for that line's answer: in-process,
`EngineBackend` parses the line and waits on `DecisionEngine.submit`, so the engine micro-batches the lines in
flight; a remote backend posts it to a server. Records (the format of `omni.contract.batch_file`) are appended as
answers finish, in completion order, one flushed write per record. On a rerun a line whose last record is an answer is
skipped, and so is one whose error a retry cannot mend (a 4xx: not JSON, a missing or corrupt file, a bad question);
one that failed for the service's reasons (429, 5xx, 408/504 deadlines) is tried again. Before and after each run the
output is rewritten (atomically) with one record per line, the last, so reruns never grow it. A failing line only
ever costs its own record; a backend that cannot answer at all (`BackendUnavailable`) stops the run, leaving the
lines not yet written for the next run.
Knows nothing of HTTP, argv or how a line becomes a request: the edge passes the backend (with its line parser) and
`describe(exc, request_id) -> (status, body)`, the error table's view of a failure, whose status alone says whether a
retry can help.
"""
from __future__ import annotations

import dataclasses
import json
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from omni.contract.batch_file import read_batch_output
from omni.contract.errors import NotReady, Overloaded
from omni.contract.outcomes import with_outcome
from omni.contract.policy import Policy
from omni.contract.types import Decision, DecisionRequest
from omni.serve.engine import DecisionEngine

__all__ = ["BackendUnavailable", "BacklogSummary", "EngineBackend", "LineFailed", "OutputWriter", "answered_lines",
           "compact_output", "input_reference", "pending_lines", "read_batch_output", "retryable", "run_backlog",
           "settled_lines"]

Describe = Callable[[BaseException, str], tuple[int, dict]]
Gate = Callable[[DecisionRequest, Callable[[DecisionRequest], Decision]], Decision]   # (request, forward) -> decision
# characters Python's str.splitlines() breaks on that json.dumps(ensure_ascii=False) leaves raw inside strings
_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


class LineFailed(Exception):
    """A line's answer is an error the backend already holds in wire form (a server's status and body)."""

    def __init__(self, status: int, body: Any):
        self.status, self.body = status, body
        super().__init__(f"status {status}")


class BackendUnavailable(Exception):
    """The backend cannot answer any line now (a server that does not answer, a key it refuses): the run stops."""


class Backend(Protocol):
    def answer(self, text: bytes, request_id: str) -> dict:
        """The System One response body for one input line (without its line break); raises on failure."""


@dataclass
class BacklogSummary:
    pending: int = 0          # lines to answer in this run (not blank, not answered before)
    answered: int = 0
    failed: int = 0           # lines that got an error record in this run
    skipped: int = 0          # lines answered by an earlier run
    failed_before: int = 0    # lines an earlier run found wrong in themselves (a 4xx): not tried again
    aborted: str | None = None
    wall_s: float = 0.0


class EngineBackend:
    """In-process: `parse(text) -> DecisionRequest`, then the engine's serving path (admission, decode pool,
    micro-batcher). A full queue (Overloaded) or a stopping engine is retried `retries` times after its wait. With
    `gate(request, forward) -> Decision` (the hash banks, consulted first: the edge builds it on `omni.banks.gate`),
    each line goes through it, which calls `forward` (the engine, with the retries) only when it must."""

    def __init__(self, engine: DecisionEngine, parse: Callable[[bytes], DecisionRequest], deadline_s: float | None = None,
                 retries: int = 5, max_wait_s: float = 30.0, sleep: Callable[[float], None] = time.sleep,
                 policy: Policy | None = None, gate: Gate | None = None):
        self.engine, self.parse, self.deadline_s = engine, parse, deadline_s
        self.retries, self.max_wait_s, self.sleep = retries, max_wait_s, sleep
        self.policy = policy              # each response gets its x_outcome under it
        self.gate = gate

    def answer(self, text: bytes, request_id: str) -> dict:
        request = dataclasses.replace(self.parse(text), request_id=request_id)
        decision = self._forward(request) if self.gate is None else self.gate(request, self._forward)
        return with_outcome(decision, request, self.policy).to_wire()

    def _forward(self, request: DecisionRequest) -> Decision:
        for attempt in range(self.retries + 1):
            try:
                return self.engine.submit(request, deadline_s=self.deadline_s).result()
            except (Overloaded, NotReady) as exc:
                if attempt == self.retries:
                    raise
                wait_s = exc.retry_after_s if isinstance(exc, Overloaded) else 1.0   # NotReady says no time
                self.sleep(min(self.max_wait_s, wait_s))
        raise AssertionError("unreachable")


def input_reference(input_path: str | Path, out_path: str | Path) -> str:
    """The input file as records name it: relative to the output's folder when possible, else absolute."""
    absolute = Path(input_path).resolve()
    try:
        return Path(os.path.relpath(absolute, Path(out_path).resolve().parent)).as_posix()
    except ValueError:        # another drive (Windows): no relative path exists
        return str(absolute)


def answered_lines(out_path: str | Path) -> set[int]:
    """Lines whose last record in the output is an answer (a rerun skips them)."""
    return {line for line, record in read_batch_output(out_path).items() if "response" in record}


def retryable(status: object) -> bool:
    """Whether a line that failed with `status` can succeed when tried again: overload (429), unavailable or a
    server fault (5xx), a deadline (408, 504). A 4xx says the line itself is wrong (not JSON, a missing or corrupt
    file, a bad question): trying it again gives the same answer."""
    return not isinstance(status, int) or status >= 500 or status in (408, 429)


def settled_lines(out_path: str | Path) -> tuple[set[int], set[int]]:
    """(lines answered, lines whose last record is an error a retry cannot mend): a rerun skips both."""
    answered, failed = set(), set()
    for line, record in read_batch_output(out_path).items():
        if "response" in record:
            answered.add(line)
        elif isinstance(record.get("error"), dict) and not retryable(record["error"].get("status")):
            failed.add(line)
    return answered, failed


def compact_output(out_path: str | Path) -> None:
    """Rewrite the output with exactly one record per line, the last one, in line order (atomically: a temporary file
    renamed over it), so reruns never grow it."""
    path = Path(out_path)
    if not path.exists():
        return
    records = read_batch_output(path)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(temporary, "wb") as handle:
        handle.writelines(encode_record(records[line]) for line in sorted(records))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def pending_lines(input_path: str | Path, answered: set[int]) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, its bytes without the line break) for every non-blank line not in `answered`."""
    with open(input_path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            text = raw.rstrip(b"\r\n")
            if text.strip() and number not in answered:
                yield number, text


class OutputWriter:
    """Appends records to the output, one flushed write each; a torn last record (a crash mid-write) is closed off
    first so that the next record starts on its own line."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file = open(self.path, "ab")  # noqa: SIM115  (held for the run, closed by close())
        if self._file.tell() > 0:
            with open(self.path, "rb") as existing:
                existing.seek(-1, os.SEEK_END)
                if existing.read(1) != b"\n":
                    self._file.write(b"\n")

    def write(self, record: dict) -> None:
        data = encode_record(record)
        with self._lock:
            self._file.write(data)
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def encode_record(record: dict) -> bytes:
    """One record as a line of UTF-8 JSON that every line splitter sees as one line."""
    try:
        text = json.dumps(record, ensure_ascii=False)
        for char, escape in _LINE_BREAKS.items():
            text = text.replace(char, escape)      # only ever inside JSON strings, where the escape means the same
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:                     # a lone surrogate: \\u escapes are still valid JSON
        return json.dumps(record).encode("ascii") + b"\n"


def answer_line(backend: Backend, describe: Describe, number: int, text: bytes, reference: str) -> dict:
    """The record of one line: its answer or its error (BackendUnavailable goes up: no record)."""
    request_id = uuid.uuid4().hex
    record: dict[str, Any] = {"line": number, "input": reference}
    try:
        response = backend.answer(text, request_id)
        audit = response.pop("x_audit", None)      # the decision's audit record, beside its answer in the record
        record["response"] = response
        if audit is not None:
            record["audit"] = audit
        return record
    except BackendUnavailable:
        raise
    except LineFailed as exc:
        status, body = exc.status, exc.body
    except Exception as exc:  # noqa: BLE001  (every failure of a line is that line's record, never the run's end)
        status, body = describe(exc, request_id)
    record["error"] = {"status": status, "body": body}
    return record


def run_backlog(input_path: str | Path, out_path: str | Path, backend: Backend, describe: Describe,
                concurrency: int = 16, progress: bool = True) -> BacklogSummary:
    """Answer every pending line of `input_path` into `out_path` with at most `concurrency` lines in flight."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    answered, failed_for_good = settled_lines(out_path)
    settled = answered | failed_for_good
    summary = BacklogSummary(pending=sum(1 for _ in pending_lines(input_path, settled)))
    summary.skipped, summary.failed_before = len(answered), len(failed_for_good)
    reference = input_reference(input_path, out_path)
    compact_output(out_path)                 # one record per line before appending (an older run's duplicates go)
    writer = OutputWriter(out_path)
    started = time.perf_counter()
    try:
        with _progress_bar(summary.pending, progress) as bar:
            _feed(pending_lines(input_path, settled), concurrency, summary,
                  lambda number, text: answer_line(backend, describe, number, text, reference), writer, bar)
    finally:
        writer.close()
        compact_output(out_path)             # and after: each rerun leaves exactly one record per line
        summary.wall_s = time.perf_counter() - started
    return summary


class _Workers:
    """What `_feed`'s workers share: the bounded queue of lines, the stop flag, the fatal errors, the tally."""

    def __init__(self, concurrency: int, summary: BacklogSummary, answer: Callable[[int, bytes], dict],
                 writer: OutputWriter, bar: Any):
        self.work: queue.Queue = queue.Queue(maxsize=concurrency)
        self.stop = threading.Event()
        self.fatal: list[BaseException] = []
        self._tally = threading.Lock()
        self._summary, self._answer, self._writer, self._bar = summary, answer, writer, bar

    def run(self) -> None:
        """One worker: answer and write lines until the queue hands it None."""
        while (item := self.work.get()) is not None:
            if self.stop.is_set():
                continue                  # drain what was queued: those lines are left for the next run
            try:
                record = self._answer(*item)
                self._writer.write(record)
            except BackendUnavailable as exc:
                self._summary.aborted = self._summary.aborted or str(exc)
                self.stop.set()
                continue
            except BaseException as exc:  # noqa: BLE001  (the output cannot be written, a bug: re-raised below)
                self.fatal.append(exc)
                self.stop.set()
                continue
            with self._tally:
                self._summary.answered += "response" in record
                self._summary.failed += "error" in record
                self._bar.update(1)


def _feed(lines: Iterator[tuple[int, bytes]], concurrency: int, summary: BacklogSummary,
          answer: Callable[[int, bytes], dict], writer: OutputWriter, bar: Any) -> None:
    """Workers take lines from a bounded queue and write their records; the first fatal error stops the feeding."""
    workers = _Workers(concurrency, summary, answer, writer, bar)
    threads = [threading.Thread(target=workers.run, name=f"omni-batch-{i}", daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    try:
        for item in lines:
            if workers.stop.is_set():
                break
            workers.work.put(item)
    except BaseException:                 # Ctrl-C: the lines in flight finish and are written, the rest wait
        workers.stop.set()
        raise
    finally:
        for _ in threads:
            workers.work.put(None)
        for thread in threads:
            thread.join()
    if workers.fatal:
        raise workers.fatal[0]


def _progress_bar(total: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="line", desc="omni batch", dynamic_ncols=True, disable=not enabled)
