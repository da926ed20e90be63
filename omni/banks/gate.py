"""The banks before the model, wherever a request is answered: `omni serve`, `omni decide`, `omni batch`, `omni line`.

`consult(shelf, request, limits)`: the banks in force (taken once: a reload mid-request does not mix two sets) and
what they found for the request's media, or None without banks or media. The consultation hashes (a photo's decode,
a video's wait for its vPDQ worker): call it off an event loop. `Consulted.answer(request, config)`: the
decision without a forward pass when the match decides (omni/banks/matching.py), else None; `Consulted.joined(
decision)`: the model's decision with the match riding along and the banks consulted in its audit record.
`decided(shelf, request, config, forward)`: all three in one, for a caller that may block —
`forward(request) -> Decision` runs only when no match decides.
Knows nothing of HTTP, the engine's internals, policies, metrics or how the request came.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from omni.banks.decisions import answered_by_bank, with_match
from omni.banks.matching import BankSet, Verdict
from omni.banks.shelf import BankShelf
from omni.contract.config import EngineConfig
from omni.contract.types import Decision, DecisionRequest
from preprocess.media import MediaLimits


@dataclass(frozen=True)
class Consulted:
    banks: BankSet          # the set consulted
    verdict: Verdict        # what it found

    def answer(self, request: DecisionRequest, config: EngineConfig) -> Decision | None:
        """The bank's decision under the engine's config: its served name, and its audit record shown as the
        engine's would be (`audit = "always"`: every decision's)."""
        if not self.verdict.decides:
            return None
        return answered_by_bank(request, self.verdict, config.served_name, self.banks.named(),
                                audit_shown=request.audit or config.audit == "always")

    def joined(self, decision: Decision) -> Decision:
        return with_match(decision, self.verdict, self.banks.named())


def consult(shelf: BankShelf | None, request: DecisionRequest, limits: MediaLimits,
            waiting_for_videos: Callable[[], None] | None = None) -> Consulted | None:
    """`waiting_for_videos`: see `BankSet.consult` (called once the request waits on its videos' vPDQ hashes)."""
    if shelf is None or not request.media:
        return None
    banks = shelf.current
    return Consulted(banks, banks.consult(request.media, limits, waiting_for_videos))


def decided(shelf: BankShelf | None, request: DecisionRequest, config: EngineConfig,
            forward: Callable[[DecisionRequest], Decision]) -> Decision:
    consulted = consult(shelf, request, config.media)
    answered = consulted.answer(request, config) if consulted is not None else None
    if answered is not None:
        return answered
    decision = forward(request)
    return consulted.joined(decision) if consulted is not None else decision
