"""Service settings: the ONLY place that reads the environment (`OMNI_*`); CLI flags override the same fields.

`Settings` holds the HTTP-edge fields plus a complete `EngineConfig`. Every scalar EngineConfig field `foo_bar` is
`OMNI_FOO_BAR` / `--foo-bar`; MediaLimits fields are `OMNI_MEDIA_FOO_BAR` / `--media-foo-bar`; `model_path` is
`OMNI_MODEL` / `--model`. The adapters' fields have flags of their own names (`FLAG_NAMES`: `--adapters DIR`,
`--adapter NAME=PATH`, `--shadow LIVE=CANDIDATE`); a list of pairs is a comma list of `NAME=VALUE` in its variable
(`OMNI_ADAPTERS=a=/srv/a,b=/srv/b`). Unknown `OMNI_*` names are reported, not ignored silently.
Knows nothing of FastAPI, uvicorn or the model; never reads the environment at import time.
"""
from __future__ import annotations

import dataclasses
import math
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from api.http.identity import parse_key_entry
from api.http.settings_lists import SettingsError, bank_pdq_thresholds, check_adapters, coerce_list
from omni.contract.config import EngineConfig
from preprocess.media import MediaLimits, MiB

ENV_PREFIX = "OMNI_"
MEDIA_PREFIX = "media_"
JSON_OVERHEAD_BYTES = 8 * MiB  # state + questions on top of the base64 media a body may carry


# settings whose flag is not `--` + the field's name (the env name still is OMNI_ + the field's name)
FLAG_NAMES = {"adapters_dir": "--adapters", "adapters": "--adapter", "shadows": "--shadow"}


def flag_of(key: str) -> str:
    """The command-line flag of a setting (`max_adapters` -> `--max-adapters`, `adapters` -> `--adapter`)."""
    return FLAG_NAMES.get(key, "--" + key.replace("_", "-"))


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    # empty = auth off; a present Authorization header is then ignored. Each entry a keys-file line `KEY [NAME [ROLE]]`
    # (api/http/identity.py): a bare KEY is an admin, `KEY NAME` a reviewer
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    max_body_bytes: int | None = None        # wire AND decompressed cap; None = derived from the media limits
    max_multipart_parts: int = 64
    parse_threads: int = 4                   # bounded pool for body decompression / JSON / base64 at the edge
    log_level: str = "info"
    drain_timeout_s: float | None = None     # SIGTERM grace; None = request_timeout_s + 5
    body_timeout_s: float = 30.0             # a request body must arrive within this, else 408
    public_docs: bool = False                # with API keys: /docs and /openapi.json open without a key
    public_metrics: bool = False             # with API keys: /metrics open without a key
    ui: bool = True                          # the review workbench at /ui (its files carry no data: open)
    review_dir: str | None = None            # labels, kept decisions and their media; None = review off
    review_batches: tuple[str, ...] = ()     # `omni batch` outputs offered as review queues (needs review_dir)
    review_reports: tuple[str, ...] = ()     # `omni eval --out` directories shown on the workbench's Report page
    review_k: int = 1                        # reviewers per item (1..10); >= 2: blind labels, consensus, disagreements
    review_max_comment_chars: int = 2000     # a reviewer's comment is at most this long
    review_guidelines: tuple[str, ...] = ()  # `[QUEUE=]FILE` markdown shown beside a queue's items (bare: all others)
    review_shield: tuple[str, ...] = ()      # `[QUEUE:]all|outcome=O|QUESTION=ANSWER`: media blurred until revealed
    review_daily_limit: tuple[str, ...] = ()   # `N`, `queue:Q=N`, `reviewer:NAME=N`: shielded media revealed a day
    # the decision log: every decision (request with media by hash, response, audit record) appended to JSONL
    decision_log: str | None = None          # its directory; None = off
    decision_log_media: str = "store"        # store: each media content kept once, by sha256; hash-only: hashes only
    decision_log_segment_mb: float = 64.0    # a segment rotates before it passes this
    retain_days: float | None = None         # segments older than this, and media no kept record names, are pruned
    # policies (docs/policies.md): answers -> act / review / pass, and who hears of them
    policy: str | None = None                # a policy TOML file; None = no outcomes. Reloaded on SIGHUP or the route
    # hash banks (docs/banks.md): media matched before the model; reloaded on SIGHUP or the admin route
    bank: tuple[str, ...] = ()               # bank files (CSV/JSONL), consulted in this order
    bank_pdq_threshold: tuple[str, ...] = ()   # `BANK=BITS`: a bank's PDQ threshold (0..63; default 31)
    bank_vpdq_workers: int = 1               # processes hashing request videos by vPDQ (when a bank holds vpdq)
    bank_vpdq_timeout_s: float = 20.0        # a video not hashed by then is a counted miss (its worker restarted)
    webhook: str | None = None               # POST each decision whose outcome is in webhook_on to this URL
    webhook_secret: str | None = field(default=None, repr=False)   # HMAC-SHA256 key of X-Omni-Signature
    webhook_on: tuple[str, ...] = ("act", "review")   # the overall outcomes that are sent
    webhook_tries: int = 6                   # attempts per decision before it goes to the dead-letter file
    webhook_timeout_s: float = 10.0          # per attempt
    webhook_queue: int = 1000                # deliveries waiting; past it a delivery is dropped (and counted)
    webhook_dead_letter: str | None = None   # undeliverable decisions, one JSON line each; None = <cache_dir>/webhooks
    webhook_check: bool = True               # at start, the receiver's host and port must accept a connection
    # Ray Serve (`omni serve --ray`, api/cluster/): the same app in front, one engine per replica behind it
    ray: bool = False                        # serve on a Ray cluster (the [cluster] extra)
    ray_address: str | None = None           # an existing cluster ("auto", "ray://head:10001"); None = start one here
    replicas: int = 1                        # engine replicas (fixed), unless autoscale is set
    autoscale: str | None = None             # "MIN:MAX" engine replicas, scaled by requests in flight
    replica_cpus: float = 1.0                # logical CPUs reserved by each engine replica
    replica_gpus: float | None = None        # GPUs per engine replica; None = 1 when the cluster has GPUs, else 0
    replica_load_retries: int = 2            # a replica whose model fails to load is retried this often, then reported
    cache_affinity: bool = True              # route by media / state to the replica that has them (False: Ray's default)
    affinity_slack_requests: int = 8         # a request leaves its cache-warm replica when that one is this far ahead
    engine: EngineConfig = field(default_factory=EngineConfig)
    unknown_env: tuple[str, ...] = ()        # OMNI_* names that matched nothing (logged at start)

    @property
    def body_cap_bytes(self) -> int:
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        m = self.engine.media
        media_bytes = m.max_images_total_bytes + m.max_audio_video_total_bytes
        return math.ceil(media_bytes * 4 / 3) + JSON_OVERHEAD_BYTES  # base64 inflates by 4/3

    @property
    def drain_s(self) -> float:
        return self.drain_timeout_s if self.drain_timeout_s is not None else self.engine.request_timeout_s + 5.0

    @property
    def autoscale_bounds(self) -> tuple[int, int] | None:
        """(MIN, MAX) engine replicas from `autoscale` "MIN:MAX" (1 <= MIN <= MAX), None when not set."""
        if self.autoscale is None:
            return None
        low, sep, high = self.autoscale.partition(":")
        if not (sep and low.strip().isdigit() and high.strip().isdigit()) or not 1 <= int(low) <= int(high):
            raise SettingsError(f"autoscale must be MIN:MAX with 1 <= MIN <= MAX (e.g. 1:4), got {self.autoscale!r}")
        return int(low), int(high)

    @property
    def tiny_default(self) -> bool:
        return self.engine.model_path is None

    # ------------------------------------------------------------------ sources
    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = dict(os.environ if environ is None else environ)
        values: dict[str, tuple[str | tuple[str, ...], str]] = {}  # field -> (raw or read, source name)
        unknown = []
        known = _known_fields()
        for name, raw in env.items():
            if not name.startswith(ENV_PREFIX):
                continue
            key = name[len(ENV_PREFIX):].lower()
            if key == "api_keys_file":
                values["api_keys"] = (_read_keys_file(raw, name), name)
            elif key == "webhook_secret_file":
                values["webhook_secret"] = (_read_secret_file(raw, name), name)
            elif key in known:
                values[key] = (raw, name)
            else:
                unknown.append(name)
        settings = cls().with_values({k: _coerce(raw, known[k], src) for k, (raw, src) in values.items()})
        return dataclasses.replace(settings, unknown_env=tuple(sorted(unknown)))

    def with_cli(self, args: Any) -> Settings:
        """Override with argparse values (attributes named like the fields; None = flag not given)."""
        known = _known_fields()
        given: dict[str, Any] = {}
        for key, value in vars(args).items():
            if key == "api_keys_file" and value is not None:
                given["api_keys"] = _read_keys_file(value, "--api-keys-file")
            elif key == "webhook_secret_file" and value is not None:
                given["webhook_secret"] = _read_secret_file(value, "--webhook-secret-file")
            elif key in known and value is not None:
                flag = flag_of(key)
                if isinstance(value, list):   # a repeated flag (tuple fields): each may be a comma list too
                    given[key] = tuple(part for one in value for part in _coerce(one, known[key], flag))
                else:
                    given[key] = _coerce(value, known[key], flag) if isinstance(value, str) else value
        return self.with_values(given)

    def value_of(self, key: str) -> Any:
        """The current value of a setting named as in `cli_fields()` (for help texts and logs)."""
        if key == "model":
            return self.engine.model_path
        if is_media_limit(key):
            return getattr(self.engine.media, key[len(MEDIA_PREFIX):])
        return getattr(self, key) if key in {f.name for f in dataclasses.fields(Settings)} else getattr(self.engine, key)

    def with_values(self, values: Mapping[str, Any]) -> Settings:
        """Apply typed values keyed by field name (`model` for the checkpoint, `media_*` for media limits)."""
        own = {f.name for f in dataclasses.fields(Settings)} - {"engine", "unknown_env"}
        engine_names = {f.name for f in dataclasses.fields(EngineConfig)}
        top: dict[str, Any] = {}
        eng: dict[str, Any] = {}
        media: dict[str, Any] = {}
        for key, value in values.items():
            if key == "model":
                eng["model_path"] = value or None
            elif is_media_limit(key):
                media[key[len(MEDIA_PREFIX):]] = value
            elif key in own:
                top[key] = value
            elif key in engine_names:
                eng[key] = value
            else:
                raise SettingsError(f"unknown setting {key!r}")
        try:   # EngineConfig and MediaLimits check their own values
            if media:
                eng["media"] = dataclasses.replace(self.engine.media, **media)
            engine = dataclasses.replace(self.engine, **eng)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        out = dataclasses.replace(self, engine=engine, **top)
        _check(out)
        return _with_records(out)


def is_media_limit(key: str) -> bool:
    """`media_max_images` names a MediaLimits field; `media_cache_mb` is an EngineConfig field of its own."""
    return key.startswith(MEDIA_PREFIX) and key[len(MEDIA_PREFIX):] in {f.name for f in dataclasses.fields(MediaLimits)}


def cli_fields() -> dict[str, type]:
    """Field name -> Python type for every flag `add_serve_arguments` generates (also the env names)."""
    return _known_fields()


# ---------------------------------------------------------------------- helpers
_SKIP_ENGINE = {"model_path", "media"}
_SKIP_TOP = {"engine", "unknown_env"}


def _known_fields() -> dict[str, Any]:
    hints: dict[str, Any] = {}
    for cls, skip, prefix in ((Settings, _SKIP_TOP, ""), (EngineConfig, _SKIP_ENGINE, ""),
                              (MediaLimits, set(), MEDIA_PREFIX)):
        types = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in skip:
                hints[prefix + f.name] = types[f.name]
    hints["model"] = str | None
    return hints


def _coerce(raw: Any, hint: Any, source: str) -> Any:
    if not isinstance(raw, str):
        return raw
    args = typing.get_args(hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if optional else hint
    text = raw.strip()
    if optional and text.lower() in ("", "none", "null"):
        return None
    if typing.get_origin(base) is tuple:
        return coerce_list(text, base, source)
    try:
        if base is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if base is int:
            return int(text.replace("_", ""))
        if base is float:
            return float(text)
        return text
    except ValueError:
        raise SettingsError(f"{source}: expected {getattr(base, '__name__', base)}, got {raw!r}") from None


def _read_keys_file(path: str, source: str) -> tuple[str, ...]:
    """One `KEY [NAME [ROLE]]` per line, `#` comment lines and blank lines skipped (an operator-provided path, e.g. a
    Docker secret): the entries of Settings.api_keys. A bad name, an unknown role or a key given twice is a
    SettingsError naming the file and the line (never the key)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeError) as exc:
        raise SettingsError(f"{source}: cannot read {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
    entries: list[str] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            key, _, _ = parse_key_entry(text)
        except ValueError as exc:
            raise SettingsError(f"{source}: {path} line {number}: {exc}") from None
        if key in first_line:
            raise SettingsError(f"{source}: {path} line {number}: the key of line {first_line[key]} again")
        first_line[key] = number
        entries.append(" ".join(text.split()))
    return tuple(entries)


def _check(s: Settings) -> None:
    """The HTTP edge's own fields (EngineConfig and MediaLimits check theirs when they are built)."""
    for name in ("max_multipart_parts", "parse_threads"):
        if getattr(s, name) < 1:
            raise SettingsError(f"{name} must be >= 1, got {getattr(s, name)}")
    if not 0 < s.port < 65536:
        raise SettingsError(f"port must be 1..65535, got {s.port}")
    if s.max_body_bytes is not None and s.max_body_bytes < 1024:
        raise SettingsError(f"max_body_bytes must be >= 1024, got {s.max_body_bytes}")
    if not s.body_timeout_s > 0:
        raise SettingsError(f"body_timeout_s must be > 0, got {s.body_timeout_s}")
    if s.drain_timeout_s is not None and s.drain_timeout_s < 0:
        raise SettingsError(f"drain_timeout_s must be >= 0, got {s.drain_timeout_s}")
    _check_api_keys(s.api_keys)
    _check_review(s)
    _check_decision_log(s)
    _check_policy(s)
    bank_pdq_thresholds(s.bank_pdq_threshold)
    if s.bank_vpdq_workers < 1 or not s.bank_vpdq_timeout_s > 0:
        raise SettingsError(f"bank_vpdq_workers must be >= 1 and bank_vpdq_timeout_s > 0, got "
                            f"{s.bank_vpdq_workers} and {s.bank_vpdq_timeout_s:g}")
    _check_wellness(s)
    _check_cluster(s)
    check_adapters(s.engine)


def _check_api_keys(entries: tuple[str, ...]) -> None:
    """Every entry a keys-file line (OMNI_API_KEYS' comma list: usually bare keys), no key twice; the messages name
    the entry's place, never the key."""
    seen: set[str] = set()
    for number, entry in enumerate(entries, 1):
        if not entry.strip():
            raise SettingsError("api_keys must not contain empty keys")
        try:
            key, _, _ = parse_key_entry(entry)
        except ValueError as exc:
            raise SettingsError(f"api_keys entry {number}: {exc}") from None
        if key in seen:
            raise SettingsError(f"api_keys entry {number}: a key given twice")
        seen.add(key)


def _with_records(s: Settings) -> Settings:
    """A decision log or a review directory keeps every decision with its audit record: the engine makes one for
    every decision (`audit="record"`; the response still shows it only when asked, unless `audit="always"`)."""
    keeps = s.decision_log is not None or s.review_dir is not None
    if keeps and s.engine.audit == "request":
        return dataclasses.replace(s, engine=dataclasses.replace(s.engine, audit="record"))
    return s


def _check_decision_log(s: Settings) -> None:
    if s.decision_log_media not in ("store", "hash-only"):
        raise SettingsError(f"decision_log_media must be store or hash-only, not {s.decision_log_media!r}")
    if not s.decision_log_segment_mb > 0:
        raise SettingsError(f"decision_log_segment_mb must be > 0, got {s.decision_log_segment_mb}")
    if s.retain_days is not None and not s.retain_days > 0:
        raise SettingsError(f"retain_days must be > 0, got {s.retain_days}")
    if s.decision_log is not None and Path(s.decision_log).exists() and not Path(s.decision_log).is_dir():
        raise SettingsError(f"decision_log {s.decision_log!r} is not a directory")


def _read_secret_file(path: str, source: str) -> str:
    """A secret kept in a file (a Docker or Kubernetes secret): its first line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SettingsError(f"{source}: cannot read {path!r}: {exc.strerror}") from None
    return lines[0].strip() if lines else ""


WEBHOOK_OUTCOMES = ("act", "review", "pass")
MIN_WEBHOOK_SECRET_CHARS = 16


def _check_wellness(s: Settings) -> None:
    from omni.review.wellness import WellnessSettingError, parse_limits, parse_shield

    if (s.review_shield or s.review_daily_limit) and s.review_dir is None:
        raise SettingsError("review_shield and review_daily_limit need review_dir: they protect its reviewers")
    try:
        for entry in s.review_shield:
            parse_shield(entry)
        parse_limits(s.review_daily_limit)
    except WellnessSettingError as exc:
        raise SettingsError(str(exc)) from None


def _check_policy(s: Settings) -> None:
    """The policy file is read (and checked) when the app is built; here only what the flags say together."""
    if s.webhook is None:
        return
    if not s.webhook.startswith(("http://", "https://")):
        raise SettingsError(f"webhook must be an http:// or https:// URL, got {s.webhook!r}")
    if s.policy is None:
        raise SettingsError("webhook needs policy: decisions are sent by their outcome (--policy FILE)")
    if not s.webhook_secret or len(s.webhook_secret) < MIN_WEBHOOK_SECRET_CHARS:
        raise SettingsError(f"webhook needs webhook_secret of at least {MIN_WEBHOOK_SECRET_CHARS} characters "
                            "(--webhook-secret, OMNI_WEBHOOK_SECRET or --webhook-secret-file)")
    if not s.webhook_on or set(s.webhook_on) - set(WEBHOOK_OUTCOMES):
        raise SettingsError(f"webhook_on must name outcomes among {', '.join(WEBHOOK_OUTCOMES)}, got "
                            f"{','.join(s.webhook_on)!r}")
    if s.webhook_tries < 1 or s.webhook_queue < 1 or not s.webhook_timeout_s > 0:
        raise SettingsError("webhook_tries and webhook_queue must be >= 1 and webhook_timeout_s > 0")


def _check_review(s: Settings) -> None:
    """Review paths name files the operator has: checked at start, so a typo is a clear error, not a 404 later."""
    if not 1 <= s.review_k <= 10:
        raise SettingsError(f"review_k (reviewers per item) must be 1..10, got {s.review_k}")
    if s.review_max_comment_chars < 1:
        raise SettingsError(f"review_max_comment_chars must be >= 1, got {s.review_max_comment_chars}")
    if s.review_batches and s.review_dir is None:
        raise SettingsError("review_batches needs review_dir: the directory the reviewers' labels are saved in")
    if s.review_dir is not None and Path(s.review_dir).exists() and not Path(s.review_dir).is_dir():
        raise SettingsError(f"review_dir {s.review_dir!r} is not a directory")
    for path in s.review_batches:
        if not Path(path).is_file():
            raise SettingsError(f"review_batches: no batch output file {path!r}")
    for path in s.review_reports:
        if not (Path(path) / "metrics.json").is_file():
            raise SettingsError(f"review_reports: {path!r} is not an `omni eval --out` directory (no metrics.json)")
    _check_guidelines(s)


GUIDELINES_MAX_BYTES = 256 * 1024
GUIDELINES_FLAG = "review_guidelines (--review-guidelines)"


def guideline_entries(entries: tuple[str, ...]) -> list[tuple[str | None, str]]:
    """(QUEUE or None, FILE) of each `[QUEUE=]FILE` entry; an entry that is an existing file as a whole is a bare FILE
    (a path with `=` in it)."""
    out: list[tuple[str | None, str]] = []
    for entry in entries:
        queue, sep, path = entry.partition("=")
        if not sep or Path(entry).is_file():
            out.append((None, entry))
        else:
            out.append((queue.strip(), path.strip()))
    return out


def _check_guidelines(s: Settings) -> None:
    """Each guidelines file is there, readable UTF-8 text and at most 256 KiB; one bare FILE and one per queue."""
    if s.review_guidelines and s.review_dir is None:
        raise SettingsError(f"{GUIDELINES_FLAG} needs review_dir: guidelines are shown beside the review queues")
    seen: set[str | None] = set()
    for queue, path in guideline_entries(s.review_guidelines):
        if queue == "" or not path:
            raise SettingsError(f"{GUIDELINES_FLAG}: expected [QUEUE=]FILE, got {queue or ''}={path}")
        if queue in seen:
            which = f"queue {queue!r}" if queue is not None else "every other queue (a FILE without QUEUE=)"
            raise SettingsError(f"{GUIDELINES_FLAG}: two guidelines files for {which}")
        seen.add(queue)
        file = Path(path)
        try:
            size = file.stat().st_size
            if not file.is_file():
                raise SettingsError(f"{GUIDELINES_FLAG}: {path!r} is not a file")
            if size > GUIDELINES_MAX_BYTES:
                raise SettingsError(f"{GUIDELINES_FLAG}: {path!r} is {size} bytes, over the "
                                    f"{GUIDELINES_MAX_BYTES // 1024} KiB limit")
            file.read_bytes().decode("utf-8")
        except OSError as exc:
            raise SettingsError(f"{GUIDELINES_FLAG}: cannot read {path!r}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise SettingsError(f"{GUIDELINES_FLAG}: {path!r} is not UTF-8 text") from None


def _check_cluster(s: Settings) -> None:
    if s.replicas < 1:
        raise SettingsError(f"replicas must be >= 1, got {s.replicas}")
    if s.autoscale is not None:
        _ = s.autoscale_bounds   # raises SettingsError when malformed
    for name in ("replica_cpus", "replica_load_retries", "affinity_slack_requests"):
        if getattr(s, name) < 0:
            raise SettingsError(f"{name} must be >= 0, got {getattr(s, name)}")
    if s.replica_gpus is not None and s.replica_gpus < 0:
        raise SettingsError(f"replica_gpus must be >= 0, got {s.replica_gpus}")

