"""Smaller breaks a class sees (issue 38), checked in Debian's headless Chromium (tests/appdriver.py): the design
page's tables whole at 1280 x 720, and the GP page's tick labels, subscripts and study images as displayed.

Screenshots go to the test's tmp_path, or to CEM_LAB_SCREENSHOTS when set."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from appdriver import CHROMIUM, chromium, serve_app, settle
from conftest import child_env, require_system_package

pytestmark = pytest.mark.slow
require_system_package(CHROMIUM is not None, "the browser checks of page details", "chromium", module_level=True)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("app")
    (root / "data").mkdir()
    with serve_app(child_env(CEM_LAB_JOBS_DIR=str(root / "jobs"), CEM_LAB_DATA_DIR=str(root / "data"))) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def _shots(tmp_path) -> Path:
    folder = Path(os.environ.get("CEM_LAB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


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
        page.screenshot(path=str(_shots(tmp_path) / f"design{'-widest' if query else ''}.png"), full_page=True)
    page.close()
