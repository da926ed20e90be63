"""Issue 34, evidence in the workbench: with the Ask tab's Evidence box ticked the request carries `x_evidence`, and
the answer's evidence (docs/evidence.md) is drawn over what was asked about: the heat map placed exactly over the
displayed photo and its boxes on the right displayed pixels, shown and hidden by a button and by the "e" key; a
video's top moments seek its player; an audio clip's windows seek its player; the state's heaviest spans marked.
The server is `omni review` with the embedded tiny demo model; the crafted responses (a photo's box and heat-map
cell at known places, a JSON state with non-ASCII text) are fulfilled in the browser in place of the server's."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image, ImageDraw
from playwright.sync_api import expect

from tests.browser.workbench import EXAMPLES, Review

PHOTO_SIZE = (1200, 500)                       # wider than the answers column: the photo is shown scaled down
BOX = {"x0": 900.0, "y0": 150.0, "x1": 1050.0, "y1": 300.0, "weight": 0.05}
GRID = (10, 24)                                # rows, cols: 50 px cells
HOT_CELL = (4, 19)                             # the heaviest cell (row, col): inside BOX
QUESTIONS = {"scratched": {"type": "noul", "instructions": "Is the fan guard scratched?"}}


@pytest.fixture(scope="module")
def server(tmp_path_factory, browser):
    folder = tmp_path_factory.mktemp("evidence")
    review = Review(folder, "--review-dir", str(folder / "rv"))
    yield SimpleNamespace(url=review.url + "/ui", folder=folder)
    review.stop()


@pytest.fixture(scope="module")
def photo(tmp_path_factory) -> Path:
    """A non-square photo with a red square where BOX is."""
    path = tmp_path_factory.mktemp("photo") / "guard.png"
    image = Image.new("RGB", PHOTO_SIZE, (200, 200, 200))
    ImageDraw.Draw(image).rectangle((BOX["x0"], BOX["y0"], BOX["x1"] - 1, BOX["y1"] - 1), fill=(220, 0, 0))
    image.save(path)
    return path


def heatmap() -> list[list[float]]:
    rows, cols = GRID
    cells = [[0.0001] * cols for _ in range(rows)]
    cells[HOT_CELL[0]][HOT_CELL[1]] = 0.02
    return cells


def crafted(state: str | dict, span_text: str) -> dict:
    """An answer with evidence for one photo, the example video (2 s) and recording (2 s), and one state span."""
    chars = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False, separators=(",", ":"),
                                                             sort_keys=True)
    start = chars.index(span_text)
    question = {
        "answer": "true",
        "share": {"prompt": 0.4, "state": 0.1, "image": 0.3, "audio": 0.05, "video": 0.13, "video_audio": 0.02},
        "state": {"chars": len(chars), "covered_chars": len(chars),
                  "spans": [{"start": start, "end": start + len(span_text), "text": span_text, "weight": 0.03}]},
        "images": [{"index": 0, "width": PHOTO_SIZE[0], "height": PHOTO_SIZE[1],
                    "grid": {"rows": GRID[0], "cols": GRID[1]}, "heatmap": heatmap(), "boxes": [BOX]}],
        "audio": [{"index": 0, "seconds": 2.0, "per_second": [0.01, 0.04],
                   "windows": [{"start_s": 1.28, "end_s": 1.36, "weight": 0.004}]}],
        "videos": [{"index": 0, "width": 256, "height": 256, "seconds": 2.0,
                    "timeline": [{"start_s": 0.0, "end_s": 1.0, "weight": 0.03}, {"start_s": 1.0, "end_s": 2.0, "weight": 0.1}],
                    "moments": [{"start_s": 1.0, "end_s": 2.0, "weight": 0.1,
                                 "boxes": [{"x0": 128.0, "y0": 0.0, "x1": 256.0, "y1": 128.0, "weight": 0.01}]},
                                {"start_s": 0.0, "end_s": 1.0, "weight": 0.03, "boxes": []}],
                    "soundtrack": {"seconds": 2.0, "per_second": [0.01, 0.01],
                                   "windows": [{"start_s": 0.4, "end_s": 0.48, "weight": 0.002}]}}],
    }
    return {"answers": {"scratched": {"type": "noul", "noul": 0.8, "confidence": 0.8}},
            "usage": {"input_tokens": 100}, "x_evidence": {"method": "routing-attention/1",
                                                           "questions": {"scratched": question}}}


def ask(page, url: str, files: list[Path], state: str | dict) -> None:
    page.goto(url)
    expect(page.locator("#model-name")).to_contain_text("clef-omni")
    page.set_input_files("#files", [str(f) for f in files])
    page.click("#toggle-raw")
    page.fill("#raw-json", json.dumps({"state": state, "questions": QUESTIONS}))
    page.check("#ask-evidence")
    page.click("#ask-button")
    expect(page.locator("#evidence")).to_be_visible()


def route_answer(page, answer: dict) -> list[bytes]:
    """The next asks are answered with `answer`; returns the request bodies as they are sent."""
    sent: list[bytes] = []

    def fulfil(route):
        sent.append(route.request.post_data_buffer or b"")
        route.fulfill(status=200, content_type="application/json", body=json.dumps(answer))

    page.route("**/v1/systemone", fulfil)
    return sent


def box_of(page, selector: str) -> dict:
    box = page.locator(selector).bounding_box()
    assert box is not None, selector
    return box


def assert_same_box(actual: dict, expected: dict, what: str) -> None:
    for key in ("x", "y", "width", "height"):
        assert actual[key] == pytest.approx(expected[key], abs=1), f"{what}: {key} {actual} != {expected}"


def test_the_heat_map_and_boxes_lie_on_the_right_pixels_of_the_displayed_photo(page, server, photo):
    state = "Unit 14: a scratch on the fan guard."
    sent = route_answer(page, crafted(state, "scratch"))
    ask(page, server.url, [photo], state)
    assert b'"x_evidence":true' in sent[0]                  # the box asked for evidence
    figure = '#evidence figure[data-evidence="images[0]"]'
    page.wait_for_function(f"() => document.querySelector('{figure} img').complete")
    image = box_of(page, f"{figure} img")
    assert image["width"] < PHOTO_SIZE[0] - 100             # scaled down: the test would not see a missing scale
    assert_same_box(box_of(page, f"{figure} .ev-overlay"), image, "the overlay")
    assert_same_box(box_of(page, f"{figure} .ev-heat"), image, "the heat map")
    scale_x, scale_y = image["width"] / PHOTO_SIZE[0], image["height"] / PHOTO_SIZE[1]
    expected = {"x": image["x"] + BOX["x0"] * scale_x, "y": image["y"] + BOX["y0"] * scale_y,
                "width": (BOX["x1"] - BOX["x0"]) * scale_x, "height": (BOX["y1"] - BOX["y0"]) * scale_y}
    assert_same_box(box_of(page, f'{figure} .ev-box[data-rank="1"]'), expected, "the box")
    # the heaviest cell is the most opaque pixel of the canvas, and the canvas spans the grid: it is drawn at
    # displayed x in [col/cols, (col+1)/cols] of the photo's width
    hottest = page.eval_on_selector(f"{figure} .ev-heat", """(canvas) => {
        const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        let best = 0;
        for (let i = 3; i < data.length; i += 4) if (data[i] > data[best * 4 + 3]) best = (i - 3) / 4;
        return { row: Math.floor(best / canvas.width), col: best % canvas.width, rows: canvas.height, cols: canvas.width };
    }""")
    assert hottest == {"row": HOT_CELL[0], "col": HOT_CELL[1], "rows": GRID[0], "cols": GRID[1]}
    # the red square of the photo is under the box: the displayed pixel at the box's centre is red
    centre = (expected["x"] + expected["width"] / 2, expected["y"] + expected["height"] / 2)
    page.click(".ev-toggle")                                # the overlay off, to see the photo's own pixel
    red = page.evaluate("""([x, y]) => {
        const img = document.elementFromPoint(x, y);
        const canvas = document.createElement("canvas");
        const box = img.getBoundingClientRect();
        canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
        const context = canvas.getContext("2d");
        context.drawImage(img, 0, 0);
        const px = context.getImageData(Math.floor((x - box.left) * img.naturalWidth / box.width),
                                         Math.floor((y - box.top) * img.naturalHeight / box.height), 1, 1).data;
        return [img.tagName, px[0], px[1], px[2]];
    }""", list(centre))
    assert red == ["IMG", 220, 0, 0]


def test_the_overlay_is_shown_and_hidden_by_its_button_and_the_e_key(page, server, photo):
    state = "Unit 14: a scratch on the fan guard."
    route_answer(page, crafted(state, "scratch"))
    ask(page, server.url, [photo], state)
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
    page.locator("#state").focus()                          # typing an "e" in a field is typing
    page.keyboard.press("e")
    expect(overlay).to_be_visible()
    assert page.input_value("#state").endswith("e")
    page.locator("#answers-column").focus()
    page.keyboard.press("e")
    expect(overlay).to_be_hidden()
    page.click("#shortcuts-button")                         # the shortcut overlay names the key
    expect(page.locator("#shortcut-rows")).to_contain_text("evidence")
    page.keyboard.press("Escape")


def test_a_click_on_a_moment_seeks_the_video_and_a_window_seeks_the_recording(page, server, photo):
    state = "Unit 14: a scratch on the fan guard."
    answer = crafted(state, "scratch")
    route_answer(page, answer)
    ask(page, server.url, [photo, EXAMPLES / "inspection" / "hum.wav", EXAMPLES / "inspection" / "fan.mp4"], state)
    figure = page.locator('#evidence figure[data-evidence="videos[0]"]')
    video = figure.locator("video")
    video.evaluate("v => new Promise((done) => v.readyState >= 1 ? done() : v.addEventListener('loadedmetadata', done))")
    moments = answer["x_evidence"]["questions"]["scratched"]["videos"][0]["moments"]
    expect(figure.locator("button.ev-moment")).to_have_count(len(moments))
    for rank, moment in enumerate(moments, 1):
        video.evaluate("v => { v.currentTime = 1.9; }")
        figure.locator(f'button.ev-moment[data-rank="{rank}"]').click()
        video.evaluate("v => new Promise((done) => v.seeking ? v.addEventListener('seeked', done, { once: true }) : done())")
        assert video.evaluate("v => v.currentTime") == pytest.approx(moment["start_s"], abs=0.05)
    figure.locator('button.ev-moment[data-rank="1"]').click()          # the moment's boxes over the frame
    expect(figure.locator(".ev-overlay .ev-box")).to_have_count(1)
    expect(figure.locator(".ev-overlay")).to_have_attribute("data-moment", "1")
    figure.locator("button.ev-window").click()                          # the soundtrack's window seeks the video
    assert video.evaluate("v => v.currentTime") == pytest.approx(0.4, abs=0.05)

    recording = page.locator('#evidence figure[data-evidence="audio[0]"]')
    recording.locator("button.ev-window").click()
    audio = recording.locator("audio")
    assert audio.evaluate("a => a.currentTime") == pytest.approx(1.28, abs=0.05)
    expect(recording.locator(".ev-time .ev-mark")).to_have_count(1)


@pytest.mark.parametrize("state", ["Unit 14: a scratch on the fan guard.",
                                   {"unit": 14, "note": "Kühler 🙂 scratch", "temp": 0.00001, "ok": True}])
def test_the_states_heaviest_spans_are_marked(page, server, photo, state):
    """A JSON state is shown as the server rendered it (compact, key-sorted, non-ASCII kept, Python's floats), its
    spans counted in code points (the emoji is one character to the server, two to JavaScript)."""
    route_answer(page, crafted(state, "scratch"))
    ask(page, server.url, [photo], state)
    marks = page.locator("#evidence .ev-state mark")
    expect(marks).to_have_count(1)
    expect(marks).to_have_text("scratch")
    if not isinstance(state, str):
        shown = page.locator("#evidence .ev-state").inner_text()
        assert shown == '{"note":"Kühler 🙂 scratch","ok":true,"temp":1e-05,"unit":14}'
        assert shown == json.dumps(state, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
