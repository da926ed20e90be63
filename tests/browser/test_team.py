"""The workbench for a team (issue 22): a name asked once, each label's history, comments, flags and skips, undo,
filters with an address for every view, a queue's guidelines beside the item, the shortcut overlay, and two
reviewers per item with their disagreements and agreement. Against its own `omni review` (the embedded demo model),
its decisions kept in its review directory (text-only requests: quick to answer)."""
from __future__ import annotations

import time

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import finish, open_page
from tests.browser.workbench import Review

QUESTIONS = {"ok": {"type": "noul", "instructions": "Is it fine?"},
             "next_step": {"type": "choice", "criteria": {"ship": None, "rework": None}}}
GUIDELINES = """# How to judge a unit

- **ok**: true only when nothing is wrong.
- Ask the lead when unsure: [the handbook](https://example.org/handbook), [not this](javascript:alert(1)).

<script>window.pwned = true</script>
<img src=x onerror="window.pwned = true">
"""


def keep(url: str, states: list[str]) -> dict[str, str]:
    """Ask the server about each state (it keeps every decision for review); state -> the kept item's key."""
    with httpx.Client(base_url=url, timeout=120) as client:
        for state in states:
            answer = client.post("/v1/systemone", json={"state": state, "questions": QUESTIONS})
            assert answer.status_code == 200, answer.text
        for _ in range(200):                      # kept after the answers were sent
            items = client.get("/v1/review/queues/kept/items").json()["items"]
            if len(items) >= len(states):
                break
            time.sleep(0.05)
        return {item["preview"]: item["key"] for item in items}


@pytest.fixture(scope="module")
def team(tmp_path_factory, browser):
    folder = tmp_path_factory.mktemp("team")
    (folder / "guide.md").write_text(GUIDELINES)
    review = Review(folder, "--review-dir", str(folder / "rv"), "--review-guidelines", str(folder / "guide.md"))
    try:
        keys = keep(review.url, [f"unit {n}" for n in range(1, 5)])
        yield review.url, keys
    finally:
        review.stop()


def item(url: str, key: str) -> dict:
    return httpx.get(f"{url}/v1/review/queues/kept/items/{key}", timeout=30).json()


def open_item(page, url: str, key: str) -> None:
    page.goto(f"{url}/ui#review/kept/{key}")
    expect(page.locator("#item h2")).to_contain_text(key)


def test_without_keys_the_page_asks_a_name_once_and_labels_record_it(browser, request, team):
    url, keys = team
    context, page, errors = open_page(browser, request, reviewer=None)
    try:
        page.goto(url + "/ui#review")
        expect(page.locator("#name-dialog")).to_be_visible()
        page.fill("#name-input", "Łukasz")
        page.click("#name-dialog button[value=save]")
        expect(page.locator("#who")).to_have_text("Łukasz · admin")
        page.reload()
        expect(page.locator("#item .rq").first).to_be_visible()
        expect(page.locator("#name-dialog")).to_be_hidden()            # asked once: kept in this browser
        open_item(page, url, keys["unit 1"])
        page.locator('#item .rq[data-question="ok"] button[data-option="true"]').click()
        expect(page.locator('#item .rq[data-question="ok"] [data-saved]')).to_contain_text("by Łukasz")
        history = item(url, keys["unit 1"])["history"]
        assert [(h["question"], h["old"], h["new"], h["reviewer"]) for h in history] == [("ok", None, "true", "Łukasz")]
    finally:
        finish(request, page, context, errors)


def test_a_label_changed_twice_shows_its_history_and_undo_reverts_it(page, team):
    url, keys = team
    key = keys["unit 2"]
    open_item(page, url, key)
    page.keyboard.press("1")                                           # ok: true
    page.keyboard.press("k")                                           # back to ok
    page.keyboard.press("2")                                           # ok: false
    expect(page.locator("#item .history")).to_have_attribute("data-history", "2")
    page.locator("#item .history summary").click()
    rows = page.locator("#item .history li")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("tester · ok: — → true")
    expect(rows.nth(1)).to_contain_text("tester · ok: true → false")
    page.keyboard.press("Control+z")                                   # the last label: false -> true again
    expect(page.locator("#item-status")).to_contain_text("Undone: the label of ok")
    expect(page.locator('#item .rq[data-question="ok"] [data-saved]')).to_have_attribute("data-saved", "true")
    expect(page.locator("#item .history li")).to_have_count(3)
    expect(page.locator("#item .history li").nth(2)).to_have_attribute("data-action", "revert")
    answer = item(url, key)
    assert answer["labels"]["ok"] == "true"
    assert [h["action"] for h in answer["history"]] == ["label", "label", "revert"]


def test_comments_flags_and_skips_are_kept_with_their_reviewer(page, team):
    url, keys = team
    key = keys["unit 3"]
    open_item(page, url, key)
    page.click("#item .comment-form button[type=submit]")             # an empty comment: said, not sent
    expect(page.locator("#item .comment-form .error")).to_have_text("write a comment first")
    page.keyboard.press("Escape")
    page.fill("#comment-text", "the photo is blurred; <b>ask</b> the site")
    page.click("#item .comment-form button[type=submit]")
    expect(page.locator("#item .comment-list li")).to_have_count(1)
    expect(page.locator("#item .comment-list li .text")).to_have_text("the photo is blurred; <b>ask</b> the site")
    expect(page.locator("#item .comment-list li .meta")).to_contain_text("tester")
    page.locator("#item").focus()
    page.keyboard.press("f")
    expect(page.locator("#flag-reason")).to_be_focused()
    page.fill("#flag-reason", "wrong unit in the photo")
    page.keyboard.press("Enter")
    expect(page.locator("#item .flags .flag")).to_contain_text("wrong unit in the photo")
    answer = item(url, key)
    assert [(c["text"], c["reviewer"]) for c in answer["comments"]] == [("the photo is blurred; <b>ask</b> the site",
                                                                          "tester")]
    assert [(f["reason"], f["reviewer"]) for f in answer["flags"]] == [("wrong unit in the photo", "tester")]
    assert answer["flagged"] is True
    page.locator("#item").focus()
    page.keyboard.press("Control+z")                                   # undo the flag
    expect(page.locator("#item .flags .flag")).to_have_count(0)
    assert item(url, key)["flags"] == []
    page.keyboard.press("s")                                           # skip: on to another item
    expect(page.locator("#item h2")).not_to_contain_text(key)
    assert [s["reviewer"] for s in item(url, key)["skips"]] == ["tester"]
    page.keyboard.press("Control+z")                                   # undo the skip: the item comes back
    expect(page.locator("#item h2")).to_contain_text(key)
    assert item(url, key)["skips"] == []


def test_filters_and_the_address_name_every_view_and_back_returns(page, team):
    url, keys = team
    key = keys["unit 4"]
    with httpx.Client(base_url=url, timeout=30) as client:
        flagged = client.post(f"/v1/review/queues/kept/items/{key}/flag", json={"reason": "check the serial"})
        assert flagged.status_code == 201, flagged.text
    page.goto(f"{url}/ui#review/kept/{keys['unit 1']}")                # a deep link to an item
    expect(page.locator("#item h2")).to_contain_text(keys["unit 1"])
    expect(page.locator("#tab-review")).to_have_attribute("aria-selected", "true")
    page.locator("#filters summary").click()
    page.select_option("#filter-state", "flagged")
    expect(page.locator("#items button")).to_have_count(1)
    expect(page.locator("#items button")).to_have_attribute("data-key", key)
    expect(page.locator("#item h2")).to_contain_text(key)
    assert page.evaluate("location.hash") == f"#review/kept/{key}?state=flagged"
    page.go_back()                                                     # the unfiltered view of unit 1 again
    expect(page.locator("#item h2")).to_contain_text(keys["unit 1"])
    expect(page.locator("#filter-state")).to_have_value("")
    page.go_forward()
    expect(page.locator("#filter-state")).to_have_value("flagged")
    expect(page.locator("#items button")).to_have_count(1)
    page.goto(f"{url}/ui#review/kept?reviewer=nobody&done=1")          # a typed address: its filters apply
    expect(page.locator("#items button")).to_have_count(0)
    expect(page.locator("#item")).to_contain_text("No item matches these filters.")


def test_an_item_that_answers_after_the_reviewer_moved_on_does_not_overwrite_the_view(page, team):
    """The CI race of issue 33's stop: the item of an address followed earlier came back after a newer address had
    emptied the list, drew itself over "No item matches" and wrote its key into the address. Held here on purpose."""
    url, keys = team
    open_item(page, url, keys["unit 1"])
    slow = keys["unit 2"]
    held = []
    page.route(lambda address: address.endswith(f"/items/{slow}"), lambda route: held.append(route))
    page.evaluate(f"location.hash = '#review/kept/{slow}'")             # its item is asked for and held
    for _ in range(200):
        if held:
            break
        page.wait_for_timeout(25)
    assert held, "the item was never asked for"
    page.evaluate("location.hash = '#review/kept?reviewer=nobody&done=1'")   # the reviewer moves on: nothing matches
    expect(page.locator("#item")).to_contain_text("No item matches these filters.")
    with page.expect_response(lambda response: response.url.endswith(f"/items/{slow}")):
        held[0].continue_()
    page.wait_for_timeout(300)                                           # its late handling, had it not been dropped
    expect(page.locator("#item")).to_contain_text("No item matches these filters.")
    assert page.evaluate("location.hash") == "#review/kept?done=1&reviewer=nobody"    # no item named
    page.unroute_all()


def test_the_queue_guidelines_are_shown_beside_the_item_with_no_html_passing(page, team):
    url, keys = team
    open_item(page, url, keys["unit 1"])
    guide = page.locator("#guidelines")
    expect(guide).to_be_visible()
    expect(guide.locator("h1")).to_have_text("How to judge a unit")
    expect(guide.locator("strong")).to_have_text("ok")
    expect(guide.locator('a[href="https://example.org/handbook"]')).to_have_count(1)
    expect(guide.locator("a")).to_have_count(1)                        # the javascript: link is not a link
    expect(guide).to_contain_text("<script>window.pwned = true</script>")   # shown as text
    assert guide.locator("script, img").count() == 0
    assert page.evaluate("window.pwned") is None
    box, item_box = guide.bounding_box(), page.locator("#item").bounding_box()
    assert box["x"] >= item_box["x"] + item_box["width"] - 1, "the guidelines are beside the item"


def test_question_mark_opens_the_list_of_every_shortcut(page, team):
    url, keys = team
    open_item(page, url, keys["unit 1"])
    page.locator("#item").focus()
    page.keyboard.press("?")
    dialog = page.locator("#shortcuts-dialog")
    expect(dialog).to_be_visible()
    for keys_text in ("Ctrl+Z", "Enter", "Delete"):
        expect(dialog).to_contain_text(keys_text)
    for what in ("skip the item", "flag the item", "write a comment", "undo your last label", "next item"):
        expect(dialog).to_contain_text(what)
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


@pytest.fixture(scope="module")
def pair(tmp_path_factory, browser):
    folder = tmp_path_factory.mktemp("pair")
    review = Review(folder, "--review-dir", str(folder / "rv"), "--review-k", "2")
    try:
        keys = keep(review.url, ["pair 1", "pair 2", "pair 3"])
        yield review.url, keys
    finally:
        review.stop()


def test_two_reviewers_their_disagreement_is_adjudicated_and_the_report_shows_agreement(browser, request, pair):
    url, keys = pair
    with httpx.Client(base_url=url, timeout=30) as client:
        for name, answers in (("alice", ("true", "true", "false")), ("bob", ("true", "false", "false"))):
            for n, answer in enumerate(answers, 1):
                saved = client.put(f"/v1/review/queues/kept/items/{keys[f'pair {n}']}/labels",
                                   json={"labels": {"ok": answer, "next_step": "ship"}},
                                   headers={"X-Omni-Reviewer": name})
                assert saved.status_code == 200, saved.text
        queues = {q["id"]: q for q in client.get("/v1/review/queues").json()["queues"]}
    assert queues["kept"]["reviewed"] == 3 and queues["kept"]["k"] == 2
    assert queues["disagreements"]["items"] == 1
    context, page, errors = open_page(browser, request, reviewer="carol")
    try:
        page.goto(f"{url}/ui#review/disagreements")
        expect(page.locator("#items button")).to_have_count(1)
        expect(page.locator("#item h2")).to_contain_text(keys["pair 2"])
        expect(page.locator('#item .rq[data-question="ok"] [data-reviewers]')).to_have_text(
            "Reviewers: alice: true · bob: false")
        page.locator('#item .rq[data-question="ok"] button[data-option="false"]').click()   # carol decides
        page.click("#tab-report")
        row = page.locator('#agreement tr[data-agreement="ok"]')
        expect(row).to_be_visible()
        expect(row).to_contain_text("Cohen's κ")
        expect(row.locator("[data-kappa]")).to_have_text("0.400")  # 2 of 3 alike; chance 4/9 (alice 2/3 true, bob 1/3)
        page.click("#tab-review")
        page.click("#reload-queue")
        expect(page.locator("#item")).to_contain_text("Nothing left to review in this queue.")
    finally:
        finish(request, page, context, errors)
