"""preprocessing ("media at speed"): bytes -> model inputs for four synthetic 21 s clips, against the decoder floor.

Clips (made here with PyAV, `fixtures.media.video_bytes`, 25 fps, 48 kHz stereo): `720p` 1280x720 H.264 + AAC (the
clip of issue 24 and of every earlier run: the moving-index test pattern, libx264 "ultrafast": no B-frames), `1080p`
1920x1080 H.264 + AAC (the same kind), `webm` 1280x720 VP9 + Opus, and `720p_high` 1280x720 H.264 + AAC written
with PyAV's libx264 defaults (preset medium, High profile, CRF 23) from a panning textured scene
(`fixtures.media.scene`): about three frames in four are B-frames, as phones and cameras write (issue 31).
Per clip, each round times, interleaved so that load from other processes hits all alike:
  * floor: one single-threaded PyAV decode of all the clip's video frames and audio, doing nothing with them;
  * ours: `preprocess.video.decode_video` (threads lent: --threads) then `preprocess.processor.encode_media` (the
    server's `decode` + `encode` stages, no cache), and the same with one thread;
  * ours decoding every frame (H.264 clips): the same as ours with `SKIP_UNREFERENCED_CODECS` emptied, so every
    frame is decoded, as before issue 31 (the before of its before/after);
  * stages: one single-threaded pass of the same chain cut into its stages, each timed alone (CPU time): demux,
    decode (every frame / the frames ours decodes), the reference's pre-scale (swscale), the processor's bicubic,
    the patch rows, the soundtrack (decode + 16 kHz mono) and `encode_media` (features, ids);
with wall and CPU time (process_time: what the stage costs the machine, whatever else runs on it). The headline is
the best of --rounds, the median beside it, and ours / floor.

Memory (`--memory`, on by default): per clip a fresh subprocess decodes and encodes it once after a warm-up and
reports the growth of its resident set over the run (sampled every 0.5 ms from /proc/self/statm), uint8 patches as
the server keeps them (normalised on the model's device), and the same run normalising on the host (float32, as
before issue 24).

With `--ref-python PATH` (a venv with torchvision, qwen-omni-utils, librosa and the ffmpeg CLI; see RESULTS.md),
the 720p clip also goes, in a subprocess with that interpreter, through
  (1) the Clef reference chain: its PyAV `load_video` (2 fps by absolute time, <= 262,144 px, swresample mono
      downmix) + transformers' `Qwen3OmniMoeProcessor` with the torchvision video processor (fps 2.0);
  (2) the cookbook chain: qwen-omni-utils `process_mm_info(use_audio_in_video=True)` + the same processor
      without fps (what the model card shows);
and the ratios ref/ours, token counts and the agreement of our tensors with (1) are printed, measured in this run.

Knows nothing of the decision core beyond `omni.model.tiny.build_tokenizer` (a tokenizer for the reference processor).
(Named `preprocessing.py`, not `preprocess.py`: run as a script, this folder comes first on the import path, and a
`preprocess.py` here would hide the `preprocess` package from every script in it.)

    .venv/bin/python benchmarks/preprocessing.py [--rounds 5] [--seconds 21] [--clips 720p,1080p,webm]
                                                 [--threads 2] [--no-memory] [--ref-python /work/refenv/bin/python]
                                                 [--smoke]

`--smoke`: the same code path at tiny sizes (2 s clips at a quarter of the sides, one round, memory of the first
clip only), to check that it runs; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import av
import torch
from smoke import parse_with_smoke

import preprocess.video as video_module
from fixtures import media as fm
from preprocess.align import PlaceholderIds
from preprocess.audio import MonoResampler
from preprocess.item import MediaItem
from preprocess.patches import PatchWriter
from preprocess.processor import encode_media, media_on_device, normalize_patches
from preprocess.resize import prescale_size, processor_resize
from preprocess.video import decode_video
from preprocess.video_frames import REFERENCE_FRAMES, frame_size

# --smoke: the same code path at tiny sizes (explicit flags still win)
SMOKE = {"rounds": 1, "seconds": 2.0, "scale": 0.25, "memory_clips": "720p"}
IDS = PlaceholderIds(image_pad=1012, video_pad=1013, audio_pad=1032, vision_start=1009, vision_end=1010,
                     audio_start=1026, audio_end=1027, newline=(198,))
CLIPS = {"720p": {"width": 1280, "height": 720},
         "1080p": {"width": 1920, "height": 1080},
         "webm": {"width": 1280, "height": 720, "container_format": "webm", "video_codec": "libvpx-vp9",
                  "audio_codec": "libopus"},
         "720p_high": {"width": 1280, "height": 720, "x264_defaults": True, "picture": fm.scene}}


def processors():
    """The Qwen3-Omni image processor and Whisper feature extractor, configured as the checkpoint's."""
    from transformers import Qwen2VLImageProcessorPil, WhisperFeatureExtractor

    image = Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2, min_pixels=3136,
                                     max_pixels=12845056, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    audio = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400,
                                    chunk_length=300, dither=0.0, return_attention_mask=True)
    return image, audio


def our_path(data: bytes, image_processor, feature_extractor, ids: PlaceholderIds, threads: int = 1):
    """Clip bytes -> (encoded media, {decode_s, encode_s, total_s, cpu_s}): decode_video, then encode_media."""
    cpu, started = time.process_time(), time.perf_counter()
    video = decode_video(MediaItem("videos", 0, data), threads=threads)
    decoded = time.perf_counter()
    encoded = encode_media(videos=[video], image_processor=image_processor, feature_extractor=feature_extractor,
                           token_ids=ids)
    done = time.perf_counter()
    return encoded, {"decode_s": decoded - started, "encode_s": done - decoded, "total_s": done - started,
                     "cpu_s": time.process_time() - cpu}


def floor(data: bytes) -> dict:
    """One single-threaded PyAV decode of every video frame and the audio, doing nothing with them."""
    cpu, started = time.process_time(), time.perf_counter()
    with av.open(io.BytesIO(data)) as container:
        streams = [container.streams.video[0], *container.streams.audio[:1]]
        for stream in streams:
            stream.thread_type, stream.thread_count = "NONE", 1
        for packet in container.demux(*streams):
            packet.decode()
    return {"total_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu}


def make_clip(name: str, seconds: float, scale: float = 1.0) -> bytes:
    """Clip `name` of CLIPS, `seconds` long (sides times `scale`, even); prints its "clip" line (with the count of
    each picture type: I, P, B)."""
    spec = dict(CLIPS[name])
    width, height = (round(spec.pop(side) * scale / 2) * 2 for side in ("width", "height"))
    started = time.perf_counter()
    clip = fm.video_bytes(seconds=seconds, width=width, height=height, fps=25, audio_rate_hz=48000, audio_channels=2,
                          **spec)
    with av.open(io.BytesIO(clip)) as container:
        video = container.streams.video[0]
        profile = video.codec_context.profile
        kinds = [av.video.frame.PictureType(frame.pict_type).name for frame in container.decode(video)]
    codec = spec.get("video_codec", "libx264")
    print(json.dumps({"event": "clip", "clip": name, "bytes": len(clip), "seconds": seconds,
                      "size": f"{width}x{height}", "fps": 25,
                      "video": f"{codec} {'defaults' if spec.get('x264_defaults') else 'ultrafast'}"
                               if codec == "libx264" else codec,
                      "profile": profile, "frames": {kind: kinds.count(kind) for kind in sorted(set(kinds))},
                      "audio": f"{spec.get('audio_codec', 'aac')} 48 kHz stereo",
                      "generate_s": round(time.perf_counter() - started, 2)}), flush=True)
    return clip


def ours_every_frame(data: bytes, image_processor, feature_extractor, ids: PlaceholderIds, threads: int):
    """`our_path` decoding every frame: no codec skips the frames the rule never keeps (the chain before issue 31)."""
    skipped = video_module.SKIP_UNREFERENCED_CODECS
    video_module.SKIP_UNREFERENCED_CODECS = frozenset()
    try:
        return our_path(data, image_processor, feature_extractor, ids, threads)
    finally:
        video_module.SKIP_UNREFERENCED_CODECS = skipped


def _cpu(work) -> tuple[float, object]:
    started = time.process_time()
    result = work()
    return time.process_time() - started, result


def _decode_kept(data: bytes, skip: bool) -> list:
    """The reference rule's kept frames, single-threaded; with `skip`, never-kept frames sent with NONREF (as ours)."""
    kept: list = []
    with av.open(io.BytesIO(data)) as container:
        video = container.streams.video[0]
        video.thread_type, video.thread_count = "NONE", 1
        context, unit = video.codec_context, float(video.time_base)
        for packet in container.demux(video):
            if skip and context.name in video_module.SKIP_UNREFERENCED_CODECS:
                never = packet.pts is not None and packet.pts * unit + 1e-6 < len(kept) / REFERENCE_FRAMES.fps
                context.skip_frame = "NONREF" if never else "DEFAULT"
            kept.extend(f for f in packet.decode() if f.time is not None
                        and f.time + 1e-6 >= len(kept) / REFERENCE_FRAMES.fps)
    return kept


def _soundtrack(data: bytes) -> None:
    with av.open(io.BytesIO(data)) as container:
        resampler = MonoResampler(MediaItem("videos", 0, data), 600.0, "max_video_seconds", 600.0)
        for frame in container.decode(container.streams.audio[0]):
            resampler.add(frame)
        resampler.finish()


def stages(data: bytes, image_processor, feature_extractor, ids: PlaceholderIds) -> dict:
    """One single-threaded pass of ours, stage by stage, each timed alone (CPU seconds)."""
    out = {}
    with av.open(io.BytesIO(data)) as container:
        out["demux_s"], _ = _cpu(lambda: sum(1 for _ in container.demux()))
    out["decode_every_frame_s"], _ = _cpu(lambda: _decode_kept(data, skip=False))
    out["decode_as_ours_s"], kept = _cpu(lambda: _decode_kept(data, skip=True))
    height, width = kept[0].height, kept[0].width
    small, final = prescale_size(height, width, REFERENCE_FRAMES.max_decode_pixels), frame_size(height, width)
    reformatter = av.video.reformatter.VideoReformatter()
    out["prescale_s"], rgb = _cpu(lambda: [reformatter.reformat(f, width=small[1], height=small[0], format="rgb24",
                                                                 threads=1).to_ndarray() for f in kept])
    out["bicubic_s"], resized = _cpu(lambda: [processor_resize(frame, final) for frame in rgb])
    writer = PatchWriter(*final, REFERENCE_FRAMES.layout, len(resized))
    out["patches_s"], _ = _cpu(lambda: [writer.put(writer.reserve(), frame) for frame in resized])
    out["soundtrack_s"], _ = _cpu(lambda: _soundtrack(data))
    video = decode_video(MediaItem("videos", 0, data))
    out["encode_s"], _ = _cpu(lambda: encode_media(videos=[video], image_processor=image_processor,
                                                     feature_extractor=feature_extractor, token_ids=ids))
    out["kept_frames"] = len(kept)
    return out


# ------------------------------------------------------------------------------------------------------ memory
def memory_child(clip_path: str, threads: int, host_float: bool) -> None:
    """In a fresh process: warm up on a short clip, then decode + encode `clip_path` once; print the resident set's
    growth over that run (peak sampled every 0.5 ms) as one JSON line."""
    torch.set_num_threads(1)
    data = Path(clip_path).read_bytes()
    image_processor, feature_extractor = processors()
    our_path(fm.video_bytes(seconds=1.0, width=320, height=180), image_processor, feature_extractor, IDS, threads)
    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * page

    before, peak, done = rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    encoded, _ = our_path(data, image_processor, feature_extractor, IDS, threads)
    tensors = encoded.tensors
    if host_float:     # what normalising before the device costs (the float32 tensor the server used to hold)
        tensors = {**tensors, "pixel_values_videos": normalize_patches(tensors["pixel_values_videos"],
                                                                       image_processor)}
    done.set()
    sampler.join()
    held = sum(t.numel() * t.element_size() for t in tensors.values())
    print(json.dumps({"peak_growth_mib": (max(peak[0], rss()) - before) / 2**20, "rss_before_mib": before / 2**20,
                      "output_tensors_mib": held / 2**20}))


def measure_memory(clip: bytes, threads: int) -> dict:
    """Peak RSS growth of one decode + encode in fresh subprocesses: as served (uint8) and normalised on the host."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "clip.bin"
        path.write_bytes(clip)
        for name, extra in (("uint8_to_device", []), ("float32_on_host", ["--host-float"])):
            done = subprocess.run([sys.executable, __file__, "--memory-child", str(path), "--threads", str(threads),
                                   *extra], check=True, capture_output=True, text=True)
            out[name] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


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
    ours = media_on_device(our_encoded.tensors, "cpu", torch.float32)
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
    """Per timed figure over the rounds: {"best": min, "median": median}."""
    return {key: {"best": min(r[key] for r in rounds), "median": statistics.median(r[key] for r in rounds)}
            for key in rounds[0]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; with --smoke the SMOKE sizes are the defaults (flags given explicitly still win)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=21.0)
    parser.add_argument("--scale", type=float, default=1.0, help="clip sides times this (smoke: 0.25)")
    parser.add_argument("--clips", default=",".join(CLIPS), help="comma-separated: " + ", ".join(CLIPS))
    parser.add_argument("--threads", type=int, default=2, help="threads lent to one decode (the server's budget)")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--no-memory", dest="memory", action="store_false")
    parser.add_argument("--memory-clips", default=",".join(CLIPS), help="the clips whose memory is measured")
    parser.add_argument("--ref-python", default=None)
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--host-float", action="store_true", help=argparse.SUPPRESS)
    return parse_with_smoke(parser, SMOKE, argv)


def placeholder_ids(ref_python: str | None):
    """-> (placeholder ids, tokenizer): the tiny tokenizer's with --ref-python (the reference needs one), else IDS."""
    if not ref_python:
        return IDS, None
    from omni.model.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    return PlaceholderIds.from_tokenizer(tokenizer), tokenizer


def one_round(args: argparse.Namespace, name: str, clip: bytes, image_processor, feature_extractor,
              ids: PlaceholderIds) -> tuple:
    """One round of floor / ours / ours with one thread [/ ours decoding every frame, H.264 clips] / the stages;
    prints its "round" line; -> (our encoded media, the round's figures)."""
    base = floor(clip)
    encoded, ours = our_path(clip, image_processor, feature_extractor, ids, args.threads)
    _, single = our_path(clip, image_processor, feature_extractor, ids, 1)
    row = {"floor_s": base["total_s"], "floor_cpu_s": base["cpu_s"], "ours_s": ours["total_s"],
           "ours_decode_s": ours["decode_s"], "ours_encode_s": ours["encode_s"], "ours_cpu_s": ours["cpu_s"],
           "ours_1_thread_s": single["total_s"], "ours_1_thread_cpu_s": single["cpu_s"]}
    if CLIPS[name].get("video_codec", "libx264") == "libx264":
        _, every = ours_every_frame(clip, image_processor, feature_extractor, ids, args.threads)
        _, every_single = ours_every_frame(clip, image_processor, feature_extractor, ids, 1)
        row |= {"every_frame_s": every["total_s"], "every_frame_cpu_s": every["cpu_s"],
                "every_frame_1_thread_s": every_single["total_s"]}
    row |= {f"stage_{key}": value for key, value in stages(clip, image_processor, feature_extractor, ids).items()}
    print(json.dumps({"event": "round", "clip": name, **{k: round(v, 4) for k, v in row.items()}}), flush=True)
    return encoded, row


def run_clip(args: argparse.Namespace, name: str, clip: bytes, image_processor, feature_extractor,
             ids: PlaceholderIds, tokenizer) -> dict:
    """--rounds interleaved rounds of floor / ours (--threads) / ours (1 thread) [/ the reference chains, 720p with
    --ref-python]; prints a "round" line each and the clip's "summary" line; returns the summary."""
    our_path(clip, image_processor, feature_extractor, ids, args.threads)      # warm-up: lazy imports, first calls
    rounds, reference_rounds = [], []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with_reference = bool(args.ref_python) and name == "720p"
        if with_reference:
            (tmp / "clip.mp4").write_bytes(clip)
            tokenizer.save_pretrained(tmp / "tokenizer")
            (tmp / "ref.py").write_text(REF_SCRIPT)
        for _ in range(args.rounds):
            encoded, row = one_round(args, name, clip, image_processor, feature_extractor, ids)
            rounds.append(row)
            if with_reference:
                reference_rounds.append(run_reference_round(args.ref_python, tmp))
    times = summarize(rounds)
    summary = {"event": "summary", "clip": name, "smoke": args.smoke, "threads": args.threads, "times": times,
               "ratio_ours_over_floor_best": times["ours_s"]["best"] / times["floor_s"]["best"],
               "ratio_ours_over_floor_median": times["ours_s"]["median"] / times["floor_s"]["median"],
               "ratio_1_thread_over_floor_best": times["ours_1_thread_s"]["best"] / times["floor_s"]["best"],
               "ratio_cpu_over_floor_cpu_best": times["ours_cpu_s"]["best"] / times["floor_cpu_s"]["best"],
               "realtime_factor_best": args.seconds / times["ours_s"]["best"],
               **({"ratio_every_frame_over_floor_best": times["every_frame_s"]["best"] / times["floor_s"]["best"],
                   "ratio_every_frame_over_ours_best": times["every_frame_s"]["best"] / times["ours_s"]["best"],
                   "ratio_every_frame_1_thread_over_floor_best":
                       times["every_frame_1_thread_s"]["best"] / times["floor_s"]["best"]}
                  if "every_frame_s" in times else {}),
               "video_grid_thw": encoded.tensors["video_grid_thw"].tolist(), "tokens": encoded.tokens_by_modality,
               "media_ids": len(encoded.ids), "load_average": os.getloadavg()}
    if args.memory and name in args.memory_clips.split(","):
        summary["memory"] = measure_memory(clip, args.threads)
        uint8, host = (summary["memory"][k]["peak_growth_mib"] for k in ("uint8_to_device", "float32_on_host"))
        summary["memory_ratio_host_float_over_uint8"] = host / uint8 if uint8 > 0 else None
    print(json.dumps(summary), flush=True)
    print(f"\n{name}: ours {times['ours_s']['best']:.3f} s best / {times['ours_s']['median']:.3f} s median "
          f"({args.threads} threads) vs floor {times['floor_s']['best']:.3f} s: "
          f"{summary['ratio_ours_over_floor_best']:.2f}x the floor (1 thread "
          f"{summary['ratio_1_thread_over_floor_best']:.2f}x; CPU {summary['ratio_cpu_over_floor_cpu_best']:.2f}x); "
          f"for {args.seconds:g} s of video ({summary['realtime_factor_best']:.0f}x real time); grid "
          f"{summary['video_grid_thw']}, tokens {encoded.tokens_by_modality}", flush=True)
    if "every_frame_s" in times:
        print(f"{name}: decoding every frame (before issue 31): {times['every_frame_s']['best']:.3f} s = "
              f"{summary['ratio_every_frame_over_floor_best']:.2f}x the floor (1 thread "
              f"{summary['ratio_every_frame_1_thread_over_floor_best']:.2f}x)", flush=True)
    print(f"{name}: stages (CPU s, best): " + ", ".join(
        f"{key[6:-2]} {value['best']:.3f}" for key, value in times.items()
        if key.startswith("stage_") and key.endswith("_s")), flush=True)
    if reference_rounds:
        print_reference(times["ours_s"], reference_rounds, encoded)
    return summary


def print_reference(ours: dict, reference_rounds: list[tuple[dict, dict]], encoded) -> None:
    """Per reference chain its JSON line and headline (ratios ref / ours), then the agreement with the Clef one."""
    best, median = ours["best"], ours["median"]
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
    """Per clip: make it, run the interleaved rounds, measure memory; print each clip's figures."""
    args = parse_args(argv)
    if args.memory_child:
        memory_child(args.memory_child, args.threads, args.host_float)
        return
    torch.set_num_threads(args.torch_threads)
    print(json.dumps({"event": "env", "python": platform.python_version(), "torch": torch.__version__,
                      "av": av.__version__, "cores": os.cpu_count(), "threads": args.threads,
                      "torch_threads": args.torch_threads, "load_average": os.getloadavg()}), flush=True)
    image_processor, feature_extractor = processors()
    ids, tokenizer = placeholder_ids(args.ref_python)
    for name in args.clips.split(","):
        clip = make_clip(name, args.seconds, args.scale)
        run_clip(args, name, clip, image_processor, feature_extractor, ids, tokenizer)


if __name__ == "__main__":
    main()
