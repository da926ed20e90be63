"""preprocessing: a 21 s 1280x720 25 fps H.264 clip with 48 kHz stereo AAC, from bytes to model-ready tensors.

Our path (`preprocess.video.decode_video` -> `preprocess.processor.encode_media`: one PyAV demux pass for frames
and soundtrack, one swscale resize per kept frame, numpy patchify, Whisper features, placeholder ids) is timed
per stage over several rounds; the headline is the best round, the median beside it. Wall time is compared with
the clip's 21 s; peak memory is the growth of the process's max RSS during one run plus the tracemalloc peak
(numpy and Python allocations; FFmpeg's and torch's own buffers are not seen by tracemalloc).

With `--ref-python PATH` (a venv with torchvision, qwen-omni-utils, librosa and the ffmpeg CLI; see RESULTS.md),
the same clip also goes, in a subprocess with that interpreter, through
  (1) the Clef reference chain: its PyAV `load_video` (2 fps by absolute time, <= 262,144 px, swresample mono
      downmix) + transformers' `Qwen3OmniMoeProcessor` with the torchvision video processor (fps 2.0);
  (2) the cookbook chain: qwen-omni-utils `process_mm_info(use_audio_in_video=True)` + the same processor
      without fps (what the model card shows);
and the ratios ref/ours, token counts and the agreement of our tensors with (1) are printed, measured in this run.

Knows nothing of the decision core beyond `omni.model.tiny.build_tokenizer` (a tokenizer for the reference processor).
(Named `preprocessing.py`, not `preprocess.py`: run as a script, this folder comes first on the import path, and a
`preprocess.py` here would hide the `preprocess` package from every script in it.)

    .venv/bin/python benchmarks/preprocessing.py [--rounds 3] [--seconds 21] [--ref-python /work/refenv/bin/python]
                                                 [--smoke]

`--smoke`: the same code path at tiny sizes (a 2 s clip, one round), to check that it runs; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import tempfile
import time
import tracemalloc
from pathlib import Path

import torch
from smoke import parse_with_smoke

from fixtures import media as fm
from preprocess.align import PlaceholderIds
from preprocess.item import MediaItem
from preprocess.processor import encode_media
from preprocess.video import VideoFramePolicy, decode_video

# --smoke: the same code path at tiny sizes (explicit flags still win)
SMOKE = {"rounds": 1, "seconds": 2.0}
IDS = PlaceholderIds(image_pad=1012, video_pad=1013, audio_pad=1032, vision_start=1009, vision_end=1010,
                     audio_start=1026, audio_end=1027, newline=(198,))


def processors():
    """The Qwen3-Omni image processor and Whisper feature extractor, configured as the checkpoint's."""
    from transformers import Qwen2VLImageProcessorPil, WhisperFeatureExtractor

    image = Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2, min_pixels=3136,
                                     max_pixels=12845056, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    audio = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400,
                                    chunk_length=300, dither=0.0, return_attention_mask=True)
    return image, audio


def our_path(data: bytes, image_processor, feature_extractor, ids: PlaceholderIds,
             policy: VideoFramePolicy = VideoFramePolicy()):
    """Clip bytes -> (encoded media, {decode_s, encode_s, total_s}): decode_video, then encode_media."""
    started = time.perf_counter()
    video = decode_video(MediaItem("videos", 0, data), policy=policy)
    decoded = time.perf_counter()
    encoded = encode_media(videos=[video], image_processor=image_processor, feature_extractor=feature_extractor,
                           token_ids=ids)
    done = time.perf_counter()
    return encoded, {"decode_s": decoded - started, "encode_s": done - decoded, "total_s": done - started}


def measure_memory(data, image_processor, feature_extractor, policy) -> dict:
    """One untimed run of our path: max RSS growth, tracemalloc peak and output tensor size, in MiB."""
    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    encoded, _ = our_path(data, image_processor, feature_extractor, IDS, policy)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tensor_bytes = sum(t.numel() * t.element_size() for t in encoded.tensors.values())
    return {"tracemalloc_peak_mib": peak / 2**20, "max_rss_mib": rss_after_kib / 1024,
            "max_rss_growth_mib": (rss_after_kib - rss_before_kib) / 1024, "output_tensors_mib": tensor_bytes / 2**20}


REF_SCRIPT = r'''
import io, json, math, sys, time
import av, numpy as np, torch
from transformers import (AutoTokenizer, Qwen2VLImageProcessor, Qwen2VLVideoProcessor, Qwen3OmniMoeProcessor,
                          WhisperFeatureExtractor)
clip_path, tokenizer_dir, out_dir, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(2)
tok = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
ip = dict(patch_size=16, temporal_patch_size=2, merge_size=2, min_pixels=3136, max_pixels=12845056,
          image_mean=[0.5] * 3, image_std=[0.5] * 3)
proc = Qwen3OmniMoeProcessor(image_processor=Qwen2VLImageProcessor(**ip), video_processor=Qwen2VLVideoProcessor(**ip),
    feature_extractor=WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400,
                                              chunk_length=300, dither=0.0, return_attention_mask=True),
    tokenizer=tok, chat_template=tok.chat_template)
data = open(clip_path, "rb").read()
VIDEO_PH = "<|vision_start|><|video_pad|><|vision_end|>\n"

def clef_audio(data):  # Clef reference _decode_audio: swresample straight to 16 kHz mono
    with av.open(io.BytesIO(data)) as c:
        s = next(s for s in c.streams if s.type == "audio")
        r = av.AudioResampler(format="flt", layout="mono", rate=16000)
        chunks = []
        for f in list(c.decode(s)) + [None]:
            chunks += [x.to_ndarray().reshape(-1) for x in r.resample(f)]
    return np.concatenate(chunks).astype(np.float32)

def clef_frames(data):  # Clef reference load_video: 2 fps by absolute time, <= 262,144 px, even sides
    frames = []
    with av.open(io.BytesIO(data)) as c:
        s = next(s for s in c.streams if s.type == "video"); s.thread_type = "AUTO"
        for f in c.decode(s):
            if f.time is None or f.time + 1e-6 < len(frames) / 2.0:
                continue
            scale = min(1.0, math.sqrt(262144 / (f.width * f.height)))
            w, h = max(2, round(f.width * scale / 2) * 2), max(2, round(f.height * scale / 2) * 2)
            frames.append(f.to_ndarray(format="rgb24", width=w, height=h))
    if len(frames) % 2:
        frames.append(frames[-1])
    return np.stack(frames)

def clef_chain():
    t0 = time.perf_counter()
    frames, track = clef_frames(data), clef_audio(data)
    t1 = time.perf_counter()
    out = proc(text=VIDEO_PH, videos=[frames], audio=[track], audio_from_video_indices=[0],
               videos_kwargs={"fps": 2.0, "do_sample_frames": False, "use_audio_in_video": True},
               add_special_tokens=False, return_tensors="pt")
    return out, t1 - t0, time.perf_counter() - t1

def cookbook_chain():
    from qwen_omni_utils import process_mm_info
    msgs = [{"role": "user", "content": [{"type": "video", "video": clip_path}, {"type": "text", "text": "Talking?"}]}]
    t0 = time.perf_counter()
    audios, images, videos = process_mm_info(msgs, use_audio_in_video=True)
    t1 = time.perf_counter()
    text = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    out = proc(text=text, audio=audios, videos=videos, return_tensors="pt", padding=True, use_audio_in_video=True,
               audio_from_video_indices=[0])
    return out, t1 - t0, time.perf_counter() - t1

result = {}
for name, chain in (("clef_reference", clef_chain), ("cookbook", cookbook_chain)):
    chain()  # warm-up: lazy imports, first-call caches (ours is warm too)
    times = []
    for _ in range(rounds):
        out, decode_s, process_s = chain()
        times.append({"decode_s": decode_s, "process_s": process_s, "total_s": decode_s + process_s})
    ids = out["input_ids"][0]
    result[name] = {"rounds": times, "video_grid_thw": out["video_grid_thw"].tolist(),
                    "video_second_per_grid": [float(x) for x in out["video_second_per_grid"]],
                    "video_tokens": int((ids == tok.convert_tokens_to_ids("<|video_pad|>")).sum()),
                    "audio_tokens": int((ids == tok.convert_tokens_to_ids("<|audio_pad|>")).sum()),
                    "sequence_length": int(ids.numel())}
    if name == "clef_reference":
        torch.save({k: out[k] for k in ("pixel_values_videos", "input_features", "feature_attention_mask",
                                        "input_ids")}, out_dir + "/clef_reference.pt")
json.dump(result, open(out_dir + "/ref.json", "w"))
'''


def run_reference_round(ref_python: str, tmp: Path) -> tuple[dict, dict]:
    """One round of both reference chains in a fresh subprocess (files already in `tmp`)."""
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    subprocess.run([ref_python, str(tmp / "ref.py"), str(tmp / "clip.mp4"), str(tmp / "tokenizer"), str(tmp), "1"],
                   check=True, env=env)
    return json.loads((tmp / "ref.json").read_text()), torch.load(tmp / "clef_reference.pt")


def agreement(clef: dict, our_encoded) -> dict:
    """How close our tensors are to the Clef reference chain's: pixels, log-mel, placeholder ids."""
    ours = our_encoded.tensors
    result = {}
    if tuple(clef["pixel_values_videos"].shape) == tuple(ours["pixel_values_videos"].shape):
        diff = (clef["pixel_values_videos"] - ours["pixel_values_videos"]).abs()
        result["pixels_mean_abs_diff"] = float(diff.mean())
        result["pixels_max_abs_diff"] = float(diff.max())
    frames = min(clef["input_features"].shape[-1], ours["input_features"].shape[-1])
    mel = clef["input_features"][..., :frames] - ours["input_features"][..., :frames]
    result["log_mel_mean_diff_ref_minus_ours"] = float(mel.mean())  # swresample's mono downmix: +3 dB
    result["log_mel_mean_abs_diff"] = float(mel.abs().mean())
    result["media_ids_equal"] = clef["input_ids"][0].tolist() == our_encoded.ids
    return result


def summarize(rounds: list[dict]) -> dict:
    """Per timed stage over the rounds: {"best": min, "median": median}."""
    return {key: {"best": min(r[key] for r in rounds), "median": statistics.median(r[key] for r in rounds)}
            for key in rounds[0]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; with --smoke the SMOKE sizes are the defaults (flags given explicitly still win)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=21.0)
    parser.add_argument("--ref-python", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--interpolation", default=VideoFramePolicy().interpolation,
                        help="swscale filter of the one frame resize (BICUBIC, BILINEAR, AREA, ...)")
    return parse_with_smoke(parser, SMOKE, argv)


def make_clip(seconds: float) -> bytes:
    """The 1280x720 25 fps H.264 + 48 kHz stereo AAC clip, `seconds` long; prints its "clip" line."""
    started = time.perf_counter()
    clip = fm.video_bytes(seconds=seconds, width=1280, height=720, fps=25, audio_rate_hz=48000, audio_channels=2)
    print(json.dumps({"event": "clip", "bytes": len(clip), "seconds": seconds, "size": "1280x720", "fps": 25,
                      "audio": "AAC 48 kHz stereo", "generate_s": round(time.perf_counter() - started, 2)}))
    return clip


def placeholder_ids(ref_python: str | None):
    """-> (placeholder ids, tokenizer): the tiny tokenizer's with --ref-python (the reference needs one), else IDS."""
    if not ref_python:
        return IDS, None
    from omni.model.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    return PlaceholderIds.from_tokenizer(tokenizer), tokenizer


def run_rounds(args: argparse.Namespace, clip: bytes, image_processor, feature_extractor, ids: PlaceholderIds,
               tokenizer, policy: VideoFramePolicy):
    """--rounds rounds of our path, each followed by one reference round with --ref-python (interleaved, so load
    from other processes hits both sides alike) -> (last encoded media, our times, reference rounds)."""
    rounds, reference_rounds = [], []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.ref_python:
            (tmp / "clip.mp4").write_bytes(clip)
            tokenizer.save_pretrained(tmp / "tokenizer")
            (tmp / "ref.py").write_text(REF_SCRIPT)
        for _ in range(args.rounds):
            encoded, times = our_path(clip, image_processor, feature_extractor, ids, policy)
            rounds.append(times)
            print(json.dumps({"event": "ours", **{k: round(v, 3) for k, v in times.items()}}))
            if args.ref_python:
                reference_rounds.append(run_reference_round(args.ref_python, tmp))
    return encoded, rounds, reference_rounds


def print_ours(args: argparse.Namespace, ours: dict, memory: dict, encoded) -> None:
    """The "summary" JSON line and the one-line headline of our path."""
    grid = encoded.tensors["video_grid_thw"].tolist()
    report = {"event": "summary", "smoke": args.smoke, "python": platform.python_version(), "threads": args.threads,
              "interpolation": args.interpolation,
              "ours": ours, "realtime_factor_best": args.seconds / ours["total_s"]["best"],
              "memory": {k: round(v, 1) for k, v in memory.items()}, "video_grid_thw": grid,
              "tokens": encoded.tokens_by_modality, "media_ids": len(encoded.ids)}
    print(json.dumps(report))
    print(f"\nours: {ours['total_s']['best']:.3f} s best / {ours['total_s']['median']:.3f} s median for "
          f"{args.seconds:g} s of video ({report['realtime_factor_best']:.0f}x real time): decode "
          f"{ours['decode_s']['best']:.3f} s + encode {ours['encode_s']['best']:.3f} s; grid {grid}, "
          f"tokens {encoded.tokens_by_modality}; max RSS growth {memory['max_rss_growth_mib']:.0f} MiB, "
          f"tracemalloc peak {memory['tracemalloc_peak_mib']:.0f} MiB, output tensors "
          f"{memory['output_tensors_mib']:.0f} MiB")


def print_reference(ours: dict, reference_rounds: list[tuple[dict, dict]], encoded) -> None:
    """Per reference chain its JSON line and headline (ratios ref / ours), then the agreement with the Clef one."""
    best, median = ours["total_s"]["best"], ours["total_s"]["median"]
    for name in ("clef_reference", "cookbook"):
        info = reference_rounds[-1][0][name]
        ref = summarize([r[0][name]["rounds"][0] for r in reference_rounds])
        print(json.dumps({"event": name, **{k: v for k, v in info.items() if k != "rounds"}, "times": ref,
                          "ratio_ref_over_ours_best": ref["total_s"]["best"] / best,
                          "ratio_ref_over_ours_median": ref["total_s"]["median"] / median}))
        print(f"{name}: {ref['total_s']['best']:.3f} s best (decode {ref['decode_s']['best']:.3f} + process "
              f"{ref['process_s']['best']:.3f}) = {ref['total_s']['best'] / best:.1f}x ours (median "
              f"{ref['total_s']['median'] / median:.1f}x); grid {info['video_grid_thw']}, spg "
              f"{info['video_second_per_grid']}, {info['video_tokens']} video + {info['audio_tokens']} audio "
              f"tokens, L={info['sequence_length']}")
    print(json.dumps({"event": "agreement_with_clef_reference", **agreement(reference_rounds[-1][1], encoded)}))


def main(argv: list[str] | None = None) -> None:
    """Make the clip, measure memory, run the interleaved rounds, print our figures and the reference's."""
    args = parse_args(argv)
    policy = VideoFramePolicy(interpolation=args.interpolation)
    torch.set_num_threads(args.threads)
    clip = make_clip(args.seconds)
    image_processor, feature_extractor = processors()
    ids, tokenizer = placeholder_ids(args.ref_python)
    memory = measure_memory(clip, image_processor, feature_extractor, policy)  # also the warm-up round
    encoded, rounds, reference_rounds = run_rounds(args, clip, image_processor, feature_extractor, ids, tokenizer,
                                                   policy)
    ours = summarize(rounds)
    print_ours(args, ours, memory, encoded)
    if args.ref_python:
        print_reference(ours, reference_rounds, encoded)


if __name__ == "__main__":
    main()
