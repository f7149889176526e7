"""A learner's journey on the site's page "Inside a trained model" (inside.html; docs/site.md), from file:// with every
request that is not a file:// one aborted and recorded (none may be tried), in one session the way a person walks
it: a shared link opens a trained checkpoint on a seed's function at a test-time T (the app's parameter names), the
steps are stepped back, the learner clicks a point of their own onto the curve plot, drags it, removes it with a
right-click, clears the points (the prior), goes back to the function, follows the page switcher to the energy page
and back with the state kept, opens the link in a new page, and opens two bad links (the app's words). Every
prediction drawn is the Python core's for the same points (inspect_function in float64, to 1e-9). Screenshots go
to the test's tmp_path, or to CEM_LAB_SCREENSHOTS when set.
"""
from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from appdriver import CHROMIUM, chromium, shots
from conftest import require_system_package

from cem_core.experiments.gp.inspect import inspect_function, parse_points
from cem_core.experiments.gp.trained import load_gp_model
from cem_core.ui import inside, site
from cem_core.ui.inside_controls import InsideControls

pytestmark = pytest.mark.slow          # a real Chromium
require_system_package(CHROMIUM is not None, "the browser test", "chromium", module_level=True)

LINK_REFUSED = "The link's settings could not be used: {}. Showing the defaults instead."


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return site.build(tmp_path_factory.mktemp("site") / "site").parent


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def _ready(page, before: str | None = None) -> None:
    """The page drew a state (another one than `before`'s, when given) and the player shows it."""
    page.wait_for_function("""(before) => document.body.dataset.ready === 'true'
        && document.querySelector('#playback').dataset.version
        && document.body.dataset.state !== before""", arg=before, timeout=60000)
    page.wait_for_timeout(100)


def _state(page) -> dict:
    return json.loads(page.evaluate("document.body.dataset.state"))


def _query(page) -> dict:
    return {k: v[-1] for k, v in parse_qs(urlparse(page.url).query).items()}


def _curve(page) -> dict:
    """The curve plot's traces by name (x, y) as drawn now."""
    return page.evaluate("""() => Object.fromEntries(document.querySelector('.plot[data-name=curve]').data
        .map(t => [t.name, {x: Array.from(t.x), y: Array.from(t.y)}]))""")


def _pixel(page, x: float, y: float) -> tuple[float, float]:
    """Where the data point (x, y) is on the screen."""
    return tuple(page.evaluate("""([x, y]) => {
        const div = document.querySelector('.plot[data-name=curve]'), box = div.getBoundingClientRect();
        const xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis;
        return [box.left + xa._offset + xa.l2p(x), box.top + ya._offset + ya.l2p(y)];
    }""", [x, y]))


def _python(name: str, points, T: int, seed: int | None = None, context: int = 0) -> dict:
    model, task = load_gp_model(name)
    return inspect_function(model.double(), task, seed, context=context, T_test=T, points=points)


def _same_prediction(page, py: dict) -> None:
    """The model's line on the curve plot is Python's prediction at the last step, to 1e-9."""
    drawn = np.asarray(_curve(page)["model"]["y"], dtype=float)
    want = np.asarray(py["layers"][0]["prediction"][-1], dtype=float)
    assert np.abs(drawn - want).max() <= 1e-9 * np.abs(want).max()


def test_a_learner_places_their_own_points_on_a_trained_model(built, browser, tmp_path):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tried, problems = [], []

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            tried.append(r.request.url)
            r.abort()
    context.route("**/*", route)
    page = context.new_page()
    page.on("pageerror", lambda err: problems.append(str(err)))
    # (MathJax on the energy page declares a font at about:blank to measure glyphs: not a request that leaves it)
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" and "about:blank" not in m.text
            and m.text != "Failed to load resource: net::ERR_FAILED" else None)
    folder = shots(tmp_path)

    # 1. A shared link: the block as one energy on seed 3's function, 8 points, test-time T 16 (trained T 8).
    link = "in_side=gp&in_gp_model=gp-block-T8&in_seed=3&in_context=8&in_gp_T=16"
    page.goto(f"{(built / 'inside.html').as_uri()}?{link}")
    _ready(page)
    state = _state(page)
    assert (state["gp_model"], state["seed"], state["context"], state["gp_T"], state["points"]) == \
           ("gp-block-T8", 3, 8, 16, None)
    py = _python("gp-block-T8", None, 16, seed=3, context=8)
    curve = _curve(page)
    assert {"true f", "GP mean", "model", "context (8)", "GP ± 2 sd"} <= set(curve)
    assert np.allclose(curve["context (8)"]["x"], py["context_x"], rtol=0, atol=0)
    # the prediction against Python's on the very points drawn: past the trained T the steps amplify the last bits
    # in which two processes' eigendecompositions of the function's draw can differ (1e-8 relative, once)
    drawn_points = list(zip(curve["context (8)"]["x"], curve["context (8)"]["y"]))
    on_drawn = _python("gp-block-T8", drawn_points, 16)
    _same_prediction(page, on_drawn)
    assert page.inner_text("#note") == inside.gp_reading(py).replace("**", "")
    assert page.locator("#playback").get_attribute("data-step") == "16"
    page.screenshot(path=folder / "site-inside-link.png", full_page=True)

    # 2. Back to step 0 with the keyboard: the layer skipped.
    page.keyboard.press("Home")
    page.wait_for_function("document.querySelector('#playback').dataset.step === '0'")
    assert np.allclose(_curve(page)["model"]["y"], on_drawn["layers"][0]["prediction"][0], rtol=1e-9, atol=1e-12)
    page.keyboard.press("End")
    page.wait_for_function("document.querySelector('#playback').dataset.step === '16'")

    # 3. A click on the plot adds a ninth point of the learner's own: the truth goes, the link carries the points.
    before = page.evaluate("document.body.dataset.state")
    page.mouse.click(*_pixel(page, 0.8, 1.2))
    _ready(page, before)
    points = _state(page)["points"]
    assert len(points) == 9 and points[8] == pytest.approx([0.8, 1.2], abs=0.02)
    assert points[:8] == [[round(x, 3), round(y, 3)] for x, y in zip(py["context_x"], py["context_y"])]
    assert "true f" not in _curve(page) and "context (9)" in _curve(page)
    assert parse_points(_query(page)["in_points"], load_gp_model("gp-block-T8")[1]) == [tuple(p) for p in points]
    _same_prediction(page, _python("gp-block-T8", points, 16))
    assert page.inner_text("#note").startswith("On these points the steps")

    # 4. Dragged down and left, the point follows the hand and the prediction follows the point.
    before = page.evaluate("document.body.dataset.state")
    start, end = _pixel(page, *points[8]), _pixel(page, 0.4, -1.0)
    page.mouse.move(*start)
    page.mouse.down()
    for k in range(1, 9):
        page.mouse.move(start[0] + (end[0] - start[0]) * k / 8, start[1] + (end[1] - start[1]) * k / 8)
        page.wait_for_timeout(30)
    page.mouse.up()
    _ready(page, before)
    page.wait_for_timeout(400)
    moved = _state(page)["points"]
    assert len(moved) == 9 and moved[:8] == points[:8] and moved[8] == pytest.approx([0.4, -1.0], abs=0.02)
    _same_prediction(page, _python("gp-block-T8", moved, 16))
    page.screenshot(path=folder / "site-inside-own-points.png", full_page=True)

    # 5. A right-click on it removes it; "Clear the points" leaves the prior; the seed's function comes back.
    before = page.evaluate("document.body.dataset.state")
    page.mouse.click(*_pixel(page, *moved[8]), button="right")
    _ready(page, before)
    assert _state(page)["points"] == points[:8]
    before = page.evaluate("document.body.dataset.state")
    page.click("#clear-points")
    _ready(page, before)
    assert _state(page)["points"] == [] and "context (0)" in _curve(page)
    band = _curve(page)["GP ± 2 sd"]["y"]
    assert np.allclose(band, -2.0)                                     # the prior: mean 0, sd 1
    before = page.evaluate("document.body.dataset.state")
    page.click("#sample")
    _ready(page, before)
    assert _state(page)["points"] is None and "in_points" not in _query(page)
    _same_prediction(page, on_drawn)

    # 6. The page switcher: to the energy page and back, each page's state kept in the address.
    page.click("#to-energy")
    page.wait_for_selector("#phases .plot", timeout=60000)
    assert _query(page)["in_gp_model"] == "gp-block-T8" and _query(page)["in_seed"] == "3"
    page.click("#to-inside")
    _ready(page)
    assert _state(page)["gp_model"] == "gp-block-T8" and _state(page)["gp_T"] == 16

    # 7. The link, opened in a new page, is the same state.
    other = context.new_page()
    other.goto(page.input_value("#link"))
    _ready(other)
    assert _state(other) == _state(page)
    other.close()

    # 8. Bad links: the app's words (parse_points' and the controls'), and the defaults drawn.
    for bad, why in [("in_points=2:0,0.1:0.2", None), ("in_seed=5000", "function seed 5000: the site carries the "
                      "functions of seeds 0 to 999 (the app draws any seed to 9999)"),
                     ("in_context=40", "points seen 40: must be in [1, 31]")]:
        if why is None:                                                # the app's own refusal of the link
            with pytest.raises(ValueError) as err:
                InsideControls.from_link({"in_points": "2:0,0.1:0.2"})
            why = InsideControls.explain(err.value)
            assert why == "your points 2:0,0.1:0.2: x = 2 of '2:0' is outside the box [-1, 1]"
        page.goto(f"{(built / 'inside.html').as_uri()}?{bad}")
        _ready(page)
        assert page.inner_text("#messages") == LINK_REFUSED.format(why)
        assert _state(page)["gp_model"] == "gp-cem-T8" and _state(page)["points"] is None

    page.goto(f"{(built / 'inside.html').as_uri()}?in_side=lm&in_lm_model=lm-llama")     # the app's LM side: not here
    _ready(page)
    assert page.inner_text("#messages") == ("The language models are not on the site yet (the app has them): showing "
                                            "the GP side.")
    assert tried == [] and problems == []
    context.close()


@pytest.mark.parametrize("width, height", [(390, 844), (768, 1024)])
def test_the_site_on_a_phone_and_a_tablet(built, browser, tmp_path, width, height):
    """As a student on a phone (390 x 844) and a tablet (768 x 1024): on both pages the controls hide behind a
    button, nothing runs off the side, the plots stack at the page's full width; opened, the controls work (another
    checkpoint is drawn) and close again."""
    folder = shots(tmp_path)
    for name in ("index.html", "inside.html"):
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto((built / name).as_uri())
        if name == "inside.html":
            _ready(page)
        else:
            page.wait_for_selector("#phases .plot .main-svg", timeout=60000)
        layout = page.evaluate("""() => {
            const main = document.querySelector('main').getBoundingClientRect();
            const plots = [...document.querySelectorAll('.player .plot')].map(p => p.getBoundingClientRect());
            return {scroll: document.documentElement.scrollWidth, sidebar: getComputedStyle(
                        document.getElementById('sidebar')).display,
                    main: main.width, plots: plots.map(r => [r.left, r.width])};
        }""")
        assert layout["scroll"] <= width and layout["sidebar"] == "none", (name, layout)
        lefts = {round(left) for left, _ in layout["plots"]}
        assert len(layout["plots"]) >= 2 and len(lefts) == 1, (name, layout)            # one column
        assert all(w >= layout["main"] - 2 * 16 - 4 for _, w in layout["plots"]), (name, layout)
        page.screenshot(path=folder / f"site-{name.split('.')[0]}-{width}.png")
        page.click("#controls-toggle")
        assert page.evaluate("getComputedStyle(document.getElementById('sidebar')).display") == "block"
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        if name == "inside.html":
            before = page.evaluate("document.body.dataset.state")
            page.select_option("#gp_model", "gp-llama")
            _ready(page, before)
            assert _state(page)["gp_model"] == "gp-llama"
            page.screenshot(path=folder / f"site-inside-{width}-controls.png")
        page.click("#controls-toggle")
        assert page.evaluate("getComputedStyle(document.getElementById('sidebar')).display") == "none"
        page.close()


@pytest.mark.parametrize("present", [False, True], ids=["page", "presented at 1280x720"])
def test_the_whole_lesson_at_one_url(built, browser, tmp_path, present):
    """A lecturer runs the whole ten-step lesson on the site from file:// with no network: Start the lesson on the
    energy page, Next through its seven steps, on to the GP page's step 8 (its two plots the app's own figures of the
    committed sweep, the words with its numbers) and the inside page's steps 9 and 10 (each step's state, the note
    the app's, the plot it talks about framed), Back once, and End gives back the state from before the lesson
    (presentation mode off). Presented, each step's plots are on the 1280 x 720 screen."""
    from cem_core.ui import lesson, site_data

    context = browser.new_context(viewport={"width": 1280, "height": 720})
    tried = []

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            tried.append(r.request.url)
            r.abort()
    context.route("**/*", route)
    page = context.new_page()
    problems = []
    page.on("pageerror", lambda err: problems.append(str(err)))
    folder = shots(tmp_path)
    page.goto(f"{(built / 'index.html').as_uri()}?T=12")
    page.wait_for_selector("#phases .plot .main-svg", timeout=60000)
    if present:
        page.check("#present")
        page.wait_for_selector("#present-lesson-start:visible")
    page.click("#present-lesson-start" if present else "#lesson-start")
    records = site_data.gp_records()
    for index, step in enumerate(lesson.STEPS):
        title = f"Lesson · step {index + 1} of {len(lesson.STEPS)}: {step.title}"
        page.locator("#lesson-title").get_by_text(title, exact=True).wait_for(timeout=60000)
        query = _query(page)
        assert query["lesson"] == str(index + 1) and (query.get("present") == "true") == present, (title, query)
        file = {"energy": "index.html", "gp": "gp.html", "inside": "inside.html"}[step.page]
        assert urlparse(page.url).path.endswith("/" + file), (title, page.url)
        if step.page != "energy":
            page.wait_for_selector("body[data-ready=true]", timeout=60000)
            page.wait_for_timeout(300)
            assert " ".join(page.inner_text("#lesson-say").split()) == \
                " ".join(lesson.text(step, records).replace("**", "").replace("*", "").split())
        if step.page == "gp":
            names = page.evaluate("[...document.querySelectorAll('#views .plot')].map(p => p.dataset.name)")
            assert names == (list(step.views) if present else ["gp-ratio", "gp-context", "gp-scaling"])
            want = site_data.gp_page(records)["views"][step.points_at]["figure"]["data"]
            drawn = page.evaluate(f"""document.querySelector('#views .plot[data-name="{step.points_at}"]').data
                                      .map(t => [t.name, Array.from(t.y || [])])""")
            assert drawn == [[t.get("name"), list(t.get("y", []))] for t in want]
            assert page.evaluate(f"""document.querySelector('#views .plot[data-name="{step.points_at}"]')
                                     .classList.contains('pointed')""")
        if step.page == "inside":
            state = _state(page)
            assert {k: state[k] for k in step.state} == step.state, title
            c = step.controls()
            py = _python(c.gp_model, None, c.gp_T, seed=c.seed, context=c.context)
            assert page.inner_text("#note") == inside.gp_reading(py, None if c.gp_T >= py["trained_T"] else 0.0)\
                .replace("**", "")
            assert page.evaluate(f"""document.querySelector('.player .plot[data-name="{step.points_at}"]')
                                     .classList.contains('pointed')""")
            shown = page.evaluate("[...document.querySelectorAll('.player .plot')].map(p => p.dataset.name)")
            assert shown == (list(step.views) if present else ["curve", "rmse", "energy", "heatmap"]), title
        if present:
            assert not page.locator("#sidebar").is_visible(), title
            for box in page.evaluate("""[...document.querySelectorAll('#views .plot, .player .plot')].map(p => {
                    const r = p.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; })"""):
                assert box[0] >= 0 and box[1] <= 720 + 1 and box[2] >= 0 and box[3] <= 1280, (title, box)
        page.screenshot(path=folder / f"site-lesson{'-presented' if present else ''}-{index + 1}.png")
        if index + 1 < len(lesson.STEPS):
            page.click("#lesson-next")
    assert page.locator("#lesson-next").is_disabled()
    page.click("#lesson-back")
    page.locator("#lesson-title").get_by_text(f"Lesson · step 9 of {len(lesson.STEPS)}", exact=False).wait_for()
    page.click("#lesson-end")
    page.wait_for_selector("#phases .plot .main-svg", timeout=60000)
    query = _query(page)
    assert urlparse(page.url).path.endswith("/index.html") and query["T"] == "12"
    assert "lesson" not in query and "present" not in query
    assert tried == [] and problems == []
    context.close()


def test_the_gp_page_is_the_apps(built, browser, tmp_path):
    """The site's GP page from file:// shows what the app's GP page shows from the committed results: the sweep's three
    figures (their traces the app's), the factor study's images (loaded, with the app's captions and alt texts) and
    conditions table (verdict first), and the test-time study's figures, finding and table."""
    from cem_core.ui import site_data

    gp = site_data.gp_page(site_data.gp_records())
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto((built / "gp.html").as_uri())
    page.wait_for_selector("body[data-ready=true]", timeout=60000)
    page.wait_for_function("[...document.images].every(i => i.complete)")
    assert page.inner_text("h1") == gp["title"]
    for name, view in gp["views"].items():
        drawn = page.evaluate(f"""document.querySelector('#views .plot[data-name="{name}"]').data
                                  .map(t => [t.name, Array.from(t.y || [])])""")
        assert drawn == [[t.get("name"), list(t.get("y", []))] for t in view["figure"]["data"]], name
    images = page.evaluate("[...document.querySelectorAll('#studies figure')].map(f => [f.querySelector('img')"
                           ".naturalWidth, f.querySelector('img').alt, f.querySelector('figcaption').textContent])")
    assert [(alt, caption) for _, alt, caption in images] == [(i["alt"], i["caption"]) for i in gp["study"]["images"]]
    assert all(width >= 1000 for width, _, _ in images)
    tables = page.evaluate("""[...document.querySelectorAll('#studies table.claims')].map(t =>
        [...t.querySelectorAll('tr')].map(r => [...r.children].map(c => c.textContent)))""")
    for drawn, rows in zip(tables, (gp["study"]["table"], gp["test_time"]["table"])):
        assert drawn == [list(rows[0])] + [[str(v) for v in r.values()] for r in rows]
    plots = page.evaluate("[...document.querySelectorAll('#studies .plot')].map(p => p.data.length)")
    assert plots == [len(f["data"]) for f in gp["test_time"]["figures"]]
    assert " ".join(gp["test_time"]["summary"].split()) in " ".join(page.inner_text("#studies").split())
    page.screenshot(path=shots(tmp_path) / "site-gp.png", full_page=True)
    page.close()
