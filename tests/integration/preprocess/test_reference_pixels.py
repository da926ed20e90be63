"""Video pixels equal the Clef reference's: its `load_video` pre-scale, then transformers' video processor (bicubic,
antialias), for upscales, downscales and odd sizes; and a video request's probabilities equal those of the model fed
the reference processor's own `pixel_values_videos` (issue 24).

The expected values come from the real processor classes (transformers 5.10.2, as the reference pins, with
torchvision) in a throwaway venv: fixtures/make_video_reference.py wrote them to fixtures/files/video_reference/.

Tolerance per size class, in normalised units (the reference's (x - 127.5) / 127.5): 0 for every class, i.e. bit for
bit (the sha256 of the whole float32 tensor), on x86-64 CPUs with AVX2 or AVX-512, where the fixtures were made and
torch's uint8 bicubic runs the same vectorised kernel; elsewhere one uint8 level (2/255) at the sampled positions.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from PIL import Image

from fixtures.make_video_reference import load_video, sample_positions
from preprocess.processor import encode_item, media_on_device
from preprocess.resize import smart_resize
from preprocess.video import decode_video
from tests.media_items import media_item

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "fixtures" / "files" / "video_reference"
REFERENCE = json.loads((FIXTURES / "reference.json").read_text())
EXACT_CPU = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
ONE_LEVEL = 2 / 255
# size class -> max |ours - reference| in normalised units (0: bit for bit, see the module docstring)
TOLERANCE = {"upscale_256x256": 0.0, "downscale_1280x720": 0.0, "odd_300x170": 0.0, "odd_prescaled_998x562": 0.0,
             "portrait_upscale_170x300": 0.0}


def our_pixels(data: bytes, image_processor, threads: int = 1) -> tuple[torch.Tensor, list[int]]:
    """Our decoder + encoder, normalised as on the model's device (float32)."""
    encoding = encode_item(decode_video(media_item("videos", data), threads=threads), "videos", image_processor)
    pixels = media_on_device({"pixel_values_videos": encoding.patches}, "cpu", torch.float32)["pixel_values_videos"]
    return pixels, list(encoding.grid)


def sha256(pixels: torch.Tensor) -> str:
    return hashlib.sha256(pixels.numpy().tobytes()).hexdigest()


@pytest.mark.parametrize("name", sorted(TOLERANCE))
@pytest.mark.parametrize("threads", [1, 2])
def test_pixels_equal_the_reference_processor(name, threads, image_processor):
    expected = REFERENCE["clips"][name]
    pixels, grid = our_pixels((FIXTURES / expected["file"]).read_bytes(), image_processor, threads)
    assert grid == expected["grid"]
    levels = np.frombuffer(bytes.fromhex(expected["levels_hex"]), np.uint8)
    reference = (torch.from_numpy(levels.astype(np.float32)) - 127.5) / 127.5
    ours = pixels.reshape(-1)[torch.from_numpy(sample_positions(pixels.numel(), len(levels)))]
    tolerance = TOLERANCE[name] if EXACT_CPU else ONE_LEVEL
    assert (ours - reference).abs().max().item() <= tolerance
    if EXACT_CPU:
        assert sha256(pixels) == expected["sha256_float32"]
    assert float(pixels.double().mean()) == pytest.approx(expected["mean"], abs=1e-3)


def test_the_fixtures_tell_the_old_single_bilinear_resize_apart():
    """One swscale bilinear resize straight to the final size (what we did before) misses the upscale badly."""
    expected = REFERENCE["clips"]["upscale_256x256"]
    with av.open(io.BytesIO((FIXTURES / expected["file"]).read_bytes())) as container:
        frame = next(container.decode(video=0))
        one_step = frame.to_ndarray(format="rgb24", width=384, height=384, interpolation="BILINEAR")
    rows = patchify_pair(np.stack([one_step, one_step]), expected["grid"])
    old = (torch.from_numpy(rows.astype(np.float32)) - 127.5) / 127.5
    levels = np.frombuffer(bytes.fromhex(expected["levels_hex"]), np.uint8)
    reference = (torch.from_numpy(levels.astype(np.float32)) - 127.5) / 127.5
    gap = (old.reshape(-1)[torch.from_numpy(sample_positions(old.numel(), len(levels)))] - reference).abs()
    assert gap.max().item() > 0.05


# ---------------------------------------------------------------------- the reference processor's tensor for fan.mp4
def patchify_pair(frames: np.ndarray, grid: list[int]) -> np.ndarray:
    """(T, H, W, 3) -> the processor's rows, by its own view/permute (transformers' Qwen2VLVideoProcessor)."""
    t, h, w = grid
    x = frames.transpose(0, 3, 1, 2).reshape(t, 2, 3, h // 2, 2, 16, w // 2, 2, 16)
    return np.ascontiguousarray(x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)).reshape(t * h * w, 3 * 2 * 16 * 16)


def reference_fan_pixels() -> torch.Tensor:
    """The reference processor's `pixel_values_videos` for fan.mp4, rebuilt without torchvision: its frames, PIL's
    bicubic (the same kernel up to one level at a few hundred places), the recorded corrections, its patch layout and
    normalisation; checked against the sha256 of the real processor's output."""
    expected = REFERENCE["fan"]
    frames = load_video((ROOT / expected["file"]).read_bytes())
    height, width = smart_resize(*frames.shape[1:3], 32, 131072, 786432)
    resized = np.stack([np.asarray(Image.fromarray(f).resize((width, height), Image.BICUBIC)) for f in frames])
    flat = resized.reshape(-1).astype(np.int16)
    for index, delta in expected["pil_bicubic_corrections"]:
        flat[index] += delta
    rows = patchify_pair(flat.astype(np.uint8).reshape(resized.shape), expected["grid"])
    pixels = (torch.from_numpy(rows.astype(np.float32)) - 127.5) / 127.5
    assert sha256(pixels) == expected["sha256_float32"], "not the reference processor's tensor"
    return pixels


@pytest.fixture(scope="module")
def cacheless_engine(tiny_dir):
    from omni.contract.config import EngineConfig
    from omni.serve.engine import DecisionEngine

    config = EngineConfig(model_path=str(tiny_dir), media_cache_mb=0, prefix_cache_mb=0, dtype="float32")
    return DecisionEngine(config).load()


def fan_probabilities(engine, pixels: torch.Tensor | None = None) -> torch.Tensor:
    """All option probabilities of a video request on fan.mp4 (float32), with `pixels` swapped in if given."""
    from omni.contract.request import parse_request

    data = (ROOT / REFERENCE["fan"]["file"]).read_bytes()
    body = {"state": "Inspect the fan.", "videos": [f"data:video/mp4;base64,{base64.b64encode(data).decode()}"],
            "questions": {"running": {"type": "noul", "instructions": "Is the fan running?"},
                          "speed": {"type": "score", "instructions": "How fast?", "criteria": ["off", "slow", "fast"]},
                          "noise": {"type": "choice", "instructions": "What noise?",
                                    "criteria": {"none": "Silent.", "hum": "A hum.", "rattle": "A rattle."}}}}
    record = engine.model.prepare(parse_request(body, engine.config))
    if pixels is not None:
        assert record.media.tensors["pixel_values_videos"].shape == pixels.shape
        record.media = dataclasses.replace(record.media, tensors={**record.media.tensors,
                                                                  "pixel_values_videos": pixels})
    return torch.cat([p.reshape(-1) for p in engine.model.probabilities([record])[0]])


def test_fan_video_probabilities_equal_the_reference_pixels(cacheless_engine, image_processor):
    reference = reference_fan_pixels()
    ours, grid = our_pixels((ROOT / REFERENCE["fan"]["file"]).read_bytes(), image_processor)
    assert grid == REFERENCE["fan"]["grid"] == [2, 24, 24]      # 256x256 upscaled to 384x384
    if EXACT_CPU:
        assert torch.equal(ours, reference)
    with_ours = fan_probabilities(cacheless_engine)
    with_reference = fan_probabilities(cacheless_engine, reference)
    assert (with_ours - with_reference).abs().max().item() <= 1e-5


def test_the_old_pixels_were_off_by_more_than_that(cacheless_engine):
    """The same check with the pixels of the old single bilinear resize fails: the test can see the gap."""
    with av.open(io.BytesIO((ROOT / REFERENCE["fan"]["file"]).read_bytes())) as container:
        frames = [f.to_ndarray(format="rgb24", width=384, height=384, interpolation="BILINEAR")
                  for f in container.decode(video=0)]
    kept = np.stack([frames[i] for i in (0, 4, 8, 12)])         # 8 fps source: frames at 0, 0.5, 1.0, 1.5 s
    old = (torch.from_numpy(patchify_pair(kept, REFERENCE["fan"]["grid"]).astype(np.float32)) - 127.5) / 127.5
    gap = (fan_probabilities(cacheless_engine, old) - fan_probabilities(cacheless_engine, reference_fan_pixels()))
    assert gap.abs().max().item() > 1e-5
