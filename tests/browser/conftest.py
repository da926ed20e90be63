"""Browser tests: the review workbench in headless Chromium (Debian's `chromium`), driven by Playwright for Python.

The browser is the system's (`apt-get install chromium`; `OMNI_CHROMIUM` names another binary); Playwright never
downloads one. Without it these tests skip, unless `OMNI_REQUIRE_BROWSER=1` (CI sets it), where that is a failure.
A failing test leaves a full-page screenshot in `test-artifacts/browser/`. The page runs under its real Content
Security Policy; any error the page logs (a script error, a CSP refusal) fails the test.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
AXE = ROOT / ".venv" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
CHROMIUM = os.environ.get("OMNI_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM:
        message = "needs Debian's chromium (apt-get install chromium) or OMNI_CHROMIUM=/path/to/chromium"
        if os.environ.get("OMNI_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI and containers run as root, where Chromium's sandbox refuses to start
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


def open_page(browser, request, width: int = 1280, height: int = 900, reviewer: str | None = "tester", **options):
    """A fresh page; on teardown, a screenshot if the test failed, and a failure if the page logged an error.
    `reviewer`: the name the page finds kept in this browser (so a server without keys does not ask for one); None:
    none kept, as on a reviewer's first visit."""
    context = browser.new_context(viewport={"width": width, "height": height}, **options)
    if reviewer is not None:
        context.add_init_script(    # on the workbench's pages only: about:blank has no storage to read
            f"if (location.protocol.startsWith('http') && !localStorage.getItem('omni.reviewer')) "
            f"localStorage.setItem('omni.reviewer', {reviewer!r});")
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"script error: {exc}"))
    page.on("console", lambda msg: errors.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" and "status of 4" not in msg.text else None)   # 4xx answers are expected
    return context, page, errors


@pytest.fixture
def page(browser, request):
    context, page, errors = open_page(browser, request)
    yield page
    finish(request, page, context, errors)


@pytest.fixture
def phone(browser, request):
    context, page, errors = open_page(browser, request, width=390, height=844)
    yield page
    finish(request, page, context, errors)


def finish(request, page, context, errors: list[str]) -> None:
    failed = getattr(request.node, "report_call", None)
    if failed is not None and failed.failed:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()
    assert not errors, "the page logged errors:\n" + "\n".join(errors)


@pytest.fixture(scope="session")
def axe_source() -> Path:
    """axe-core's script (npm, `.venv/axe`): a skip without it, a failure under `OMNI_REQUIRE_BROWSER=1`."""
    if not AXE.is_file():
        message = f"needs axe-core from npm in {AXE.parent} (scripts/bootstrap.sh --tests installs it)"
        if os.environ.get("OMNI_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    return AXE
