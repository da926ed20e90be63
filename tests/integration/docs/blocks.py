"""The code blocks of the README and docs/, what their doc-test markers say, and the commands inside them.

A shell block (```bash, sh, shell, console, zsh) or a ```python block must have a marker on the line right above it:

    <!-- doc-test: run -->               every command runs, in order, in one scratch directory per page, and exits 0
    <!-- doc-test: server -->            the same, but `omni serve` / `omni review` start in the background on a free
                                         port (up once /ready answers 200) and the commands after them in the block talk
                                         to that server: `localhost:8000` becomes its address; a curl must get a 2xx
    <!-- doc-test: not run: REASON -->   nothing runs; REASON says why (real weights, a GPU, Docker, minutes of work)

`run` and `server` take modifiers after a `;`:

    after setup: REASON                  a leading `bash scripts/bootstrap.sh && ` is dropped: that set-up is what CI
                                         itself runs before the tests (`.ci/run`)
    line N not run: REASON               command N of the block (counted from 1, comments and blank lines aside) does
                                         not run; must come last (REASON runs to the end of the marker)

Every other fence names a language that is not run (```json, ```text, ```yaml …); a fence without a language is an
error, so a command cannot slip in unmarked. Knows nothing of how the commands are run.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

SHELL = {"bash", "sh", "shell", "console", "zsh"}
RUNNABLE = SHELL | {"python"}
SETUP = "bash scripts/bootstrap.sh && "
MARKER = re.compile(r"<!--\s*doc-test:\s*(?P<body>.*?)\s*-->")
FENCE = re.compile(r"^ {0,3}(?P<ticks>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<word>\w+)\1")
SERVERS = re.compile(r"^(?:\.venv/bin/)?omni (?:serve|review)\b")


class MarkerError(ValueError):
    """A marker this checker cannot read, or one that leaves a reason out."""


@dataclass(frozen=True)
class Plan:
    mode: str                                    # run | server | not run
    reason: str = ""                             # why not run (mode "not run")
    setup_reason: str = ""                       # `after setup`: why the bootstrap prefix is dropped
    skipped: dict[int, str] = field(default_factory=dict)   # command number -> why it does not run


@dataclass(frozen=True)
class Block:
    page: Path
    line: int                                    # the fence's line, from 1
    lang: str
    body: str
    marker: str | None                           # the marker's text, or None when the line above has none

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang in RUNNABLE


def read_blocks(page: Path) -> list[Block]:
    """Every fenced block of a markdown page, with the marker on the line above it (if any)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        ticks, start = opening["ticks"], i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(ticks)), len(lines))
        above = MARKER.fullmatch(lines[start - 1].strip()) if start > 0 else None
        blocks.append(Block(page, start + 1, opening["lang"].lower(), "\n".join(lines[start + 1:end]),
                            above["body"] if above else None))
        i = end + 1
    return blocks


def plan_of(block: Block) -> Plan:
    """What the block's marker asks for; MarkerError when there is none, or it cannot be read, or gives no reason."""
    if block.marker is None:
        raise MarkerError(f"{block.where}: a ```{block.lang} block without a doc-test marker on the line above it "
                          "(<!-- doc-test: run -->, server, or not run: REASON)")
    text = block.marker
    if text.startswith("not run:"):
        return Plan("not run", reason=_reason(text.removeprefix("not run:"), block))
    mode, _, rest = text.partition(";")
    mode = mode.strip()
    if mode not in ("run", "server"):
        raise MarkerError(f"{block.where}: doc-test marker {text!r} starts with neither run, server nor 'not run:'")
    setup_reason, skipped = "", {}
    while rest.strip():
        rest = rest.strip()
        lines = re.match(r"lines? (?P<numbers>\d+(?:\s*,\s*\d+)*) not run:(?P<reason>.*)$", rest)
        if lines:
            reason = _reason(lines["reason"], block)
            skipped.update({int(n): reason for n in lines["numbers"].split(",")})
            break
        if rest.startswith("after setup:"):
            setup, _, rest = rest.removeprefix("after setup:").partition(";")
            setup_reason = _reason(setup, block)
            continue
        raise MarkerError(f"{block.where}: unknown doc-test modifier {rest!r}")
    count = len(commands(block))
    if any(n < 1 or n > count for n in skipped):
        raise MarkerError(f"{block.where}: 'line N not run' names a command the block does not have (it has {count})")
    return Plan(mode, setup_reason=setup_reason, skipped=skipped)


def _reason(text: str, block: Block) -> str:
    reason = text.strip()
    if len(reason) < 10:
        raise MarkerError(f"{block.where}: say why it is not run, in words ({reason!r} is too short)")
    return reason


def commands(block: Block) -> list[str]:
    """The block's commands: a python block is one; a shell block's lines are joined across `\\` continuations, open
    quotes and heredocs; blank lines and whole-line comments are left out."""
    if block.lang == "python":
        return [block.body]
    found: list[str] = []
    pending: list[str] = []
    for line in block.body.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending.append(line)
        text = "\n".join(pending)
        if _complete(text):
            found.append(text)
            pending = []
    if pending:
        found.append("\n".join(pending))       # an unfinished command: running it fails and says where
    return found


def _complete(text: str) -> bool:
    if text.endswith("\\"):
        return False
    heredoc = HEREDOC.search(text)
    if heredoc:
        body = text[heredoc.end():].split("\n")[1:]
        return any(line.strip() == heredoc["word"] for line in body)
    try:
        shlex.split(text, comments=True)
    except ValueError:                          # an open quote: the command goes on on the next line
        return False
    return True


def starts_server(command: str) -> bool:
    return SERVERS.match(command.strip()) is not None
