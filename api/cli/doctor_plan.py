"""`omni doctor --plan [--json]`: the memory plan (`omni.model.doctor.plan`) of a checkpoint's configs (`--model`, or
the embedded default) at the configured limits, as one screen of aligned plain text or one JSON object. Nothing is
loaded: the thinker is built on the meta device. Knows nothing of torch or model internals beyond the plan's figures.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni.contract.config import EngineConfig
    from omni.model.doctor.plan import Plan

GB = 10 ** 9


def checkpoint_plan(config: EngineConfig, directory: Path) -> Plan:
    """The plan of `directory`'s configs at `config`'s limits (CheckpointError when they cannot be read)."""
    import torch

    from omni.model.doctor import layout
    from omni.model.doctor.plan import make_plan, plan_model

    backbone = layout.read_backbone_config(directory)
    head = layout.read_head_config(directory) if (directory / "joint_head_config.json").is_file() else None
    dtype = torch.bfloat16 if config.dtype == "auto" else getattr(torch, config.dtype)
    return make_plan(plan_model(backbone, head), config, dtype, getattr(torch, config.head_dtype))


def plan_screen(plan: Plan, directory: Path) -> list[str]:
    """The plan as aligned plain lines (one screen)."""
    from omni.model.doctor.findings import gib

    limits = plan.limits
    title = (f"at {limits['max_context_tokens']:,} context tokens, batches of {limits['max_batch_records']} records / "
             f"{limits['max_batch_tokens']:,} tokens, prefill chunks of {limits['prefill_chunk_tokens']:,} "
             f"({'off' if not limits['prefill_chunk_tokens'] else 'on'}), up to {limits['max_images']} images of "
             f"{limits['max_image_pixels']:,} pixels")
    lines = [f"omni doctor --plan: {directory}", title, "",
             f"  {'weights':<16}{'text layers':>12}{'the rest':>12}{'head':>12}{'total':>12}"]
    for w in plan.weights:
        lines.append(f"  {w.scheme + ' ' + w.dtype:<16}{gib(w.quantized_bytes):>12}{gib(w.rest_bytes):>12}"
                     f"{gib(w.head_bytes):>12}{gib(w.total_bytes):>12}")
    request = plan.request
    how = (f"prefilled in chunks, {request.visual_tokens:,} image tokens in its first" if request.chunked
           else f"in a batch of {request.rows}, {request.visual_tokens:,} image tokens each")
    peak = (f"  one request ({limits['dtype']}): activations {gib(request.peak.activation_bytes)} + keys/values "
            f"{gib(request.peak.kv_bytes)} = {gib(request.peak.total_bytes)} at its peak ({how})")
    caches = (f"  caches: prefix {gib(plan.prefix_cache_bytes)} on the device, media {gib(plan.media_cache_bytes)} in "
              f"host memory; runtime {gib(plan.runtime_bytes)}, +10% slack; a GPU gives 90% of itself")
    unpacked = "; ".join(f"{name} unpacks one layer's experts while it runs: {gib(size)} (bfloat16)"
                         for name, size in plan.dequantized_bytes.items())
    lines += ["", peak, caches] + ([f"  {unpacked} — counted in the table below"] if unpacked else []) + ["",
              (f"  {'GPU':<8}{'fits':<6}{'scheme':<8}{'needs':>10}{'usable':>10}{'max context':>13}"
               f"{'max batch':>11}  with")]
    for fit in plan.gpus:
        scheme = fit.scheme or "-"
        lines.append(f"  {str(fit.gpu_gb) + ' GB':<8}{'yes' if fit.scheme else 'no':<6}{scheme:<8}"
                     f"{fit.need_bytes / GB:>8.1f}GB{fit.to_json()['usable_bytes'] / GB:>8.1f}GB"
                     f"{fit.max_context_tokens:>13,}{fit.max_batch_records:>11}  {settings_text(fit.settings)}")
    lines.append("  (scheme: the least lossy that fits at these limits, or with the settings named under `with`; "
                 "max context / batch: the most that fit with it)")
    return lines


def settings_text(settings: dict[str, int]) -> str:
    """`--prefix-cache-mb 0 --max-context-tokens 12,288` for a GPU that fits only with changed settings."""
    if not settings:
        return "these limits"
    return " ".join(f"--{name.replace('_', '-')} {value:,}" for name, value in settings.items())


def plan_json(plan: Plan, directory: Path) -> dict[str, Any]:
    return {"directory": str(directory), **plan.to_json()}
