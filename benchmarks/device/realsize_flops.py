"""realsize_flops: the analytic prefill FLOP model behind realsize.py's TFLOP and MFU columns.

FlopModel reads the parameter counts and configs of a built (or meta-device) thinker and joint head and turns the
thinker forwards one request ran (their new and cached token counts and media grids) into FLOPs; `count` is the
parameter count it rests on. The second paragraph
of FlopModel's docstring is printed under the report's table as the FLOP note, so it stays one plain paragraph.

What it must not know: the device, the timings, the engines, the cases and their inputs, and the report's layout.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from omni.model.head import JointSchemaHead


def count(module: nn.Module | None) -> int:
    """Parameters of a module (0 for None)."""
    return 0 if module is None else sum(p.numel() for p in module.parameters())


class FlopModel:
    """Analytic prefill FLOPs (2 per multiply-add) of the built thinker + head, from its modules' parameter counts.

    Text decoder: 2 x active parameters per token (attention projections + router + top-k of the experts; embeddings
    are lookups and lm_head is never applied, the head gathers its rows) + causal attention 4 * layers * (heads *
    head_dim) * T^2 / 2. Vision: 2 x (patch embed + blocks) per patch, 2 x (mergers) per merged token, full attention
    within each temporal grid 4 * depth * width * t * (h*w)^2. Audio: the three stride-2 convolutions per 1 s chunk,
    2 x (conv_out + layers + projections) per token, attention 4 * layers * d * sum(window^2) over 104-token windows.
    Head: its memory projection over every prefilled row (the span-level rest is negligible). Not counted: norms,
    RoPE, softmax, routing top-k, elementwise ops, the head's per-option work.
    """

    def __init__(self, thinker: nn.Module, head: JointSchemaHead, lexical_table: torch.Tensor | None = None):
        text = thinker.model.language_model
        tc = text.config
        self.layers, self.attn_width = tc.num_hidden_layers, tc.num_attention_heads * tc.head_dim
        self.active_per_token = 0
        for layer in text.layers:
            mlp = layer.mlp
            experts = count(mlp.experts) * tc.num_experts_per_tok / tc.num_experts if hasattr(mlp, "experts") else 0
            self.active_per_token += count(layer.self_attn) + (count(mlp.gate) + experts if experts else count(mlp))
        self.head_per_row = head.hidden_size * head.width
        vis, aud = thinker.model.visual, thinker.model.audio_tower
        self.vision = {"per_patch": count(vis.patch_embed) + count(vis.blocks), "depth": len(vis.blocks),
                           "per_merged": count(vis.merger) + count(getattr(vis, "merger_list", None)),
                           "width": vis.config.hidden_size, "merge": vis.config.spatial_merge_size}
        ac = aud.config
        self.audio = {"per_token": count(aud.conv_out) + count(aud.layers) + count(aud.proj1) + count(aud.proj2),
                          "layers": len(aud.layers), "d": ac.d_model, "channels": ac.downsample_hidden_size,
                          "mel": ac.num_mel_bins, "chunk": 2 * ac.n_window,
                          "window_chunks": ac.n_window_infer // (2 * ac.n_window)}
        lm_head = 0 if lexical_table is None else lexical_table.numel()   # Backbone swapped lm_head for Identity
        self.params = {"thinker": count(thinker) + lm_head, "text": count(text),
                       "vision": count(vis), "audio": count(aud), "head": count(head),
                       "active_per_token_decoder": int(self.active_per_token)}

    def text(self, new: int, past: int = 0) -> float:
        """`new` tokens prefilled after `past` cached ones."""
        linear = 2 * self.active_per_token * new
        attention = 4 * self.layers * self.attn_width * (new * past + new * new / 2)
        return linear + attention + 2 * self.head_per_row * new

    def vision_grid(self, t: int, h: int, w: int) -> float:
        """One image or video of t x h x w patches (its grid_thw)."""
        v = self.vision
        n = t * h * w
        return (2 * n * v["per_patch"] + 2 * n / v["merge"] ** 2 * v["per_merged"]
                + 4 * v["depth"] * v["width"] * t * (h * w) ** 2)

    def audio_clip(self, frames: int) -> float:
        """One clip (or soundtrack) of `frames` mel frames (100 per second)."""
        a = self.audio
        chunks = math.ceil(frames / a["chunk"])
        f1, f2, f3 = (math.ceil(a["mel"] / 2 ** k) for k in (1, 2, 3))
        t1, t2, t3 = (math.ceil(a["chunk"] / 2 ** k) for k in (1, 2, 3))
        c = a["channels"]
        conv = 2 * chunks * (c * 9 * f1 * t1 + c * c * 9 * f2 * t2 + c * c * 9 * f3 * t3)
        rest = frames % a["chunk"]           # as transformers' _get_feat_extract_output_lengths
        tokens = (frames // a["chunk"]) * t3 + (((rest - 1) // 2 + 1 - 1) // 2 + 1 - 1) // 2 + 1
        window = a["window_chunks"] * t3
        attention = 4 * a["layers"] * a["d"] * sum(min(window, tokens - i) ** 2 for i in range(0, tokens, window))
        return conv + 2 * tokens * a["per_token"] + attention

    def forwards(self, entries) -> tuple[float, int]:
        """(FLOPs, prefilled tokens) of the thinker forwards one request ran, as `realsize_model.ForwardLog` recorded
        them: (rows, new tokens per row, tokens already cached, media tensors) each. A warm request (prefix and media
        from the caches) prefills only what follows its prefix, after the cached tokens, with no media."""
        flops, prefilled = 0.0, 0
        for rows, new, past, media in entries:
            flops += rows * self.text(new, past)
            prefilled += rows * new
            for key in ("image_grid_thw", "video_grid_thw"):
                for t, h, w in media.get(key, torch.zeros(0, 3)).tolist():
                    flops += self.vision_grid(int(t), int(h), int(w))
            for frames in media.get("feature_attention_mask", torch.zeros(0, 1)).sum(-1).tolist():
                flops += self.audio_clip(int(frames))
        return flops, prefilled
