"""EngineConfig: everything the engine needs to load and run a model, as one frozen dataclass.

The one place its values are checked (`__post_init__`; media limits check themselves in `MediaLimits`): every edge
that builds one — settings from the environment, CLI flags, Python callers — gets the same ConfigError naming the
field. Knows nothing of the environment or argv (the edges fill it in) and nothing of HTTP.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from omni.contract.errors import ConfigError
from omni.contract.types import ISOLATION_MODES
from preprocess.media import MediaLimits

CONFIDENCE_FORMULAS = ("clef", "typesafe")
AUDIT_MODES = ("request", "record", "always")
DTYPES = ("auto", "float32", "bfloat16", "float16")
QUANTIZE_CHOICES = ("none", "int8", "fp8", "nf4", "int4")   # omni.model.quantize.SCHEMES (a test keeps them equal)
_AT_LEAST_ONE = ("max_context_tokens", "max_questions", "max_question_id_chars", "max_batch_records",
                 "max_batch_tokens", "max_queue", "decode_threads", "max_adapters")
_AT_LEAST_TWO = ("max_choice_options", "max_score_levels")
MAX_DECODE_THREADS = 64   # requests decoded at once; the media threads they share are also capped at the cores
_NOT_NEGATIVE = ("torch_threads", "probability_decimals", "max_wait_ms", "inline_prepare_max_chars", "media_cache_mb",
                 "prefix_cache_mb", "prefill_chunk_tokens")


@dataclass(frozen=True)
class EngineConfig:
    model_path: str | None = None          # checkpoint directory or hub id; None = the embedded tiny default
    served_name: str = "clef-omni"          # the `model` reported in answers and /v1/models
    model_aliases: tuple[str, ...] = ("jev-latest", "clef-omni")
    dtype: str = "auto"                     # auto: bfloat16 on CUDA, float32 on CPU
    device: str = "auto"                    # auto: cuda if available else cpu
    head_dtype: str = "float32"             # the head runs in float32 by default (the reference uses bf16)
    attn_implementation: str = "sdpa"
    quantize: str | None = None             # the text layers' scheme (docs/quantization.md); None = as the checkpoint
                                            # is stored (a pre-quantized one's own scheme, else none)
    torch_threads: int = 0                  # intra-op CPU threads for torch (process-wide); 0 = sized when the
                                            # engine starts: the CPUs this process may use (affinity, cgroup quota)
                                            # less decode_threads, at least 1 (omni/serve/cpus.py)
    max_context_tokens: int = 64_000
    max_questions: int = 64
    max_question_id_chars: int = 256
    max_choice_options: int = 255
    max_score_levels: int = 10
    confidence: str = "clef"                # "clef" (p_max) or "typesafe"
    calibration: bool = False               # apply the checkpoint's calibration.json (omni calibrate) when present
    probability_decimals: int = 4
    max_batch_records: int = 8
    max_batch_tokens: int = 16_384
    max_wait_ms: float = 5.0                # a partial batch waits this long, and only for requests still decoding
    max_queue: int = 256
    request_timeout_s: float = 60.0
    decode_threads: int = 2                 # requests decoded at once, and the threads they share to decode media
                                            # (preprocess.threads: a lone video gets FFmpeg frame threads; <= cores)
    inline_prepare_max_chars: int = 4096    # media-free requests this small skip the decode pool (0 = never)
    isolation: str = "joint"                # default of x_isolation: joint (the reference) or isolated
    audit: str = "request"                  # request: an audit record when a request asks (x_audit); record: one for
                                            # every decision (a decision log keeps them), shown when asked; always:
                                            # one for every decision, shown in every response
    media_cache_mb: float = 512.0           # per-item media encodings kept, by content (0 = off)
    prefix_cache_mb: float = 1024.0         # prompt prefixes' keys/values + head memory rows, on the device (0 = off)
    prefill_chunk_tokens: int = 1024        # longer prefixes are prefilled a chunk at a time, others served between
    media: MediaLimits = field(default_factory=MediaLimits)
    cache_dir: str | None = None            # where the embedded tiny default is built; None = ~/.cache/omni-decide
    adapters_dir: str | None = None         # each subfolder an adapter, served under the folder's name (SIGHUP rescans)
    adapters: tuple[tuple[str, str], ...] = ()   # (name, folder) of adapters served besides those in adapters_dir
    max_adapters: int = 8                   # adapters resident at once; the least recently used idle one is evicted
    shadows: tuple[tuple[str, str], ...] = ()    # (live model, candidate adapter): the candidate scores live's requests

    def __post_init__(self) -> None:
        if self.confidence not in CONFIDENCE_FORMULAS:
            raise ConfigError(f"confidence must be one of {CONFIDENCE_FORMULAS}, not {self.confidence!r}")
        for names, low in ((_AT_LEAST_ONE, 1), (_AT_LEAST_TWO, 2), (_NOT_NEGATIVE, 0)):
            for name in names:
                if getattr(self, name) < low:
                    raise ConfigError(f"{name} must be >= {low}, got {getattr(self, name)}")
        if self.quantize is not None and self.quantize not in QUANTIZE_CHOICES:
            raise ConfigError(f"quantize must be one of {', '.join(QUANTIZE_CHOICES)}, not {self.quantize!r}")
        if self.decode_threads > MAX_DECODE_THREADS:
            raise ConfigError(f"decode_threads must be <= {MAX_DECODE_THREADS}, got {self.decode_threads}")
        if not self.request_timeout_s > 0:
            raise ConfigError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        for name, allowed in (("dtype", DTYPES), ("head_dtype", DTYPES[1:]), ("isolation", ISOLATION_MODES),
                              ("audit", AUDIT_MODES)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
