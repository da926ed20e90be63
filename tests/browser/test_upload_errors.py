"""Issue 22, bug 5: two broken files uploaded together are both marked on the Ask page after one Ask (before, only the
first was, and the second only after the first was removed); the good file beside them is not marked. Against its own
`omni review` (the embedded demo model)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.workbench import EXAMPLES, ROOT, Review


@pytest.fixture(scope="module")
def served(tmp_path_factory, browser):
    folder = tmp_path_factory.mktemp("upload-errors")
    review = Review(folder, "--review-dir", str(folder / "rv"))
    notes = folder / "notes.wav"                       # a text file with an audio name
    notes.write_text("these are notes about the fan, not a recording\n" * 4)
    yield review.url + "/ui", notes
    review.stop()


def test_two_broken_files_are_both_marked_after_one_ask(page, served):
    url, notes = served
    page.goto(url)
    expect(page.locator("#model-name")).to_contain_text("clef-omni")
    page.set_input_files("#files", [str(EXAMPLES / "inspection" / "unit.png"),
                                    str(ROOT / "fixtures" / "files" / "corrupt" / "truncated.png"), str(notes)])
    expect(page.locator(".media-card")).to_have_count(3)
    page.select_option("#preset", "inspection")
    page.click("#load-preset")
    page.click("#ask-button")
    for place in ("images[1]", "audio[0]"):
        card = page.locator(f'.media-card[data-place="{place}"]')
        expect(card).to_have_class("media-card failed")
        expect(card.locator(".media-error")).not_to_be_empty()
    expect(page.locator('.media-card[data-place="images[0]"]')).to_have_class("media-card")
    expect(page.locator('.media-card[data-place="images[0]"] .media-error')).to_be_empty()
    assert page.locator('.media-card[data-place="audio[0]"] .media-error').inner_text() != \
        page.locator('.media-card[data-place="images[1]"] .media-error').inner_text()   # each its own reason

    for name in ("truncated.png", "notes.wav"):        # both removed: the good photo alone is answered
        page.get_by_role("button", name=f"remove {name}").click()
    page.click("#ask-button")
    expect(page.locator("#answers .answer")).to_have_count(5)
    expect(page.locator("#ask-error")).to_be_empty()
