"""Smaller breaks a class sees, checked in Debian's headless Chromium (tests/appdriver.py): the design
page's tables whole at 1280 x 720, and the GP page's tick labels, subscripts and study images as displayed.

Screenshots go to the test's tmp_path, or to CEM_LAB_SCREENSHOTS when set."""
from __future__ import annotations

import re

import pytest
from appdriver import CHROMIUM, chromium, serve_app, settle, shots
from conftest import child_env, require_system_package

pytestmark = pytest.mark.slow
require_system_package(CHROMIUM is not None, "the browser checks of page details", "chromium", module_level=True)


@pytest.fixture(scope="module")
def app():
    with serve_app(child_env()) as server:                 # (no job is started here)
        yield server


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def test_design_tables_are_whole_at_1280x720(app, browser, tmp_path):
    """The parameter table had twelve columns in an interactive grid: at 1280 px its total column was cut and the
    KV-cache columns hid behind a horizontal scroll. Every table of the page now lies wholly inside the window,
    with nothing to scroll, in both the default state and the widest (every parameter column non-zero)."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    for query in ("", "?ds_diagonal=per_head&ds_preconditioner=dlr&ds_block=joint&ds_d_model=8192&ds_d_ff=32768"
                      "&ds_n_layers=128&ds_n_heads=128&ds_vocab_size=300000"):
        page.goto(f"{app.url}/design{query}")
        settle(page)
        tables = page.locator("[data-testid='stTable']")
        tables.nth(1).wait_for(timeout=60000)                     # a busy machine's page can still be streaming in
        assert tables.count() == 2, query
        for i in range(tables.count()):
            table = tables.nth(i)
            table.scroll_into_view_if_needed()
            sizes = table.evaluate("""e => [e, ...e.querySelectorAll('*')].map(n => [n.scrollWidth, n.clientWidth,
                                          n.getBoundingClientRect().right, getComputedStyle(n).overflowX])""")
            for scroll, client, right, overflow in sizes:
                assert right <= 1280, (query, i, right)
                if overflow in ("auto", "scroll"):
                    assert scroll <= client, (query, i, scroll, client)
            assert ("total", "KV x llama")[i] in table.inner_text()
        page.screenshot(path=str(shots(tmp_path) / f"design{'-widest' if query else ''}.png"), full_page=True)
    page.close()


def test_gp_page_ticks_subscripts_and_study_images(app, browser, tmp_path):
    """At 1280 x 720: the test-time scaling plot's x ticks read 1, 2, 4, 8, 16 (its last read "2x10"); y_j is a
    subscript, never a literal underscore; each study image is shown at least APP_IMAGE_PX wide (at which its
    text is at least APP_TEXT_PX, tests/test_figdata.py) with a caption and an alt text."""
    from cem_core.ui import study_plots

    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{app.url}/gp")
    settle(page)
    page.wait_for_selector(".js-plotly-plot .xtick", timeout=60000)
    ticks = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].map(p => [
        p.querySelector('.gtitle') ? p.querySelector('.gtitle').textContent : '',
        [...p.querySelectorAll('.xtick text')].map(t => t.textContent)])""")
    scaling = [t for title, t in ticks if title.startswith("Test-time scaling")]
    assert scaling == [["1", "2", "4", "8", "16"]], ticks
    titles = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot .ytitle')].map(
        t => [t.textContent, t.innerHTML])""")
    context = [html for text, html in titles if text.startswith("held-out RMSE of y")]
    assert context and re.search(r'<tspan style="font-size:70%" dy="0.3em">j</tspan>', context[0]), titles  # <sub>
    text = page.inner_text("body") + " ".join(t for t, _ in titles)
    assert "y_j" not in text and "d_x" not in text.replace("d_x = 2", "")             # the condition's name stays
    page.locator(".js-plotly-plot").filter(has_text="Test-time scaling").first.screenshot(
        path=str(shots(tmp_path) / "gp-scaling.png"))
    page.locator(".js-plotly-plot").filter(has_text="RMSE vs context").first.screenshot(
        path=str(shots(tmp_path) / "gp-context.png"))
    images = page.locator("[data-testid='stImage'] img, [data-testid='stImageContainer'] img")
    assert images.count() == 3
    for i in range(3):
        image = images.nth(i)
        image.scroll_into_view_if_needed()
        page.wait_for_function("e => e.complete && e.naturalWidth > 0", arg=image.element_handle())
        box = image.bounding_box()
        assert box["width"] >= study_plots.APP_IMAGE_PX and box["x"] + box["width"] <= 1280, box
        assert len(image.get_attribute("alt") or "") > 80
        image.screenshot(path=str(shots(tmp_path) / f"gp-study-{i}.png"))
    captions = page.locator("[data-testid='stImageCaption']").all_inner_texts()
    assert [c.strip() for c in captions] == [study_plots.STUDY_CAPTIONS[n][0] for n in study_plots.GP_STUDY_FIGURES]
    page.close()
