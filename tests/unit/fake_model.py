"""FakeModel: a small model behind the REAL DecisionEngine for API and serving tests (no weights, no transformers).

It satisfies the `DecisionModel` surface (omni/model/surface.py; mypy checks it in `_declared_surface` below, and
tests/unit/test_surfaces.py at run time): nothing is ever chunked, its media "encoding" is the checks alone and it
keeps no cache.

Media are checked by the real limits and format sniffing; a body ending in b"CORRUPT" does not decode. Answers are
uniform. Knobs by state text: "__boom__" fails its whole batch in the forward, "__bug__" raises a plain RuntimeError
while preparing (an engine-side bug), "__slow_decode__" blocks while preparing until `release` is set.
`load_gate` holds the warm-up forward (the engine is loading); `forward_gate` holds every later forward.
"""
from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from omni.contract.audit import MediaAudit, ModelAudit, ModelEvidence, PromptAudit
from omni.contract.config import EngineConfig
from omni.contract.types import DecisionRequest
from omni.model.adapters import Selection
from omni.model.cache import CacheStats
from omni.model.calibration import Calibration
from omni.model.checkpoint import CheckpointSource
from omni.model.media import NO_MEDIA, RequestMedia
from omni.model.surface import DecisionModel
from preprocess.errors import CorruptMedia
from preprocess.item import MediaItem
from preprocess.media import check_request
from preprocess.sniff import sniff_for_slot

MAGIC = {"image": b"\x89PNG\r\n\x1a\n", "audio": b"RIFF\x00\x00\x00\x00WAVE", "video": b"\x00\x00\x00\x18ftypmp42"}
TOKENS = {"image": 64, "audio": 32, "video": 128}


def media(kind: str, payload: bytes = b"pixels" * 8, corrupt: bool = False) -> bytes:
    """Bytes that sniff as `kind`; `corrupt=True` keeps the magic but breaks the body."""
    return MAGIC[kind] + (b"CORRUPT" if corrupt else payload)


@dataclass
class FakeRecord:
    request: DecisionRequest
    num_tokens: int
    tokens_by_modality: dict[str, int]
    timings_ms: dict[str, float] = field(default_factory=lambda: {"decode": 0.1, "encode": 0.1})
    truncated_state_tokens: int = 0
    truncated_state_chars: int = 0
    cache: dict[str, str] = field(default_factory=dict)
    selection: Selection = field(default_factory=Selection)


class FakeModel:
    def __init__(self, config: EngineConfig | None = None, *, load_gate: threading.Event | None = None,
                 forward_gate: threading.Event | None = None):
        self.config = config or EngineConfig()
        self.source = CheckpointSource(Path("fake"), self.config.model_path is None, "2026-10-09")
        self.calibration: Calibration | None = None
        self.load_gate, self.forward_gate = load_gate, forward_gate
        self.release = threading.Event()
        self.seen: list[DecisionRequest] = []       # every request prepared after the warm-up
        self.forwards_started = 0                    # forward calls entered after the warm-up (gated or not)
        self._warm = False

    def encode_media(self, items: tuple[MediaItem, ...]) -> RequestMedia:
        """The real limits and sniffing; a body ending in b"CORRUPT" does not decode. Nothing is encoded."""
        check_request(items, self.config.media)
        for item in items:
            sniff_for_slot(item)
            if item.data.endswith(b"CORRUPT"):
                raise CorruptMedia(item, f"cannot decode this {item.kind}")
        return RequestMedia(NO_MEDIA, items=len(items))

    def prepare(self, request: DecisionRequest, media: RequestMedia | None = None,
                selection: Selection | None = None) -> FakeRecord:
        """(The fake hosts no adapters: the engine never selects one for it.)"""
        if request.state == "__bug__":
            raise RuntimeError("secret internal detail /srv/model.py line 42")
        if request.state == "__slow_decode__":
            self.release.wait(30)
        if self._warm:
            self.seen.append(request)
        if media is None:
            self.encode_media(request.media)
        tokens = {"text": 10 + 5 * len(request.questions)}
        for item in request.media:
            tokens[item.kind] = tokens.get(item.kind, 0) + TOKENS[item.kind]
        return FakeRecord(request, sum(tokens.values()), tokens)

    def logits(self, records: Sequence[FakeRecord]) -> list[list[torch.Tensor]]:
        """Uniform answers: equal logits."""
        return [[torch.zeros(len(q.options)) for q in r.request.questions] for r in records]

    def probabilities(self, records: Sequence[FakeRecord]) -> list[list[torch.Tensor]]:
        gate = self.forward_gate if self._warm else self.load_gate
        self.forwards_started += self._warm
        if gate is not None:
            gate.wait(30)
        self._warm = True
        if any(r.request.state == "__boom__" for r in records):
            raise RuntimeError("device fault in the fake forward")
        return [[torch.full((len(q.options),), 1.0 / len(q.options)) for q in r.request.questions] for r in records]

    def grad_off(self) -> torch.inference_mode:
        return torch.inference_mode()

    def explain(self, record: FakeRecord, per_question: list[torch.Tensor]) -> dict | None:
        """The fake has no head attention: a fixed, empty evidence when asked."""
        return None if record.request.evidence is None else {"method": "fake", "questions": {}}

    def needs_chunks(self, record: FakeRecord) -> bool:
        return False

    def prefill_tokens_left(self, record: FakeRecord) -> int:
        return 0

    def prefill_step(self, record: FakeRecord) -> bool:
        return True

    def cache_stats(self) -> dict[str, CacheStats]:
        return {}

    def forget_prefixes(self) -> None:
        pass

    def evidence(self, record: FakeRecord) -> ModelEvidence:
        """A fixed model (sha256 of b"fake"), no calibration, the request's media by their real sha256."""
        prompt = PromptAudit("fake/1", hashlib.sha256(b"fake template").hexdigest(),
                             hashlib.sha256(repr(record.request).encode()).hexdigest(), record.num_tokens,
                             dict(record.tokens_by_modality), 0, 0, "joint")
        media = tuple(MediaAudit(item.slot, item.index, hashlib.sha256(item.data).hexdigest(), len(item.data),
                                 item.kind, {}) for item in record.request.media)
        return ModelEvidence(ModelAudit("", hashlib.sha256(b"fake").hexdigest(), {}, self.source.release_date, "fake"),
                             None, prompt, media, {"omni_decide": "test", "git_commit": None, "torch": "", "transformers": "",
                                                   "pyav": "", "ffmpeg": ""}, "cpu", "float32", "float32")


def _declared_surface(model: FakeModel) -> DecisionModel[FakeRecord]:
    """Never called: mypy (pyproject's [tool.mypy] files include this module) checks here that the fake keeps
    satisfying the `DecisionModel` surface the engine is typed by."""
    return model
