"""Issue 22, "accessible": axe-core (from the npm registry, pinned in scripts/bootstrap.sh) finds no serious or
critical WCAG 2.0–2.2 A/AA violation on Ask (empty, answered, and answered with its evidence shown), Review (an item shown) and Report (an eval report),
at 1366×900 and on a 390×844 touch phone; the focus ring has 3:1 contrast against what surrounds it; on a phone every
control is at least 44×44 CSS px; keyboard hints show on a desktop and are hidden on a touch screen.

axe-core is added to each page as an init script (Chromium's DevTools protocol runs those outside the page's Content
Security Policy, which stays on: the page still refuses everything else it would). Without axe-core in
`.venv/axe` the axe tests skip, unless `OMNI_REQUIRE_BROWSER=1` (CI), where that is a failure.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from playwright.sync_api import expect

from api.cli.main import main as omni
from tests.browser.conftest import finish, open_page
from tests.browser.workbench import EXAMPLES, Review, write_batch_input, write_report

AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
SCREENS = {"desktop": {"viewport": {"width": 1366, "height": 900}},
           "phone": {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True,
                     "device_scale_factor": 3}}
VIEWS = ["ask", "ask-answered", "ask-evidence", "review", "report"]
TARGET_PX = 44
# what a touch-target check measures: every control a finger presses (a checkbox or radio by its label's box)
CONTROLS = ("button, .button, select, input:not([type=hidden]):not([type=file]), textarea, a[href], summary, "
            "[role=tab]")


@pytest.fixture(scope="module")
def workbench(tmp_path_factory, browser):
    folder = tmp_path_factory.mktemp("accessibility")
    out = folder / "out.jsonl"
    omni(["batch", str(write_batch_input(folder)), "--out", str(out), "--quiet"])
    report = write_report(folder)
    review = Review(folder, "--batch", str(out), "--report", str(report), "--review-dir", str(folder / "rv"))
    yield SimpleNamespace(url=review.url + "/ui")
    review.stop()


def open_screen(browser, request, screen: str, axe: Path | None = None):
    """A page on `screen` ("desktop" | "phone") with axe-core present when given (conftest's `open_page`: a
    reviewer's name already kept, a failure if the page logs an error)."""
    size, options = SCREENS[screen]["viewport"], {k: v for k, v in SCREENS[screen].items() if k != "viewport"}
    context, page, errors = open_page(browser, request, size["width"], size["height"], **options)
    if axe is not None:
        context.add_init_script(path=str(axe))           # for every document the page opens from now on
    return context, page, errors


@pytest.fixture
def screen_page(browser, request):
    """`screen_page(screen, axe=None)` -> a page; every page opened is closed (and checked) on teardown."""
    opened: list[tuple[Any, Any, list[str]]] = []

    def make(screen: str, axe: Path | None = None):
        context, page, errors = open_screen(browser, request, screen, axe)
        opened.append((context, page, errors))
        return page

    yield make
    for context, page, errors in opened:
        finish(request, page, context, errors)


def show(page, url: str, view: str) -> None:
    """Open `view` and wait until what it shows is there."""
    if view.startswith("ask"):
        page.goto(url)
        expect(page.locator("#model-name")).to_contain_text("clef-omni")
        if view == "ask-answered":
            page.set_input_files("#files", [str(EXAMPLES / "inspection" / "unit.png")])
        if view == "ask-evidence":                 # the evidence of a photo, a recording and a video, and the state
            page.set_input_files("#files", [str(EXAMPLES / "inspection" / name) for name in ("unit.png", "hum.wav", "fan.mp4")])
            page.check("#ask-evidence")
        if view != "ask":
            page.select_option("#preset", "inspection")
            page.click("#load-preset")
            page.click("#ask-button")
            expect(page.locator("#answers .answer")).to_have_count(5)
        if view == "ask-evidence":
            expect(page.locator('#evidence figure[data-evidence="videos[0]"] button.ev-moment').first).to_be_visible()
    elif view == "review":
        page.goto(url + "#review")
        expect(page.locator("#item .rq").first).to_be_visible()
    else:
        page.goto(url + "#report")
        expect(page.locator('#report-body tr[data-row="all"]')).to_be_visible()
    page.wait_for_load_state("networkidle")


def axe_violations(page) -> list[dict[str, Any]]:
    return page.evaluate("""async (tags) => {
        const result = await axe.run(document, { runOnly: { type: "tag", values: tags }, resultTypes: ["violations"] });
        return result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
          nodes: v.nodes.map((n) => `${n.target.join(" ")}: ${(n.failureSummary || "").replaceAll("\\n", " ")}`) }));
    }""", AXE_TAGS)


@pytest.mark.parametrize("screen", list(SCREENS))
@pytest.mark.parametrize("view", VIEWS)
def test_axe_finds_no_serious_or_critical_violation(screen_page, workbench, axe_source, screen, view):
    page = screen_page(screen, axe_source)
    show(page, workbench.url, view)
    violations = axe_violations(page)
    serious = [v for v in violations if v["impact"] in ("serious", "critical")]
    for v in violations:                    # the lesser ones are reported (pytest -s), not failed
        if v not in serious:
            print(f"axe-core on {view} ({screen}): {v['impact']} {v['id']}: {v['nodes']}")
    assert not serious, f"axe-core on {view} ({screen}):\n" + json.dumps(serious, indent=1)


# ---------------------------------------------------------------------------------------------------- focus ring
CONTRAST = """(el) => {
  // WCAG 2.x relative luminance and contrast ratio of two computed colours
  const rgb = (text) => (text.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map((c) => { c /= 255; return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; })
    .reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const opaque = (node) => {            // the background of the first of node and its ancestors that has one
    for (let n = node; n; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] === 1)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const style = getComputedStyle(el);
  const ring = rgb(style.outlineColor).slice(0, 3);
  const around = opaque(el.parentElement);
  const own = opaque(el);
  const band = style.boxShadow.startsWith("rgb") ? rgb(style.boxShadow).slice(0, 3) : null;   // an inner tone
  return { outline: style.outlineStyle, width: parseFloat(style.outlineWidth), offset: parseFloat(style.outlineOffset),
           ring: style.outlineColor, around: ratio(ring, around), own: ratio(ring, own),
           band: band && { color: style.boxShadow, own: ratio(band, own), ring: ratio(band, ring) } };
}"""


def focus_with_keyboard(page, selector: str) -> None:
    """Give `selector` the focus as the keyboard would (so that :focus-visible applies)."""
    page.keyboard.press("Shift")           # after a key press, a focus counts as keyboard focus
    page.focus(selector)
    assert page.eval_on_selector(selector, "(el) => el.matches(':focus-visible')"), selector


# the selected (blue) and an unselected tab on the white top bar; controls on the light page; the answers region
@pytest.mark.parametrize("selector", ["#tab-ask", "#tab-review", "#load-preset", "#preset", "#state", "#ask-button",
                                      "#answers-column"])
def test_the_focus_ring_has_3_to_1_contrast_with_its_surroundings(screen_page, workbench, selector):
    page = screen_page("desktop")
    show(page, workbench.url, "ask-answered")
    focus_with_keyboard(page, selector)
    ring = page.eval_on_selector(selector, CONTRAST)
    assert ring["outline"] != "none" and ring["width"] >= 2, ring
    assert ring["around"] >= 3, f"{selector}: the ring {ring['ring']} against its surroundings: {ring['around']:.2f}:1"
    # with no gap between ring and control, the ring must also stand out from the control's own colour
    if ring["offset"] <= 0:
        assert ring["own"] >= 3, f"{selector}: the ring against the control: {ring['own']:.2f}:1"


def test_the_focus_ring_is_seen_on_the_accent_blue_buttons(screen_page, workbench):
    """The selected tab and the primary button are accent blue: the ring's inner tone stands out against them (3:1),
    its dark outer tone against the page, and the two tones against each other."""
    page = screen_page("desktop")
    show(page, workbench.url, "ask")
    for selector in ("#tab-ask", "#ask-button"):
        focus_with_keyboard(page, selector)
        ring = page.eval_on_selector(selector, CONTRAST)
        assert ring["band"], f"{selector}: no inner tone: {ring}"
        assert ring["band"]["own"] >= 3 and ring["band"]["ring"] >= 3 and ring["around"] >= 3, ring


# ---------------------------------------------------------------------------------------------------- touch
SMALL_TARGETS = """([selector, minimum]) => {
  const visible = (el) => { const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none" && !el.closest("[hidden], dialog:not([open])"); };
  const box = (el) => {                 // a checkbox or radio is pressed through its label: the larger of the two
    const own = el.getBoundingClientRect();
    const label = (el.type === "checkbox" || el.type === "radio") ? (el.closest("label") || el.labels?.[0]) : null;
    const r = label ? label.getBoundingClientRect() : own;
    return { width: Math.max(own.width, r.width), height: Math.max(own.height, r.height) };
  };
  const inText = (el) => el.matches("a") && el.closest("p, li, td, dd, blockquote");   // inline links are exempt
  return [...document.querySelectorAll(selector)].filter((el) => visible(el) && !inText(el)).map((el) => ({ el, ...box(el) }))
    .filter((t) => t.width < minimum - 0.5 || t.height < minimum - 0.5)
    .map((t) => `${t.el.outerHTML.slice(0, 90)} ${t.width.toFixed(0)}x${t.height.toFixed(0)}`);
}"""


@pytest.mark.parametrize("view", VIEWS)
def test_every_control_is_44_px_on_a_phone(screen_page, workbench, view):
    page = screen_page("phone")
    show(page, workbench.url, view)
    if view == "review":
        for summary in page.locator("#filters summary").all():          # the filter form's controls too
            summary.click()
    small = page.evaluate(SMALL_TARGETS, [CONTROLS, TARGET_PX])
    assert not small, f"under {TARGET_PX}x{TARGET_PX} px on a phone ({view}):\n" + "\n".join(small)


def test_controls_keep_their_desktop_size_with_a_mouse(screen_page, workbench):
    """The 44 px rule is for fingers (`pointer: coarse`): with a mouse the page stays as dense as before."""
    page = screen_page("desktop")
    show(page, workbench.url, "ask")
    height = page.eval_on_selector("#load-preset", "(el) => el.getBoundingClientRect().height")
    assert height < TARGET_PX


# ---------------------------------------------------------------------------------------------------- hints
def test_keyboard_hints_show_on_a_desktop_and_hide_on_a_touch_screen(screen_page, workbench):
    desktop, phone = screen_page("desktop"), screen_page("phone")
    for page in (desktop, phone):
        show(page, workbench.url, "ask")
    expect(desktop.locator("#ask-button kbd")).to_have_count(2)
    expect(desktop.locator("#ask-button kbd").first).to_be_visible()
    expect(desktop.locator("#shortcuts-button")).to_be_visible()
    expect(phone.locator("#ask-button")).to_be_visible()
    expect(phone.locator("#ask-button kbd").first).to_be_hidden()
    assert phone.locator("#ask-button").inner_text().strip() == "Ask"     # no stray "+" either
    expect(phone.locator("#shortcuts-button")).to_be_hidden()
    for page in (desktop, phone):
        page.click("#tab-review")
        expect(page.locator("#item .rq").first).to_be_visible()
    expect(desktop.locator("#shortcuts")).to_be_visible()
    expect(phone.locator("#shortcuts")).to_be_hidden()
    assert phone.locator("#item kbd").evaluate_all("(keys) => keys.every((k) => !k.offsetParent)"), \
        "keyboard hints show in the item on a touch screen"
