"""realsize: end-to-end decision latency of the REAL-size model on one GPU, through the product path.

Device call (one, on a lent H200; the image lacks transformers 5.23 / av / soundfile, so the wheels from
`bash benchmarks/device/fetch_wheels.sh` travel in .whl):
    run  command: "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target
                   /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit 1;
                   python3 benchmarks/device/realsize.py 2>&1 | tee $OUT/realsize.txt"
         carry: [".whl"]   timeout_s: 540
It stops starting new rounds after --budget-s (420 s, model build included) and writes $OUT/realsize.json,
$OUT/realsize.md (rewritten after every case, so a run cut short keeps what it measured) and prints the same.
Dry run here (scaled-down shapes and inputs, CPU, about 2 minutes; also automatic where CUDA is absent):
    .venv/bin/python benchmarks/device/realsize.py --dry-run

What it builds: the Qwen3-Omni-30B-A3B thinker with the released shapes (clef-reference §1.2, qwen-omni-notes §5:
48 MoE layers of hidden 2048, 128 experts top-8, vocab 152,064; the 27-block vision and 32-layer audio towers;
31.7 B parameters, 59 GiB in bf16) and the joint-schema head with the reference's presumed omni shapes (§1.4:
width 1024, 2 routing + 4 decoder layers, 16 heads, feedforward 4096; 109.2 M parameters), with random weights
made on the device (no download, no checkpoint files). Tokenizer and processor settings come from the tiny
checkpoint `omni.model.tiny.write_checkpoint` writes (small vocabulary, every Qwen special token); the thinker's
special-token ids are that tokenizer's, so every id it produces is a valid embedding row. The model is put together
as `ClefModel.load` would (lm_head swapped for the lexical table, strict shapes) and measured through
`DecisionEngine.decide(parse_request(body))`: media decoding, prompt encoding, the prefill, the head, the answers.

What it measures, per case (a)-(f): p50/p99 of end-to-end `decide` (CUDA-synchronised before and after; the
script also synchronises at the end of `model.probabilities` so the engine's own forward timing is real), the
engine's media / prompt / forward split, input and prefilled tokens, prefill tokens/s, an analytic FLOP count and
MFU against --peak-tflops, and peak GPU memory. Cold cases send a new state each round (prefix-cache miss) through
an engine whose media cache is off (every round decodes its media); case (f) repeats (d)'s state and video with new
questions through an engine with both caches on (media and prefix hits).

What it must not know: anything about answer quality (the weights are random: time only), the HTTP edge and the
micro-batcher (one request at a time, `decide`), and any real checkpoint or network.
"""
from __future__ import annotations

import argparse
import base64
import json
import math
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from fixtures.media import image_bytes, video_bytes, wav_bytes
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.model.backbone import Backbone
from omni.model.checkpoint import CheckpointSource
from omni.model.clef import ClefModel
from omni.model.head import JointSchemaHead
from omni.model.tiny import TINY_AUDIO, TINY_TEXT, TINY_VISION, thinker_config, tiny_head_config, write_checkpoint
from omni.serve.engine import DecisionEngine
from preprocess.loader import load_processor_parts
from preprocess.media import MiB

STARTED = time.monotonic()
GiB = 1024 ** 3
# Released Qwen3-Omni-30B-A3B thinker (clef-reference §1.2; qwen-omni-notes §5 / real_model_arith.py).
REAL_TEXT = dict(vocab_size=152064, hidden_size=2048, intermediate_size=768, num_hidden_layers=48,
                 num_attention_heads=32, num_key_value_heads=4, head_dim=128, moe_intermediate_size=768,
                 num_experts=128, num_experts_per_tok=8, decoder_sparse_step=1, norm_topk_prob=True,
                 mlp_only_layers=[], max_position_embeddings=65536, rms_norm_eps=1e-6,
                 rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [24, 20, 20],
                                  "interleaved": True, "mrope_interleaved": True})
REAL_VISION = dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16,
                   temporal_patch_size=2, spatial_merge_size=2, in_channels=3, num_position_embeddings=2304,
                   deepstack_visual_indexes=[8, 16, 24])
REAL_AUDIO = dict(num_mel_bins=128, encoder_layers=32, encoder_attention_heads=20, encoder_ffn_dim=5120,
                  d_model=1280, downsample_hidden_size=480, n_window=50, n_window_infer=800,
                  max_source_positions=1500, conv_chunksize=500)
# Clef-flash's published head with hidden 2048 (§1.4's GUESS for omni): 109,175,812 parameters.
REAL_HEAD = dict(hidden_size=2048, width=1024, routing_layers=2, layers=4, heads=16, feedforward=4096, dropout=0.0)
SHAPES = {"real": dict(text=REAL_TEXT, vision=REAL_VISION, audio=REAL_AUDIO, head=REAL_HEAD),
          "dry": dict(text={**TINY_TEXT, "vocab_size": 152064}, vision=TINY_VISION, audio=TINY_AUDIO,
                      head=tiny_head_config(TINY_TEXT["hidden_size"]))}


@dataclass(frozen=True)
class Plan:
    """Input sizes and round counts of one run."""

    state_tokens: int = 300
    image_side: int = 1024             # a square photo; 1024 px -> 32 x 32 = 1,024 image tokens
    audio_seconds: float = 30.0
    video: tuple[float, int, int] = (21.0, 1280, 720)   # seconds, width, height (25 fps, H.264 + stereo AAC)
    long_state_tokens: int = 8000
    long_questions: int = 64
    rounds: dict = field(default_factory=lambda: {"a": 20, "b": 20, "c": 20, "d": 5, "e": 5, "f": 10})
    warmups: int = 2


PLANS = {"real": Plan(), "dry": Plan(image_side=512, audio_seconds=10.0, video=(4.0, 640, 360), long_state_tokens=1500,
                                     rounds={k: 3 for k in "abcdef"}, warmups=1)}
# Published hosted latencies (Cloudflare's Clef blog) and this project's goal on one H200, in ms.
ANCHORS = {"a": (130, 20), "b": (150, 60), "c": ("a few 100", None), "d": (1500, 300), "e": (None, None),
           "f": (1500, 300)}


def log(message: str) -> None:
    """Progress on stderr, stamped with the seconds since start."""
    print(f"[{time.monotonic() - STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="scaled-down shapes and inputs (automatic without CUDA)")
    parser.add_argument("--device", default="auto", help="auto: cuda if available, else cpu")
    parser.add_argument("--dtype", default="auto", help="thinker dtype; auto: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--head-dtype", default=EngineConfig.head_dtype, help="the engine's default: float32")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak for MFU (H200: 989)")
    parser.add_argument("--budget-s", type=float, default=None, help="no new rounds after this (real 420, dry 600)")
    parser.add_argument("--rounds-scale", type=float, default=1.0, help="multiply every case's rounds")
    parser.add_argument("--cases", default="abcdef", help="which cases to run, e.g. abd")
    parser.add_argument("--inputs", choices=("auto", "real", "dry"), default="auto",
                        help="input sizes and rounds; auto: those of the shapes (real inputs + dry shapes checks here "
                             "the real token counts and media times)")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="output folder (default $OUT, else a temp dir)")
    args = parser.parse_args(argv)
    args.device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if not args.device.startswith("cuda") and not args.dry_run:
        log("no CUDA device: running the dry run (scaled-down shapes and inputs)")
        args.dry_run = True
    args.size = "dry" if args.dry_run else "real"
    args.inputs = args.size if args.inputs == "auto" else args.inputs
    args.dtype = ("bfloat16" if args.device.startswith("cuda") else "float32") if args.dtype == "auto" else args.dtype
    args.budget_s = args.budget_s or (600.0 if args.dry_run else 420.0)
    args.out = Path(args.out or tempfile.mkdtemp(prefix="realsize-"))
    return args


# ------------------------------------------------------------------------------------------------------ the model
def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def thinker_config_for(shapes: dict, tokenizer):
    """Thinker config of `shapes` whose special-token ids are `tokenizer`'s (tiny.thinker_config) and whose vocabulary
    has the shapes' size (the tokenizer's ids are all below it)."""
    from transformers import Qwen3OmniMoeThinkerConfig

    values = thinker_config(tokenizer, text=shapes["text"], vision=shapes["vision"], audio=shapes["audio"])
    values["text_config"]["vocab_size"] = shapes["text"]["vocab_size"]
    return Qwen3OmniMoeThinkerConfig(**values)


@torch.no_grad()
def randomize_(module: nn.Module, std: float = 0.02) -> int:
    """Random weights in place, one kernel per tensor: norms 1 (bias 0), matrices N(0, std), vectors 0. Returns the
    number of tensors touched."""
    count = 0
    for sub in module.modules():
        norm = "Norm" in type(sub).__name__
        for name, param in sub.named_parameters(recurse=False):
            if norm:
                param.fill_(1.0 if name == "weight" else 0.0)
            elif param.dim() >= 2:
                param.normal_(0.0, std)
            else:
                param.zero_()
            count += 1
    return count


def build_thinker(config, device: str, dtype: torch.dtype) -> nn.Module:
    """The thinker made directly on `device` in `dtype` (construction-time init skipped), then randomized there."""
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration
    from transformers.initialization import no_init_weights

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)   # as from_pretrained(dtype=...) does, for construction only
    try:
        with no_init_weights(), torch.device(device):
            thinker = Qwen3OmniMoeThinkerForConditionalGeneration(config)
    finally:
        torch.set_default_dtype(previous)
    torch.manual_seed(0)
    tensors = randomize_(thinker)
    thinker.set_attn_implementation("sdpa")   # Backbone.load's default
    log(f"thinker: {tensors} tensors randomized on {device}")
    return thinker.eval()


def build_model(args, shapes: dict, parts) -> tuple[Backbone, JointSchemaHead]:
    """Backbone (lm_head kept as the lexical table, as Backbone.load) + joint head, random, on the device."""
    dtype = getattr(torch, args.dtype)
    thinker = build_thinker(thinker_config_for(shapes, parts.tokenizer), args.device, dtype)
    lexical_table = thinker.lm_head.weight.detach()
    thinker.lm_head = nn.Identity()
    thinker.requires_grad_(False)
    torch.manual_seed(1)
    with torch.device(args.device):
        head = JointSchemaHead(**shapes["head"])
    head = head.to(dtype=getattr(torch, args.head_dtype)).eval().requires_grad_(False)
    sync(args.device)
    return Backbone(thinker, lexical_table, args.device, dtype), head


def make_engine(backbone: Backbone, head: JointSchemaHead, parts, directory: Path, config: EngineConfig,
                device: str) -> DecisionEngine:
    """A ClefModel assembled by hand as `ClefModel.from_config` would, behind a DecisionEngine; its forward timing is
    made real by a CUDA synchronise at the end of `probabilities` (where the product reads them anyway)."""
    model = ClefModel(backbone, head, parts, CheckpointSource(directory, False, "random"),
                      max_context_tokens=config.max_context_tokens, media_limits=config.media,
                      media_cache_bytes=int(config.media_cache_mb * MiB),
                      prefix_cache_bytes=int(config.prefix_cache_mb * MiB), isolation=config.isolation)
    probabilities = model.probabilities

    def synchronised(records):
        out = probabilities(records)
        sync(device)
        return out

    model.probabilities = synchronised
    return DecisionEngine(config, model=model).load()


# ---------------------------------------------------------------------------------------------------- FLOP model
def count(module: nn.Module | None) -> int:
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
        self.vision = dict(per_patch=count(vis.patch_embed) + count(vis.blocks), depth=len(vis.blocks),
                           per_merged=count(vis.merger) + count(getattr(vis, "merger_list", None)),
                           width=vis.config.hidden_size, merge=vis.config.spatial_merge_size)
        ac = aud.config
        self.audio = dict(per_token=count(aud.conv_out) + count(aud.layers) + count(aud.proj1) + count(aud.proj2),
                          layers=len(aud.layers), d=ac.d_model, channels=ac.downsample_hidden_size,
                          mel=ac.num_mel_bins, chunk=2 * ac.n_window,
                          window_chunks=ac.n_window_infer // (2 * ac.n_window))
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
        v = self.vision
        n = t * h * w
        return (2 * n * v["per_patch"] + 2 * n / v["merge"] ** 2 * v["per_merged"]
                + 4 * v["depth"] * v["width"] * t * (h * w) ** 2)

    def audio_clip(self, frames: int) -> float:
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

    def request(self, tokens: int, prefix: int, media: dict[str, torch.Tensor], warm: bool) -> tuple[float, int]:
        """(FLOPs, prefilled tokens) of one request of `tokens` tokens whose first `prefix` do not depend on the
        questions; `media`: its thinker media tensors (grids, audio masks); `warm`: prefix and media come from the
        caches, so only the rest is prefilled."""
        if warm:
            return self.text(tokens - prefix, prefix), tokens - prefix
        flops = self.text(tokens)
        for key in ("image_grid_thw", "video_grid_thw"):
            for t, h, w in media.get(key, torch.zeros(0, 3)).tolist():
                flops += self.vision_grid(int(t), int(h), int(w))
        for frames in media.get("feature_attention_mask", torch.zeros(0, 1)).sum(-1).tolist():
            flops += self.audio_clip(int(frames))
        return flops, tokens


# --------------------------------------------------------------------------------------------------- the workload
FILLER = ("Customer reports that the rooftop unit at the north warehouse started rattling after the storm. The "
          "technician replaced the fan belt, checked the refrigerant pressure and cleaned the condenser coil. Orders "
          "for spare parts are stuck at checkout and the billing team has not answered the last two emails. ")


def state_text(tokenizer, tokens: int, nonce: str) -> str:
    """About `tokens` tokens of ticket text (the checkpoint's tokenizer), starting with `nonce`."""
    ids = tokenizer(FILLER * (tokens // 8 + 1), add_special_tokens=False)["input_ids"][:tokens]
    return f"Ticket {nonce}. " + tokenizer.decode(ids)


QUESTION_TEXT = {"noul": "Is the model and serial number label visible in the photo?",
                 "choice": "Which team should handle this?", "score": "How urgent is this?"}


def questions(n: int, tag: str) -> dict:
    """`n` questions cycling noul / choice / score (3 and 4 options); `tag` goes into every id and instruction, so
    a new tag makes new questions."""
    out = {}
    for k in range(n):
        kind = ("noul", "choice", "score")[k % 3]
        q = {"type": kind, "instructions": f"{tag} {k + 1}: {QUESTION_TEXT[kind]}"}
        if kind == "choice":
            q["criteria"] = {"billing": None, "technical": "Send a technician.", "sales": None}
        elif kind == "score":
            q["criteria"] = ["can wait", "this week", "today", "right now"]
        out[f"{tag}_{k + 1:02d}"] = q
    return out


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def make_media(plan: Plan) -> dict[str, str]:
    """The cases' media as data URLs (fixtures.media: real PNG, WAV, MP4 files)."""
    seconds, width, height = plan.video
    media = {"image": data_url("image/png", image_bytes("PNG", "RGB", plan.image_side, plan.image_side)),
             "audio": data_url("audio/wav", wav_bytes(plan.audio_seconds)),
             "video": data_url("video/mp4", video_bytes("mp4", "libx264", "aac", seconds, width, height, 25))}
    log("media: " + ", ".join(f"{k} {len(v) * 3 // 4 / 1e6:.2f} MB" for k, v in media.items()))
    return media


@dataclass
class Case:
    key: str
    title: str
    body: Callable[[int], dict]       # round -> request body (negative rounds: warm-ups)
    rounds: int
    warm: bool = False                # through the engine with media + prefix caches on


def make_cases(plan: Plan, tokenizer, media: dict[str, str], selected: str, scale: float) -> list[Case]:
    """(a)-(f). Cold cases put the round into the state (a new prefix each time); (f) keeps (d)'s state and video and
    asks new questions each round."""
    seconds, width, height = plan.video
    short = "Review the installation: photo, recording and video of the unit."
    video_state = "Review the installation video of the fan and its sound."

    def body(state: str, tag: str, n: int = 5, **slots) -> dict:
        return {"state": state, "questions": questions(n, tag), **{k: [media[v]] for k, v in slots.items()}}

    def nonce(r: int) -> str:
        return f"{r + 100:04d}"

    specs = [
        ("a", f"text: {plan.state_tokens}-token state, 5 questions",
         lambda r: body(state_text(tokenizer, plan.state_tokens, nonce(r)), "a")),
        ("b", f"image: {plan.image_side}x{plan.image_side} photo, 5 questions",
         lambda r: body(f"Ticket {nonce(r)}. {short}", "b", images="image")),
        ("c", f"audio: {plan.audio_seconds:g} s clip, 5 questions",
         lambda r: body(f"Ticket {nonce(r)}. {short}", "c", audio="audio")),
        ("d", f"video: {seconds:g} s {width}x{height} with sound, 5 questions",
         lambda r: body(f"Ticket {nonce(r)}. {video_state}", "d", videos="video")),
        ("e", f"long: {plan.long_questions} questions over a {plan.long_state_tokens}-token state",
         lambda r: body(state_text(tokenizer, plan.long_state_tokens, nonce(r)), "e", plan.long_questions)),
        ("f", "video (d) warm: same state + video, new questions",
         lambda r: body(f"Ticket 0001. {video_state}", f"f{nonce(r)}", videos="video")),
    ]
    return [Case(key, title, make, max(1, round(plan.rounds[key] * scale)), warm=key == "f")
            for key, title, make in specs if key in selected]


# ---------------------------------------------------------------------------------------------------- measuring
def nearest_rank(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank (p99 of fewer than 100 values is their maximum)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def time_left(budget_s: float) -> float:
    return budget_s - (time.monotonic() - STARTED)


def run_case(case: Case, engine: DecisionEngine, bookkeeping: DecisionEngine, flops: FlopModel, args,
             warmups: int) -> dict:
    """Warm up, then time `case.rounds` decides (fewer if the budget runs low); one result row."""
    device = args.device
    request = parse_request(case.body(0), bookkeeping.config)     # bookkeeping, off the clock
    media = bookkeeping.model.encode_media(request.media)
    record = bookkeeping.model.prepare(request, media)
    total_flops, prefilled = flops.request(record.num_tokens, record.prefix_len, media.encoded.tensors, case.warm)
    state_tokens = len(bookkeeping.model.parts.tokenizer(request.state, add_special_tokens=False)["input_ids"])
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    first = time.monotonic()
    for w in range(warmups):
        decision = engine.decide(parse_request(case.body(-1 - w), engine.config))
    sync(device)
    per_round = (time.monotonic() - first) / max(1, warmups)
    latencies, parts, caches = [], {"decode": [], "encode": [], "forward": []}, set()
    for r in range(case.rounds):
        if time_left(args.budget_s) < 1.5 * per_round:
            break
        body = case.body(r)
        sync(device)
        started = time.perf_counter()
        decision = engine.decide(parse_request(body, engine.config))
        sync(device)
        latencies.append(time.perf_counter() - started)
        per_round = max(per_round, latencies[-1])
        for key in parts:
            parts[key].append(decision.timings_ms.get(key, 0.0))
        caches.add(",".join(f"{k}:{v}" for k, v in sorted(decision.cache.items())) or "off")
    return {**result_row(case, args, latencies, parts, caches, decision, total_flops, prefilled),
            "state_tokens": state_tokens}


def result_row(case: Case, args, latencies: list[float], parts: dict, caches: set, decision, total_flops: float,
               prefilled: int) -> dict:
    """One case's JSON-ready figures (None where nothing was measured)."""
    row = {"case": case.key, "title": case.title, "rounds": len(latencies), "rounds_planned": case.rounds,
           "input_tokens": decision.usage.input_tokens, "prefill_tokens": prefilled,
           "tokens_by_modality": decision.tokens_by_modality, "caches": sorted(caches), "tflop": total_flops / 1e12,
           "cloudflare_ms": ANCHORS[case.key][0], "goal_ms": ANCHORS[case.key][1]}
    if not latencies:
        return {**row, "skipped": "budget"}
    p50 = statistics.median(latencies)
    forward = statistics.median(parts["forward"]) / 1e3
    peak = args.peak_tflops * 1e12
    row.update(p50_ms=p50 * 1e3, p99_ms=nearest_rank(latencies, 0.99) * 1e3, mean_ms=statistics.fmean(latencies) * 1e3,
               media_ms=statistics.median(parts["decode"]), prompt_ms=statistics.median(parts["encode"]),
               forward_ms=forward * 1e3, prefill_tok_s=prefilled / p50, mfu=total_flops / p50 / peak,
               mfu_forward=total_flops / forward / peak if forward > 0 else None)
    if args.device.startswith("cuda"):
        row["peak_gib"] = torch.cuda.max_memory_allocated() / GiB
    else:
        row["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GiB
    return row


# ------------------------------------------------------------------------------------------------------ reporting
def fmt(value, spec: str = ".1f") -> str:
    if value is None:
        return "—"
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def millions(n: float) -> str:
    return f"{n / 1e9:.3f} B" if n >= 1e9 else f"{n / 1e6:.3f} M"


def markdown(env: dict, rows: list[dict], skipped: list[str]) -> str:
    """The report: environment, one table row per case, what was skipped, how MFU was counted."""
    params = env["params"]
    lines = [f"# realsize ({env['size']} shapes, {env['inputs']} inputs, {env['device_name']}, {env['dtype']})", "",
             f"thinker {millions(params['thinker'])} params ({millions(params['active_per_token_decoder'])} active "
             f"per token in the decoder layers), head {millions(params['head'])}; weights "
             f"{fmt(env.get('weights_gib'), '.1f')} GiB; build {env['build_s']:.1f} s; experts "
             f"{env['experts_implementation']}, attention {env['attn_implementation']}; torch {env['torch']}, "
             f"transformers {env['transformers']}; peak {env['peak_tflops']:g} TFLOP/s", "",
             "| case | input tok (state) | prefill tok | p50 ms | p99 ms | media / prompt / forward ms (p50) "
             "| prefill tok/s | TFLOP | MFU e2e | MFU fwd | peak GiB | Cloudflare ms | goal ms | caches |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        split = f"{fmt(r.get('media_ms'))} / {fmt(r.get('prompt_ms'))} / {fmt(r.get('forward_ms'))}"
        peak = r.get("peak_gib", r.get("peak_rss_gib"))
        lines.append(f"| ({r['case']}) {r['title']} | {r['input_tokens']} ({r['state_tokens']}) | "
                     f"{r['prefill_tokens']} | "
                     f"{fmt(r.get('p50_ms'))} | {fmt(r.get('p99_ms'))} | {split} | "
                     f"{fmt(r.get('prefill_tok_s'), ',.0f')} | "
                     f"{r['tflop']:.3g} | {fmt(r.get('mfu'), '.2%')} | {fmt(r.get('mfu_forward'), '.2%')} | "
                     f"{fmt(peak, '.1f')}{'' if 'peak_gib' in r else ' (RSS)'} | {fmt(r['cloudflare_ms'], '')} | "
                     f"{fmt(r['goal_ms'], '')} | {' '.join(r['caches'])} |")
    lines += ["", "Skipped: " + ("; ".join(skipped) if skipped else "nothing"), "",
              "p50/p99 over the rounds (nearest rank: p99 is the maximum below 100 rounds) of end-to-end "
              "`decide(parse_request(body))`, CUDA-synchronised. MFU e2e = FLOPs / p50 / peak; MFU fwd = FLOPs / "
              "the engine's forward p50 / peak. FLOPs: " + " ".join(FlopModel.__doc__.split("\n\n")[1].split())]
    return "\n".join(lines) + "\n"


def write_report(out: Path, env: dict, rows: list[dict], skipped: list[str]) -> str:
    """Rewrite realsize.json and realsize.md (after every case: a run cut short keeps what it measured)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "realsize.json").write_text(json.dumps({"env": env, "cases": rows, "skipped": skipped}, indent=1) + "\n")
    text = markdown(env, rows, skipped)
    (out / "realsize.md").write_text(text)
    return text


def environment(args, flops: FlopModel, backbone: Backbone, build_s: float, weights_gib: float | None) -> dict:
    import transformers

    config = backbone.thinker.config
    return {"size": args.size, "inputs": args.inputs, "device": args.device, "dtype": args.dtype,
            "head_dtype": args.head_dtype,
            "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
            "torch": torch.__version__, "transformers": transformers.__version__, "build_s": build_s,
            "weights_gib": weights_gib, "params": flops.params, "peak_tflops": args.peak_tflops,
            "experts_implementation": getattr(config.text_config, "_experts_implementation", None),
            "attn_implementation": getattr(config, "_attn_implementation", None), "budget_s": args.budget_s}


def real_shapes_on_meta() -> None:
    """Dry run only: the real-size config built on the meta device, to show its parameter counts here."""
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration

    from omni.model.tiny import build_tokenizer

    with torch.device("meta"):
        thinker = Qwen3OmniMoeThinkerForConditionalGeneration(thinker_config_for(SHAPES["real"], build_tokenizer()))
        head = JointSchemaHead(**REAL_HEAD)
    params = FlopModel(thinker, head).params
    log("real shapes on the meta device: " + ", ".join(f"{k} {v / 1e9:.4f} B" for k, v in params.items())
        + f" ({count(thinker) * 2 / GiB:.1f} GiB in bf16)")


def build(args, directory: Path) -> tuple[DecisionEngine, DecisionEngine, FlopModel, dict]:
    """Processor parts, the random model, the cold and warm engines, the FLOP model, the environment line."""
    parts = load_processor_parts(write_checkpoint(directory))
    started = time.monotonic()
    backbone, head = build_model(args, SHAPES[args.size], parts)
    build_s = time.monotonic() - started
    weights = torch.cuda.memory_allocated() / GiB if args.device.startswith("cuda") else None
    flops = FlopModel(backbone.thinker, head, backbone.lexical_table)
    base = EngineConfig(device=args.device, dtype=args.dtype, head_dtype=args.head_dtype)
    cold = make_engine(backbone, head, parts, directory, replace(base, media_cache_mb=0), args.device)
    warm = make_engine(backbone, head, parts, directory, base, args.device)
    env = environment(args, flops, backbone, build_s, weights)
    log(f"built in {build_s:.1f} s: {json.dumps(env)}")
    return cold, warm, flops, env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = PLANS[args.inputs]
    log(f"{args.size} shapes, {args.inputs} inputs on {args.device} ({args.dtype}); budget {args.budget_s:g} s; "
        f"output {args.out}")
    if args.dry_run:
        real_shapes_on_meta()
    with tempfile.TemporaryDirectory(prefix="realsize-ckpt-") as tmp:
        cold, warm, flops, env = build(args, Path(tmp))
        cases = make_cases(plan, cold.model.parts.tokenizer, make_media(plan), args.cases, args.rounds_scale)
        rows, skipped = [], []
        for case in cases:
            if time_left(args.budget_s) < (5 if args.dry_run else 20):
                skipped.append(f"({case.key}) entirely")
                log(f"({case.key}) skipped: budget")
                continue
            log(f"({case.key}) {case.title}: {plan.warmups} warm-up + {case.rounds} rounds")
            row = run_case(case, warm if case.warm else cold, cold, flops, args, plan.warmups + case.warm)
            if row["rounds"] < case.rounds:
                skipped.append(f"({case.key}) {case.rounds - row['rounds']} of {case.rounds} rounds")
            rows.append(row)
            print(json.dumps(row), flush=True)
            write_report(args.out, env, rows, skipped)
        print(write_report(args.out, env, rows, skipped), flush=True)
    log(f"done; wrote {args.out / 'realsize.json'} and {args.out / 'realsize.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
