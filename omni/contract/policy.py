"""A decision policy: the TOML file that turns answers into act / review / pass, read, checked and versioned.

    version = "inspection-2026-12"       # required: the team's name for this version
    model = "line-4"                     # optional: bound to this adapter (or the base's name); governs its decisions only
    [default]                            # optional: questions the policy does not name (without it they get none)
    auto_at = 0.9
    [questions.label_visible]            # noul
    auto_at = 0.95                       # an answer's confidence below this -> review
    act_on = [false]                     # automatic answers that call for action; the others -> pass
    [questions.next_step]                # choice
    type = "choice"                      # optional: checked against act_on now and against each request later
    options = ["ship", "rework", "scrap"]
    auto_at = 0.9
    act_on = ["rework", "scrap"]
    auto_at_for = {scrap = 0.97}         # optional: a stricter (or looser) bar for one answer
    [questions.severity]                 # score: act_on names levels by index
    auto_at = 0.9
    act_on = [2]
    auto_at_with = {video = 0.95}        # optional: the bar when the request has that medium (image/audio/video)
    qa_sample = 0.05                     # optional: this share of its automatic answers also goes to QA review
    qa_target = 0.97                     # optional: the precision its automatic answers must keep (omni report qa)
    [qa]                                 # optional: QA samples of automatic decisions (docs/policies.md)
    sample = 0.02                        # the share of automatic decisions (act or pass) also sent to QA review
    seed = 7                             # optional: the draws' seed (default: from the file's sha256); recorded
    target = 0.95                        # optional: the precision every question's automatic answers must keep

`act_on` values say the question's type: booleans noul, strings choice, integers score (one kind per list).
`read_policy` checks the whole file when it is read; a `PolicyError` names the file, the key path and its TOML line.
The policy's `sha256` is the file's bytes' sha256: the version a decision names. `PolicySource` holds the current
policy of a process and swaps it whole on reload, so a decision sees one policy or the next, never half of one.
Knows nothing of HTTP, torch, the model or the environment.
"""
from __future__ import annotations

import hashlib
import math
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni.contract.errors import OmniError, quoted
from omni.contract.toml_text import TomlProblem, load_toml
from omni.contract.types import Answer

POLICY_FORMAT = "omni-policy/1"
MODALITIES = ("image", "audio", "video")
QUESTION_KEYS = ("auto_at", "act_on", "auto_at_for", "auto_at_with", "type", "options", "qa_sample", "qa_target")
QA_KEYS = ("sample", "seed", "target")
DEFAULT_KEYS = ("auto_at", "auto_at_with")


class PolicyError(OmniError):
    """A policy file that cannot be read or used; the message names the file, the key and its line."""


@dataclass(frozen=True)
class QuestionPolicy:
    """One question's rule. `type` is None when the file does not say (then it is what `act_on` implies, if any)."""

    auto_at: float
    act_on: tuple[Answer, ...] = ()
    auto_at_for: dict[str, float] = field(default_factory=dict)      # answer (as its wire key) -> bar
    auto_at_with: dict[str, float] = field(default_factory=dict)     # modality -> bar
    type: str | None = None
    options: tuple[str, ...] | None = None                           # choice ids, or score level count as "0".."n-1"
    qa_sample: float | None = None       # the share of its automatic answers also sent to QA review (None: [qa]'s)
    qa_target: float | None = None       # the precision its automatic answers must keep (None: [qa]'s)


@dataclass(frozen=True)
class QaPlan:
    """`[qa]`: QA samples of automatic decisions (omni/contract/qa.py draws them)."""

    sample: float                          # the share of automatic decisions (act or pass) also sent to QA review
    seed: int                              # the draws' seed: given, or the first 48 bits of the file's sha256
    target: float | None = None            # the precision every question's automatic answers must keep


@dataclass(frozen=True)
class Policy:
    version: str
    sha256: str
    questions: dict[str, QuestionPolicy]
    default: QuestionPolicy | None = None
    source: str = "policy"
    model: str | None = None               # bound to this model (an adapter's name, or the base's): it governs that
                                           # model's decisions only; None: whichever model answered
    qa: QaPlan | None = None               # [qa]: QA samples of automatic decisions; None: none (unless a question's)

    def governs(self, model: str, base_names: tuple[str, ...] = ()) -> bool:
        """Whether decisions answered by `model` are taken under this policy (the base's names count as one)."""
        if self.model is None:
            return True
        return self.model == model or (self.model in base_names and model in base_names)

    def rule_for(self, question_id: str) -> QuestionPolicy | None:
        """The question's own rule, else the `[default]` one, else None (the question gets no outcome)."""
        return self.questions.get(question_id, self.default)


def answer_key(answer: Answer) -> str:
    """An answer as the wire keys it: true/false, a choice id, a level index."""
    if isinstance(answer, bool):
        return "true" if answer else "false"
    return str(answer)


def read_policy(path: str | Path) -> Policy:
    """Read and check a policy file; PolicyError naming the file and the key or line at fault."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy ({exc.strerror or exc})") from None
    return parse_policy(data, str(path))


def parse_policy(data: bytes, source: str = "policy") -> Policy:
    try:
        text = data.decode("utf-8")
        table = load_toml(text)
    except UnicodeDecodeError:
        raise PolicyError(f"{source}: not UTF-8 text") from None
    except TomlProblem as exc:      # its syntax, or nested past the limit (never a RecursionError)
        raise PolicyError(f"{source}: {exc}") from None
    reader = _Reader(text, source)
    reader.no_unknown_keys(table, ("version", "model", "default", "questions", "qa"), "")
    version = table.get("version")
    if not isinstance(version, str) or not version.strip():
        raise reader.error("version", "", "required: a non-empty string naming this version of the policy")
    model = table.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise reader.error("model", "", "a non-empty string: the model (adapter) whose decisions this policy governs")
    questions_table = table.get("questions", {})
    if not isinstance(questions_table, dict):
        raise reader.error("questions", "", "must be a table of [questions.<id>] tables")
    questions = {qid: reader.question(rule, f"questions.{qid}") for qid, rule in questions_table.items()}
    default = None
    if "default" in table:
        reader.no_unknown_keys(table["default"], DEFAULT_KEYS, "default")
        default = reader.question(table["default"], "default")
    if not questions and default is None:
        raise reader.error("questions", "", "the policy names no question and has no [default]")
    sha256 = hashlib.sha256(data).hexdigest()
    qa = reader.qa(table["qa"], sha256) if "qa" in table else None
    if qa is None and any(rule.qa_sample for rule in questions.values()):
        qa = QaPlan(0.0, int(sha256[:12], 16), None)      # only questions sample: the seed still comes from the file
    return Policy(version.strip(), sha256, questions, default, source,
                  model.strip() if isinstance(model, str) else None, qa)


class _Reader:
    """Checks tables and turns a problem into a PolicyError with the key path and the line it is on."""

    def __init__(self, text: str, source: str):
        self.lines = text.splitlines()
        self.source = source

    def error(self, key: str, table: str, message: str) -> PolicyError:
        path = f"{table}.{key}" if table else key
        line = self.line_of(table, key.split(".")[0].split("[")[0])
        where = f" (line {line})" if line else ""
        return PolicyError(f"{self.source}: {path}{where}: {message}")

    def line_of(self, table: str, key: str) -> int | None:
        """The line of `key` inside `[table]` (or of the table's header when the key is not written)."""
        header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(
            rf'(?:{re.escape(part)}|"{re.escape(part)}")' for part in table.split(".")) + r"\s*\]") if table else None
        inside, header_line = table == "", None
        named = rf'(?:{re.escape(key)}|"{re.escape(key)}")'
        for number, line in enumerate(self.lines, start=1):
            if not table and re.match(rf"^\s*\[\[?\s*{named}\s*[.\]]", line):
                return number                   # a top-level key written as a table: [key] or [key.sub]
            if re.match(r"^\s*\[", line):
                inside = bool(header and header.match(line))
                header_line = number if inside else header_line
            elif inside and re.match(rf"^\s*{named}\s*=", line):
                return number
        return header_line

    def no_unknown_keys(self, table: Any, known: tuple[str, ...], path: str) -> None:
        if not isinstance(table, dict):
            raise self.error(path.rsplit(".", 1)[-1], path.rpartition(".")[0], "must be a table")
        where = {"": "the top level of a policy", "default": "a [default] table", "qa": "the [qa] table"}.get(
            path, "a question table")
        for key in table:
            if key not in known:
                raise self.error(key, path, f"unknown key; {where} takes {', '.join(known)}")

    def question(self, rule: Any, path: str) -> QuestionPolicy:
        self.no_unknown_keys(rule, QUESTION_KEYS, path)
        if "auto_at" not in rule:
            raise self.error("auto_at", path, "required: the confidence from which an answer is automatic (0..1)")
        auto_at = self.bar(rule["auto_at"], "auto_at", path)
        kind = rule.get("type")
        if kind is not None and kind not in ("noul", "choice", "score"):
            raise self.error("type", path, f"{quoted(kind)} is not a question type (noul, choice, score)")
        act_on = self.act_on(rule.get("act_on", []), path)
        implied = {bool: "noul", str: "choice", int: "score"}[type(act_on[0])] if act_on else None
        if kind and implied and kind != implied:
            raise self.error("act_on", path, f"{implied} answers ({quoted(list(act_on))}) for a {kind} question")
        kind = kind or implied
        options = self.options(rule.get("options"), kind, path)
        by_answer = self.bars(rule.get("auto_at_for", {}), "auto_at_for", path)
        for answer in (*act_on, *by_answer):
            key = answer_key(answer)
            if options is not None and key not in options:
                raise self.error("act_on" if answer in act_on else f"auto_at_for.{answer}", path,
                                 f"{quoted(key)} is not an answer of this question (its answers: {', '.join(options)})")
        with_medium = self.bars(rule.get("auto_at_with", {}), "auto_at_with", path)
        for medium in with_medium:
            if medium not in MODALITIES:
                raise self.error(f"auto_at_with.{medium}", path, f"not a medium ({', '.join(MODALITIES)})")
        qa_sample = self.bar(rule["qa_sample"], "qa_sample", path, "share") if "qa_sample" in rule else None
        qa_target = self.bar(rule["qa_target"], "qa_target", path) if "qa_target" in rule else None
        return QuestionPolicy(auto_at, act_on, by_answer, with_medium, kind, options, qa_sample, qa_target)

    def qa(self, table: Any, sha256: str) -> QaPlan:
        self.no_unknown_keys(table, QA_KEYS, "qa")
        if "sample" not in table:
            raise self.error("sample", "qa", "required: the share of automatic decisions sent to QA review (0..1)")
        seed = table.get("seed", int(sha256[:12], 16))
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise self.error("seed", "qa", f"{quoted(seed)} is not a seed: a whole number from 0")
        target = self.bar(table["target"], "target", "qa") if "target" in table else None
        return QaPlan(self.bar(table["sample"], "sample", "qa", "share"), seed, target)

    def bar(self, value: Any, key: str, path: str, what: str = "confidence") -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0.0 <= value <= 1.0:
            raise self.error(key, path, f"{quoted(value)} is not a {what} between 0 and 1")
        return float(value)

    def bars(self, value: Any, key: str, path: str) -> dict[str, float]:
        if not isinstance(value, dict):
            raise self.error(key, path, "must be a table: answer or medium = confidence (0..1)")
        return {str(name): self.bar(bar, f"{key}.{name}", path) for name, bar in value.items()}

    def act_on(self, value: Any, path: str) -> tuple[Answer, ...]:
        if not isinstance(value, list):
            raise self.error("act_on", path, "must be a list of answers: booleans (noul), option ids (choice) or "
                                             "level indexes (score)")
        kinds = {type(v) for v in value}
        if len(kinds) > 1 or (kinds and not kinds <= {bool, str, int}):
            raise self.error("act_on", path, f"{quoted(value)}: one kind of answer per list — booleans (noul), "
                                             "option ids (choice) or level indexes (score)")
        if any(isinstance(v, int) and not isinstance(v, bool) and v < 0 for v in value):
            raise self.error("act_on", path, f"{quoted(value)}: a score level is an index from 0")
        return tuple(value)

    def options(self, value: Any, kind: str | None, path: str) -> tuple[str, ...] | None:
        if value is None:
            return ("true", "false") if kind == "noul" else None
        if kind == "noul":
            raise self.error("options", path, "a noul question's answers are true and false")
        if kind == "score" and isinstance(value, int) and not isinstance(value, bool) and value >= 2:
            return tuple(str(level) for level in range(value))
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value) \
                or len(set(value)) != len(value):
            raise self.error("options", path, "a list of distinct option ids (choice), or a level count (score)")
        if kind == "score":
            return tuple(str(level) for level in range(len(value)))      # the levels' names: indexes on the wire
        return tuple(value)


class PolicySource:
    """The policy a process decides with, swapped whole on `reload()`: a reader takes `current` once per decision."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.current: Policy = read_policy(self.path)
        self.reloads = 0

    def reload(self) -> Policy:
        """Read the file again; on any problem the current policy stays and PolicyError says why."""
        with self._lock:
            policy = read_policy(self.path)
            self.current = policy            # one reference assignment: readers see the old policy or the new one
            self.reloads += 1
            return policy
