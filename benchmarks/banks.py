"""banks: hash-bank lookups at size (issue 36 item 1) — a bank of `--entries` PDQ hashes (1,000,000 by default) read
from its CSV file and indexed, then looked up: near copies of banked hashes (2..31 bits flipped: matches) and random
hashes (misses), one query at a time; p50 / p99 per kind, the file's read and the index's build time, the bytes the
index holds. Beside it, in the same run: the PDQ hash of the inspection photo (what a request's photo costs before
its lookup) against the model's answer to the inspection request (`DecisionEngine.decide`, the embedded demo
checkpoint, caches off), as the ratio a matched request could reach; then the real thing over HTTP: the inspection
request answered by a bank (no forward pass) — its photo an exact copy (sha256), its photo a near copy (PDQ), its
video banked (vPDQ) — against the same request with nothing banked, which the model answers (goal: the matched
request >= 20x faster than the model answer), timed at the client and by the server itself (its Server-Timing
total: without the in-process test client's thread hops); and the same with a photo as phones write them (12
megapixels, JPEG, EXIF-rotated), banked by PDQ, against the model's answer with such a photo. `phone_hash`: that
photo's PDQ hash as requests get it (at 512x512, as Meta's reference hasher) against the same hash at full size;
`phone_video`: a clip as phones write them (1080p, 10 s, High profile, B-frames), its vPDQ hash against the model's
answer with it, and that answer served with a vPDQ bank in force (the hash and the model's decoding at once);
`abandoned_video`: that clip's hash left running by a request its photo answered, and the next video's wait for the
one vPDQ worker, the hash let finish against stopped after its grace.

Random PDQ hashes stand for a bank's (real PDQ hashes are near-balanced bit strings, as these are); the queries' and
the bank's seeds are fixed. One faiss thread. Prints JSON lines (`env`, `bank`, `lookup` per kind, `hash_vs_model`,
`phone_hash`, `phone_video`, `abandoned_video`, `matched_vs_model`, `summary`). Not a test: nothing asserted.
Knows nothing of how matches are used: it calls `omni.banks` and the engine as a library.

    .venv/bin/python benchmarks/banks.py [--entries 1000000] [--queries 400] [--smoke]

About three minutes here (the file and the index, and making the 1080p clip: a minute each). `--smoke`: 20,000 entries, 40 queries; its figures mean
nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from smoke import parse_with_smoke

from omni.banks.entries import read_bank
from omni.banks.index import Bank
from preprocess.hashes import pdq_of_image, vpdq_available
from preprocess.item import MediaItem

ROOT = Path(__file__).resolve().parents[1]
SMOKE = {"entries": 20_000, "queries": 40, "model_rounds": 2}


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def write_bank(path: Path, hashes: np.ndarray) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.write("hash_type,hash,label,action,source,added\n")
        for i, row in enumerate(hashes):
            out.write(f"pdq,{row.tobytes().hex()},known-{i % 7},act,bench,2026-12-04T00:00:00Z\n")


def timed_lookups(bank: Bank, queries: list[bytes]) -> tuple[list[float], int]:
    times, matched = [], 0
    for query in queries:
        started = time.perf_counter()
        found = bank.match("pdq", query)
        times.append(time.perf_counter() - started)
        matched += bool(found)
    return times, matched


def phone_photo(variant: int = 0) -> bytes:
    """A photo as a phone writes it: 4032x3024 JPEG (quality 90, 4:2:0) stored sideways with EXIF orientation 6
    (a portrait), the demo photo scaled up with a little sensor noise; `variant` seeds the noise (another file, the
    same picture: a near copy)."""
    import io

    from PIL import Image

    image = Image.open(ROOT / "examples" / "inspection" / "unit.png").convert("RGB").resize((4032, 3024),
                                                                                           Image.Resampling.BICUBIC)
    noise = np.random.default_rng(variant).integers(-3, 4, (3024, 4032, 3))
    noisy = Image.fromarray(np.clip(np.asarray(image).astype(np.int16) + noise, 0, 255).astype(np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    noisy.save(out, "JPEG", quality=90, exif=exif)
    return out.getvalue()


def phone_hash(rounds: int) -> dict[str, float]:
    """A phone photo's PDQ hash as requests get it (decoded, upright, at 512x512) against the same photo hashed at
    its full 12 megapixels (what the hash cost before: PDQ's blur over every pixel), in the same run."""
    from preprocess.hashes import pdq_of_pixels
    from preprocess.image import decode_image

    item = MediaItem("images", 0, phone_photo())
    ours, full_size = [], []
    for i in range(rounds + 1):
        started = time.perf_counter()
        pdq_of_image(item)
        hashed = time.perf_counter() - started
        started = time.perf_counter()
        pdq_of_pixels(decode_image(item).pixels)
        whole = time.perf_counter() - started
        if i:
            ours.append(hashed)
            full_size.append(whole)
    return {"phone_photo_bytes": len(item.data), "phone_pdq_p50_ms": round(1000 * statistics.median(ours), 3),
            "phone_pdq_full_size_p50_ms": round(1000 * statistics.median(full_size), 3),
            "phone_full_size_over_512": round(statistics.median(full_size) / statistics.median(ours), 2)}


def phone_clip(smoke: bool) -> tuple[bytes, int, str]:
    """(clip, seconds, size): a clip as phones write it — 1920x1080 shown portrait, 30 fps, 10 s, H.264 High with
    B-frames (libx264's defaults on a panning scene); `--smoke`: 2 s at 640x360. Making the 1080p one takes a minute."""
    from fixtures.media import scene, video_bytes

    seconds, width, height = (2, 640, 360) if smoke else (10, 1920, 1080)
    clip = video_bytes(seconds=seconds, width=width, height=height, fps=30, x264_defaults=True, picture=scene,
                       rotation_degrees=90)
    return clip, seconds, f"{width}x{height}"


def inspection_media(video: bytes) -> list[tuple[str, bytes]]:
    return [("images", (ROOT / "examples" / "inspection" / "unit.png").read_bytes()),
            ("audio", (ROOT / "examples" / "inspection" / "hum.wav").read_bytes()), ("videos", video)]


def phone_video(clip: bytes, rounds: int) -> dict[str, float]:
    """The phone clip's vPDQ hash (in this process, one thread, as a worker computes it) against the model's answer
    to the inspection request with it as its video (`DecisionEngine.decide`, caches off, no banks), in the same run."""
    from omni.contract.config import EngineConfig
    from omni.contract.request import parse_request
    from omni.contract.types import Part
    from omni.serve.engine import DecisionEngine
    from preprocess.hashes import vpdq_of_video

    template = json.loads((ROOT / "examples" / "inspection.json").read_text())
    engine = DecisionEngine(EngineConfig(torch_threads=1, media_cache_mb=0, prefix_cache_mb=0))
    hashed, answered = [], []
    for i in range(min(rounds, 5) + 1):                # the first round warms both up
        started = time.perf_counter()
        vpdq_of_video(MediaItem("videos", 0, clip))
        hash_s = time.perf_counter() - started
        request = parse_request({**template, "id": f"v{i}"}, engine.config,
                                [Part(s, d) for s, d in inspection_media(clip)])
        started = time.perf_counter()
        engine.decide(request)
        model_s = time.perf_counter() - started
        if i:
            hashed.append(hash_s)
            answered.append(model_s)
    return {"vpdq_p50_ms": round(1000 * statistics.median(hashed), 1),
            "model_p50_ms": round(1000 * statistics.median(answered), 1),
            "model_over_vpdq": round(statistics.median(answered) / statistics.median(hashed), 2)}


def phone_video_served(clip: bytes, rounds: int) -> dict[str, float]:
    """The inspection request with the phone clip over HTTP to `omni serve`'s app (caches off) with a bank holding
    vPDQ hashes (the demo fan's: the clip matches none), answered by the model: its Server-Timing total, p50. The
    clip's hash and the media's decoding for the model run at once, the forward pass after both."""
    from fastapi.testclient import TestClient

    from api.http.app import create_app
    from api.http.settings import Settings
    from preprocess.hashes import vpdq_of_video

    request = (ROOT / "examples" / "inspection.json").read_text()
    fan = (ROOT / "examples" / "inspection" / "fan.mp4").read_bytes()
    value = ";".join(f.line() for f in vpdq_of_video(MediaItem("videos", 0, fan)))
    totals = []
    with tempfile.TemporaryDirectory(prefix="omni-banks-") as work:
        bank = Path(work) / "videos.csv"
        bank.write_text(f'hash_type,hash,label,action,source,added\nvpdq,"{value}",fan,act,bench,2026-12-04T00:00:00Z\n')
        settings = Settings().with_values({"bank": (str(bank),), "torch_threads": 1, "media_cache_mb": 0,
                                           "prefix_cache_mb": 0})
        with TestClient(create_app(settings)) as client:
            while client.get("/ready").status_code != 200:
                time.sleep(0.05)
            for i in range(min(rounds, 5) + 1):
                names = ("unit.png", "hum.wav", "clip.mp4")
                files = [(slot, (name, data, "application/octet-stream"))
                         for (slot, data), name in zip(inspection_media(clip), names, strict=True)]
                answer = client.post("/v1/systemone", data={"request": request}, files=files)
                assert answer.status_code == 200 and "x_match" not in answer.json(), answer.text
                if i:
                    totals.append(server_total_s(answer.headers["server-timing"]))
    return {"served_with_vpdq_bank_p50_ms": round(1000 * statistics.median(totals), 1)}


def abandoned_video(clip: bytes, rounds: int) -> dict[str, float]:
    """A request answered by its photo's `act` match (PDQ) while its phone clip is still being vPDQ-hashed, then at
    once a request whose only medium is the demo's banked fan video (one vPDQ worker): how long the second waits for
    its answer when the first's unwanted hash is let finish (`cancel_grace_s` unbounded: the baseline) and when it is
    stopped after the default grace (the worker replaced), in the same run. `BankSet.consult` as a library."""
    from omni.banks.entries import BankEntry, BankFile
    from omni.banks.matching import BankSet
    from omni.banks.video_hasher import CANCEL_GRACE_S, VideoHasher
    from preprocess.hashes import vpdq_of_video

    photo = (ROOT / "examples" / "inspection" / "unit.png").read_bytes()
    fan = (ROOT / "examples" / "inspection" / "fan.mp4").read_bytes()
    fan_value = ";".join(f.line() for f in vpdq_of_video(MediaItem("videos", 0, fan)))
    entries = (BankEntry("pdq", pdq_of_image(MediaItem("images", 0, photo)).hex, "unit", "act", "bench", "2026", 2),
               BankEntry("vpdq", fan_value, "fan", "act", "bench", "2026", 3))
    bank = Bank(BankFile("known", Path("known.csv"), "v1", entries))
    first = [MediaItem("images", 0, photo), MediaItem("videos", 0, clip)]
    second = [MediaItem("videos", 0, fan)]
    figures: dict[str, float] = {}
    for name, grace_s in (("let_finish", 1e9), ("stopped", CANCEL_GRACE_S)):
        hasher = VideoHasher(workers=1, timeout_s=60.0, cancel_grace_s=grace_s)
        try:
            banks = BankSet([bank], hasher.features)
            started = time.perf_counter()
            assert banks.consult(second).decides                      # a worker started, its first video hashed
            figures[f"{name}_worker_start_and_first_video_ms"] = round(1000 * (time.perf_counter() - started), 1)
            waits = []
            for _ in range(min(rounds, 5)):
                assert banks.consult(first).shown.medium == "images[0]"   # type: ignore[union-attr]
                started = time.perf_counter()
                assert banks.consult(second).decides
                waits.append(time.perf_counter() - started)
            figures[f"{name}_next_video_p50_ms"] = round(1000 * statistics.median(waits), 1)
            figures[f"{name}_workers_stopped"] = hasher.abandoned
        finally:
            hasher.close()
    figures["let_finish_over_stopped"] = round(figures["let_finish_next_video_p50_ms"]
                                               / figures["stopped_next_video_p50_ms"], 2)
    return figures


def model_vs_hash(rounds: int) -> dict[str, float]:
    from omni.contract.config import EngineConfig
    from omni.contract.request import parse_request
    from omni.contract.types import Part
    from omni.serve.engine import DecisionEngine

    template = json.loads((ROOT / "examples" / "inspection.json").read_text())
    media = [(slot, (ROOT / "examples" / "inspection" / name).read_bytes())
             for slot, name in (("images", "unit.png"), ("audio", "hum.wav"), ("videos", "fan.mp4"))]
    engine = DecisionEngine(EngineConfig(torch_threads=1, media_cache_mb=0, prefix_cache_mb=0))
    photo = media[0][1]
    model_s, hash_s = [], []
    for i in range(rounds + 1):                      # the first round warms both up
        request = parse_request({**template, "id": f"b{i}"}, engine.config, [Part(s, d) for s, d in media])
        started = time.perf_counter()
        engine.decide(request)
        model = time.perf_counter() - started
        started = time.perf_counter()
        pdq_of_image(MediaItem("images", 0, photo))
        hashed = time.perf_counter() - started
        if i:
            model_s.append(model)
            hash_s.append(hashed)
    return {"model_p50_ms": round(1000 * statistics.median(model_s), 3),
            "pdq_hash_p50_ms": round(1000 * statistics.median(hash_s), 3)}


def _flipped_video(data: bytes) -> bytes:
    """The clip with every frame upside down, written again: another video to vPDQ (a model answer's request)."""
    import io

    import av

    out = io.BytesIO()
    with av.open(io.BytesIO(data)) as source, av.open(out, "w", format="mp4") as target:
        rate = source.streams.video[0].average_rate or 8
        stream = target.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = source.streams.video[0].width, source.streams.video[0].height, \
            "yuv420p"
        for index, frame in enumerate(source.decode(video=0)):
            flipped = av.VideoFrame.from_ndarray(frame.to_ndarray(format="rgb24")[::-1].copy(), format="rgb24")
            flipped.pts = index
            for packet in stream.encode(flipped):
                target.mux(packet)
        for packet in stream.encode():
            target.mux(packet)
    return out.getvalue()


def matched_vs_model(rounds: int) -> dict[str, float]:
    """The inspection request (photo, recording, video) over HTTP to `omni serve`'s app in this process (the demo
    checkpoint, caches off) with one bank that holds, all with action `act`: the sha256 of the photo, the PDQ hash of
    the photo turned upside down, and the vPDQ hash of the video. Four requests, alternating, one at a time:
    - exact: the photo itself (its sha256 matches: nothing is decoded);
    - pdq: a near copy of the upside-down photo (one pixel changed each round: a new sha256, the same PDQ, so the
      photo is decoded and PDQ-hashed every time; the video's vPDQ hash is started, and not waited for once the
      photo's act match decides);
    - vpdq: an unbanked photo and the banked video (both hashed; the video matches by vPDQ);
    - model: an unbanked photo and an unbanked video (both hashed, nothing matches: the model answers);
    - phone: a phone photo (`phone_photo`: 12 megapixels, EXIF-rotated) whose other copy is banked by PDQ — another
      file with the same picture each round (new sha256: decoded and PDQ-hashed every time);
    - phone-model: a phone photo of another picture (the demo photo turned a quarter), which the model answers.
    Without the vpdq package: no vPDQ entry, no vpdq case (and the videos are not hashed)."""
    import io

    from fastapi.testclient import TestClient
    from PIL import Image

    from api.http.app import create_app
    from api.http.settings import Settings
    from preprocess.hashes import sha256_of, vpdq_of_video

    request = (ROOT / "examples" / "inspection.json").read_text()
    photo = (ROOT / "examples" / "inspection" / "unit.png").read_bytes()
    image = Image.open(io.BytesIO(photo)).convert("RGB")
    hum = ("audio", ("hum.wav", (ROOT / "examples" / "inspection" / "hum.wav").read_bytes(), "audio/wav"))
    fan = (ROOT / "examples" / "inspection" / "fan.mp4").read_bytes()
    other_fan = _flipped_video(fan)

    def png(picture: Image.Image) -> bytes:
        out = io.BytesIO()
        picture.save(out, format="PNG")
        return out.getvalue()

    turned = image.rotate(180)
    unbanked = png(image.rotate(90))
    phones = [phone_photo(variant) for variant in range(3)]            # a near copy of phones[0] each round
    other_phone = _turned_jpeg(phones[0])
    rows = [f"sha256,{sha256_of(photo)},unit-exact,act,bench,2026-12-04T00:00:00Z",
            f"pdq,{pdq_of_image(MediaItem('images', 0, png(turned))).hex},unit-turned,act,bench,2026-12-04T00:00:00Z",
            f"pdq,{pdq_of_image(MediaItem('images', 0, phones[0])).hex},unit-phone,act,bench,2026-12-04T00:00:00Z"]
    with_vpdq = vpdq_available()
    if with_vpdq:
        value = ";".join(f.line() for f in vpdq_of_video(MediaItem("videos", 0, fan)))
        rows.append(f'vpdq,"{value}",fan,act,bench,2026-12-04T00:00:00Z')

    def near_copy(round_number: int) -> bytes:
        copy = turned.copy()
        copy.putpixel((round_number % copy.width, 0), (round_number % 256, 0, 0))
        return png(copy)

    cases = {"exact": lambda i: (photo, other_fan), "pdq": lambda i: (near_copy(i), other_fan),
             **({"vpdq": lambda i: (unbanked, fan)} if with_vpdq else {}), "model": lambda i: (unbanked, other_fan),
             "phone": lambda i: (phones[1 + i % 2], other_fan), "phone-model": lambda i: (other_phone, other_fan)}
    with tempfile.TemporaryDirectory(prefix="omni-banks-") as work:
        bank = Path(work) / "known.csv"
        bank.write_text("hash_type,hash,label,action,source,added\n" + "\n".join(rows) + "\n")
        settings = Settings().with_values({"bank": (str(bank),), "torch_threads": 1, "media_cache_mb": 0,
                                           "prefix_cache_mb": 0})
        with TestClient(create_app(settings)) as client:
            while client.get("/ready").status_code != 200:
                time.sleep(0.05)
            times: dict[str, list[float]] = {kind: [] for kind in cases}
            server: dict[str, list[float]] = {kind: [] for kind in cases}     # Server-Timing's total, seconds
            for i in range(rounds + 1):                # the first round warms them up (and starts the vPDQ worker)
                for kind, media in cases.items():
                    image_bytes, video = media(i)
                    kind_of_photo = ("unit.jpg", "image/jpeg") if image_bytes[:2] == b"\xff\xd8" else ("unit.png", "image/png")
                    files = [("images", (kind_of_photo[0], image_bytes, kind_of_photo[1])), hum,
                             ("videos", ("fan.mp4", video, "video/mp4"))]
                    started = time.perf_counter()
                    answer = client.post("/v1/systemone", data={"request": request}, files=files)
                    elapsed = time.perf_counter() - started
                    assert answer.status_code == 200, answer.text
                    match = answer.json().get("x_match")
                    assert (match is None) == kind.endswith("model"), (kind, match)
                    assert match is None or match["hash_type"] == {"exact": "sha256", "phone": "pdq"}.get(kind, kind), \
                        (kind, match)
                    if i:
                        times[kind].append(elapsed)
                        server[kind].append(server_total_s(answer.headers["server-timing"]))
    p50 = {kind: statistics.median(values) for kind, values in times.items()}
    on_server = {kind: statistics.median(values) for kind, values in server.items()}
    out: dict[str, float] = {"model_p50_ms": round(1000 * p50["model"], 3),
                             "server_model_p50_ms": round(1000 * on_server["model"], 3)}
    out["phone_model_p50_ms"] = round(1000 * p50["phone-model"], 3)
    out["server_phone_model_p50_ms"] = round(1000 * on_server["phone-model"], 3)
    out["phone_p50_ms"] = round(1000 * p50["phone"], 3)
    out["model_over_phone"] = round(p50["phone-model"] / p50["phone"], 2)      # each against its own model answer
    out["server_phone_p50_ms"] = round(1000 * on_server["phone"], 3)
    out["server_model_over_phone"] = round(on_server["phone-model"] / on_server["phone"], 2)
    for kind in cases:
        if not kind.startswith("phone") and kind != "model":
            out[f"{kind}_p50_ms"] = round(1000 * p50[kind], 3)
            out[f"model_over_{kind}"] = round(p50["model"] / p50[kind], 2)
            out[f"server_{kind}_p50_ms"] = round(1000 * on_server[kind], 3)
            out[f"server_model_over_{kind}"] = round(on_server["model"] / on_server[kind], 2)
    return out


def _turned_jpeg(data: bytes) -> bytes:
    """Another phone photo: the same file's picture turned a quarter, written the same way (nothing banks it)."""
    import io

    from PIL import Image

    out = io.BytesIO()
    with Image.open(io.BytesIO(data)) as image:
        image.transpose(Image.Transpose.ROTATE_90).save(out, "JPEG", quality=90, exif=image.getexif())
    return out.getvalue()


def server_total_s(header: str) -> float:
    """The server's own time for a request (`Server-Timing: ..., total;dur=MS`), in seconds: from its first byte
    read to its answer, without the client (the in-process test client's thread hops cost about 1.7 ms a request)."""
    [total] = [entry for entry in header.split(", ") if entry.startswith("total;dur=")]
    return float(total.removeprefix("total;dur=")) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="hash-bank lookups at size")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--model-rounds", type=int, default=10)
    args = parse_with_smoke(parser, SMOKE, argv)
    faiss.omp_set_num_threads(1)
    emit("env", smoke=args.smoke, entries=args.entries, queries=args.queries, cpus=os.cpu_count(),
         load_avg=os.getloadavg()[0], faiss=faiss.__version__)
    rng = np.random.default_rng(36)
    hashes = rng.integers(0, 256, (args.entries, 32), dtype=np.uint8)
    with tempfile.TemporaryDirectory(prefix="omni-banks-") as work:
        path = Path(work) / "known.csv"
        write_bank(path, hashes)
        started = time.perf_counter()
        file = read_bank(path)
        read_s = time.perf_counter() - started
        started = time.perf_counter()
        bank = Bank(file)
        build_s = time.perf_counter() - started
        emit("bank", entries=len(bank), file_bytes=path.stat().st_size, read_s=round(read_s, 3),
             build_s=round(build_s, 3))
    near = []
    for i in rng.choice(args.entries, args.queries, replace=False):
        row = hashes[i].copy()
        for bit in rng.choice(256, int(rng.integers(2, 32)), replace=False):
            row[bit // 8] ^= 1 << (bit % 8)
        near.append(row.tobytes())
    far = [rng.integers(0, 256, 32, dtype=np.uint8).tobytes() for _ in range(args.queries)]
    timed_lookups(bank, near[:10] + far[:10])        # warm-up
    results = {}
    for kind, queries in (("near copy", near), ("random", far)):
        times, matched = timed_lookups(bank, queries)
        results[kind] = statistics.median(times)
        emit("lookup", kind=kind, n=len(queries), matched=matched, p50_ms=round(1000 * statistics.median(times), 4),
             p99_ms=round(1000 * pct(times, 0.99), 4), goal_p50_ms=5.0)
    figures = model_vs_hash(args.model_rounds)
    cost_ms = figures["pdq_hash_p50_ms"] + 1000 * results["near copy"]
    emit("hash_vs_model", **figures, lookup_p50_ms=round(1000 * results["near copy"], 4),
         model_over_hash_and_lookup=round(figures["model_p50_ms"] / cost_ms, 2), goal=20)
    emit("phone_hash", **phone_hash(args.model_rounds))
    if vpdq_available():
        clip, seconds, size = phone_clip(args.smoke)
        alone = phone_video(clip, args.model_rounds)
        served_clip = phone_video_served(clip, args.model_rounds)
        emit("phone_video", clip_bytes=len(clip), clip_seconds=seconds, clip_size=size, **alone, **served_clip,
             served_over_hash_plus_model=round(served_clip["served_with_vpdq_bank_p50_ms"]
                                               / (alone["vpdq_p50_ms"] + alone["model_p50_ms"]), 2))
        emit("abandoned_video", clip_seconds=seconds, clip_size=size, **abandoned_video(clip, args.model_rounds))
    served = matched_vs_model(args.model_rounds)
    emit("matched_vs_model", **served, goal=20)
    emit("summary", entries=args.entries, near_p50_ms=round(1000 * results["near copy"], 4),
         random_p50_ms=round(1000 * results["random"], 4), smoke=args.smoke,
         model_over_hash_and_lookup=round(figures["model_p50_ms"] / cost_ms, 2),
         model_over_exact=served["model_over_exact"], model_over_pdq=served["model_over_pdq"],
         model_over_vpdq=served.get("model_over_vpdq"), server_model_over_exact=served["server_model_over_exact"],
         server_model_over_pdq=served["server_model_over_pdq"],
         server_model_over_vpdq=served.get("server_model_over_vpdq"), model_over_phone=served["model_over_phone"],
         server_model_over_phone=served["server_model_over_phone"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
