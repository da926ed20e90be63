"""The review workbench in a real browser (headless Chromium) against a real `omni review` process with the embedded
tiny demo model: ask about the example photo, recording and video and read the README's answers from the bars; a
broken upload shown next to its file; a batch reviewed with the keyboard, the labels found in the saved dataset after
a server restart, and `omni finetune` run on them; the report page; keyboard-only use; a phone-width screen."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from playwright.sync_api import expect

from api.cli.main import main as omni
from tests.browser.workbench import EXAMPLES, ROOT, Review, write_batch_input, write_report

MEDIA = [str(EXAMPLES / "inspection" / name) for name in ("unit.png", "hum.wav", "fan.mp4")]
README_ANSWERS = {"label_visible": 0.9812, "sounds_normal": 0.0192, "fan_running": 0.9777}


@pytest.fixture(scope="module")
def workbench(tmp_path_factory, browser):
    folder = tmp_path_factory.mktemp("workbench")
    batch_in = write_batch_input(folder)
    out = folder / "out.jsonl"
    omni(["batch", str(batch_in), "--out", str(out), "--quiet"])      # the broken line is an error record
    report = write_report(folder)
    review = Review(folder, "--batch", str(out), "--report", str(report), "--review-dir", str(folder / "rv"))
    yield SimpleNamespace(folder=folder, out=out, rv=folder / "rv", review=review, url=review.url + "/ui")
    review.stop()


def ask_inspection(page) -> None:
    page.select_option("#preset", "inspection")
    page.click("#load-preset")
    page.click("#ask-button")


def probability(page, question: str, option: str) -> float:
    return float(page.get_attribute(f'#answers .bar[data-question="{question}"][data-option="{option}"]',
                                    "data-probability"))


def no_sideways_scroll(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1")


def test_ask_about_the_example_media_shows_the_demo_answers_as_bars(page, workbench):
    page.goto(workbench.url)
    expect(page.locator("#model-name")).to_contain_text("clef-omni")
    page.set_input_files("#files", MEDIA)
    expect(page.locator(".media-card")).to_have_count(3)
    for player in (".media-card img", ".media-card audio[controls]", ".media-card video[controls]"):
        expect(page.locator(player)).to_have_count(1)
    ask_inspection(page)
    expect(page.locator("#answers .answer")).to_have_count(5)
    for question, expected in README_ANSWERS.items():
        assert probability(page, question, "true") == pytest.approx(expected, abs=1e-4), question
    expect(page.locator('#answers .bar.best[data-question="next_step"]')).to_have_attribute("data-option", "rework")
    expect(page.locator('#answers .bar.best[data-question="severity"]')).to_have_attribute("data-option", "1")
    expect(page.locator("#tokens")).to_contain_text("991")
    expect(page.locator('#timings tr[data-timing="forward"]')).to_be_visible()

    page.click("#add-question")                                    # a new question about the same media
    card = page.locator("#questions .question").last
    card.locator(".qid").fill("photo_sharp")
    card.locator(".instructions").fill("Is the photo in focus?")
    page.click("#ask-button")
    expect(page.locator('#answers .answer[data-question="photo_sharp"]')).to_be_visible()
    expect(page.locator('#timings tr[data-timing="media-cache"]')).to_contain_text("hit")   # not decoded again


def test_a_broken_upload_is_shown_next_to_its_file_and_the_others_still_work(page, workbench):
    page.goto(workbench.url)
    page.set_input_files("#files", [MEDIA[0], str(ROOT / "fixtures" / "files" / "corrupt" / "truncated.png")])
    ask_inspection(page)
    broken = page.locator('.media-card[data-place="images[1]"]')
    expect(broken).to_have_class("media-card failed")
    expect(broken.locator(".media-error")).not_to_be_empty()
    expect(page.locator('.media-card[data-place="images[0]"] .media-error')).to_be_empty()
    broken.get_by_role("button", name="remove truncated.png").click()
    page.click("#ask-button")
    expect(page.locator("#answers .answer")).to_have_count(5)
    expect(page.locator("#ask-error")).to_be_empty()


def test_a_batch_is_reviewed_with_the_keyboard_saved_as_a_dataset_kept_across_a_restart_and_finetuned(
        page, workbench, tmp_path):
    page.goto(workbench.url + "#review")
    expect(page.locator("#queue option").first).to_contain_text("out.jsonl")
    expect(page.locator("#items li")).to_have_count(4)             # four answered lines; the broken one failed
    first = page.locator("#item .rq").first
    expect(first).to_have_class("rq current")
    key = page.locator('#items button[aria-current="true"]').get_attribute("data-key")
    model_pick = page.locator('#item .rq[data-question="label_visible"] .options button.model').get_attribute(
        "data-option")
    correction = "false" if model_pick == "true" else "true"
    page.keyboard.press("2" if correction == "false" else "1")     # correct the first answer
    expect(page.locator('#item .rq[data-question="label_visible"] .saved')).to_contain_text(f"saved: {correction}")
    for _ in range(4):                                              # accept the model's other four answers
        page.keyboard.press("Enter")
    expect(page.locator(f'#items button[data-key="{key}"]')).to_contain_text("5/5 labelled")
    for _ in range(5 * 2):                                          # two more items, all accepted with "a"
        page.keyboard.press("a")
    expect(page.locator("#items .done")).to_have_count(3)

    lines = [json.loads(text) for text in (workbench.rv / "labels.jsonl").read_text().splitlines()]
    assert len(lines) == 3
    corrected = next(line for line in lines if line["x_review"]["key"] == key)
    assert corrected["labels"]["label_visible"] is (correction == "true")
    assert corrected["x_review"]["corrected"] == ["label_visible"]

    address = page.url
    page.goto("about:blank")     # nothing of the workbench in flight as it stops (the next item's media, a count's
    workbench.review.restart()   # refresh): a navigation ends the old page's scripts, which set_content did not
    page.goto(address)                                              # the workbench again, at the same address
    expect(page.locator("#items li")).to_have_count(1)              # only the unreviewed item is left
    page.check("#show-done")
    expect(page.locator("#items li")).to_have_count(4)
    page.locator(f'#items button[data-key="{key}"]').click()
    expect(page.locator('#item .rq[data-question="label_visible"] .saved')).to_contain_text(f"saved: {correction}")

    checkpoint = tmp_path / "finetuned"
    assert omni(["finetune", str(workbench.rv), "--epochs", "1", "--out", str(checkpoint), "--quiet"]) == 0
    assert (checkpoint / "joint_head.safetensors").is_file()


def test_the_batch_queue_says_which_lines_failed(page, workbench):
    """Issue 22, bug 9: the batch's broken line (its photo is cut short) had no trace in the workbench."""
    page.goto(workbench.url + "#review")
    expect(page.locator("#queue option").first).to_contain_text("1 line failed")
    expect(page.locator('#queue-failures li[data-line="5"]')).to_contain_text("line 5: 422")


def test_the_report_page_shows_the_eval_tables_and_figures(page, workbench):
    page.goto(workbench.url + "#report")
    expect(page.locator('#report-body tr[data-row="label_visible"]')).to_be_visible()
    expect(page.locator('#report-body tr[data-row="all"]')).to_be_visible()
    figures = page.locator("#report-body .report-figures img")
    expect(figures.first).to_be_visible()
    page.wait_for_load_state("networkidle")
    sizes = figures.evaluate_all("images => images.map(i => i.complete && i.naturalWidth)")
    assert sizes and all(sizes), sizes


def test_the_page_works_from_the_keyboard_alone(page, workbench):
    page.goto(workbench.url)
    expect(page.locator("#model-name")).to_contain_text("clef-omni")
    for _ in range(40):                                             # Tab until the preset list has the focus
        if page.evaluate("() => document.activeElement.id") == "preset":
            break
        page.keyboard.press("Tab")
    else:
        pytest.fail("the preset list cannot be reached with Tab")
    page.keyboard.press("ArrowDown")                                # Inspection
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == "load-preset"
    outline = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"                                        # the focus can be seen
    page.keyboard.press("Enter")
    expect(page.locator("#questions .question")).to_have_count(5)
    page.keyboard.press("Control+Enter")                            # ask without the mouse
    expect(page.locator("#answers .answer")).to_have_count(5)
    page.focus("#tab-ask")
    page.keyboard.press("ArrowRight")                               # tabs move with the arrow keys
    expect(page.locator("#tab-review")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#review")).to_be_visible()


def test_a_phone_width_screen_has_no_sideways_scrolling(phone, workbench):
    phone.goto(workbench.url)
    phone.set_input_files("#files", MEDIA)
    ask_inspection(phone)
    expect(phone.locator("#answers .answer")).to_have_count(5)
    assert no_sideways_scroll(phone)
    box = phone.locator('#answers .bar[data-question="label_visible"][data-option="true"] .track').bounding_box()
    assert box and box["width"] > 60                                # the bars stay readable
    phone.click("#tab-review")
    expect(phone.locator("#item .rq").first).to_be_visible()
    assert no_sideways_scroll(phone)
    phone.click("#tab-report")
    expect(phone.locator("#report-body h2")).to_be_visible()
    assert no_sideways_scroll(phone)
