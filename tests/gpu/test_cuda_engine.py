"""The same engine on CUDA: bfloat16 backbone + float32 head agree with the CPU float32 reference, text and media.

Skipped without CUDA (CI machines have none). Run on a lent GPU with `python -m pytest -q tests/gpu`.
"""
import base64

import pytest
import torch

from fixtures.media import image_bytes, video_bytes, wav_bytes
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.serve.engine import DecisionEngine

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

QUESTIONS = {"a": {"type": "noul", "instructions": "Is the label visible?"},
             "b": {"type": "choice", "criteria": {"x": "first", "y": "second", "z": None}},
             "c": {"type": "score", "criteria": ["low", "mid", "high"]}}


def url(mime, data):
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@pytest.mark.parametrize(("dtype", "tolerance"), [("float32", 1e-4), ("bfloat16", 5e-2)])
def test_cuda_matches_cpu(tiny_dir, dtype, tolerance):
    body = {"state": "Review the unit.", "questions": QUESTIONS, "images": [url("image/png", image_bytes())],
            "audio": [url("audio/wav", wav_bytes(1.0))], "videos": [url("video/mp4", video_bytes(seconds=2.0))]}
    cpu = DecisionEngine(EngineConfig(model_path=str(tiny_dir), device="cpu", dtype="float32")).load()
    gpu = DecisionEngine(EngineConfig(model_path=str(tiny_dir), device="cuda", dtype=dtype)).load()
    for b in (body, {"state": "text only", "questions": QUESTIONS}):
        want = cpu.model.probabilities([cpu.model.prepare(parse_request(b, cpu.config))])[0]
        got = gpu.model.probabilities([gpu.model.prepare(parse_request(b, gpu.config))])[0]
        for p, q in zip(got, want, strict=True):
            assert p.dtype == torch.float32
            torch.testing.assert_close(p.cpu(), q, atol=tolerance, rtol=0)
