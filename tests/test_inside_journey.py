"""A lecturer inside a trained model, in Debian's headless Chromium (tests/appdriver.py): the page "Inside a trained
model" opened, a GP checkpoint's steps played in the browser (no message to the server), the test-time T turned
to four times the trained T, one checkpoint pinned against another (CEM attention at T = 8 against Llama), a text
typed on the language-model side, and an over-long one refused with a message. Screenshots: trained-*.png in
CEM_LAB_SCREENSHOTS (docs/screenshots) or the test's tmp_path."""
from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from appdriver import (
    CHROMIUM,
    choose,
    chromium,
    click_radio,
    committed,
    errors,
    playback,
    serve_app,
    set_slider,
    settle,
    shots,
    traces,
    version,
)
from conftest import ROOT, child_env, require_system_package

from cem_core.experiments.gp.inspect import inspect_function
from cem_core.experiments.gp.trained import GP_MODELS, load_gp_model
from cem_core.ui.inside_controls import InsideControls

pytestmark = pytest.mark.slow
require_system_package(CHROMIUM is not None, "the browser journey inside a trained model", "chromium",
                       module_level=True)

DEFAULTS = InsideControls()


def _curve(frame) -> list:
    """The model's line on the curve plot, as the browser draws it now."""
    return next(t["y"] for t in traces(frame, "curve") if t["meta"] == "now")


def _step(frame) -> int:
    return int(frame.evaluate("() => document.body.dataset.step"))


def _notes(page) -> str:
    boxes = page.locator("[data-testid='stAlertContentInfo']")
    return " ".join(boxes.nth(i).inner_text() for i in range(boxes.count()))


def test_inside_a_trained_model(tmp_path):
    model, task = load_gp_model(DEFAULTS.gp_model, ROOT / "models")
    data = inspect_function(model, task, DEFAULTS.seed, DEFAULTS.context)
    steps = data["layers"][0]["prediction"]
    with serve_app(child_env()) as app, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        sent = []
        page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(payload)))
        page.goto(f"{app.url}/inside")
        settle(page)
        frame = playback(page)
        assert _step(frame) == DEFAULTS.gp_T and _curve(frame) == pytest.approx(steps[-1], abs=1e-5)
        page.wait_for_timeout(500)
        before = len(sent)
        # -- the steps, played in the browser -----------------------------------------------------------------
        frame.click("#first")
        assert _step(frame) == 0 and _curve(frame) == pytest.approx(steps[0], abs=1e-5)
        assert "after step 0 of 8" in frame.evaluate("() => document.querySelector('[data-name=curve] .gtitle')"
                                                     ".textContent")
        frame.click("#play")
        frame.wait_for_function("() => document.body.dataset.step === '8'", timeout=30000)
        frame.wait_for_function("() => document.querySelector('#play').textContent === '▶'")
        frame.locator("#scrub").fill("3")
        assert _step(frame) == 3 and _curve(frame) == pytest.approx(steps[3], abs=1e-5)
        rmse_now = next(t for t in traces(frame, "rmse") if t["meta"] == "now")
        assert rmse_now["x"] == [3, 3] and rmse_now["y"][0] == pytest.approx(data["layers"][0]["rmse_to_posterior"][3])
        page.wait_for_timeout(500)
        assert len(sent) == before, "playing the steps sent messages to the server"
        page.screenshot(path=shots(tmp_path) / "trained-gp.png")
        # -- test-time T: four times the trained T ----------------------------------------------------------------
        old = version(frame)
        most = InsideControls.gp_most_T(DEFAULTS.gp_model)
        set_slider(page, "test-time T", most, 1)
        frame = playback(page, version=old)
        label = "() => document.querySelector('#label').textContent"
        assert frame.evaluate(label) == f"step 3 of {most}"                    # the reader's step is kept
        frame.locator("#scrub").focus()
        page.keyboard.press("End")
        assert frame.evaluate(label) == f"step {most} of {most}"
        assert f"Steps beyond the trained T = {GP_MODELS[DEFAULTS.gp_model].T}" in _notes(page), _notes(page)
        assert page.get_by_text("held-out functions").count() >= 1            # the 256-function reading
        assert page.get_by_text(f"at T = {most}").count() >= 1
        page.get_by_text("held-out functions").first.scroll_into_view_if_needed()
        page.screenshot(path=shots(tmp_path) / "trained-test-time.png")
        # -- pin and compare: CEM attention T = 8 against Llama ----------------------------------------------------
        page.get_by_role("button", name="Pin this checkpoint").click()
        settle(page)
        old = version(frame)
        choose(page, "GP checkpoint", f"gp-llama: {GP_MODELS['gp-llama'].title}")
        frame = playback(page, version=old)
        names = [t["name"] for t in traces(frame, "curve")]
        pinned = f"pinned: {DEFAULTS.gp_model}, T {most}"
        assert pinned in names and "now: gp-llama" in names, names
        assert pinned in [t["name"] for t in traces(frame, "rmse")]
        assert page.get_by_text(f"Pinned: {DEFAULTS.gp_model}, T {most}").count() == 1
        assert "no in-layer steps" in _notes(page)
        page.screenshot(path=shots(tmp_path) / "trained-pinned.png")
        assert errors(page) == []
        # -- the language model: a text typed -------------------------------------------------------------------
        click_radio(page, "Language model")
        box = page.get_by_label("text for the model to read", exact=True)
        box.wait_for(timeout=60000)
        before_url = page.url
        box.fill("The module defines a class for each kind of file.")
        box.press("Enter")
        committed(page, before_url)
        tokens = page.locator(".lens-tokens").first
        tokens.wait_for(timeout=60000)
        assert "".join(tokens.inner_text().split()).startswith("The␣module␣defines")
        assert page.get_by_text("lm-llama beside it").count() == 1              # Llama's prediction beside
        assert page.get_by_text("stopped after step 2 of 2").count() == 1
        assert errors(page) == []
        page.screenshot(path=shots(tmp_path) / "trained-lm.png")
        page.locator("[data-testid='stPlotlyChart']").first.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        page.screenshot(path=shots(tmp_path) / "trained-lm-steps.png")
        before_url = page.url
        box.fill("x" * 200)
        box.press("Enter")
        committed(page, before_url)
        assert any("text is too long: 200 tokens" in e for e in errors(page)), errors(page)
        page.close()
        assert "Traceback" not in app.log(), app.log()[-3000:]


def test_a_learners_points_in_the_app(tmp_path):
    """The app reads a learner's own points as the site does: a shared link with in_points opens them (no true
    function, the note on "these points", the same prediction as inspect_function on them), points typed into "your
    points" redraw the plots and go into the address, and points outside the box are refused with the site's words."""
    model, task = load_gp_model("gp-cem-T8", ROOT / "models")
    points = [(-0.5, 0.2), (0.1, -1.0), (0.6, 0.8)]
    data = inspect_function(model, task, None, points=points)
    with serve_app(child_env()) as app, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{app.url}/inside?in_gp_model=gp-cem-T8&in_points=-0.5:0.2,0.1:-1,0.6:0.8")
        settle(page)
        frame = playback(page)
        names = [t["name"] for t in traces(frame, "curve")]
        assert "context (3)" in names and "true f" not in names, names
        assert _curve(frame) == pytest.approx(data["layers"][0]["prediction"][-1], abs=1e-5)
        assert "On these points the steps" in _notes(page), _notes(page)
        page.screenshot(path=shots(tmp_path) / "trained-own-points.png")
        old, before_url = version(frame), page.url
        box = page.get_by_label("your points (x:y, …)", exact=True)
        box.fill("-0.5:0.2, 0.1:-1, 0.6:0.8, 0.9:0")
        box.press("Enter")
        committed(page, before_url)
        frame = playback(page, version=old)
        assert "context (4)" in [t["name"] for t in traces(frame, "curve")]
        assert parse_qs(urlparse(page.url).query)["in_points"] == ["-0.5:0.2, 0.1:-1, 0.6:0.8, 0.9:0"], page.url
        assert errors(page) == []
        page.goto(f"{app.url}/inside?in_points=2:0,0.1:0.2")
        settle(page)
        assert any("your points 2:0,0.1:0.2: x = 2 of '2:0' is outside the box [-1, 1]" in e for e in errors(page)), \
            errors(page)
        page.close()
        assert "Traceback" not in app.log(), app.log()[-3000:]
