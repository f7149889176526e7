"""Journeys through the app in one browser session, the way a lecturer uses it (Playwright driving
Debian's headless Chromium against `streamlit run app.py`; tests/appdriver.py):

- every page visited twice in different orders, with controls moved on each, an LM run started and
  stopped and a GP model trained: no page shows an error, every control keeps its value, and the
  server's log has no traceback;
- the README's classroom walkthrough (cem_core.ui.walkthrough), step by step in the order written,
  each step's claim checked on the page's own note;
- the pages at 1280 x 720 and 1920 x 1080: the first two plots, the equations and the verdict columns
  lie inside the viewport, plot text is at least 14 px, axes carry no SI suffixes, step ticks are
  integers. Screenshots go to the test's tmp_path.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlparse

import pytest
from appdriver import (
    CHROMIUM,
    choose,
    chromium,
    click_radio,
    committed,
    errors,
    go_to,
    notes,
    serve_app,
    set_slider,
    settle,
    slider_value,
    type_number,
)
from conftest import child_env, require_system_package

from cem_core.nn.config import CEMOptions
from cem_core.ui import walkthrough
from cem_core.ui.controls import LAYER_LABELS, EnergyControls
from cem_core.ui.interactive import FONT_PX
from cem_core.ui.jobs import JobBoard

pytestmark = pytest.mark.slow
require_system_package(CHROMIUM is not None, "the browser journeys", "chromium", module_level=True)

ENERGY_LABELS = {"p_scale": "preconditioner scale", "seed": "seed", "width": "width d", "seq_len": "sequence length"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app with jobs and data folders of its own (an LM run is started here)."""
    root = tmp_path_factory.mktemp("app")
    (root / "data").mkdir()
    with serve_app(child_env(CEM_LAB_JOBS_DIR=str(root / "jobs"), CEM_LAB_DATA_DIR=str(root / "data"))) as server:
        yield server
        JobBoard(jobs_dir=root / "jobs", data_dir=root / "data", workdir=root).stop()


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def _query(page) -> dict:
    return dict(parse_qsl(urlparse(page.url).query))


def _assert_clean(page, where: str) -> None:
    assert errors(page) == [], where


def move_energy_control(page, name: str, value) -> None:
    """Move one control of the energy page through its widget."""
    kind, allowed = EnergyControls.specs()[name]
    if name == "layer":
        click_radio(page, LAYER_LABELS[value])
    elif kind == "choice":
        choose(page, CEMOptions.__dataclass_fields__[name].metadata["label"], value)
    elif name in ("seed", "width", "seq_len"):
        type_number(page, ENERGY_LABELS[name], value)
    else:
        label = ENERGY_LABELS.get(name) or CEMOptions.__dataclass_fields__[name].metadata["label"]
        step = allowed[2] if kind == "float" and len(allowed) > 2 else 0.1 if kind == "float" else 1
        set_slider(page, label, value, step)


# -- (a) one session, every page twice --------------------------------------------------------------


def test_one_session_every_page_twice(app, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(app.url)
    settle(page)
    set_slider(page, "steps T", 8, 1)
    go_to(page, "Design space")
    type_number(page, "d_model", 1536)
    go_to(page, "GP recursion")
    set_slider(page, "points seen", 3, 1)
    set_slider(page, "training steps", 50, 50)
    page.get_by_role("button", name="Train a small model now").click()
    page.get_by_text("held-out RMSE").first.wait_for(timeout=180000)
    settle(page)
    _assert_clean(page, "after training on the GP page")
    go_to(page, "Mini language model")
    page.get_by_role("button", name="Start").click()
    page.get_by_text(re.compile(r"step [\d,]+ of [\d,]+ · [\d,]+ tokens/s · about")).wait_for(timeout=240000)
    assert page.get_by_text("The committed sweep").count() == 1            # the evidence stays beside the run
    page.screenshot(path=tmp_path / "lm-running.png", full_page=True)
    page.get_by_role("button", name="Stop the run").click()
    page.get_by_text("stopped.").first.wait_for(timeout=60000)
    page.get_by_role("button", name="Start").wait_for(timeout=60000)       # the launcher is back
    settle(page)
    _assert_clean(page, "after stopping the LM run")
    page.screenshot(path=tmp_path / "lm-stopped.png", full_page=True)

    expected = {"Energy descent": lambda: slider_value(page, "steps T") == 8 and _query(page).get("T") == "8",
                "Design space": lambda: page.get_by_label("d_model", exact=True).input_value() == "1536"
                and _query(page).get("ds_d_model") == "1536",
                "GP recursion": lambda: slider_value(page, "points seen") == 3 and slider_value(page, "training steps")
                == 50 and _query(page).get("gp_context") == "3",
                "Mini language model": lambda: page.get_by_role("button", name="Start").count() == 1
                and _query(page).get("lm_preset") == "cpu-tiny"}
    for title in ("Energy descent", "Mini language model", "Design space", "GP recursion", "Energy descent",
                  "Design space", "Mini language model", "GP recursion"):
        go_to(page, title)
        _assert_clean(page, f"second visit of {title}")
        assert expected[title](), (title, page.url)
    page.close()
    log = app.log()
    assert "Traceback" not in log and "Error" not in log, log[-3000:]


# -- (b) the README walkthrough, in order ---------------------------------------------------------


def test_readme_walkthrough_in_order(app, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(app.url)
    settle(page)
    before = page.url
    page.locator("[data-testid='stCheckbox'], [data-testid='stToggle']").filter(has_text="Teacher mode").click()
    committed(page, before)
    assert _query(page).get("teacher") == "true"
    assert page.locator("[data-testid='stAlertContentInfo']").count() >= 4     # the guided explanations
    for number, (step, state) in enumerate(zip(walkthrough.STEPS, walkthrough.states()), start=2):
        for name, value in step.changes.items():
            move_energy_control(page, name, value)
        shown = EnergyControls.from_query(_query(page))
        assert shown.values() | {"heat_step": 0} == state.values() | {"heat_step": 0}, (number, page.url)
        text = " ".join(notes(page))
        for phrase in step.phrases:
            assert phrase in text, (number, step.say, phrase, text)
        ringed = page.evaluate("() => document.querySelector('.js-plotly-plot').data.some(t => t.name === "
                               "'energy rose')")
        assert ringed == step.rises, (number, step.say)
        _assert_clean(page, f"walkthrough step {number}")
        page.screenshot(path=tmp_path / f"walkthrough-{number}.png")
    page.close()


# -- (c) legible on a projector -------------------------------------------------------------------


INSIDE = """(selector) => Array.from(document.querySelectorAll(selector)).map(e => {
    const r = e.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, scroll: e.scrollWidth, width: e.clientWidth};
})"""
PLOT_TEXT = """() => Array.from(document.querySelectorAll('.js-plotly-plot .main-svg text'))
    .filter(t => t.textContent.trim()).map(t => [t.textContent, parseFloat(getComputedStyle(t).fontSize)])"""
X_TICKS = """(i) => Array.from(document.querySelectorAll('.js-plotly-plot')[i].querySelectorAll('.xtick text'))
    .map(t => t.textContent)"""


OVERHANG = 4      # px: a glyph such as the square root's may reach past its box; a cut equation misses by far more


def _boxes(page, selector: str) -> list[dict]:
    return page.evaluate(INSIDE, selector)


@pytest.mark.parametrize("width,height", [(1280, 720), (1920, 1080)])
def test_legible_on_a_projector(app, browser, tmp_path, width, height):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(f"{app.url}/?anchor=1.0&T=16&preconditioner=dlr&p_scale=2.0")      # energies up to 1e22
    settle(page)
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 4", timeout=60000)
    plots = _boxes(page, ".js-plotly-plot")
    assert len(plots) >= 2
    for box in plots[:2]:                                                     # the first two plots, whole
        assert box["top"] >= 0 and box["bottom"] <= height and box["right"] <= width, (box, width, height)
    assert page.locator("[data-testid='stAppDeployButton']").count() == 0
    small = [(text, px) for text, px in page.evaluate(PLOT_TEXT) if px < FONT_PX]
    assert small == [], small[:5]
    ticks = [t for i in range(len(plots)) for t in page.evaluate("(i) => Array.from(document.querySelectorAll("
             "'.js-plotly-plot')[i].querySelectorAll('.ytick text, .xtick text')).map(t => t.textContent)", i)]
    assert ticks and not [t for t in ticks if re.fullmatch(r"[−-]?[\d.]+[kMGTPEB]", t)], ticks   # no SI suffix
    assert all(re.fullmatch(r"\d+", t) for t in page.evaluate(X_TICKS, 0)), page.evaluate(X_TICKS, 0)
    page.screenshot(path=tmp_path / f"energy-{width}.png")
    for box in _boxes(page, ".katex-display"):                               # the update equations: complete
        assert box["scroll"] <= box["width"] + OVERHANG and box["right"] <= width, box
    page.goto(f"{app.url}/design?ds_T=1")
    settle(page)
    equations = page.locator(".katex-display")
    assert equations.count() >= 10
    assert "0, \\dots, 0" not in page.content() and page.get_by_text("t = 0, …, 0").count() == 0
    for i in range(equations.count()):
        equations.nth(i).scroll_into_view_if_needed()
        box = _boxes(page, ".katex-display")[i]
        assert box["scroll"] <= box["width"] + OVERHANG and box["right"] <= width, (i, box)
    page.screenshot(path=tmp_path / f"design-{width}.png", full_page=True)
    for path in ("gp", "lm"):                                                # the claims tables, verdict first
        page.goto(f"{app.url}/{path}")
        settle(page)
        table = page.locator("[data-testid='stTable']").first
        table.scroll_into_view_if_needed()
        headers = table.locator("th").all_inner_texts()
        assert headers[0].strip() == "verdict", headers
        box = table.evaluate("e => { const r = e.getBoundingClientRect(); return {right: r.right, "
                             "scroll: e.scrollWidth, width: e.clientWidth}; }")
        assert box["scroll"] <= box["width"] + 1 and box["right"] <= width, (path, box)
        page.screenshot(path=tmp_path / f"{path}-{width}.png", full_page=True)
    page.close()
