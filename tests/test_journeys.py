"""Journeys through the app in one browser session, the way a lecturer uses it (Playwright driving
Debian's headless Chromium against `streamlit run app.py`; tests/appdriver.py):

- every page visited twice in different orders, with controls moved on each, an LM run started and
  stopped and a GP model trained: no page shows an error, every control keeps its value, and the
  server's log has no traceback;
- step playback: play, pause, step and the scrubber move the marker on the landscape, the cursor on the
  energy and update-norm plots and the heatmap's step without a single message to the server; a click on a
  heatmap row makes every view follow that token;
- pin and compare: a pinned state is drawn faint beside later ones, with a legend naming both, until unpinned;
- the forms of the energy: the block as one energy (one phase, its caption and note) and the distance-form
  diagonal (steps that shrink where the bilinear form's run off) on the energy page, the block switch on the
  design page;
- the classroom lesson (cem_core.ui.lesson) from *Start the lesson* to its last step with Next, and Back:
  each step's state, its highlighted element and its claim, checked on the page;
- presentation mode at 1280 x 720: the sidebar collapsed, only the step's controls, the step's plots inside
  the viewport in larger fonts;
- the pages at 1280 x 720 and 1920 x 1080: the first two plots, the equations and the verdict columns
  lie inside the viewport, plot text is at least 14 px, axes carry no SI suffixes, step ticks are
  integers.
- a referee on the LM page: the claims at the common rate and at each variant's own rate side by side, the
  line on learned step sizes, the width ladder's fitted lines and its labelled projection.

Screenshots go to the test's tmp_path, or to CEM_LAB_SCREENSHOTS when set (the ones in docs/ are made so).
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlparse

import numpy as np
import pytest
from appdriver import (
    CHROMIUM,
    INSIDE,
    PLAYBACK,
    PLOT_TEXT,
    choose,
    chromium,
    click_radio,
    errors,
    go_to,
    marker,
    notes,
    playback,
    selected,
    serve_app,
    set_slider,
    settle,
    shots,
    slider_value,
    traces,
    type_number,
    version,
)
from conftest import ROOT, child_env, require_system_package
from csv_rows import app_csvs, csv_difference, explore_agrees

from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.nn.config import CEMOptions
from cem_core.ui import lesson
from cem_core.ui.controls import LAYER_LABELS, EnergyControls
from cem_core.ui.design_controls import DesignControls
from cem_core.ui.explore import diagnose, explore
from cem_core.ui.figure_style import FONT_PX
from cem_core.ui.jobs import JobBoard
from cem_core.ui.pages import APP_PAGES

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
    page.get_by_role("button", name="Start", exact=True).click()
    page.get_by_text(re.compile(r"step [\d,]+ of [\d,]+ · [\d,]+ tokens/s · about")).wait_for(timeout=240000)
    assert page.get_by_text("The committed sweep").count() == 1            # the evidence stays beside the run
    page.screenshot(path=tmp_path / "lm-running.png", full_page=True)
    page.get_by_role("button", name="Stop the run").click()
    page.get_by_text("stopped.").first.wait_for(timeout=60000)
    page.get_by_role("button", name="Start", exact=True).wait_for(timeout=60000)       # the launcher is back
    settle(page)
    _assert_clean(page, "after stopping the LM run")
    page.screenshot(path=tmp_path / "lm-stopped.png", full_page=True)

    expected = {"Energy descent": lambda: slider_value(page, "steps T") == 8 and _query(page).get("T") == "8",
                "Design space": lambda: page.get_by_label("d_model", exact=True).input_value() == "1536"
                and _query(page).get("ds_d_model") == "1536",
                "GP recursion": lambda: slider_value(page, "points seen") == 3 and slider_value(page, "training steps")
                == 50 and _query(page).get("gp_context") == "3",
                "Mini language model": lambda: page.get_by_role("button", name="Start", exact=True).count() == 1
                and _query(page).get("lm_preset") == "cpu-tiny"}
    for title in ("Energy descent", "Mini language model", "Design space", "GP recursion", "Energy descent",
                  "Design space", "Mini language model", "GP recursion"):
        go_to(page, title)
        _assert_clean(page, f"second visit of {title}")
        assert expected[title](), (title, page.url)
    page.close()
    log = app.log()
    assert "Traceback" not in log and "Error" not in log, log[-3000:]


# -- (b) step playback, a followed token, pin and compare ----------------------------------------------


def _sent(page) -> list:
    """Every message the page sends the server over its websocket (a rerun is one), from now on."""
    sent = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(payload)))
    return sent


def _step_shown(frame) -> dict:
    """What the playback shows now: its step, the landscape marker, the energy cursor, the heatmap's title."""
    return {"step": int(frame.evaluate("() => document.body.dataset.step")), "marker": marker(frame, "landscape"),
            "cursor": next(t["x"] for t in traces(frame, "energy") if t["meta"] == "cursor"),
            "title": frame.evaluate("() => document.querySelector('[data-name=heatmap] .gtitle').textContent")}


def test_playback_runs_in_the_browser_and_a_click_follows_a_token(app, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sent = _sent(page)
    page.goto(f"{app.url}/?T=16")
    settle(page)
    frame = playback(page)
    assert frame.locator("#plotly-version").count() == 0                 # the plotly.js it was written for
    trajectory = explore(EnergyControls.from_values(T=16))["phases"][0]["landscape"]["trajectory"]
    assert _step_shown(frame)["step"] == 16                              # a new state shows the whole descent
    page.wait_for_timeout(500)
    before = len(sent)
    frame.click("#first")
    for t in range(4):
        shown = _step_shown(frame)
        assert shown["step"] == t and shown["cursor"] == [t, t], shown
        assert shown["marker"][0][0] == pytest.approx(trajectory[t, 0]) and shown["marker"][1][0] == pytest.approx(
            trajectory[t, 1])
        assert ("at x⁽⁰⁾" if t == 0 else f"step {t} of 16") in shown["title"], shown
        frame.click("#next")
    frame.locator("#scrub").focus()
    page.keyboard.press("End")                                           # the scrubber, by keyboard
    assert _step_shown(frame)["step"] == 16
    page.keyboard.press("Home")
    frame.click("#play")
    frame.wait_for_function("() => document.body.dataset.step === '16'", timeout=30000)   # plays to the end
    frame.wait_for_function("() => document.querySelector('#play').textContent === '▶'")  # and stops
    frame.locator("#scrub").fill("7")                                    # a drag of the scrubber lands on 7
    assert _step_shown(frame)["step"] == 7
    page.wait_for_timeout(500)
    assert len(sent) == before, "playback sent messages to the server (a rerun)"
    page.screenshot(path=shots(tmp_path) / "playback.png")
    # A click on row 2 of the heatmap: every view follows token 2 (one rerun, as a control would).
    box = frame.evaluate("""() => { const d = document.querySelector('[data-name=heatmap]'), L = d._fullLayout;
        const r = d.getBoundingClientRect();
        return [r.left + L._size.l + L.xaxis.c2p(0), r.top + L._size.t + L.yaxis.c2p(2)]; }""")
    offset = page.locator("iframe[src*='cem_playback']").bounding_box()
    old = version(frame)
    page.mouse.click(offset["x"] + box[0], offset["y"] + box[1])
    frame = playback(page, version=old)
    assert _query(page)["token"] == "2"
    assert "token 2" in frame.evaluate("() => document.querySelector('[data-name=landscape] .gtitle').textContent")
    bold = [t for t in traces(frame, "energy") if t["name"] == "token 2"]
    assert len(bold) == 1 and frame.evaluate("() => document.querySelector('[data-name=energy]').data.find("
                                             "t => t.name === 'token 2').line.width") >= 3
    assert slider_value(page, "followed token") == 2
    assert _step_shown(frame)["step"] == 7                               # the reader's step is kept
    _assert_clean(page, "playback")
    page.close()


def test_pin_and_compare(app, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(app.url)
    settle(page)
    frame = playback(page)
    page.get_by_role("button", name="Pin this state").click()
    settle(page)
    old = version(frame)
    move_energy_control(page, "T", 8)
    frame = playback(page, version=old)
    names = [t["name"] for t in traces(frame, "energy")]
    assert "pinned: T 4" in names and "now: T 8" in names, names
    assert "x⁽ᵗ⁾ pinned: T 4" in [t["name"] for t in traces(frame, "landscape")]
    pinned, = [t for t in traces(frame, "energy") if t["name"] == "pinned: T 4"]
    assert max(x for x in pinned["x"] if x is not None) == 4             # the pinned curves end at its own T
    assert page.get_by_text("Pinned: T 4").count() == 1
    page.screenshot(path=shots(tmp_path) / "pinned.png")
    old = version(frame)
    page.get_by_role("button", name="Unpin").click()
    frame = playback(page, version=old)
    assert not [t for t in traces(frame, "energy") if (t["name"] or "").startswith("pinned")]
    # A block adds a phase, a heading and a caption above the playback: every playback still gets its state
    # (a moved component is a new iframe, which Streamlit once left without its data:
    # docs/design.md#78-a-component-that-moves-is-a-new-iframe).
    for layer, phases in (("block", 2), ("attention", 1), ("mlp", 1), ("block", 2)):
        move_energy_control(page, "layer", layer)
        for index in range(phases):
            shown = playback(page, index).evaluate("() => document.querySelector('#label').textContent")
            assert shown == "step 8 of 8", (layer, index, shown)
    _assert_clean(page, "pin and compare")
    page.close()


def test_the_forms_of_the_energy(app, browser, tmp_path):
    """The block as one energy and the distance-form diagonal, as a reader meets them: the energy page's
    layer 'Block as one energy' is one phase with its own caption, note and equations; the diagonal form
    appears once a diagonal is on; in distance form attention's steps shrink where the bilinear form's run
    off; the design page's block switch adds the joint block's preconditioner and equations."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(app.url)
    settle(page)
    old = version(playback(page))
    move_energy_control(page, "layer", "joint")
    frame = playback(page, version=old)
    assert page.locator(PLAYBACK).count() == 1                                  # one phase: one descent
    assert page.get_by_text("The block as one energy: every step descends E_att + E_mlp").count() == 1
    assert any(n.startswith("joint block:") for n in notes(page)), notes(page)
    assert page.get_by_text("diagonal form").count() == 0                        # no diagonal: no form to choose
    move_energy_control(page, "diagonal", "shared")
    move_energy_control(page, "diagonal_form", "distance")
    assert dict(parse_qsl(urlparse(page.url).query))["diagonal_form"] == "distance"
    page.screenshot(path=shots(tmp_path) / "energy-joint-distance.png")
    move_energy_control(page, "layer", "attention")
    old = version(frame)
    move_energy_control(page, "T", 16)
    frame = playback(page, version=old)
    assert "The steps shrink" in " ".join(notes(page)), notes(page)              # distance form: a minimum ahead
    old = version(frame)
    move_energy_control(page, "diagonal_form", "bilinear")
    playback(page, version=old)
    assert "The iterates run off" in " ".join(notes(page)), notes(page)          # bilinear: unbounded below
    _assert_clean(page, "forms of the energy, energy page")
    go_to(page, "Design space")
    choose(page, CEMOptions.__dataclass_fields__["block"].metadata["label"], "joint")
    settle(page)
    assert page.get_by_text("cem-full's block as one energy").count() == 1
    assert page.get_by_text("block precond").count() >= 1
    page.screenshot(path=shots(tmp_path) / "design-joint.png", full_page=True)
    _assert_clean(page, "forms of the energy, design page")
    page.close()


def test_the_app_fetches_nothing_from_outside(app, browser):
    """A classroom without internet: every page of the app, visited in turn, asks only the app's own server for
    anything (its icon is a local file: a :material/...: page icon was fetched from a web font service)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    own = urlparse(app.url).netloc
    outside = []
    page.on("request", lambda r: None if urlparse(r.url).netloc in ("", own) or r.url.startswith(("data:", "blob:"))
            else outside.append(r.url))
    for p in APP_PAGES:
        page.goto(f"{app.url}/{p.path}")
        settle(page)
    assert outside == [], outside
    page.close()


def _table_row(page, variant: str) -> list[str]:
    """The cells of the design page's parameter table (its first) in the row of `variant`."""
    rows = page.locator("[data-testid='stTable'] table").first.locator("tbody tr")
    for k in range(rows.count()):
        cells = [c.strip() for c in rows.nth(k).locator("th, td").all_inner_texts()]
        if variant in cells:
            return cells
    raise AssertionError(f"no row {variant!r} in the parameter table")


def test_the_ties_on_the_design_page(app, browser, tmp_path):
    """A researcher drops CEM attention's ties on the design page: the attention projections of cem-attn go from
    2 d^2 to Llama's 4 d^2 per layer (counted here from the page's sizes), the page says the layers leave the energy
    view and its equations give the update without an energy; turning a diagonal on ties them again, with a note,
    and the warning goes."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{app.url}/design")
    settle(page)
    d, layers = DesignControls().shape.d_model, DesignControls().shape.n_layers
    heads = page.locator("[data-testid='stTable'] table").first.locator("thead th")
    heads.filter(has_text="attn proj").wait_for()
    header = heads.all_inner_texts()
    column = [h.strip() for h in header].index("attn proj")
    assert _table_row(page, "cem-attn")[column] == f"{2 * d * d * layers:,}"
    assert not any("not energy descent" in n for n in notes(page))
    choose(page, CEMOptions.__dataclass_fields__["attn_ties"].metadata["label"], "none")
    settle(page)
    assert _table_row(page, "cem-attn")[column] == f"{4 * d * d * layers:,}" == _table_row(page, "llama")[column]
    assert any("With attention ties none the CEM layers are not energy descent" in n and "leaves the energy view" in n
               for n in notes(page)), notes(page)
    assert page.get_by_text("not a gradient of an energy").count() >= 1
    assert dict(parse_qsl(urlparse(page.url).query))["ds_attn_ties"] == "none"
    page.screenshot(path=shots(tmp_path) / "design-untied.png", full_page=True)
    choose(page, CEMOptions.__dataclass_fields__["diagonal"].metadata["label"], "shared")
    settle(page)
    assert selected(page, CEMOptions.__dataclass_fields__["attn_ties"].metadata["label"]) == "both"
    assert not any("not energy descent" in n for n in notes(page))
    assert _table_row(page, "cem-attn")[column] == f"{2 * d * d * layers:,}"
    _assert_clean(page, "the ties, design page")
    page.close()


def test_the_two_questions_where_their_evidence_is(app, browser, tmp_path):
    """A reader of the results goes to the language-model page and then to the GP page: each question's section is
    there with its figure drawn (Plotly's plot in the section), its finding in words and the rule fixed before the
    runs, and nothing on either page is an error."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(app.url)
    settle(page)
    go_to(page, "Mini language model")
    for title in ("Which tie costs the perplexity? The tie ladder", "Can in-layer recursion scale at test time?"):
        heading = page.get_by_role("heading", name=re.compile(re.escape(title)))
        heading.scroll_into_view_if_needed()
        assert heading.count() == 1, title
    assert page.get_by_text("On the tie ladder (").count() == 1
    assert page.get_by_text("Rule, fixed before the ladder ran: Rates: the budget ladder's rule").count() == 1
    assert page.locator(".js-plotly-plot").filter(has_text="The tie ladder: gap to Llama").count() == 1
    assert page.locator(".js-plotly-plot").filter(has_text="Test-time steps, LM").count() == 1
    for name, text in (("lm-tie-ladder", "The tie ladder: gap to Llama"), ("lm-test-time", "Test-time steps, LM")):
        page.locator(".js-plotly-plot").filter(has_text=text).screenshot(path=shots(tmp_path) / f"{name}.png")
    _assert_clean(page, "the questions, language-model page")
    go_to(page, "GP recursion")
    assert page.locator(".js-plotly-plot").filter(has_text="Test-time steps, GP, base").count() == 1
    assert page.locator(".js-plotly-plot").filter(has_text="Test-time steps, GP, joint long").count() == 1
    assert page.get_by_text("On the GP task (").count() == 1
    page.locator(".js-plotly-plot").filter(has_text="Test-time steps, GP, joint long").screenshot(
        path=shots(tmp_path) / "gp-test-time.png")
    _assert_clean(page, "the questions, GP page")
    page.close()


# -- (c) the lesson, from start to end ----------------------------------------------------------------


def _check_lesson_step(page, index: int, records) -> None:
    step = lesson.STEPS[index]
    bar = page.locator(".st-key-lesson-bar")
    bar.get_by_text(f"step {index + 1} of {len(lesson.STEPS)}: {step.title}").wait_for(timeout=60000)
    settle(page)
    words = " ".join(page.locator(".st-key-lesson-say").inner_text().split())
    assert " ".join(lesson.text(step, records).replace("*", "").replace("`", "").split()) in words, words
    assert _query(page).get("lesson") == str(index + 1)
    controls = type(step.controls()).from_query(_query(page))
    assert controls == step.controls(), (index, page.url)                # the complete state, from a clean one
    where = f"lesson step {index + 1}"
    if step.page == "inside":                                            # a trained model on one function
        assert urlparse(page.url).path == "/inside"
        frame = playback(page)
        assert frame.evaluate("() => Array.from(document.querySelectorAll('.plot.pointed'), e => e.dataset.name)") == [
            step.points_at], where
        words = {"towards": "towards the posterior mean", "away": "away from the posterior mean",
                 "barely": "barely move", "lost": "diverge"}[step.carries]
        assert words in " ".join(notes(page)), (where, notes(page))
        _assert_clean(page, where)
        return
    if step.page == "gp":
        assert urlparse(page.url).path == "/gp"
        framed = page.locator(f".st-key-lesson-{step.points_at}")
        assert framed.evaluate("e => getComputedStyle(e).outlineStyle") == "solid"
        for number in ("T1", "Tmax"):
            assert f"{lesson.gp_numbers(records)[number]:.2f}" in words
        _assert_clean(page, where)
        return
    frame = playback(page)
    text = " ".join(notes(page))
    for phrase in step.phrases:
        assert phrase in text, (where, phrase, text)
    names = [t["name"] for t in traces(frame, "energy")]
    assert ("energy rose" in names) == step.rises, where
    assert any((n or "").startswith("pinned") for n in names) == (step.pinned is not None), (where, names)
    if step.points_at == "note":
        style = page.locator(".st-key-lesson-note-0").evaluate("e => getComputedStyle(e).outlineStyle")
        assert style == "solid", where
    else:
        assert frame.evaluate("() => Array.from(document.querySelectorAll('.plot.pointed'), e => e.dataset.name)") == [
            step.points_at], where
    if step.lower_than_pinned:                                           # every token ends below the pinned state
        lines = {t["name"]: t["y"] for t in traces(frame, "energy")}
        pinned = next(y for n, y in lines.items() if (n or "").startswith("pinned"))
        ends = [pinned[i - 1] for i, v in enumerate(pinned) if v is None]
        now = [lines[f"token {i}"][-1] for i in range(len(ends))]
        assert all(a < b for a, b in zip(now, ends)), (now, ends)
    _assert_clean(page, where)


def test_the_lesson_end_to_end(app, browser, tmp_path):
    records = gp_sweep.GP_SWEEP.load(Path(__file__).resolve().parents[1] / gp_sweep.COMMITTED_GP_SWEEP / "results.json")
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{app.url}/?T=9&seed=5")                                  # a state the lesson must not inherit
    settle(page)
    page.get_by_role("button", name="Start the lesson").click()
    for index in range(len(lesson.STEPS)):
        _check_lesson_step(page, index, records)
        page.screenshot(path=shots(tmp_path) / f"lesson-{index + 1}.png")
        if index < len(lesson.STEPS) - 1:
            page.locator(".st-key-lesson-bar").get_by_role("button", name="Next").click()
    assert page.locator(".st-key-lesson-bar").get_by_role("button", name="Next").is_disabled()
    page.locator(".st-key-lesson-bar").get_by_role("button", name="Back").click()
    _check_lesson_step(page, len(lesson.STEPS) - 2, records)             # Back sets the step before, whole
    page.locator(".st-key-lesson-bar").get_by_role("button", name="End").click()
    page.locator(".st-key-lesson-bar").wait_for(state="detached", timeout=30000)   # the rerun may start late
    settle(page)
    assert page.locator(".st-key-lesson-bar").count() == 0 and "lesson" not in _query(page)
    page.close()


def _inside(box: dict, where) -> None:
    assert box["top"] >= 0 and box["bottom"] <= 720 and box["right"] <= 1280, (where, box)


def _box(page, selector: str) -> dict:
    boxes = page.evaluate(INSIDE, selector)
    assert len(boxes) == 1, (selector, boxes)
    return boxes[0]


def _check_presented_step(page, index: int) -> None:
    """At 1280 x 720: the bar, the step's words, its two views and (energy page) the page's note lie inside the
    viewport; the plots' text is larger than on the page; the followed token's legend entry is shown."""
    step, where = lesson.STEPS[index], f"presented step {index + 1}"
    page.locator(".st-key-lesson-bar").get_by_text(f"step {index + 1} of {len(lesson.STEPS)}").wait_for(timeout=60000)
    settle(page)
    for selector in (".st-key-lesson-bar", ".st-key-lesson-say"):
        _inside(_box(page, selector), (where, selector))
    if step.page == "gp":
        for name in step.views:
            page.wait_for_selector(f".st-key-lesson-{name} .js-plotly-plot .main-svg .gtitle", timeout=60000)
            _inside(_box(page, f".st-key-lesson-{name}"), (where, name))
        sizes = [px for _, px in page.evaluate(PLOT_TEXT)]
    else:
        frame = playback(page)
        _inside(_box(page, ".st-key-lesson-note-0"), (where, "note"))
        offset = page.locator(PLAYBACK).bounding_box()
        plots = frame.evaluate("() => Array.from(document.querySelectorAll('.plot'), e => { const r = "
                               "e.getBoundingClientRect(); return [e.dataset.name, r.top, r.bottom, r.right]; })")
        assert [p[0] for p in plots] == list(step.views), (where, plots)
        for name, top, bottom, right in plots:
            _inside({"top": offset["y"] + top, "bottom": offset["y"] + bottom, "right": offset["x"] + right},
                    (where, name))
        followed = f"token {step.controls().followed()}" if step.page == "energy" else None
        for name in set(step.views) & {"energy", "norm"} if followed else ():
            legend = frame.evaluate("n => Array.from(document.querySelectorAll(`[data-name=${n}] .legendtext`), "
                                    "t => t.textContent)", name)
            assert followed in legend, (where, name, legend)
        sizes = [px for _, px in frame.evaluate(PLOT_TEXT)]
    assert sizes and min(sizes) >= FONT_PX * 1.2, (where, sorted(sizes)[:3])    # larger fonts for the room
    _assert_clean(page, where)


def test_the_whole_lesson_in_presentation_mode_at_1280x720(app, browser, tmp_path):
    """A lecturer presents the lesson from its first step to its last with Next: each step's words, the two views
    it talks about and the page's note are on the projected 1280 x 720 page. End gives back the state from
    before the lesson, presentation mode off, the sidebar's controls back."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{app.url}/?T=9&seed=5&present=true")
    settle(page)
    assert page.locator("[data-testid='stSidebar']").get_attribute("data-collapsed") == "true"
    page.locator("[data-testid='stMainBlockContainer']").get_by_role("button", name="Start the lesson").click()
    for index in range(len(lesson.STEPS)):
        _check_presented_step(page, index)
        page.screenshot(path=shots(tmp_path) / f"presentation-{index + 1}.png")
        if index < len(lesson.STEPS) - 1:
            page.locator(".st-key-lesson-bar").get_by_role("button", name="Next").click()
    page.locator(".st-key-lesson-bar").get_by_role("button", name="End").click()
    page.locator(".st-key-lesson-bar").wait_for(state="detached", timeout=30000)
    last = {"gp": "GP recursion: does in-layer recursion help?", "inside": "Inside a trained model"}
    page.get_by_role("heading", name=last[lesson.STEPS[-1].page]).wait_for(timeout=60000)
    settle(page)                                                         # the page of the last step, as it was
    assert "present" not in _query(page)
    page.locator("[data-testid='stSidebarNav']").wait_for(timeout=30000)   # the sidebar is open again
    go_to(page, "Energy descent")
    assert _query(page)["T"] == "9" and _query(page)["seed"] == "5" and _query(page)["layer"] == "attention"
    assert slider_value(page, "steps T") == 9
    assert page.locator("[data-testid='stSidebar'] [data-testid='stSlider']").count() >= 4
    _assert_clean(page, "after the presented lesson")
    page.close()


# -- (d) legible on a projector -------------------------------------------------------------------


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
    frame = playback(page)                                                    # the plots live in its iframe
    offset = page.locator("iframe[src*='cem_playback']").bounding_box()
    plots = frame.evaluate(INSIDE, ".js-plotly-plot")
    assert len(plots) == 4
    for box in plots[:2]:                                                     # the first two plots, whole
        top, bottom, right = (offset["y"] + box["top"], offset["y"] + box["bottom"], offset["x"] + box["right"])
        assert top >= 0 and bottom <= height and right <= width, (box, offset, width, height)
    assert page.locator("[data-testid='stAppDeployButton']").count() == 0
    small = [(text, px) for text, px in frame.evaluate(PLOT_TEXT) if px < FONT_PX]
    assert small == [], small[:5]
    ticks = [t for i in range(len(plots)) for t in frame.evaluate("(i) => Array.from(document.querySelectorAll("
             "'.js-plotly-plot')[i].querySelectorAll('.ytick text, .xtick text')).map(t => t.textContent)", i)]
    assert ticks and not [t for t in ticks if re.fullmatch(r"[−-]?[\d.]+[kMGTPEB]", t)], ticks   # no SI suffix
    assert all(re.fullmatch(r"\d+", t) for t in frame.evaluate(X_TICKS, 0)), frame.evaluate(X_TICKS, 0)
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


# -- (e) a referee reads the LM evidence ----------------------------------------------------------------


def test_a_referee_reads_the_claims_at_own_rates_and_the_width_ladders(app, browser, tmp_path):
    """From the LM page's top to its end: the claims at the common rate, the same claims beside them with each
    variant at its own rate (every claim of the paper once, no column cut off), the line on learned step sizes,
    and the two width ladders' figures (at the paper's budget, then the quarter-budget one) with their verdicts
    on the gap's size, nothing carried past the widths measured, and no gap called closing."""
    from app_pages.mini_lm import LADDER_SECTIONS, RECORDED_RULE
    from cem_core.experiments.lm import ladder, presets, runner

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{app.url}/lm")
    settle(page)
    own = page.get_by_role("heading", name="Each variant at its own learning rate")
    own.wait_for(timeout=60000)
    own.scroll_into_view_if_needed()
    table = page.locator("[data-testid='stTable']").filter(has_text="own rates: t-based verdict")   # side by side
    table.first.wait_for(timeout=60000)                                 # the page streams in below its heading
    assert table.count() == 1
    headers = [h.strip() for h in table.locator("th").all_inner_texts()]
    assert "own rates: t-based verdict" in headers and "recorded verdict (± 2 se)" in headers, headers
    assert table.locator("tbody tr").count() == 8
    box = table.evaluate("e => { const r = e.getBoundingClientRect(); return {right: r.right, "
                         "scroll: e.scrollWidth, width: e.clientWidth}; }")
    assert box["scroll"] <= box["width"] + 1 and box["right"] <= 1400, box
    assert page.get_by_text("Claim 6 and learned step sizes").count() == 1
    table.scroll_into_view_if_needed()
    page.screenshot(path=shots(tmp_path) / "lm-own-rates.png", full_page=True)
    root = Path(__file__).resolve().parents[1]
    names = []
    for preset, folder in (("budget-ladder", presets.COMMITTED_BUDGET_LADDER), ("ladder", presets.COMMITTED_LADDER)):
        rungs = page.get_by_role("heading", name=LADDER_SECTIONS[preset][0])
        rungs.scroll_into_view_if_needed()
        settle(page)
        names = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(p => p.data.map("
                              "t => t.name))")
        records = runner.LM_SWEEP.load(root / folder / "results.json")
        assert {ladder.legend(name, t) for name, t in ladder.trends(records, preset).items()} <= set(names), names
        figure = page.locator(".js-plotly-plot").filter(has_text=ladder.LADDERS[preset].capitalize())
        figure.scroll_into_view_if_needed()
        page.screenshot(path=shots(tmp_path) / f"lm-{preset}.png", full_page=True)
    assert not any("projection" in (n or "").lower() for n in names)      # no interval carried past the data
    closing = page.get_by_text(re.compile("closing", re.I)).all_inner_texts()       # only in the retired rule
    assert len(closing) == 1 and closing[0].startswith(RECORDED_RULE), closing
    _assert_clean(page, "the LM page's evidence")
    page.close()


# -- (f) the browser's history and the links the app shows ------------------------------------------------


def _back(page) -> None:
    """The browser's Back button, then the page's rerun for the address it went back to."""
    before = page.url
    page.go_back()
    page.wait_for_function("u => window.location.href !== u", arg=before, timeout=30000)
    page.wait_for_timeout(300)
    settle(page)


def test_back_undoes_each_change_and_returns_to_the_previous_page(app, browser):
    """One history entry per action: Back undoes a slider change, then a select box's, then a page switch
    returns to the page before it, in the state it was left in."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(app.url)
    settle(page)
    page.wait_for_function("() => new URLSearchParams(location.search).has('T') && !!window.cemHistory")
    # Entries are counted as the page pushes them: Chromium's history.length goes out of step when frames come and go
    # (whatwg/html#2018), and a page switch removes the playback's (a fresh clone's run once read 6 for 7).
    start = page.evaluate("window.cemHistory.pushed")
    set_slider(page, "steps T", 5, 1)
    choose(page, CEMOptions.__dataclass_fields__["preconditioner"].metadata["label"], "psd")
    go_to(page, "Design space")
    type_number(page, "d_model", 1536)
    pushed = page.evaluate("window.cemHistory.pushed") - start
    assert pushed == 4, page.evaluate("window.cemHistory")                # 4 actions, 4 entries; Back walks them
    _back(page)                                                           # d_model 1536 undone
    assert page.get_by_label("d_model", exact=True).input_value() == "768"
    _back(page)                                                           # back on the energy page, as left
    page.get_by_role("heading", name="Energy descent").wait_for(timeout=30000)
    assert slider_value(page, "steps T") == 5 and _query(page)["preconditioner"] == "psd"
    _back(page)                                                           # the preconditioner undone
    assert selected(page, "preconditioner") == "none" and _query(page)["T"] == "5"
    _back(page)                                                           # T undone
    assert slider_value(page, "steps T") == 4 and _query(page)["T"] == "4"
    _assert_clean(page, "Back through the history")
    page.close()


def test_back_from_a_page_just_opened_leaves_the_app(app, browser, tmp_path):
    """Opened from another page and left as it is, the app is one step back: Back returns to the page before (the
    app's first write of its controls adds no entry that Back would seem to stop at)."""
    before = tmp_path / "before.html"
    before.write_text("<!doctype html><title>before</title><p>the page before")
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(before.as_uri())
    page.goto(app.url)
    settle(page)
    page.wait_for_function("() => new URLSearchParams(location.search).has('T') && !!window.cemHistory")
    page.go_back()
    page.wait_for_function("u => location.href === u", arg=before.as_uri(), timeout=30000)
    page.close()


HISTORY_JS = ROOT / "app_pages" / "history.js"


@pytest.mark.parametrize("early", [True, False], ids=["before the script", "after it"])
def test_the_apps_first_write_adds_no_entry_back_stops_at(browser, tmp_path, early):
    """app_pages/history.js on its own, with the app's first write of the address (a push with no input of the
    reader's) made before the script runs or after it: either way Back from the page just opened goes to the page
    before it, and a push after a key press is an entry Back undoes."""
    first, app_page = tmp_path / "first.html", tmp_path / "app.html"
    first.write_text("<!doctype html><title>first</title>")
    app_page.write_text("<!doctype html><title>app</title><input id=box>")
    page = browser.new_page()
    page.goto(first.as_uri())
    page.goto(app_page.as_uri())
    written = f"{app_page.as_uri()}?T=4"
    if early:
        page.evaluate("u => history.pushState({}, '', u)", written)
    page.add_script_tag(content=HISTORY_JS.read_text())
    if not early:
        page.evaluate("u => history.pushState({}, '', u)", written)
    assert page.evaluate("window.cemHistory") == {"pushed": 0, "replaced": 0 if early else 1, "early": early}
    page.locator("#box").press("x")                                   # an input of the reader's, then a change
    page.evaluate("u => history.pushState({}, '', u)", f"{app_page.as_uri()}?T=5")
    page.go_back()
    page.wait_for_function("u => location.href === u", arg=written)
    page.go_back()
    page.wait_for_function("u => location.href === u", arg=first.as_uri(), timeout=10000)
    page.close()


def test_a_held_key_loses_no_press_and_ends_on_its_value(app, browser):
    """An arrow key held on η (30 presses, 33 ms apart, faster than the page reruns): every press counts, the
    slider and the URL end on the value they make, and the plots show that state (runs interrupted by the next
    press once put the slider back and lost presses, and the page could draw a stale state last)."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(app.url)
    settle(page)
    frame = playback(page)
    old = version(frame)
    thumb = page.locator("input[type='range'][aria-label='step size eta']")
    thumb.focus()
    for _ in range(30):
        page.keyboard.press("ArrowRight")
        page.wait_for_timeout(33)
    page.wait_for_function("() => new URLSearchParams(location.search).get('eta') === '2.5'", timeout=60000)
    settle(page)
    page.wait_for_timeout(1000)                                           # any stale state would arrive by now
    settle(page)
    assert slider_value(page, "step size eta") == pytest.approx(2.5)
    frame = playback(page, version=old)
    expected = explore(EnergyControls.from_values(eta=2.5))["phases"][0]["energies"]
    shown = {t["name"]: t["y"] for t in traces(frame, "energy")}
    assert shown["token 0"] == pytest.approx(expected[:, 0].tolist(), rel=1e-5), "the plots show another state"
    _assert_clean(page, "a held key")
    page.close()


def test_links_name_the_address_the_app_was_opened_at(app, browser):
    """A classroom server is not localhost:8501: the lesson's "link to this step" carries the address the page
    was opened at (here the server by name, localhost, on its own port), and opening it shows that step."""
    port = urlparse(app.url).port
    address = f"http://localhost:{port}"
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{address}/?lesson=2")
    settle(page)
    link = page.locator(".st-key-lesson-bar a").filter(has_text="link to this step")
    assert link.get_attribute("href") == f"{address}/?lesson=2"
    page.locator(".st-key-lesson-bar").get_by_role("button", name="Next").click()
    page.locator(".st-key-lesson-bar").get_by_text("step 3 of").wait_for(timeout=60000)
    settle(page)
    href = link.get_attribute("href")
    assert href == f"{address}/?lesson=3", href
    other = browser.new_page(viewport={"width": 1280, "height": 720})
    other.goto(href)
    settle(other)
    other.locator(".st-key-lesson-bar").get_by_text("step 3 of").wait_for(timeout=60000)
    _assert_clean(other, "a lesson link opened in a new window")
    other.close()
    page.close()


LEGEND_OVERLAPS = """name => { const d = document.querySelector(`[data-name=${name}]`);
    const boxes = Array.from(d.querySelectorAll('.legend .traces'), e => e.getBoundingClientRect());
    const out = [];
    boxes.forEach((a, i) => boxes.slice(i + 1).forEach(b => {
        if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) out.push([i]);
    }));
    return {n: boxes.length, overlaps: out.length}; }"""
TITLES_INSIDE = """() => Array.from(document.querySelectorAll('.plot'), d => { const svg = d.querySelector('.main-svg');
    const t = d.querySelector('.gtitle').getBoundingClientRect(), s = svg.getBoundingClientRect();
    return [d.dataset.name, t.left >= s.left - 1 && t.right <= s.right + 1]; })"""


@pytest.mark.parametrize("width", [1024, 1280])
def test_labels_are_whole_with_the_sidebar_open(app, browser, tmp_path, width):
    """With the sidebar open: "Pin this state" is whole (at 1024 px it read "Pin …"), no plot title runs past its
    plot (the energy title read "…per t"), and the landscape's legend entries do not overlap, with a pinned
    state and eight heads' keys in it."""
    page = browser.new_page(viewport={"width": width, "height": 800})
    page.goto(f"{app.url}/?heads=8&width=16")
    settle(page)
    frame = playback(page)
    label = page.get_by_role("button", name="Pin this state").locator("p")
    assert label.evaluate("e => e.scrollWidth <= e.clientWidth"), label.inner_text()
    page.get_by_role("button", name="Pin this state").click()
    settle(page)
    old = version(frame)
    move_energy_control(page, "T", 8)
    frame = playback(page, version=old)
    assert all(inside for _, inside in frame.evaluate(TITLES_INSIDE)), frame.evaluate(TITLES_INSIDE)
    legend = frame.evaluate(LEGEND_OVERLAPS, "landscape")
    assert legend["n"] >= 5 and legend["overlaps"] == 0, legend
    page.screenshot(path=tmp_path / f"energy-sidebar-{width}.png")
    _assert_clean(page, f"labels at {width} px")
    page.close()



def test_random_control_changes_in_the_browser_show_no_error(app, browser):
    """The short browser twin of tests/test_app_controls.py: a fixed random sequence of control changes made as a
    person makes them (the layer's radio, select boxes, sliders by key, widths typed; widths the heads do not
    divide among them), with no error box or traceback after any of them, and the URL always a state the page
    accepts."""
    import random

    rng = random.Random(38)
    choices = {"layer": ("attention", "mlp", "block", "joint"), "diagonal": ("none", "per_head", "shared"),
               "preconditioner": ("none", "dlr", "psd"), "T": (1, 3, 8), "eta": (0.5, 1.5), "width": (6, 7, 9, 12),
               "anchor": (0.0, 0.5)}
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(app.url)
    settle(page)
    for i in range(14):
        name = rng.choice(sorted(choices))
        value = rng.choice(choices[name])
        move_energy_control(page, name, value)
        settle(page)
        _assert_clean(page, f"change {i + 1}: {name} = {value}")
        EnergyControls.from_query(_query(page))                          # raises if the URL is refused
    page.close()
    assert "Traceback" not in app.log()


# -- (h) Instant: the energy page computed in the browser ----------------------------------------------------------

EXPLORER = "iframe[src*='cem_explorer']"


def _explorer(page, before: str | None = None):
    """The Instant explorer's frame (same origin: its page is served by the app) once it has drawn its latest
    state in every player (and, with `before`, the first player's version is another). The frame may still hold its
    first, empty document (no body yet) when it is found: the component's folder is built on its first use."""
    frame = page.locator(EXPLORER).element_handle(timeout=60000).content_frame()
    frame.wait_for_function("""v => !!document.body && document.body.dataset.state === 'drawn' &&
        document.querySelector('.playback') && document.querySelector('.playback').dataset.version !== v""",
                            arg=before, timeout=60000)
    return frame


def test_instant_redraws_in_the_browser_and_the_app_keeps_the_state(app, browser, tmp_path):
    """?instant=true: a key press on the explorer's T slider redraws the plots with no message to the server, the
    note Python's diagnose writes for the state the page holds; once idle the app's address has the state, and
    with Instant off the server's sidebar shows it."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    sent = _sent(page)
    page.goto(f"{app.url}/?instant=true&T=8")
    settle(page)
    frame = _explorer(page)
    assert sent, "no websocket message counted"
    assert page.locator(PLAYBACK).count() == 0                        # no server-drawn phase
    assert frame.evaluate("() => CEMExplorer.page.values.T") == 8
    assert [frame.locator(f"#{part}").is_visible() for part in ("intro", "lesson-start", "link", "pin")] == \
        [False, False, False, True]
    before = frame.evaluate("() => document.querySelector('.playback').dataset.version")
    page.wait_for_timeout(1000)                                       # (the component's first report, if any)
    count = len(sent)
    thumb = frame.locator("input[type=range][aria-label='steps T']")
    thumb.focus()
    page.keyboard.press("ArrowRight")
    frame = _explorer(page, before)
    assert len(sent) == count, "the redraw needed the server"
    values = frame.evaluate("() => CEMExplorer.page.values")
    assert values["T"] == 9
    c = EnergyControls.from_values(**values)
    assert frame.evaluate("() => Array.from(document.querySelectorAll('.note'), e => e.innerText)") == [
        d.text.replace("**", "") for d in diagnose(c, explore(c))]
    energies = explore(c)["phases"][0]["energies"]                   # (T + 1, tokens)
    lines = frame.evaluate("""() => document.querySelector('.playback [data-name=energy]').data
        .filter(t => t.y && t.y.length === 10).map(t => Array.from(t.y))""")
    assert len(lines) == energies.shape[1]
    assert np.allclose(np.array(lines).T, energies, rtol=1e-5, atol=1e-10 * abs(energies).max())
    page.screenshot(path=shots(tmp_path) / "instant.png", full_page=True)
    frame.locator(".downloads summary").first.click()                 # a plot's data saved from the frame
    with page.expect_download() as saved:
        frame.locator(".downloads li").filter(has_text="norm").get_by_role("button", name="CSV").click()
    assert saved.value.suggested_filename == "attention-norm-0.csv"
    found = csv_difference(app_csvs(c.values())[0]["norm"], Path(saved.value.path()).read_bytes().decode("utf-8"),
                           "norm", explore_agrees)
    assert found is None, found

    page.wait_for_function("() => new URLSearchParams(location.search).get('T') === '9'", timeout=20000)
    settle(page)
    assert [b'"report":1' in m and b'"T":9' in m for m in sent[count:]] == [True]   # one message: the state
    assert _query(page)["instant"] == "true"
    go_to(page, "Design space")                                       # another page and back: Instant, at T 9
    go_to(page, "Energy descent")
    assert _explorer(page).evaluate("() => CEMExplorer.page.values.T") == 9
    page.get_by_text("Compute in my browser (instant)").click()
    settle(page)
    playback(page)
    assert slider_value(page, "steps T") == 9 and "instant" not in _query(page)
    _assert_clean(page, "Instant off")
    page.close()
