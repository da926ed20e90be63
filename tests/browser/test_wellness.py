"""Issue 36 item 4, reviewer wellness, in Chromium: under `--review-shield all --review-daily-limit 4` an item's photo
and video are drawn blurred and grey and its recordings muted until the reviewer reveals each one (the `v` key or a
button); each reveal is counted for the reviewer and the day; past the limit a reveal is refused and the reviewer's
list keeps only what they revealed, while another reviewer still gets every item; axe finds no serious violation
on a shielded item."""
from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest
from playwright.sync_api import expect

from api.cli.main import main as omni
from tests.browser.conftest import finish, open_page
from tests.browser.test_accessibility import axe_violations
from tests.browser.workbench import Review, write_batch_input


@pytest.fixture(scope="module")
def shielded(tmp_path_factory, browser):
    folder = tmp_path_factory.mktemp("wellness")
    out = folder / "out.jsonl"
    omni(["batch", str(write_batch_input(folder)), "--out", str(out), "--quiet"])
    review = Review(folder, "--batch", str(out), "--review-dir", str(folder / "rv"), "--review-shield", "all",
                    "--review-daily-limit", "4")
    yield SimpleNamespace(url=review.url, rv=folder / "rv")
    review.stop()


def filter_of(page, selector: str) -> str:
    return page.locator(selector).evaluate("e => getComputedStyle(e).filter")


def test_media_stay_shielded_until_revealed_and_the_daily_limit_moves_items_to_others(browser, request, shielded):
    context, page, errors = open_page(browser, request, reviewer="wren")
    try:
        page.goto(shielded.url + "/ui#review")
        expect(page.locator("#items li")).to_have_count(4)
        figures = page.locator("#item .media figure")
        expect(figures).to_have_count(3)
        expect(page.locator("#item .media figure.shielded")).to_have_count(3)
        expect(page.locator('#item figure[data-media="images[0]"] img')).to_be_visible()
        assert "blur(24px)" in filter_of(page, '#item figure[data-media="images[0]"] img')
        assert "grayscale(1)" in filter_of(page, '#item figure[data-media="images[0]"] img')
        expect(page.locator('#item figure[data-media="audio[0]"] audio')).to_have_count(1)
        assert page.locator('#item figure[data-media="audio[0]"] audio').evaluate("a => a.muted") is True
        assert page.locator('#item figure[data-media="videos[0]"] video').evaluate("v => v.muted") is True
        expect(page.locator("#exposure")).to_contain_text("Revealed today: 0 of your daily limit of 4")

        page.keyboard.press("v")                                         # the first shielded medium: the photo
        expect(page.locator('#item figure[data-media="images[0]"]')).not_to_have_class("shielded")
        assert filter_of(page, '#item figure[data-media="images[0]"] img') == "none"
        expect(page.locator("#exposure")).to_contain_text("Revealed today: 1 of your daily limit of 4")
        page.get_by_role("button", name="Reveal audio[0]").click()       # a button does the same
        expect(page.locator('#item figure[data-media="audio[0]"]')).not_to_have_class("shielded")
        assert page.locator('#item figure[data-media="audio[0]"] audio').evaluate("a => a.muted") is False
        page.keyboard.press("v")
        expect(page.locator("#item .media figure.shielded")).to_have_count(0)
        expect(page.locator("#exposure")).to_contain_text("Revealed today: 3")

        page.keyboard.press("n")                                         # the next item: shielded again
        expect(page.locator("#item .media figure.shielded")).to_have_count(3)
        page.keyboard.press("v")
        expect(page.locator("#item .media figure.shielded")).to_have_count(2)
        expect(page.locator("#exposure")).to_contain_text("Revealed today: 4 of your daily limit of 4")
        page.keyboard.press("v")                                         # past the limit: refused, said why
        expect(page.locator("#review-error")).to_contain_text("daily limit")
        expect(page.locator("#item .media figure.shielded")).to_have_count(2)

        page.reload()                                                    # at the limit: only what wren revealed
        expect(page.locator("#items li")).to_have_count(1)
    finally:
        finish(request, page, context, errors)
    exposures = [json.loads(line) for line in (shielded.rv / "exposure.jsonl").read_text().splitlines()]
    assert [e["reviewer"] for e in exposures] == ["wren"] * 4 and len({(e["key"], e["index"]) for e in exposures}) == 4
    other = httpx.get(shielded.url + "/v1/review/queues", headers={"x-omni-reviewer": "sam"}).json()["queues"][0]["id"]
    items = httpx.get(f"{shielded.url}/v1/review/queues/{other}/items", headers={"x-omni-reviewer": "sam"}).json()
    assert len(items["items"]) == 4 and all(item["shielded"] for item in items["items"])    # the others still get all


def test_axe_finds_no_serious_violation_on_a_shielded_item(browser, request, shielded, axe_source):
    context, page, errors = open_page(browser, request, reviewer="axel")
    context.add_init_script(path=str(axe_source))
    try:
        page.goto(shielded.url + "/ui#review")
        expect(page.locator("#item .media figure.shielded").first).to_be_visible()
        expect(page.locator("#exposure")).to_be_visible()
        serious = [v for v in axe_violations(page) if v["impact"] in ("serious", "critical")]
        assert not serious, json.dumps(serious, indent=1)
    finally:
        finish(request, page, context, errors)
