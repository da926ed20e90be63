"""The declared surfaces of a model: what the engine, evaluation and fine-tuning may call on one, and nothing else.

    PreparedInputs    what the engine reads of a prepared record (its request, token counts, timings, cache outcomes)
    DecisionModel     what the engine and evaluation call: prepare off the model thread, logits / probabilities on
                      it, the chunked-prefill hooks, the caches' counters, the evidence for an audit record
    AdapterHost       a model adapters can be loaded into and unloaded from (omni/model/adapters.py)
    TrainableModel    a DecisionModel whose weights fine-tuning can reach (the thinker backbone and the head)

A model's records are its own: whatever its `prepare` returns goes back, unchanged, to its `logits`,
`probabilities` and chunk hooks (`RecordT`); callers read them only through `PreparedInputs`. `ClefModel`
(omni/model/clef.py) satisfies both Protocols, the test `FakeModel` satisfies `DecisionModel`; mypy checks both
(`tests/unit/test_surfaces.py` checks it at run time too). Knows nothing of how a model is built, of serving, HTTP,
training loops or the environment.
"""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from typing_extensions import TypeVar

from omni.contract.audit import ModelEvidence
from omni.contract.types import DecisionRequest
from omni.model.adapters import Adapter, Selection
from omni.model.backbone import Backbone
from omni.model.cache import CacheStats
from omni.model.calibration import Calibration
from omni.model.checkpoint import CheckpointSource
from omni.model.head import JointSchemaHead
from omni.model.media import RequestMedia
from preprocess.item import MediaItem


@runtime_checkable
class PreparedInputs(Protocol):
    """What the engine reads of a prepared record (`omni.model.inputs.PreparedRecord` for ClefModel)."""

    @property
    def request(self) -> DecisionRequest: ...

    @property
    def tokens_by_modality(self) -> dict[str, int]: ...

    @property
    def timings_ms(self) -> dict[str, float]: ...          # decode, encode; the engine adds its own stages

    @property
    def cache(self) -> dict[str, str]: ...                 # media / prefix: hit, partial, miss (the forward fills prefix)

    @property
    def num_tokens(self) -> int: ...

    @property
    def truncated_state_tokens(self) -> int: ...

    @property
    def truncated_state_chars(self) -> int: ...

    @property
    def selection(self) -> Selection: ...                  # the adapter it is answered with, a shadow candidate


# the record type of one model; the default is what a caller that never sees the model's records knows of them
RecordT = TypeVar("RecordT", bound=PreparedInputs, default=PreparedInputs)


@runtime_checkable
class DecisionModel(Protocol[RecordT]):
    """Everything the engine and evaluation call on a model. `prepare` / `encode_media` run off the model thread and
    are thread-safe; `logits`, `probabilities` and the chunk hooks run on the one thread that owns the model."""

    @property
    def source(self) -> CheckpointSource: ...               # directory, tiny default or not, release date

    calibration: Calibration | None                          # applied by `probabilities` when set

    def encode_media(self, items: tuple[MediaItem, ...]) -> RequestMedia:
        """A request's media items decoded and encoded (through the media cache); typed MediaError on a bad item."""
        ...

    def prepare(self, request: DecisionRequest, media: RequestMedia | None = None,
                selection: Selection | None = None) -> RecordT:
        """The request's model inputs; `media`: its items already encoded by `encode_media`; `selection`: the adapter
        (and head-only shadow candidate) it is answered with (None: the base)."""
        ...

    def logits(self, records: Sequence[RecordT]) -> list[list[torch.Tensor]]:
        """Per record, per question: raw head logits [n_options] (under the caller's grad mode)."""
        ...

    def probabilities(self, records: Sequence[RecordT]) -> list[list[torch.Tensor]]:
        """Per record, per question: calibrated float32 probabilities in the head's (prompt) option order."""
        ...

    def grad_off(self) -> AbstractContextManager[Any]:
        """The grad mode `logits` should run in when no gradient is wanted (inference_mode unless the weights'
        quantization needs no_grad)."""
        ...

    def explain(self, record: RecordT, per_question: list[torch.Tensor]) -> dict[str, Any] | None:
        """The answered record's `x_evidence` (docs/evidence.md) from the head attention its forward left, given its
        probabilities (head order); None when its request did not ask for evidence."""
        ...

    def needs_chunks(self, record: RecordT) -> bool:
        """Whether the record's prefix is prefilled a chunk per model turn before it can be answered."""
        ...

    def prefill_tokens_left(self, record: RecordT) -> int:
        """Prefix tokens the record still has to prefill a chunk at a time (0 when it is not chunked)."""
        ...

    def prefill_step(self, record: RecordT) -> bool:
        """Prefill the record's next chunk; True once its prefix is complete."""
        ...

    def cache_stats(self) -> dict[str, CacheStats]:
        """The model's caches' counters by name (media, prefix)."""
        ...

    def forget_prefixes(self) -> None:
        """Drop every cached prefix (after the weights changed)."""
        ...

    def evidence(self, record: RecordT) -> ModelEvidence:
        """What the model knows of one prepared decision for its audit record: the checkpoint's hash, the
        calibration and buckets used, the prompt's and media's audit, software, device and dtypes."""
        ...


@runtime_checkable
class AdapterHost(Protocol):
    """A model that adapters can be loaded into (ClefModel; the test fake is not one). Both calls run where no
    forward runs at the same time."""

    def load_adapter(self, directory: str | Path, name: str) -> Adapter:
        """The adapter in `directory` served as `name`, checked against the base; AdapterError naming the cause."""
        ...

    def unload_adapter(self, adapter: Adapter) -> None:
        """Free what the adapter holds in the base."""
        ...

    def score_shadows(self, records: Sequence[Any]) -> list[list[torch.Tensor] | None]:
        """Head-only shadow candidates' probabilities for records their forwards answered (None: nothing to score),
        together; runs off the model thread, after the live answers."""
        ...


@runtime_checkable
class TrainableModel(DecisionModel[RecordT], Protocol[RecordT]):
    """A DecisionModel with the weights fine-tuning trains: the thinker (whole, or through LoRA adapters) and the
    joint-schema head. A model without weights (the test fake) cannot be trained, so this is a surface of its own."""

    backbone: Backbone
    head: JointSchemaHead
