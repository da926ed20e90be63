"""Issue 36 item 3, appeals, in the workbench (Chromium): a decision the server logged and a caller appealed is in the
Review tab's appeals queue with its outcome, answers and the caller's reason; the reviewer reverses it with a note and
it moves to the decided appeals, recorded under the reviewer's name; axe finds no serious violation there."""
from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import finish, open_page
from tests.browser.test_accessibility import axe_violations
from tests.browser.workbench import EXAMPLES, Review

POLICY = 'version = "p1"\n[questions.label_visible]\nauto_at = 0.5\nact_on = [false]\n'


@pytest.fixture(scope="module")
def appealed(tmp_path_factory, browser):
    folder = tmp_path_factory.mktemp("appeals")
    (folder / "policy.toml").write_text(POLICY, encoding="utf-8")
    review = Review(folder, "--review-dir", str(folder / "rv"), "--decision-log", str(folder / "log"),
                    "--policy", str(folder / "policy.toml"))
    files = {"request": ("request.json", (EXAMPLES / "inspection.json").read_bytes(), "application/json"),
             "images": ("unit.png", (EXAMPLES / "inspection" / "unit.png").read_bytes(), "image/png")}
    for request_id in ("unit-41", "unit-42"):
        decided = httpx.post(review.url + "/v1/systemone", files=files, headers={"x-request-id": request_id},
                             timeout=120)
        assert decided.status_code == 200, decided.text
        made = httpx.post(f"{review.url}/v1/decisions/{request_id}/appeal", timeout=30,
                          json={"reason": f"The label of {request_id} is there."}, headers={"x-omni-reviewer": "cal"})
        assert made.status_code == 201, made.text
    yield SimpleNamespace(url=review.url)
    review.stop()


def test_an_appeal_is_reversed_from_the_workbench(browser, request, appealed):
    context, page, errors = open_page(browser, request, reviewer="rhea")
    try:
        page.goto(appealed.url + "/ui#review")
        section = page.locator("#appeals")
        expect(section).to_be_visible()
        expect(page.locator("#appeals-title")).to_have_text("Appeals (2 pending)")
        card = page.locator('#appeals-list li[data-appeal="unit-41"]')
        expect(card).to_contain_text("Appealed by cal")
        expect(card).to_contain_text("The label of unit-41 is there.")
        expect(card).to_contain_text("outcome act")
        expect(card).to_contain_text("label_visible: no")
        card.get_by_label("Note").fill("the label is on the photo")
        card.get_by_role("button", name="Reverse").click()
        expect(page.locator("#appeals-title")).to_have_text("Appeals (1 pending)")
        expect(page.locator('#appeals-decided li[data-appeal="unit-41"]')).to_contain_text("reversed by rhea")
    finally:
        finish(request, page, context, errors)
    decided = httpx.get(appealed.url + "/v1/appeals/unit-41").json()
    assert (decided["state"], decided["decided_by"], decided["note"]) == ("reversed", "rhea", "the label is on the photo")


def test_axe_finds_no_serious_violation_in_the_appeals_queue(browser, request, appealed, axe_source):
    context, page, errors = open_page(browser, request, reviewer="axel")
    context.add_init_script(path=str(axe_source))
    try:
        page.goto(appealed.url + "/ui#review")
        expect(page.locator('#appeals-list li[data-appeal="unit-42"]')).to_be_visible()
        serious = [v for v in axe_violations(page) if v["impact"] in ("serious", "critical")]
        assert not serious, json.dumps(serious, indent=1)
    finally:
        finish(request, page, context, errors)
