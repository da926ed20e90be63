"""x_evidence (issue 34): the head's own routing attention, from the same forward, mapped to the caller's media.

- the recomputed attention is exactly the layer's (torch MHA need_weights) and answers do not move when it is asked;
- it is the same alone, batched with others, from the prefix cache and prefilled in chunks (joint and isolated);
- shares sum to 1 and every map sums to its share;
- the mapping is exact: a head whose routing attends only to token k gives that image cell (rotated, non-square,
  upscaled pictures), that video second and cell, that audio window, that state token's characters.
"""
from __future__ import annotations

import math

import pytest
import torch

from fixtures.media import image_bytes, video_bytes, wav_bytes
from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest
from omni.contract.request import parse_request
from omni.model.evidence_attention import routing_attention
from omni.model.head import EvidenceLayer, build_joint_head
from omni.serve.engine import DecisionEngine
from tests.integration.serve.test_caches import QUESTIONS, data_url

STATE = "Unit 4711: the label is scratched near the serial, the fan rattles at start-up and then runs smoothly."


def engine(tiny_dir, **config) -> DecisionEngine:
    return DecisionEngine(EngineConfig(model_path=str(tiny_dir), probability_decimals=8, **config)).load()


@pytest.fixture(scope="module")
def media():
    return {"images": [data_url("image/png", image_bytes("PNG", "RGB", 96, 64))],
            "audio": [data_url("audio/wav", wav_bytes(1.5, 44100, 2))],
            "videos": [data_url("video/mp4", video_bytes(seconds=3.0, width=64, height=64))]}


def body(media, **extra):
    return {"state": STATE, "questions": QUESTIONS, **media, "x_evidence": {"options": "all", "top": 4}, **extra}


def flat(value, path=""):
    """Every number of a JSON value by its path (to compare two evidences number by number)."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{path}/{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{path}/{i}").items()}
    return {path: value}


def assert_same_evidence(got, want, tolerance=1e-6 + 1e-9):      # the wire rounds to 6 decimals
    a, b = flat(got), flat(want)
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], float):
            assert math.isclose(a[key], b[key], abs_tol=tolerance), (key, a[key], b[key])
        else:
            assert a[key] == b[key], key


def test_the_recomputed_attention_is_the_layers_own():
    torch.manual_seed(0)
    layer = EvidenceLayer(32, 4, 64, 0.0).eval()
    routes, memory = torch.randn(2, 5, 32), torch.randn(2, 9, 32)
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[1, 6:] = True
    normed = layer.memory_norm(memory)
    _, reference = layer.attention(layer.query_norm(routes), normed, normed, key_padding_mask=padding,
                                   need_weights=True, average_attn_weights=False)
    mine = routing_attention(layer, routes, memory, padding)
    assert torch.allclose(mine, reference.mean(dim=1), atol=1e-6)
    assert torch.allclose(mine.sum(-1), torch.ones(2, 5), atol=1e-6)
    assert float(mine[1, :, 6:].detach().abs().max()) == 0.0


def test_answers_do_not_move_and_shares_and_maps_add_up(tiny_dir, media):
    eng = engine(tiny_dir, prefix_cache_mb=0)
    plain = eng.decide(parse_request(body(media, x_evidence=False), eng.config))
    asked = eng.decide(parse_request(body(media), eng.config))
    assert plain.evidence is None and "x_evidence" not in plain.to_wire()
    assert asked.answers == plain.answers                                   # bit for bit: the head ran as before
    evidence = asked.to_wire()["x_evidence"]
    assert evidence["method"] == "routing-attention/1"
    assert list(evidence["questions"]) == list(QUESTIONS)
    for qid, question in evidence["questions"].items():
        assert list(question["options"]) == [o.id for o in parse_request(body(media), eng.config).questions[
            list(QUESTIONS).index(qid)].options]
        for entry in [question, *question["options"].values()]:
            share = entry["share"]
            assert math.isclose(sum(share.values()), 1.0, abs_tol=1e-5)
            assert all(0 <= v <= 1 for v in share.values())
            assert math.isclose(sum(map(sum, entry["images"][0]["heatmap"])), share["image"], abs_tol=1e-4)
            video = entry["videos"][0]
            assert math.isclose(sum(t["weight"] for t in video["timeline"]), share["video"], abs_tol=1e-4)
            assert math.isclose(sum(entry["audio"][0]["per_second"]), share["audio"], abs_tol=1e-4)
            assert math.isclose(sum(video["soundtrack"]["per_second"]), share["video_audio"], abs_tol=1e-4)
            assert len(entry["images"][0]["boxes"]) == 4 and len(video["moments"]) == 3   # 3 one-second grids
            weights = [b["weight"] for b in entry["images"][0]["boxes"]]
            assert weights == sorted(weights, reverse=True)
            for span in entry["state"]["spans"]:
                assert STATE[span["start"]:span["end"]] == span["text"]
        assert question["answer"] in question["options"]


@pytest.mark.parametrize("isolation", ["joint", "isolated"])
def test_the_same_alone_batched_cached_and_chunked(tiny_dir, media, isolation):
    alone = engine(tiny_dir, prefix_cache_mb=0, prefill_chunk_tokens=0, media_cache_mb=0)
    want = alone.decide(parse_request(body(media, x_isolation=isolation), alone.config)).evidence
    other = {"state": "Another unit, nothing to report.", "questions": QUESTIONS, "x_evidence": True}
    batched = alone.decide_batch([parse_request(other, alone.config),
                                  parse_request(body(media, x_isolation=isolation), alone.config)])
    assert batched[1].batch_size == 2
    assert_same_evidence(batched[1].evidence, want)
    cached = engine(tiny_dir, prefix_cache_mb=64, prefill_chunk_tokens=0)
    cached.decide(parse_request(body(media, x_isolation=isolation), cached.config))
    hit = cached.decide(parse_request(body(media, x_isolation=isolation), cached.config))
    assert hit.cache.get("prefix") == "hit"
    assert_same_evidence(hit.evidence, want)
    chunked = engine(tiny_dir, prefix_cache_mb=0, prefill_chunk_tokens=128)
    got = chunked.decide(parse_request(body(media, x_isolation=isolation), chunked.config))
    assert got.timings_ms.get("prefill_chunks", 0) > 0
    assert_same_evidence(got.evidence, want)


def test_an_isolated_question_reads_only_the_prefix_and_its_own_block(tiny_dir, media):
    eng = engine(tiny_dir, prefix_cache_mb=0)
    decision = eng.decide(parse_request(body(media, x_isolation="isolated"), eng.config))
    for question in decision.evidence["questions"].values():
        assert math.isclose(sum(question["share"].values()), 1.0, abs_tol=1e-5)


# ------------------------------------------------------------------------------------- the mapping is exact
def smart_resize(height: int, width: int, factor: int = 32, min_pixels: int = 65536,
                 max_pixels: int = 1048576) -> tuple[int, int]:
    """The reference's smart resize (clef-reference §4), written out here independently of the product's."""
    h, w = max(factor, round(height / factor) * factor), max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h, w = math.floor(height / beta / factor) * factor, math.floor(width / beta / factor) * factor
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


class Pointing:
    """The model with a one-head copy of its head whose routing attends (all but) only to token k of a record."""

    def __init__(self, tiny_dir):
        self.engine = engine(tiny_dir, prefix_cache_mb=0, media_cache_mb=0, prefill_chunk_tokens=0)
        model = self.engine.model
        head = model.head
        self.head = build_joint_head({**head.config, "heads": 1}, head.state_dict()).eval()
        for layer in self.head.evidence_layers:
            layer.memory_norm.weight.data.fill_(1.0)
            layer.memory_norm.bias.data.zero_()
        model.head = model.forward.head = model.chunks.head = self.head

    def memory(self, request) -> torch.Tensor:
        seen = []
        hook = self.head.memory_projection.register_forward_hook(lambda _m, _i, out: seen.append(out[0].detach()))
        try:
            self.engine.decide(request)
        finally:
            hook.remove()
        return seen[0]

    def point(self, request, k: int) -> dict:
        """Evidence of `request` with the routing pointed at token k."""
        memory = self.memory(request)
        width = self.head.width
        for layer in self.head.evidence_layers:
            with torch.no_grad():
                target = layer.memory_norm(memory[k].clone())
                layer.attention.in_proj_weight[:width].zero_()
                layer.attention.in_proj_bias[:width] = 1e5 * target / target.norm()
                layer.attention.in_proj_weight[width:2 * width] = torch.eye(width)
                layer.attention.in_proj_bias[width:2 * width].zero_()
        decision = self.engine.decide(request)
        return next(iter(decision.evidence["questions"].values()))

    def pads(self, request, token: str) -> list[int]:
        record = self.engine.model.prepare(request)
        wanted = self.engine.model.parts.special_ids[token]
        return [i for i, t in enumerate(record.input_ids.tolist()) if t == wanted]


@pytest.fixture(scope="module")
def pointing(tiny_dir):
    return Pointing(tiny_dir)


ONE = {"q": {"type": "noul", "instructions": "Is it fine?"}}


@pytest.mark.parametrize(("width", "height", "orientation"), [
    (96, 64, None),          # non-square, upscaled to the minimum pixels
    (48, 40, None),          # tiny: upscaled a lot
    (120, 72, 6),            # stored 120x72, EXIF "rotate 90 CW": upright 72x120
    (1200, 400, 3),          # wide, rotated 180
])
def test_a_pointed_image_patch_gives_its_box_in_upright_source_pixels(pointing, width, height, orientation):
    data = image_bytes("JPEG" if orientation else "PNG", "RGB", width, height, exif_orientation=orientation)
    request = parse_request({"state": "s", "questions": ONE, "images": [data_url("image/png", data)],
                             "x_evidence": True}, pointing.engine.config)
    # fixtures.media: width x height is the UPRIGHT picture; the stored pixels are turned so EXIF turns them back
    upright_w, upright_h = width, height
    rows, cols = (n // 32 for n in smart_resize(upright_h, upright_w))
    pads = pointing.pads(request, "image_pad")
    assert len(pads) == rows * cols
    for n in (0, len(pads) // 2 + 1, len(pads) - 1):
        evidence = pointing.point(request, pads[n])
        image = evidence["images"][0]
        assert (image["width"], image["height"], image["grid"]) == (upright_w, upright_h, {"rows": rows, "cols": cols})
        row, col = divmod(n, cols)
        box = image["boxes"][0]
        assert box["weight"] > 0.9 and image["heatmap"][row][col] == box["weight"]     # the pointed cell leads
        expected = (col * upright_w / cols, row * upright_h / rows, (col + 1) * upright_w / cols,
                    (row + 1) * upright_h / rows)
        assert [box[k] for k in ("x0", "y0", "x1", "y1")] == pytest.approx(expected, abs=0.006)
        assert evidence["share"]["image"] > 0.9


def test_a_pointed_video_patch_gives_its_second_and_box(pointing):
    data = video_bytes(seconds=3.0, width=160, height=96, audio_codec=None)     # silent: pads are video only
    request = parse_request({"state": "s", "questions": ONE, "videos": [data_url("video/mp4", data)],
                             "x_evidence": True}, pointing.engine.config)
    pads = pointing.pads(request, "video_pad")
    grids = 3
    per_grid = len(pads) // grids
    rows, cols = (n // 32 for n in smart_resize(96, 160, min_pixels=131072, max_pixels=786432))
    assert per_grid == rows * cols
    n = per_grid * 2 + cols + 2                          # second 2, row 1, col 2
    evidence = pointing.point(request, pads[n])
    video = evidence["videos"][0]
    top = video["moments"][0]
    assert (top["start_s"], top["end_s"]) == (2.0, 3.0) and top["weight"] > 0.99
    assert video["timeline"][2]["weight"] > 0.99
    box = top["boxes"][0]
    assert [box[k] for k in ("x0", "y0", "x1", "y1")] == pytest.approx(
        (2 * 160 / cols, 96 / rows, 3 * 160 / cols, 2 * 96 / rows), abs=0.006)


def test_a_pointed_audio_token_gives_its_window(pointing):
    data = wav_bytes(2.5, 44100, 2, subtype="FLOAT")
    request = parse_request({"state": "s", "questions": ONE, "audio": [data_url("audio/wav", data)],
                             "x_evidence": True}, pointing.engine.config)
    pads = pointing.pads(request, "audio_pad")
    assert len(pads) == 13 * 2 + 7                          # 2.5 s: 13 per second, 7 for the last half second
    for n, window in ((0, (0.0, 0.08)), (13 + 5, (1.4, 1.48)), (12, (0.96, 1.0)), (26 + 6, (2.48, 2.5))):
        clip = pointing.point(request, pads[n])["audio"][0]
        top = clip["windows"][0]
        assert (top["start_s"], top["end_s"]) == window and top["weight"] > 0.99
        assert clip["per_second"][n // 13] > 0.99


def test_a_pointed_state_token_gives_its_characters(pointing, tiny_dir):
    state = {"unit": 4711, "note": "scratched label", "ok": False}
    request = parse_request({"state": state, "questions": ONE, "x_evidence": {"top": 1}}, pointing.engine.config)
    record = pointing.engine.model.prepare(request)
    rendered = '{"note":"scratched label","ok":false,"unit":4711}'
    tokenizer = pointing.engine.model.parts.tokenizer
    state_ids = tokenizer(rendered, add_special_tokens=False, return_offsets_mapping=True)
    start = record.prompt.media_end
    assert record.input_ids[start:start + len(state_ids["input_ids"])].tolist() == state_ids["input_ids"]
    for n in (0, len(state_ids["input_ids"]) // 2, len(state_ids["input_ids"]) - 1):
        evidence = pointing.point(request, start + n)
        span = evidence["state"]["spans"][0]
        chars = state_ids["offset_mapping"][n]
        assert (span["start"], span["end"]) == tuple(chars) and span["text"] == rendered[chars[0]:chars[1]]
        assert span["weight"] > 0.99 and evidence["state"]["chars"] == len(rendered)


def test_a_truncated_state_says_what_the_evidence_covers(tiny_dir):
    eng = engine(tiny_dir, max_context_tokens=600)
    long_state = "the fan rattles and the label is scratched. " * 400
    decision = eng.decide(parse_request({"state": long_state, "questions": ONE, "x_evidence": True}, eng.config))
    state = next(iter(decision.evidence["questions"].values()))["state"]
    assert state["chars"] == len(long_state)
    assert 0 < state["covered_chars"] == len(long_state) - decision.truncated_state_chars < state["chars"]
    assert all(span["end"] <= state["covered_chars"] for span in state["spans"])


@pytest.mark.parametrize(("value", "loc"), [
    ("yes", ["x_evidence"]), (1, ["x_evidence"]), ([True], ["x_evidence"]),
    ({"options": "best"}, ["x_evidence", "options"]), ({"top": 0}, ["x_evidence", "top"]),
    ({"top": 17}, ["x_evidence", "top"]), ({"top": True}, ["x_evidence", "top"]),
    ({"top": 2.5}, ["x_evidence", "top"]), ({"maps": True}, ["x_evidence", "maps"]),
])
def test_a_bad_x_evidence_is_refused_naming_the_field(value, loc):
    with pytest.raises(InvalidRequest) as caught:
        parse_request({"state": "s", "questions": ONE, "x_evidence": value}, EngineConfig())
    assert [list(issue.loc) for issue in caught.value.issues] == [loc]
