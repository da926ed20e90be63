"""The Clef reference prompt (clef-reference §2): segments → token ids + question/option spans; state truncation.

Every literal and every rendered value is tokenized as its own segment (`add_special_tokens=False`) and the id
lists are concatenated, exactly as the reference does; tokenizing the joined string would differ at the joins.
Knows nothing of the model, media decoding or HTTP: media arrive as already-expanded placeholder ids.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni.contract.errors import ContextTooLong
from omni.contract.types import TYPE_INDEX, DecisionRequest, Question
from omni.model.head import RecordSpans

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SYSTEM_PROMPT = ("Read the complete state and schema. Decide every field jointly. Each answer must be exactly one "
                 "of that field's allowed options.")
PREFIX = "<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\nSTATE:\n"
SCHEMA_HEADER = "\n\nSCHEMA FIELDS:\n"
SUFFIX = "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:"
# the template's name and its fixed text: a change of either means the logits mean something else (the audit record
# names both; calibration files are bound to the text's hash)
TEMPLATE_NAME = "clef-joint-schema/1"
TEMPLATE_TEXT = f"{PREFIX}\x00{SCHEMA_HEADER}\x00{SUFFIX}\x00FIELD/ID/TYPE/INSTRUCTION/OPTION v1"
TEMPLATE_SHA256 = hashlib.sha256(TEMPLATE_TEXT.encode()).hexdigest()


def render(value: Any) -> str:
    """A string as is (no quotes); anything else as compact, key-sorted JSON with non-ASCII kept."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def option_semantics(option_id: str, description: Any) -> dict:
    """What the prompt shows for an option: its id, plus its description unless that is None."""
    semantics = {"option_id": option_id}
    if description is not None:
        semantics["description"] = description
    return semantics


READ_WHOLE_CHARS_PER_TOKEN = 8       # a state up to 8 characters per token of room is tokenized whole
CUT_MARGIN_CHARS = 2048              # tokens ending this close to a cut are not trusted


@dataclass(frozen=True)
class StateTokens:
    """The state's kept ids, its token count (exact, or estimated when only a prefix was read), dropped characters."""

    ids: list[int]
    total_tokens: int
    exact: bool
    dropped_chars: int
    offsets: list[tuple[int, int]] = field(default_factory=list)   # each kept id's [start, end) in the state's text

    @property
    def dropped_tokens(self) -> int:
        return self.total_tokens - len(self.ids)


@dataclass(frozen=True)
class Block:
    """A run of schema tokens after the prefix that the head reads together with the prefix: [start, end) in the
    record and the spans of its questions (indices in the record)."""

    start: int
    end: int
    spans: RecordSpans


@dataclass(frozen=True)
class EncodedPrompt:
    """The record's ids. Everything before `prefix_len` (system text, STATE:, media, state, schema header) does not
    depend on the questions; then the blocks: joint, one block with every question and the suffix; isolated, one
    block per question, each numbered FIELD 1 and ending with the suffix, as if the question were asked alone."""

    input_ids: list[int]
    blocks: tuple[Block, ...]
    prefix_len: int
    state_tokens_kept: int
    state_tokens_dropped: int          # exact, or estimated when the state was read only as far as it fits
    isolated: bool = False
    state_chars_dropped: int = 0
    state_count_exact: bool = True
    media_end: int = 0                 # the first index after the media segment (system text and media before it)
    state_offsets: list[tuple[int, int]] = field(default_factory=list, repr=False, compare=False)  # kept ids' chars

    @property
    def spans(self) -> RecordSpans:
        """The joint record's spans (its one block)."""
        if self.isolated:
            raise ValueError("an isolated record has one block of spans per question")
        return self.blocks[0].spans


class PromptEncoder:
    """Renders requests into the reference prompt with one tokenizer; fixed segments are tokenized once."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_context_tokens: int):
        self.tokenizer = tokenizer
        self.max_context_tokens = max_context_tokens
        self.prefix_ids = self._ids([PREFIX])[0]
        self.schema_header_ids = self._ids([SCHEMA_HEADER])[0]
        self.suffix_ids = self._ids([SUFFIX])[0]

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        return self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]

    def schema_segments(self, questions: Sequence[Question]) -> list[tuple[str, str]]:
        """The schema as (role, text) segments; role "question"/"option" marks a span, "text" a plain literal."""
        segments: list[tuple[str, str]] = []
        for k, question in enumerate(questions, start=1):
            segments.append(("text", f"\nFIELD {k}\nID: {question.id}\nTYPE: {question.type}\nINSTRUCTION: "))
            instructions = question.instructions
            segments.append(("question", str(question.id) if instructions is None or instructions == ""
                             else render(instructions)))
            segments.append(("text", "\nALLOWED OPTIONS:\n"))
            for j, option in enumerate(question.prompt_options, start=1):
                segments.append(("text", f"OPTION {j}: "))
                segments.append(("option", render(option_semantics(option.id, option.description))))
                segments.append(("text", "\n"))
            segments.append(("text", "END FIELD\n"))
        return segments

    def encode(self, request: DecisionRequest, media_ids: Sequence[int] = (), isolated: bool = False) -> EncodedPrompt:
        """The record's ids and spans; `isolated`: one block per question instead of one joint schema."""
        groups = [[q] for q in request.questions] if isolated else [list(request.questions)]
        block_segments = [self.schema_segments(group) for group in groups]
        pieces = iter(self._ids([text for segments in block_segments for _, text in segments]))
        blocks = [self._block(segments, pieces, group) for segments, group in zip(block_segments, groups, strict=True)]

        head_ids = list(self.prefix_ids) + list(media_ids)
        fixed = len(head_ids) + len(self.schema_header_ids) + max(len(ids) for ids, _ in blocks)
        if fixed > self.max_context_tokens:
            raise ContextTooLong(("questions",), f"schema requires {fixed} tokens before state; maximum is "
                                 f"{self.max_context_tokens}", fixed, self.max_context_tokens)
        state = self.state_tokens(render(request.state), self.max_context_tokens - fixed)
        if state.dropped_tokens and not request.truncate:
            needed = f"{fixed + state.total_tokens}" if state.exact else f"more than {self.max_context_tokens}"
            raise ContextTooLong(("state",), f"the request needs {needed} tokens; maximum context "
                                 f"length is {self.max_context_tokens} (send \"truncate\": true to cut the state's "
                                 f"tail)", fixed + state.total_tokens, self.max_context_tokens)
        kept = len(state.ids)
        input_ids = head_ids + state.ids + list(self.schema_header_ids)
        prefix_len = len(input_ids)
        placed = []
        for ids, spans in blocks:
            placed.append(Block(len(input_ids), len(input_ids) + len(ids), spans.shifted(len(input_ids))))
            input_ids += ids
        return EncodedPrompt(input_ids, tuple(placed), prefix_len, kept, state.dropped_tokens, isolated,
                             state.dropped_chars, state.exact, len(head_ids), state.offsets)

    def state_tokens(self, text: str, budget: int) -> StateTokens:
        """The state's first `budget` tokens, tokenizing only about as far as they reach.

        A state up to READ_WHOLE_CHARS_PER_TOKEN x budget characters (plus a margin) is tokenized whole, as the
        reference does. A longer one is tokenized a prefix at a time (doubling): only tokens that end more than
        CUT_MARGIN_CHARS before the cut are trusted, since tokens near a cut may merge differently once the text
        goes on; the first `budget` of them are the reference's first `budget`. Time and memory then follow the
        context, not the body; what was dropped is counted exactly in characters and estimated in tokens.
        """
        limit = READ_WHOLE_CHARS_PER_TOKEN * max(budget, 1) + CUT_MARGIN_CHARS
        while True:
            whole = len(text) <= limit
            encoded = self.tokenizer(text if whole else text[:limit], add_special_tokens=False,
                                     return_offsets_mapping=True)
            ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
            if whole:
                kept_end = offsets[budget - 1][1] if 0 < budget < len(ids) else (0 if budget == 0 else len(text))
                return StateTokens(ids[:budget], len(ids), True, len(text) - kept_end if len(ids) > budget else 0,
                                   offsets[:budget])
            trusted_end = limit - CUT_MARGIN_CHARS
            trusted = [i for i, (_, end) in zip(ids, offsets, strict=True) if end <= trusted_end]
            if len(trusted) > budget:
                kept_end = offsets[budget - 1][1] if budget else 0
                chars_per_token = max(kept_end, 1) / max(budget, 1)
                estimate = len(trusted) - budget + round((len(text) - trusted_end) / chars_per_token)
                return StateTokens(trusted[:budget], budget + estimate, False, len(text) - kept_end, offsets[:budget])
            limit *= 2

    def _block(self, segments: Sequence[tuple[str, str]], pieces: Iterator[list[int]],
               questions: Sequence[Question]) -> tuple[list[int], RecordSpans]:
        """One block's ids (its schema segments, then the suffix) and its spans relative to the block's start."""
        ids: list[int] = []
        question_spans: list[tuple[int, int]] = []
        option_spans: list[tuple[tuple[int, int], ...]] = []
        current: list[tuple[int, int]] = []
        for role, _ in segments:
            start = len(ids)
            ids.extend(next(pieces))
            if role == "question":
                if current:
                    option_spans.append(tuple(current))
                current = []
                question_spans.append((start, len(ids)))
            elif role == "option":
                current.append((start, len(ids)))
        option_spans.append(tuple(current))
        ids.extend(self.suffix_ids)
        return ids, RecordSpans(tuple(question_spans), tuple(option_spans), tuple(TYPE_INDEX[q.type] for q in questions))
