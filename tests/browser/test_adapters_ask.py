"""The Ask page with adapters served (a real `omni review` process, the embedded demo model and a head-only adapter
written on it): the model chooser lists the base and the adapter, a question asked of the adapter is answered by it
(other probabilities than the base's) and says so, and the chooser stays hidden on a server without adapters."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from playwright.sync_api import expect

from tests.browser.workbench import Review


@pytest.fixture(scope="module")
def served(tmp_path_factory, browser):
    from fixtures.adapters import make_adapter
    from omni.contract.config import EngineConfig
    from omni.model.clef import ClefModel

    folder = tmp_path_factory.mktemp("adapters-ask")
    make_adapter(ClefModel.from_config(EngineConfig()), folder / "line-4", seed=7)
    review = Review(folder, "--adapter", f"line-4={folder / 'line-4'}")
    yield SimpleNamespace(url=review.url + "/ui")
    review.stop()


def ask(page, model: str) -> float:
    page.select_option("#ask-model", model)
    page.select_option("#preset", "inspection")
    page.click("#load-preset")
    page.fill("#state", "Unit 21 on the bench.")
    page.click("#ask-button")
    expect(page.locator("#ask-status")).to_contain_text("answered")
    bar = page.locator('#answers .bar[data-question="label_visible"][data-option="true"]')
    return float(bar.get_attribute("data-probability"))


def test_the_ask_page_answers_with_the_adapter_chosen(page, served):
    page.goto(served.url)
    expect(page.locator("#model-row")).to_be_visible()
    expect(page.locator("#ask-model option")).to_have_count(2)
    expect(page.locator("#ask-model")).to_have_value("clef-omni")
    base = ask(page, "clef-omni")
    expect(page.locator("#ask-status")).not_to_contain_text(" by ")
    adapted = ask(page, "line-4")
    expect(page.locator("#ask-status")).to_contain_text("answered by line-4")
    assert adapted != pytest.approx(base, abs=1e-4)
