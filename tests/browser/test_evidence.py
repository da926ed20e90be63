"""Issue 34, evidence in the workbench, against `omni review` with the embedded tiny demo model: with the Ask tab's
Evidence box ticked the request carries `x_evidence`, and the answer's evidence (docs/evidence.md) is drawn over
what was asked about: the heat map placed exactly over the displayed photo, its cells and boxes on the displayed
pixels the response names, shown and hidden by a button and by the "e" key; a click on a video's moment seeks its
player there; an audio window seeks its player; the state's spans are marked (a JSON state as the server rendered
it, offsets counted in code points). A review item that carries `evidence` (the server does not keep it yet: the
item is answered with the evidence of the real Ask added) shows it the same way."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from PIL import Image, ImageDraw
from playwright.sync_api import expect

from tests.browser.workbench import EXAMPLES, INSPECTION, Review

PHOTO_SIZE = (1200, 500)                       # wider than the answers column: shown scaled down
QUESTIONS = {"scratched": {"type": "noul", "instructions": "Is the fan guard scratched?"},
             "next_step": INSPECTION["questions"]["next_step"]}
STATE = "Unit 14: a scratch on the fan guard, seen at the night shift check."
# a JSON state: the emoji is one character to the server and two UTF-16 units to the page; a float Python writes
# with an exponent; keys the server sorts
JSON_STATE = {"unit": 14, "note": "🙂 Kühler: a scratch on the fan guard, seen at the night check", "temp": 0.00001,
              "ok": True}
FAN, HUM = EXAMPLES / "inspection" / "fan.mp4", EXAMPLES / "inspection" / "hum.wav"


@pytest.fixture(scope="module")
def server(tmp_path_factory, browser):
    folder = tmp_path_factory.mktemp("evidence")
    review = Review(folder, "--review-dir", str(folder / "rv"))
    yield SimpleNamespace(url=review.url + "/ui", api=review.url)
    review.stop()


@pytest.fixture(scope="module")
def photo(tmp_path_factory) -> Path:
    """A non-square photo: a grey field with a red square and a blue bar."""
    path = tmp_path_factory.mktemp("photo") / "guard.png"
    image = Image.new("RGB", PHOTO_SIZE, (200, 200, 200))
    draw = ImageDraw.Draw(image)
    draw.rectangle((900, 150, 1049, 299), fill=(220, 0, 0))
    draw.rectangle((100, 380, 700, 420), fill=(0, 40, 200))
    image.save(path)
    return path


def ask(page, url: str, files: list[Path], request: dict) -> dict:
    """Ask `request` (typed into the raw editor) about `files` with the Evidence box ticked; the server's answer."""
    page.goto(url)
    expect(page.locator("#model-name")).to_contain_text("clef-omni")
    page.set_input_files("#files", [str(f) for f in files])
    page.click("#toggle-raw")
    page.fill("#raw-json", json.dumps(request))
    page.check("#ask-evidence")
    with page.expect_response(lambda r: r.url.endswith("/v1/systemone")) as answered:
        page.click("#ask-button")
    answer = answered.value.json()
    expect(page.locator("#evidence")).to_be_visible()
    return answer


def box_of(page, selector: str) -> dict:
    box = page.locator(selector).bounding_box()
    assert box is not None, selector
    return box


def assert_same_box(actual: dict, expected: dict, what: str) -> None:
    for key in ("x", "y", "width", "height"):
        assert actual[key] == pytest.approx(expected[key], abs=1), f"{what}: {key} {actual} != {expected}"


def canvas_alpha(page, selector: str, col: int, row: int) -> int:
    return page.eval_on_selector(selector, "(c, [x, y]) => c.getContext('2d').getImageData(x, y, 1, 1).data[3]",
                                 [col, row])


def test_the_heat_map_and_boxes_lie_on_the_displayed_photo_where_the_response_says(page, server, photo):
    sent: list[bytes] = []

    def note(route):                                               # the request as the page sends it, sent on
        sent.append(route.request.post_data_buffer or b"")
        route.continue_()

    page.route("**/v1/systemone", note)
    answer = ask(page, server.url, [photo], {"state": STATE, "questions": QUESTIONS})
    assert b'"x_evidence":true' in sent[0]                          # the box asks for evidence
    evidence = answer["x_evidence"]["questions"]["scratched"]["images"][0]
    assert (evidence["width"], evidence["height"]) == PHOTO_SIZE
    figure = '#evidence figure[data-evidence="images[0]"]'
    page.wait_for_function(f"() => document.querySelector('{figure} img').naturalWidth > 0")
    image = box_of(page, f"{figure} img")
    assert image["width"] < PHOTO_SIZE[0] - 100                 # scaled down: a missing scale would be seen
    assert image["width"] / image["height"] == pytest.approx(PHOTO_SIZE[0] / PHOTO_SIZE[1], rel=0.01)
    assert_same_box(box_of(page, f"{figure} .ev-overlay"), image, "the overlay")
    heat = f"{figure} .ev-heat"
    assert_same_box(box_of(page, heat), image, "the heat map")

    # the canvas has one pixel per grid cell and spans the photo: cell (r, c) is drawn over x in
    # [c/cols, (c+1)/cols] and y in [r/rows, (r+1)/rows] of the displayed photo; the heaviest cell the most opaque
    grid = evidence["heatmap"]
    rows, cols = len(grid), len(grid[0])
    assert (rows, cols) == (evidence["grid"]["rows"], evidence["grid"]["cols"])
    assert page.eval_on_selector(heat, "c => [c.height, c.width]") == [rows, cols]
    weights = [(w, r, c) for r, row in enumerate(grid) for c, w in enumerate(row)]
    (_, hot_r, hot_c), (_, cold_r, cold_c) = max(weights), min(weights)
    assert canvas_alpha(page, heat, hot_c, hot_r) > canvas_alpha(page, heat, cold_c, cold_r)
    assert canvas_alpha(page, heat, hot_c, hot_r) == max(
        page.eval_on_selector(heat, "c => [...c.getContext('2d').getImageData(0, 0, c.width, c.height).data]")[3::4])

    scale_x, scale_y = image["width"] / PHOTO_SIZE[0], image["height"] / PHOTO_SIZE[1]
    assert evidence["boxes"]
    for rank, box in enumerate(evidence["boxes"], 1):
        expected = {"x": image["x"] + box["x0"] * scale_x, "y": image["y"] + box["y0"] * scale_y,
                    "width": (box["x1"] - box["x0"]) * scale_x, "height": (box["y1"] - box["y0"]) * scale_y}
        assert_same_box(box_of(page, f'{figure} .ev-box[data-rank="{rank}"]'), expected, f"box {rank}")

    shares = page.locator("#evidence .ev-share .bar")                # the share of each modality
    expect(shares).to_have_count(len(answer["x_evidence"]["questions"]["scratched"]["share"]))
    expect(page.locator('#evidence .ev-share .bar[data-share="image"] .track')).to_have_attribute(
        "aria-valuenow", str(answer["x_evidence"]["questions"]["scratched"]["share"]["image"]))


def test_the_overlay_is_shown_and_hidden_by_its_button_and_the_e_key(page, server, photo):
    ask(page, server.url, [photo], {"state": STATE, "questions": QUESTIONS})
    overlay = page.locator('#evidence figure[data-evidence="images[0]"] .ev-overlay')
    toggle = page.locator("#evidence .ev-toggle")
    expect(overlay).to_be_visible()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    toggle.click()
    expect(overlay).to_be_hidden()
    expect(toggle).to_have_attribute("aria-pressed", "false")
    page.keyboard.press("e")
    expect(overlay).to_be_visible()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    page.locator("#state").focus()                              # an "e" typed in a field is typing
    page.keyboard.press("e")
    expect(overlay).to_be_visible()
    assert page.input_value("#state").endswith("e")
    page.locator("#answers-column").focus()
    page.keyboard.press("e")
    expect(overlay).to_be_hidden()
    page.click("#shortcuts-button")                             # the shortcut overlay names the key
    expect(page.locator("#shortcut-rows")).to_contain_text("evidence")
    page.keyboard.press("Escape")


def seeked(media) -> None:
    media.evaluate("m => new Promise((done) => m.seeking ? m.addEventListener('seeked', done, { once: true }) : done())")


def test_a_click_on_a_moment_seeks_the_video_and_a_window_seeks_its_recording(page, server):
    answer = ask(page, server.url, [HUM, FAN], {"state": STATE, "questions": QUESTIONS})
    evidence = answer["x_evidence"]["questions"]["scratched"]
    video_evidence, audio_evidence = evidence["videos"][0], evidence["audio"][0]
    figure = page.locator('#evidence figure[data-evidence="videos[0]"]')
    video = figure.locator("video")
    video.evaluate("v => new Promise((done) => v.readyState >= 1 ? done() : v.addEventListener('loadedmetadata', done))")
    moments = video_evidence["moments"]
    assert moments
    expect(figure.locator("button.ev-moment")).to_have_count(len(moments))
    expect(figure.locator(".ev-time").first.locator(".ev-cell")).to_have_count(len(video_evidence["timeline"]))
    for rank, moment in enumerate(moments, 1):
        video.evaluate("v => { v.currentTime = 1.95; }")        # away from every moment's start
        seeked(video)
        figure.locator(f'button.ev-moment[data-rank="{rank}"]').click()
        seeked(video)
        assert video.evaluate("v => v.currentTime") == pytest.approx(moment["start_s"], abs=0.05)
        expect(figure.locator(".ev-overlay .ev-box")).to_have_count(len(moment["boxes"]))   # its boxes on the frame
    window = video_evidence["soundtrack"]["windows"][0]         # the soundtrack's window seeks the video
    figure.locator('button.ev-window[data-rank="1"]').click()
    seeked(video)
    assert video.evaluate("v => v.currentTime") == pytest.approx(window["start_s"], abs=0.05)

    recording = page.locator('#evidence figure[data-evidence="audio[0]"]')
    audio = recording.locator("audio")
    expect(recording.locator("button.ev-window")).to_have_count(len(audio_evidence["windows"]))
    expect(recording.locator(".ev-time .ev-mark")).to_have_count(len(audio_evidence["windows"]))
    for rank, window in enumerate(audio_evidence["windows"], 1):
        recording.locator(f'button.ev-window[data-rank="{rank}"]').click()
        seeked(audio)
        assert audio.evaluate("a => a.currentTime") == pytest.approx(window["start_s"], abs=0.05)


def marked(page, root: str) -> list[str]:
    return page.locator(f"{root} .ev-state mark").all_inner_texts()


def in_order(spans: list[dict]) -> list[str]:
    return [s["text"] for s in sorted(spans, key=lambda s: s["start"])]


@pytest.mark.parametrize("state", [STATE, JSON_STATE], ids=["text", "json"])
def test_the_states_spans_are_marked_for_each_question(page, server, state):
    """Every question's spans (the top 16, so that some lie after the emoji) and every option's are marked; a JSON
    state is shown as the server rendered it (compact, key-sorted, non-ASCII kept, Python's floats)."""
    request = {"state": state, "questions": QUESTIONS, "x_evidence": {"top": 16, "options": "all"}}
    answer = ask(page, server.url, [], request)
    rendered = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False, separators=(",", ":"),
                                                                sort_keys=True)
    assert page.locator("#evidence .ev-state").inner_text() == rendered
    questions = answer["x_evidence"]["questions"]
    assert set(questions) == set(QUESTIONS)
    for question, evidence in questions.items():
        page.select_option("#evidence-question", question)
        expect(page.locator("#evidence")).to_have_attribute("data-question", question)
        spans = evidence["state"]["spans"]
        assert spans and marked(page, "#evidence") == in_order(spans)
        if not isinstance(state, str):
            assert any(s["start"] > rendered.index("🙂") for s in spans)      # offsets past the emoji are right
    for option, evidence in questions["next_step"]["options"].items():        # each option's own evidence
        page.select_option("#evidence-option", option)
        assert marked(page, "#evidence") == in_order(evidence["state"]["spans"]), option


def test_a_review_item_with_evidence_shows_it(page, server, photo):
    """The kept item of an Ask that asked for evidence carries it (the server keeps it with the decision)."""
    state = f"Kept for review. {STATE}"                             # this item among the module's kept ones
    answer = ask(page, server.url, [photo, FAN], {"state": state, "questions": QUESTIONS})
    keys: list[str] = []
    with httpx.Client(base_url=server.api, timeout=30) as client:
        for _ in range(100):                                       # kept just after the answer was sent
            items = client.get("/v1/review/queues/kept/items").json()["items"]
            keys = [item["key"] for item in items if item["preview"].startswith("Kept for review.")]
            if keys:
                break
    assert len(keys) == 1, items
    with httpx.Client(base_url=server.api, timeout=30) as client:
        assert client.get(f"/v1/review/queues/kept/items/{keys[0]}").json()["evidence"] == answer["x_evidence"]
    page.goto(f"{server.url}#review/kept/{keys[0]}")
    expect(page.locator("#item h2")).to_contain_text(keys[0])
    panel = "#item-evidence"
    expect(page.locator(panel)).to_be_visible()
    expect(page.locator(f'{panel} figure[data-evidence="images[0]"] .ev-overlay')).to_be_visible()
    expect(page.locator(f'{panel} figure[data-evidence="videos[0]"] button.ev-moment')).not_to_have_count(0)
    assert marked(page, panel) == in_order(answer["x_evidence"]["questions"]["scratched"]["state"]["spans"])
    page.locator(panel).locator(".ev-toggle").click()             # the same toggle
    expect(page.locator(f'{panel} figure[data-evidence="images[0]"] .ev-overlay')).to_be_hidden()
