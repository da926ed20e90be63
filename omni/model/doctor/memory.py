"""How much memory a checkpoint needs on a device to answer one request at the configured limits, and how much the
device has free; said as two findings (the need, and whether it fits).

The estimate, for a request of T = max_context_tokens tokens:
- weights: the thinker's parameters (talker / code2wav are never loaded) x the load dtype's bytes, plus the head's x
  the head dtype's bytes (the loader casts whatever is on disk to these);
- keys and values of every layer for T tokens: 2 x layers x kv_heads x head_dim x T x bytes;
- activations of one forward over all T tokens, one layer at a time (inference frees each layer's before the next):
  per token 6 hidden-size rows (residual, norms, outputs), the q/k/v and attention rows, the router's logits, and the
  routed experts' rows as transformers' grouped experts keep them (experts-per-token copies of max(4 x hidden,
  hidden + 3 x expert width)), in the load dtype; plus the head's rows (2 x hidden + 4 x head width) in the head
  dtype. The attention kernels are flash / memory-efficient ones, linear in T. This is the worst case: a request
  whose media fill the first chunk of a chunked prefill (or chunking off); a long text prefix prefilled in chunks
  needs less;
- the prefix cache's budget (`prefix_cache_mb`: it lives on the model's device);
- 1 GiB for the runtime (CUDA context and workspaces, or the libraries' own memory on CPU), and 10% over everything
  but the weights for the allocator's fragmentation and the media encoders' rows.
It fits when the total is at most 90% of what is free; over 90% is tight (a warning); over 100% does not fit.
Knows nothing of checkpoint files, argv or how findings are printed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from omni.model.doctor.findings import Finding, gib
from omni.model.doctor.layout import ModelShape

GiB = 1024 ** 3
RUNTIME_BYTES = GiB
SLACK_FRACTION = 0.10
TIGHT_FRACTION = 0.90
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class MemoryEstimate:
    device: str
    tokens: int
    dtype: str
    weights_bytes: int
    kv_bytes: int
    activation_bytes: int
    prefix_cache_bytes: int
    runtime_bytes: int

    @property
    def slack_bytes(self) -> int:
        return int(SLACK_FRACTION * (self.kv_bytes + self.activation_bytes + self.prefix_cache_bytes
                                     + self.runtime_bytes))

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.kv_bytes + self.activation_bytes + self.prefix_cache_bytes
                + self.runtime_bytes + self.slack_bytes)

    def to_json(self) -> dict[str, int | str]:
        return {**asdict(self), "slack_bytes": self.slack_bytes, "total_bytes": self.total_bytes}


def estimate_memory(shape: ModelShape, device: str, dtype: torch.dtype, head_dtype: torch.dtype, tokens: int,
                    prefix_cache_bytes: int) -> MemoryEstimate:
    """The memory one request of `tokens` tokens needs on `device` (see the module's docstring for how)."""
    item, head_item = dtype.itemsize, head_dtype.itemsize
    weights = shape.backbone_params * item + shape.head_params * head_item
    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * tokens * item
    experts_rows = shape.experts_per_token * max(4 * shape.hidden_size, shape.hidden_size + 3 * shape.expert_width)
    per_token = (6 * shape.hidden_size + (2 * shape.attention_heads + 2 * shape.kv_heads) * shape.head_dim
                 + shape.experts + experts_rows)
    head_per_token = 2 * shape.hidden_size + 4 * shape.head_width
    activations = tokens * (per_token * item + head_per_token * head_item)
    return MemoryEstimate(device, tokens, str(dtype).removeprefix("torch."), weights, kv, activations,
                          prefix_cache_bytes, RUNTIME_BYTES)


def available_bytes(device: str) -> tuple[int | None, str]:
    """(bytes free for the model on `device`, where that figure comes from); None when it cannot be told."""
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            return None, "no CUDA device"
        try:
            free, _total = torch.cuda.mem_get_info(torch.device(device))
        except (RuntimeError, ValueError, AssertionError) as exc:   # an index past the last device
            return None, f"{device}: {exc}"
        return free, f"free on {device}"
    try:
        import psutil

        return int(psutil.virtual_memory().available), "available host memory"
    except ImportError:
        pass
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "available host memory (/proc/meminfo)"
    except (OSError, ValueError, IndexError):
        pass
    return None, "host memory unknown (no psutil, no /proc/meminfo)"


def memory_findings(estimate: MemoryEstimate, available: int | None, source: str) -> list[Finding]:
    """Two lines: what is needed (and of what), and whether it fits in what `source` says is free."""
    need = Finding("memory need", "info",
                   f"≈ {gib(estimate.total_bytes)}: weights {gib(estimate.weights_bytes)} {estimate.dtype}, KV "
                   f"{gib(estimate.kv_bytes)} + activations {gib(estimate.activation_bytes)} at {estimate.tokens:,} "
                   f"tokens, prefix cache {gib(estimate.prefix_cache_bytes)}, runtime {gib(estimate.runtime_bytes)}, "
                   f"+{gib(estimate.slack_bytes)}",
                   estimate.to_json())
    data = {"need_bytes": estimate.total_bytes, "available_bytes": available, "source": source}
    if available is None:
        return [need, Finding("memory fit", "warn", f"cannot tell: {source}", data)]
    words = f"needs {gib(estimate.total_bytes)}, {gib(available)} {source}"
    if estimate.total_bytes > available:
        halve = ", --dtype bfloat16" if estimate.dtype == "float32" else ""
        return [need, Finding("memory fit", "fail", f"does not fit: {words} (a bigger device{halve}, or a smaller "
                              "--max-context-tokens / prefix cache)", data)]
    if estimate.total_bytes > TIGHT_FRACTION * available:
        return [need, Finding("memory fit", "warn", f"tight: {words} (over {TIGHT_FRACTION:.0%})", data)]
    return [need, Finding("memory fit", "ok", f"fits: {words}", data)]
