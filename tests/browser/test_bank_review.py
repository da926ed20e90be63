"""Issue 36 item 1 in the workbench (Chromium): a request a hash bank sent to review (no forward pass, no answers) is
in the policy's queue with the bank, label, medium and distance as its reason, and its questions show no model
answer to accept."""
from __future__ import annotations

import httpx
from playwright.sync_api import expect

from preprocess.hashes import pdq_of_image
from preprocess.item import MediaItem
from tests.browser.conftest import finish, open_page
from tests.browser.workbench import EXAMPLES, Review

POLICY = 'version = "p1"\n[questions.label_visible]\nauto_at = 0.5\nact_on = [false]\n'


def test_a_bank_review_shows_the_bank_as_its_reason(browser, request, tmp_path):
    photo = (EXAMPLES / "inspection" / "unit.png").read_bytes()
    (tmp_path / "policy.toml").write_text(POLICY, encoding="utf-8")
    (tmp_path / "suspect.csv").write_text("hash_type,hash,label,action,source,added\n"
                                          f"pdq,{pdq_of_image(MediaItem('images', 0, photo)).hex},suspect-unit,review,"
                                          "test,2026-12-04T00:00:00Z\n", encoding="utf-8")
    review = Review(tmp_path, "--review-dir", str(tmp_path / "rv"), "--policy", str(tmp_path / "policy.toml"),
                    "--bank", str(tmp_path / "suspect.csv"))
    context, page, errors = open_page(browser, request)
    try:
        files = {"request": ("request.json", (EXAMPLES / "inspection.json").read_bytes(), "application/json"),
                 "images": ("unit.png", photo, "image/png")}
        answer = httpx.post(review.url + "/v1/systemone", files=files, timeout=120).json()
        assert answer["answers"] == {} and answer["x_outcome"]["by"] == "bank"
        page.goto(review.url + "/ui#review")
        page.select_option("#queue", "policy")
        expect(page.locator("#item .reasons")).to_contain_text("hash bank suspect: suspect-unit (images[0], 0 bits)")
        expect(page.locator("#item .rq")).to_have_count(5)
        expect(page.locator("#item .rq .options button.model")).to_have_count(0)      # no model answer to accept
    finally:
        finish(request, page, context, errors)
        review.stop()
