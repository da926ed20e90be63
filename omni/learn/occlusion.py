"""The occlusion check (`omni explain --occlude`, benchmarks/occlusion.py): does the evidence matter to the answer?

Given a request, the answers it got and their evidence (`x_evidence`, docs/evidence.md), for every question and
every medium with evidence for that question's chosen answer (the state, each image, audio clip and video): the
medium's top-evidence region is masked (a grey box, a silent window, the seconds cut out of a video, a blanked
span: `occlusion_media.py`, `occlusion_video.py`) and the request decided again; then the same with a random region
of the same size (`occlusion_regions.py`). A row reports how far the chosen answer's probability moved each time:
|Δp| = |p_masked(answer) − p(answer)|, and whether the chosen answer changed. Probabilities are the response's
(rounded to 4 decimals). Masked requests that are the same (two questions whose top regions coincide) are decided
once; all are decided in batches of `batch_size` through the caller's `decide`.

Knows nothing of the engine (the caller's `decide` answers a batch of requests), HTTP, argv or the environment.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from omni.contract.json_values import JSONObject
from omni.contract.types import DecisionRequest, Question
from omni.learn.occlusion_media import mask_audio, mask_image, mask_state
from omni.learn.occlusion_regions import Region, Target, evidence_targets, random_region, region_rng
from omni.learn.occlusion_video import mask_video
from preprocess.item import SLOT_OF_KIND, MediaItem

# answers of a batch of requests, in order: question id -> System One answer
Decide = Callable[[Sequence[DecisionRequest]], Sequence[Mapping[str, JSONObject]]]
KINDS = ("state", "image", "audio", "video")


def option_probabilities(answer: Mapping[str, Any]) -> dict[str, float]:
    """Option id -> probability, from one System One answer (noul: "true" / "false")."""
    if answer["type"] == "noul":
        p_true = float(answer["noul"])
        return {"true": p_true, "false": round(1.0 - p_true, 4)}
    return {str(k): float(v) for k, v in answer["probabilities"].items()}


def chosen(answer: Mapping[str, Any]) -> str:
    """The most probable option id (the first of equals, in the answer's order)."""
    probabilities = option_probabilities(answer)
    return max(probabilities, key=lambda option: probabilities[option])


def mask_item(item: MediaItem, region: Region) -> bytes:
    if item.kind == "image":
        assert region.box is not None
        return mask_image(item, region.box)
    if item.kind == "audio":
        return mask_audio(item, region.start, region.end)
    return mask_video(item, region.start, region.end)


def masked_request(request: DecisionRequest, target: Target, region: Region) -> DecisionRequest:
    """`request` with `region` of `target` masked (a state mask sends the blanked rendering as a string state)."""
    if target.kind == "state":
        return replace(request, state=mask_state(request.state, int(region.start), int(region.end)))
    slot = SLOT_OF_KIND[target.kind]
    item = next((m for m in request.media if m.slot == slot and m.index == target.index), None)
    if item is None:
        raise ValueError(f"the evidence names {target.label}, which the request does not have")
    masked = replace(item, data=mask_item(item, region), declared_type=None,
                     origin=f"{item.origin or item.label}, masked {region.describe()}")
    return replace(request, media=tuple(masked if m is item else m for m in request.media))


@dataclass(frozen=True)
class OcclusionRow:
    """One question × one medium: the chosen answer's probability before, with its top region masked, with a random
    region of the same size masked; the answers chosen then."""

    record: int
    question: str
    target: Target
    answer: str
    p: float
    top: Region
    random: Region
    p_top: float
    p_random: float
    answer_top: str
    answer_random: str

    @property
    def abs_dp_top(self) -> float:
        return abs(self.p_top - self.p)

    @property
    def abs_dp_random(self) -> float:
        return abs(self.p_random - self.p)

    def to_wire(self) -> dict[str, Any]:
        def side(region: Region, p: float, answer: str) -> dict[str, Any]:
            return {"region": region.to_wire(), "p": p, "abs_dp": round(abs(p - self.p), 4),
                    "answer": answer, "flipped": answer != self.answer}

        return {"record": self.record, "question": self.question, "medium": self.target.label,
                "kind": self.target.kind, "answer": self.answer, "p": self.p,
                "top": side(self.top, self.p_top, self.answer_top),
                "random": side(self.random, self.p_random, self.answer_random)}


@dataclass(frozen=True)
class Planned:
    question: Question
    target: Target
    top: Region
    random: Region


def plan(request: DecisionRequest, evidence: Mapping[str, Any], seed: int, record: int = 0) -> list[Planned]:
    """Every (question, medium) to mask, with its top and random regions (the random ones seeded by `seed`, the
    record, the medium and the question)."""
    questions = {q.id: (i, q) for i, q in enumerate(request.questions)}
    planned = []
    for qid, entry in evidence["questions"].items():
        q_index, question = questions[qid]
        for target, top, extent in evidence_targets(entry):
            rng = region_rng(seed, record, KINDS.index(target.kind), target.index, q_index)
            planned.append(Planned(question, target, top, random_region(top, extent, rng)))
    return planned


def decide_masked(request: DecisionRequest, masks: Iterable[tuple[Target, Region]], decide: Decide,
                  batch_size: int) -> dict[tuple[Target, Region], Mapping[str, JSONObject]]:
    """The answers of `request` under each mask (each distinct mask decided once, `batch_size` per call)."""
    unique = list(dict.fromkeys(masks))
    answers: dict[tuple[Target, Region], Mapping[str, JSONObject]] = {}
    for start in range(0, len(unique), max(1, batch_size)):
        chunk = unique[start:start + max(1, batch_size)]
        decided = decide([masked_request(request, target, region) for target, region in chunk])
        answers.update(zip(chunk, decided, strict=True))
    return answers


def occlusion_rows(request: DecisionRequest, evidence: Mapping[str, Any], answers: Mapping[str, Mapping[str, Any]],
                   decide: Decide, *, seed: int = 0, record: int = 0, batch_size: int = 8) -> list[OcclusionRow]:
    """The check for one request: `answers` and `evidence` are its decision's (`request` asked for evidence or not:
    the masked copies are decided as it is, evidence or none)."""
    planned = plan(request, evidence, seed, record)
    masks = [(p.target, region) for p in planned for region in (p.top, p.random)]
    masked = decide_masked(request, masks, decide, batch_size)
    rows = []
    for p in planned:
        qid = p.question.id
        answer = str(evidence["questions"][qid]["answer"])
        top, rand = masked[(p.target, p.top)][qid], masked[(p.target, p.random)][qid]
        rows.append(OcclusionRow(record, qid, p.target, answer, option_probabilities(answers[qid])[answer], p.top,
                                 p.random, option_probabilities(top)[answer], option_probabilities(rand)[answer],
                                 chosen(top), chosen(rand)))
    return rows


def summarize(rows: Sequence[OcclusionRow], key: Callable[[OcclusionRow], str] = lambda row: row.target.kind
              ) -> dict[str, dict[str, float]]:
    """Per group (default: the medium's kind, in KINDS order): rows, mean |Δp| top and random, the share of rows
    where the top mask moved the answer's probability more than the random one (and as much), answers changed."""
    groups: dict[str, list[OcclusionRow]] = {}
    for row in sorted(rows, key=lambda r: KINDS.index(r.target.kind)):
        groups.setdefault(key(row), []).append(row)
    return {name: {"rows": len(group),
                   "mean_abs_dp_top": statistics.fmean(r.abs_dp_top for r in group),
                   "mean_abs_dp_random": statistics.fmean(r.abs_dp_random for r in group),
                   "share_top_moved_more": sum(r.abs_dp_top > r.abs_dp_random for r in group) / len(group),
                   "share_tied": sum(r.abs_dp_top == r.abs_dp_random for r in group) / len(group),
                   "flipped_top": sum(r.answer_top != r.answer for r in group),
                   "flipped_random": sum(r.answer_random != r.answer for r in group)}
            for name, group in groups.items()}
