"""Review guidelines: a markdown file per queue (`--review-guidelines [QUEUE=]FILE`), shown beside its items.

`Guidelines.load(settings, queues)` reads and renders every file once, at start (settings checked that each is
there, UTF-8 and at most 256 KiB; here a QUEUE that names no queue is a SettingsError too). `QUEUE=FILE` applies to
the queue with that id, name or kind (a batch output's file name, "kept", "policy", "disagreements"); a bare FILE
to every queue without its own. The HTML is CommonMark from markdown-it-py with raw HTML off: tags in the file come
out as text, and a link or image to anything but http(s) or mailto (javascript:, data:, file:, relative) stays text.
Route: `GET /v1/review/queues/{queue_id}/guidelines` (reviewer role).
Knows nothing of the engine, the model, labels or the environment.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Request
from starlette.exceptions import HTTPException

from api.http import review_schemas, schemas
from api.http.routes import require_role, service
from api.http.settings import GUIDELINES_FLAG, Settings, SettingsError, guideline_entries
from omni.contract.errors import quoted

if TYPE_CHECKING:
    from markdown_it.token import Token
    from markdown_it.utils import EnvType, OptionsDict

    from omni.learn.review_queue import ReviewQueues

FIXED_QUEUES = ("kept", "policy", "disagreements")   # the queues a server may offer besides its batch outputs
EMPTY = {"markdown": "", "html": ""}


LINK_SCHEMES = ("http://", "https://", "mailto:")   # what a guidelines link may point to; anything else stays text


def render(markdown: str) -> str:
    """Safe HTML for `markdown`: CommonMark, raw HTML escaped as text, links and images only to http(s) and mailto
    (others stay text); a link opens in a new tab, so a reviewer never leaves the item."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False})
    md.validateLink = lambda url: url.strip().lower().startswith(LINK_SCHEMES)  # type: ignore[method-assign]
    md.add_render_rule("link_open", _link_open)
    return md.render(markdown)


def _link_open(self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    tokens[idx].attrSet("target", "_blank")
    tokens[idx].attrSet("rel", "noopener noreferrer")
    return str(self.renderToken(tokens, idx, options, env))


@dataclass(frozen=True)
class Guidelines:
    """Rendered guidelines by queue label (a queue's id, name or kind) and for every other queue (`default`)."""

    by_queue: dict[str, dict[str, str]] = field(default_factory=dict)
    default: dict[str, str] | None = None

    @classmethod
    def load(cls, settings: Settings, queues: ReviewQueues | None) -> Guidelines:
        """Read and render the files named by `settings.review_guidelines`; SettingsError when a QUEUE names none of
        the server's queues (a typo would otherwise never show its guidelines)."""
        known = set(FIXED_QUEUES)
        for source in (queues.sources.values() if queues is not None else ()):
            known |= {source.id, source.name, source.kind}
        by_queue: dict[str, dict[str, str]] = {}
        default = None
        for queue, path in guideline_entries(settings.review_guidelines):
            text = Path(path).read_text(encoding="utf-8")
            page = {"markdown": text, "html": render(text)}
            if queue is None:
                default = page
            elif queue not in known:
                raise SettingsError(f"{GUIDELINES_FLAG}: no review queue {queue!r} (queues: "
                                    f"{', '.join(sorted(known))})")
            else:
                by_queue[queue] = page
        return cls(by_queue, default)

    def for_queue(self, *labels: str) -> dict[str, str]:
        """The guidelines of the queue known by `labels` (id, name, kind; the first that has its own wins), else the
        default, else empty markdown and html."""
        for label in labels:
            if label in self.by_queue:
                return self.by_queue[label]
        return self.default if self.default is not None else EMPTY


router = APIRouter(prefix="/v1/review", tags=["review"], dependencies=[Depends(require_role("reviewer"))],
                   responses=review_schemas.REVIEW_RESPONSES)


@router.get("/queues/{queue_id}/guidelines", response_model=schemas.Guidelines,
            summary="the queue's guidelines: markdown as written and safe HTML (both \"\" when it has none)")
def queue_guidelines(request: Request, queue_id: str) -> dict:
    svc = service(request)
    if svc.review is None:
        raise HTTPException(404, "review is off: start the server with --review-dir DIR")
    source = svc.review.sources.get(queue_id)
    if source is None and queue_id != "disagreements":
        raise HTTPException(404, f"no review queue {quoted(queue_id)}")
    labels = (queue_id, source.name, source.kind) if source is not None else (queue_id,)
    return svc.guidelines.for_queue(*labels) if svc.guidelines is not None else EMPTY
