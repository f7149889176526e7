"""The static site (`make site`, cem_core/ui/site.py; docs/site.md): the energy explorer as one folder that needs no
install and no network.

- The build: at most site.LIMIT_BYTES (25 MB); our own files name no http(s) address and the vendored ones
  (plotly.js, MathJax) only inert ones (licences, XML namespaces, and plotly's map and geo defaults, which only
  its map traces reach); an --out that is a file, a link or a folder of other files is refused before anything is
  written, and an earlier site is replaced whole; the command line and `make site` build it.
- The page's controls mirror the app's (cem_core/web/controls.js against cem_core/ui/controls.py): a table of bad
  and odd links gets the message the app shows (the same Python functions: from_link, explain) or the same
  snapped state and notes; settle, shown, the heads offered and the cost agree on a grid; the update's equations
  equal update_latex's; what each mode shows is EnergyMode's.
- A journey on the built page from file://, every request that is not a file:// one aborted and recorded (none may
  be tried), in one session the way a person walks it: the defaults drawn with their note, T and the anchor moved
  (the note says the iterates settle), its plots downloaded (the energy's CSV holds the app's rows, the landscape
  an SVG), the steps played, a token followed by a click, a state pinned and compared,
  the lesson's energy-page steps in order (each step's state set and its claim in the note), a share link opened
  in a new page (the same state), and a bad link (the app's message). Another presents the lesson at 1280 x 720.
  Screenshots go to the test's tmp_path, or to CEM_LAB_SCREENSHOTS when set.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from appdriver import CHROMIUM, INSIDE, PLOT_TEXT, chromium, shots
from conftest import ROOT, child_env, require_system_package
from csv_rows import app_csvs, csv_difference, explore_agrees

from cem_core.nn.config import CEMOptions
from cem_core.ui import lesson, site
from cem_core.ui.controls import EnergyControls
from cem_core.ui.energy_mode import PRESENT_CONTROLS, PRESENT_VIEWS, EnergyMode
from cem_core.ui.equations import update_latex
from cem_core.ui.explore import diagnose, explore
from cem_core.ui.figure_style import FONT_PX

# The app's sentences around a refusal (app_pages/common.py restore_controls, app_pages/energy.py page_controls)
LINK_REFUSED = "The link's settings could not be used: {}. Showing the defaults instead."
COST_REFUSED = "{}. The plots show the last state that could be drawn."


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The site, built once for the module."""
    return site.build(tmp_path_factory.mktemp("site") / "site").parent


# -- the build ----------------------------------------------------------------------------------------------------

def test_the_app_says_the_sentences_the_site_mirrors():
    common = (ROOT / "app_pages" / "common.py").read_text()
    energy = (ROOT / "app_pages" / "energy.py").read_text()
    assert 'st.error(f"The link\'s settings could not be used: {plain(cls.explain(err))}. Showing the defaults "' \
           in common and '"instead.")' in common
    assert '. The plots show the last state that could be drawn."' in energy


def test_the_site_is_small_and_holds_what_the_page_loads(built):
    total = site.size(built)
    print(f"the site: {total / 1e6:.2f} MB")
    assert total <= site.LIMIT_BYTES == 25_000_000
    for name in ("index.html", "inside.html"):
        page = (built / name).read_text()
        for src in re.findall(r'<(?:script src|link rel="stylesheet" href)="([^"?]+)', page):
            assert (built / src).is_file(), (name, src)
    assert (built / "plotly.min.js").read_bytes() == site.PLOTLY_JS.read_bytes()      # the installed plotly's own


# Hosts the vendored scripts name without fetching them here: licences and credits (in comments and messages), XML
# namespaces, and plotly.js's defaults for map and geo traces and its Chart Studio button, which the site never draws.
INERT_HOSTS = {
    "www.apache.org", "www.mathjax.org", "github.com", "plotly.com", "feross.org", "getify.mit-license.org",
    "syntheti.cc", "www.stixfonts.org", "www.esri.com", "maplibre.org", "wiki.openstreetmap.org",
    "www.openstreetmap.org", "get.webgl.org",                                          # licences, credits, help
    "www.w3.org", "exslt.org",                                                          # XML namespaces
    "cdn.plot.ly", "cloud.plotly.com", "cdn.jsdelivr.net", "basemaps.cartocdn.com", "tiles.basemaps.cartocdn.com",
    "tile.openstreetmap.org", "server.arcgisonline.com", "geoserveis.icgc.cat", "tilemaps.icgc.cat",
    "fonts.openmaptiles.org",                                                           # plotly's map and geo traces
}
VENDORED = ("plotly.min.js", "mathjax")


def test_no_address_on_the_web_is_loaded(built):
    ours, hosts = [], set()
    for path in built.rglob("*"):
        if not path.is_file() or path.suffix in (".woff", ".otf", ".eot", ".mp3", ".ogg", ".png"):   # (no requests)
            continue
        found = re.findall(r"https?://([\w.-]+)", path.read_text(errors="replace"))
        if path.relative_to(built).parts[0] in VENDORED:
            hosts |= set(found)
        elif found:
            ours.append((path.name, found))
    assert ours == []
    assert hosts - INERT_HOSTS == set()


def test_an_out_that_is_not_a_site_is_refused_and_a_site_is_replaced(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("mine")
    with pytest.raises(ValueError, match="is a file or a link, not a folder"):
        site.build(afile)
    others = tmp_path / "others"
    others.mkdir()
    (others / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds files that no site build put there"):
        site.build(others)
    assert [p.name for p in others.iterdir()] == ["notes.txt"] and afile.read_text() == "mine"
    link = tmp_path / "link"
    link.symlink_to(others)
    with pytest.raises(ValueError, match="is a file or a link"):
        site.build(link)
    out = tmp_path / "site"
    site.build(out)
    (out / "stale.js").write_text("from an older build")
    index = site.build(out)                                           # an earlier site: replaced whole
    assert index == out / "index.html" and not (out / "stale.js").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "link", "others", "site"]   # no temporary left
    empty = tmp_path / "empty"
    empty.mkdir()
    assert site.build(empty).is_file()


@pytest.mark.slow                        # a subprocess, and make
def test_the_command_line_and_make_build_it(tmp_path):
    done = subprocess.run([sys.executable, "-m", "cem_core", "site", "--out", str(tmp_path / "a")], cwd=ROOT,
                          env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a" / "index.html").is_file() and "MB" in done.stdout
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("x")
    done = subprocess.run([sys.executable, "-m", "cem_core", "site", "--out", str(tmp_path / "b")], cwd=ROOT,
                          env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "error: --out" in done.stderr and "holds files" in done.stderr
    make = subprocess.run(["make", "-n", "site", f"OUT={tmp_path / 'c'}"], cwd=ROOT, capture_output=True, text=True)
    assert f"-m cem_core site --out {tmp_path / 'c'}" in make.stdout


# -- the controls: controls.js against cem_core/ui/controls.py -----------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    require_system_package(CHROMIUM is not None, "the site's browser tests", "chromium")
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def scripts(built, browser):
    """A page with the site's scripts loaded (not drawing): site-data, figures, controls."""
    page = browser.new_page()
    page.goto((built / "index.html").as_uri())
    page.wait_for_function("() => !!globalThis.CEMControls && !!globalThis.CEMExplorer")
    yield page
    page.close()


def app_link(query: str) -> dict:
    """What the app makes of a link's query (common.restore_controls with EnergyControls): the state, the error it
    shows and the notes of snapped values. Streamlit reads a repeated parameter's last value."""
    params = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    try:
        controls, notes = EnergyControls.from_link(params)
    except ValueError as err:
        return {"values": EnergyControls().values(), "error": LINK_REFUSED.format(EnergyControls.explain(err)),
                "notes": []}
    return {"values": controls.values(), "error": None, "notes": notes}


BAD_LINKS = [
    "layer=transformer", "T=abc", "T=", "T=0", "T=17", "T=100", "T=4.0", "T=0x10", "T=99999999999999999999",
    "T=5&T=20", "eta=0", "eta=0.01", "eta=25", "eta=inf", "eta=nan", "eta=1e999", "eta=1,5", "eta=__1",
    "anchor=-1", "p_scale=-0.5", "heads=3", "heads=4&width=6", "heads=2&width=6&rope=true",
    "width=7&heads=1&rope=true", "width=600", "seq_len=1", "seed=-1", "seed=10000", "token=256", "heat_head=8",
    "rope=yes", "rope=", "activation=tanh", "diagonal=full", "diagonal_form=distance", "preconditioner=exact",
    "preconditioner=dlr&rank=0", "rank=9", "width=512&seq_len=256&T=16&layer=block&diagonal=per_head",
    "width=512&seq_len=100", "layer=%27quoted%27", "layer=it%27s", "layer=a%0Ab", "layer=%E2%80%8B",
    "layer=x%20is%20invalid%3A%20y", "seed=%F0%9F%99%82",
]
ODD_LINKS = [                              # read, or snapped to the slider's grid with a note, as the app does
    "", "T=%20%205%20", "T=1_6", "T=%D9%A3", "T=+5", "rope=TRUE", "rope=1", "eta=.5", "eta=5.", "eta=1_0.5",
    "eta=0.33", "eta=1e-1", "anchor=3.65", "anchor=0.15", "anchor=-0", "p_scale=2.55", "p_scale=3.04",
    "heads=3&layer=mlp", "diagonal_form=distance&diagonal=shared", "preconditioner=dlr&rank=8&width=4",
    "token=3&seq_len=4", "p_scale=1e-400", "lesson=3&present=true&unknown=1",
]


@pytest.mark.parametrize("links", [BAD_LINKS, ODD_LINKS], ids=["bad", "odd"])
@pytest.mark.slow
def test_a_link_gets_the_apps_state_and_words(scripts, links):
    got = scripts.evaluate("""queries => queries.map(q => {
        const r = CEMControls.restore(Object.fromEntries(new URLSearchParams(q)));
        return {values: r.values, error: r.error, notes: r.notes}; })""", links)
    wrong = []
    for query, js in zip(links, got):
        py = app_link(query)
        if (js["error"], js["notes"]) != (py["error"], py["notes"]) or js["values"] != py["values"]:
            wrong.append(f"{query!r}:\n  app  {py}\n  site {js}")
        assert (py["error"] is not None) == (links is BAD_LINKS), query          # the table holds what it says
    print(f"{len(links)} links, each as the app reads it")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_settle_shown_heads_and_cost_agree_with_python(scripts):
    cases = [dict(EnergyControls().values(), width=w, heads=h, rope=r, diagonal=d, diagonal_form=f)
             for w in (2, 5, 6, 7, 8, 12, 30, 512) for h in (1, 3, 4, 5, 8) for r in (False, True)
             for d, f in (("none", "distance"), ("shared", "distance"), ("none", "bilinear"))]
    got = scripts.evaluate("cases => cases.map(c => CEMControls.settle(c))", cases)
    for case, js in zip(cases, got):
        values, notes = EnergyControls.settle(case)
        assert (js["values"], js["notes"]) == (values, notes), case
        assert scripts.evaluate("([w, r]) => CEMControls.headsOptions(w, r)", [case["width"], case["rope"]]) == list(
            EnergyControls.heads_options(case["width"], case["rope"]))
    combos = [(layer, p, d) for layer in ("attention", "mlp", "block", "joint") for p in ("none", "dlr", "psd")
              for d in ("none", "per_head", "shared")]
    assert scripts.evaluate("cs => cs.map(c => CEMControls.shown(...c))", combos) == [
        list(EnergyControls.shown(*c)) for c in combos]
    sizes = [EnergyControls.from_values(layer=layer, width=w, seq_len=n, T=T, diagonal=d, heads=2)
             for layer in ("attention", "mlp", "block", "joint") for w, n in ((8, 8), (128, 128), (64, 200))
             for T in (1, 16) for d in ("none", "per_head", "shared")
             if EnergyControls.from_values(layer=layer, width=w, seq_len=n, T=T, diagonal=d).cost() <= 1e9]
    costs = scripts.evaluate("vs => vs.map(v => CEMControls.cost(v))", [c.values() for c in sizes])
    assert costs == pytest.approx([c.cost() for c in sizes], rel=1e-12)


@pytest.mark.slow
def test_the_equations_are_update_latex(scripts):
    """Every combination the build exported, with the T-dependent last line mirrored in the page."""
    from cem_core.ui.site_data import EQUATION_LAYERS

    checked = 0
    for layer in EQUATION_LAYERS:
        for values in (dict(), dict(anchor=1.0, preconditioner="psd", T=2), dict(diagonal="shared", T=1),
                       dict(diagonal="per_head", diagonal_form="distance", activation="relu", T=16),
                       dict(activation="gelu", preconditioner="dlr", T=3)):
            c = EnergyControls.from_values(**values).values()
            cem = CEMOptions(**{k: c[k] for k in ("T", "anchor", "diagonal", "diagonal_form", "preconditioner")})
            js = scripts.evaluate("([layer, c]) => CEMExplorer.updateLatex(layer, c)", [layer, c])
            assert js == update_latex(layer, cem, c["activation"]), (layer, values)
            checked += 1
    assert checked == 15


MODE_FIELDS = ("name", "title", "controls", "controls_at", "bar_says", "note_beside_words", "pin_buttons",
               "pinned_caption", "layer_caption", "details", "highlight", "note_above", "start_key")


@pytest.mark.slow
def test_the_modes_are_the_apps(scripts):
    """What the page shows in each mode (sidebar, presentation, a lesson step, a presented one) is EnergyMode's,
    field by field: its controls and where, its plots' style, the views it draws of each layer's plots."""
    steps = [None, *(k for k, step in enumerate(lesson.STEPS) if step.page == "energy")]
    js_index = {None: None, **{k: i for i, k in enumerate(steps[1:])}}           # the site's steps: the energy page's
    available = (["energy", "norm", "landscape", "heatmap"], ["energy", "norm", "landscape"])
    for present in (False, True):
        for k in steps:
            m = EnergyMode(present=present, lesson=k)
            js = scripts.evaluate("""([present, index, available]) => { const m = CEMExplorer.mode(present, index);
                return {...m, views: available.map(a => m.views(a))}; }""", [present, js_index[k], available])
            for field in MODE_FIELDS:
                mine = getattr(m, field)
                assert js[field] == (list(mine) if isinstance(mine, tuple) else mine), (present, k, field)
            assert js["plots"] == vars(m.plots), (present, k)
            assert js["views"] == [None if m.views(a) is None else list(m.views(a)) for a in available], (present, k)


# -- the journey --------------------------------------------------------------------------------------------------

def _view(page, index: int = 0) -> dict:
    """What phase `index`'s player shows: its step, the landscape's marker, the traces' names per plot, the titles."""
    return page.evaluate("""i => { const root = document.querySelectorAll('.playback')[i];
        const plot = n => root.querySelector(`[data-name=${n}]`);
        const now = plot('landscape').data.find(t => t.meta === 'now');
        return {step: Number(root.dataset.step), version: root.dataset.version,
                marker: [Array.from(now.x)[0], Array.from(now.y)[0]],
                names: Object.fromEntries(['energy', 'norm', 'landscape', 'heatmap'].filter(plot).map(
                    n => [n, plot(n).data.map(t => t.name)])),
                titles: Object.fromEntries(['energy', 'landscape', 'heatmap'].filter(plot).map(
                    n => [n, plot(n).querySelector('.gtitle').textContent])),
                pointed: Array.from(root.querySelectorAll('.plot.pointed'), e => e.dataset.name)}; }""", index)


def _drawn(page, before: str | None = None) -> None:
    """Wait until the page has drawn its latest state in every player (and, with `before`, the first player's
    version is another)."""
    page.wait_for_function("""v => document.body.dataset.state === 'drawn' &&
        document.querySelector('.playback').dataset.version !== v""", arg=before, timeout=30000)


def _typeset(page) -> None:
    """Wait until MathJax has typeset every phase's equations."""
    page.wait_for_function("""() => Array.from(document.querySelectorAll('.equations .lines')).every(
        e => e.dataset.typeset === 'yes')""", timeout=30000)


def _notes(page) -> list[str]:
    return page.evaluate("() => Array.from(document.querySelectorAll('.note'), e => e.innerText)")


def _messages(page) -> list[str]:
    return page.evaluate("() => Array.from(document.querySelectorAll('#messages .box'), e => e.innerText)")


def _controls(page) -> dict:
    """The page's state, as its share link writes it."""
    return {k: v[-1] for k, v in parse_qs(urlparse(page.url).query).items()}


def _set_slider(page, label: str, value: float, step: float) -> None:
    """Move a slider with the keyboard, as a person without a mouse does: Home, then arrow presses."""
    thumb = page.locator(f"input[type=range][aria-label='{label}']")
    thumb.focus()
    before = _view(page)["version"]
    page.keyboard.press("Home")
    for _ in range(round((value - float(thumb.get_attribute("min"))) / step)):
        page.keyboard.press("ArrowRight")
    assert float(thumb.input_value()) == pytest.approx(value), label
    _drawn(page, before)


def _expected_note(**values) -> list[str]:
    c = EnergyControls.from_values(**values)
    return [d.text.replace("**", "") for d in diagnose(c, explore(c))]


def _state(step: lesson.Step) -> dict:
    return step.controls().to_query()


@pytest.mark.slow
def test_a_journey_through_the_site_from_file_with_no_network(built, browser, tmp_path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tried, failed, problems = [], [], []
    # MathJax's HTML-CSS output declares a font at about:blank to measure glyphs: not a request that leaves the page
    inert = ("about:blank",)

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            tried.append(r.request.url)
            r.abort()
    context.route("**/*", route)
    context.on("request", lambda r: None if r.url.startswith(("file://", *inert)) else tried.append(r.url))
    page = context.new_page()
    page.on("pageerror", lambda err: problems.append(str(err)))
    page.on("requestfailed", lambda r: failed.append((r.url, r.failure)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" and "about:blank" not in m.text
            and m.text != "Failed to load resource: net::ERR_FAILED" else None)   # (about:blank's, in `failed`)
    folder = shots(tmp_path)

    # 1. The defaults, drawn with their note.
    page.goto((built / "index.html").as_uri())
    _drawn(page)
    view = _view(page)
    assert set(view["names"]) == {"energy", "norm", "landscape", "heatmap"} and view["step"] == 4
    assert _notes(page) == _expected_note()
    assert _controls(page) == EnergyControls().to_query()
    _typeset(page)
    assert page.locator(".equations .lines .MathJax").count() == 7                   # each line typeset
    page.screenshot(path=folder / "site-defaults.png", full_page=True)

    # 2. T and the anchor moved: the iterates settle.
    _set_slider(page, "steps T", 16, 1)
    _set_slider(page, "anchor lambda (our extension; 0 = the paper)", 1.0, 0.1)
    assert _controls(page) == EnergyControls.from_values(T=16, anchor=1.0).to_query()
    assert _notes(page) == _expected_note(T=16, anchor=1.0) and "settle into a minimum" in _notes(page)[0]
    lines = page.evaluate("() => JSON.parse(document.querySelector('.equations .lines').dataset.lines)")
    assert lines == update_latex("attention", CEMOptions(T=16, anchor=1.0))          # the update, typeset

    # 2b. Its plots saved, as the app's download buttons save them: the energy's data as CSV (the app's rows, the
    # numbers this page computed), the landscape as an SVG of the chart; then, played back to step 0, the heatmap's
    # CSV is still the state's (the app writes the last step's weights), not the step shown.
    downloads = page.locator(".downloads").first
    downloads.locator("summary").click()
    expected = app_csvs(EnergyControls.from_values(T=16, anchor=1.0).values())[0]
    assert downloads.locator(".name").all_inner_texts() == list(expected)
    for name, kind in (("energy", "CSV"), ("landscape", "SVG"), ("heatmap", "CSV")):
        if name == "heatmap":                 # at step 0 the heatmap shows step 1's weights, once restyled to them
            first = float(explore(EnergyControls.from_values(T=16, anchor=1.0))["phases"][0]["weights"][0, 0, 7, 0])
            page.locator(".playback .first").first.click()
            page.wait_for_function("""w => document.querySelector('.playback').dataset.step === '0' && Math.abs(
                document.querySelector('[data-name=heatmap]').data.find(t => t.meta === 'weights').z[7][0] - w)
                < 1e-6""", arg=first)
        with page.expect_download() as saved:
            downloads.locator("li").filter(has_text=name).get_by_role("button", name=kind).click()
        assert saved.value.suggested_filename == f"attention-{name}-0.{kind.lower()}"
        text = Path(saved.value.path()).read_bytes().decode("utf-8")          # (its CR LF kept)
        if kind == "CSV":
            found = csv_difference(expected[name], text, name, explore_agrees)
            assert found is None, found
        else:
            assert text.startswith("<svg") and "Energy of token" in text, text[:200]

    # 3. The steps played: |◀, ▶| three times, ▶ to the end, the scrubber by keyboard.
    trajectory = explore(EnergyControls.from_values(T=16, anchor=1.0))["phases"][0]["landscape"]["trajectory"]
    player = page.locator(".playback").first
    player.locator(".first").click()
    for t in range(4):
        shown = _view(page)
        assert shown["step"] == t and shown["marker"] == pytest.approx(list(trajectory[t]), abs=1e-9)
        assert ("at x⁽⁰⁾" if t == 0 else f"step {t} of 16") in shown["titles"]["heatmap"]
        player.locator(".next").click()
    player.locator(".play").click()
    page.wait_for_function("() => document.querySelector('.playback').dataset.step === '16'", timeout=30000)
    page.wait_for_function("() => document.querySelector('.playback .play').textContent === '▶'")
    player.locator(".scrub").focus()
    page.keyboard.press("Home")
    assert _view(page)["step"] == 0
    player.locator(".scrub").fill("7")
    assert _view(page)["step"] == 7
    page.screenshot(path=folder / "site-playback.png")

    # 4. A token followed by a click on its heatmap row: every view follows it, the step kept.
    box = page.evaluate("""() => { const d = document.querySelector('.playback [data-name=heatmap]');
        const L = d._fullLayout, r = d.getBoundingClientRect();
        return [r.left + L._size.l + L.xaxis.c2p(0), r.top + L._size.t + L.yaxis.c2p(2)]; }""")
    before = _view(page)["version"]
    page.mouse.click(*box)
    _drawn(page, before)
    assert _controls(page)["token"] == "2"
    assert "token 2" in _view(page)["titles"]["landscape"]
    assert page.locator("input[aria-label='followed token']").input_value() == "2"
    assert _view(page)["step"] == 7

    # 5. Pinned and compared: the pinned state drawn faint and dashed, the legend naming both.
    page.get_by_role("button", name="Pin this state").click()
    _set_slider(page, "steps T", 8, 1)
    names = _view(page)["names"]
    assert "pinned: T 16" in names["energy"] and "now: T 8" in names["energy"], names
    assert "x⁽ᵗ⁾ pinned: T 16" in names["landscape"]
    dashed = page.evaluate("""() => document.querySelector('.playback [data-name=energy]').data.filter(
        t => t.name === 'pinned: T 16').map(t => t.line.dash)""")
    assert dashed == ["dash"]
    assert page.locator("#pinned-caption").inner_text() == "Pinned: T 16, drawn faint and dashed; now: T 8."
    page.screenshot(path=folder / "site-pinned.png")
    page.get_by_role("button", name="Unpin").click()
    assert not [n for n in _view(page)["names"]["energy"] if (n or "").startswith("pinned")]

    # 6. The lesson's energy-page steps in order: each sets its state, its pinned state and its highlight, and the
    # note says its claim.
    steps = [(index, step) for index, step in enumerate(lesson.STEPS) if step.page == "energy"]
    before = _view(page)["version"]
    page.get_by_role("button", name="Start the lesson").click()
    for number, (index, step) in enumerate(steps, start=1):
        _drawn(page, before)
        assert page.locator("#lesson-title").inner_text() == \
            f"Lesson · step {index + 1} of {len(lesson.STEPS)}: {step.title}"
        query = _controls(page)
        assert query.pop("lesson") == str(index + 1)
        assert query == _state(step), step.title
        note = _notes(page)[0]
        assert note == _expected_note(**step.state)[0]
        assert [p for p in step.phrases if p not in note] == [], (step.title, note)
        pinned = [n for n in _view(page)["names"]["energy"] if (n or "").startswith("pinned")]
        assert bool(pinned) == (step.pinned is not None), step.title
        pointed = page.evaluate("() => document.querySelector('.note').classList.contains('pointed')")
        assert pointed == (step.points_at == "note")
        assert _view(page)["pointed"] == ([] if step.points_at == "note" else [step.points_at])
        assert _view(page)["step"] == step.controls().cem.T                # a step opens at its last step
        _typeset(page)
        page.screenshot(path=folder / f"site-lesson-{number}.png")
        if number == 4:
            lesson_link = page.locator("#link").input_value()
        before = _view(page)["version"]
        if number < len(steps):
            page.get_by_role("button", name="Next →").click()
    assert not page.get_by_role("button", name="Next →").is_disabled()     # on to the GP page's step (test_site_inside)
    page.get_by_role("button", name="✕ End").click()
    _drawn(page, before)
    assert _controls(page) == EnergyControls.from_values(T=8, anchor=1.0, token=2).to_query()   # as before it

    # 7. A share link opened in a new page: the same state; a lesson step's link: that step.
    page.get_by_role("button", name="Copy link").click()
    link = page.locator("#link").input_value()
    other = context.new_page()
    other.goto(link)
    _drawn(other)
    assert _controls(other) == _controls(page) and _notes(other) == _notes(page)
    other.goto(lesson_link)
    _drawn(other)
    assert other.locator("#lesson-title").inner_text().startswith("Lesson · step 4 of")
    assert _notes(other)[0] == _expected_note(**lesson.STEPS[3].state)[0]
    other.close()

    # 8. Bad links: the app's words, and the defaults drawn.
    for query in ("T=abc&eta=0.33", "heads=3", "eta=0.33", "lesson=12"):
        page.goto((built / "index.html").as_uri() + "?" + query)
        _drawn(page)
        expected = app_link(query)
        messages = _messages(page)
        if query == "lesson=12":
            assert messages == [lesson.missing_step("12")]
        else:
            assert messages == ([expected["error"]] if expected["error"] else expected["notes"]), query
            assert _controls(page) == EnergyControls.from_values(**expected["values"]).to_query()
    page.screenshot(path=folder / "site-bad-link.png")

    # 9. Controls that depend on each other settle together, with the app's notice: width 7 leaves one head.
    before = _view(page)["version"]
    page.locator("input[aria-label='width d']").fill("7")
    page.locator("input[aria-label='width d']").press("Enter")
    _drawn(page, before)
    values, notes = EnergyControls.settle(EnergyControls().values() | {"width": 7})
    assert _messages(page) == notes and values["heads"] == 1
    assert _controls(page) == EnergyControls.from_values(**values).to_query()

    # 10. A size the page refuses: the app's warning, the plots of the last state that could be drawn.
    page.goto((built / "index.html").as_uri() + "?" + urlencode(dict(width=64, seq_len=64)))
    _drawn(page)
    before = _view(page)["version"]
    page.locator("input[aria-label='width d']").fill("512")
    page.locator("input[aria-label='width d']").press("Enter")
    page.wait_for_function("() => document.querySelector('#messages .box.warning')")
    with pytest.raises(ValueError) as refused:
        EnergyControls.from_values(width=512, seq_len=64)
    assert _messages(page) == [COST_REFUSED.format(EnergyControls.explain(refused.value))]
    assert _view(page)["version"] == before and _controls(page)["width"] == "64"

    assert tried == [], f"the page tried the network: {tried}"
    # (a file still loading when the page is left for another link is cancelled: that file is there)
    assert [(url, why) for url, why in failed if url not in inert and not (
        why == "net::ERR_ABORTED" and Path(urlparse(url).path).is_file())] == [], failed
    assert problems == [], problems
    context.close()


def _plots(page) -> list[str]:
    """The first phase's plots, in the page's order."""
    return page.evaluate("() => Array.from(document.querySelectorAll('.playback')[0].querySelectorAll('.plot'), "
                         "e => e.dataset.name)")


def _on_screen(page, selector: str, where) -> None:
    """The one element `selector` shown lies inside the projected 1280 x 720 page."""
    boxes = page.evaluate(INSIDE, selector)
    assert len(boxes) == 1, (where, selector, boxes)
    box = boxes[0]
    assert box["top"] >= 0 and box["left"] >= 0 and box["bottom"] <= 720 and box["right"] <= 1280, (where, box)


@pytest.mark.slow
def test_the_lesson_presented_from_the_site_at_1280x720(built, browser, tmp_path):
    """A lecturer projects the static page: Presentation mode hides the sidebar and puts T, η and λ in a row; the
    lesson started there shows at each of its steps, at 1280 x 720, the bar, the step's words, its controls beside
    them, the first phase's note and the two plots the step talks about, in larger type; the link keeps the mode.
    End gives back the state from before, presentation mode off and the sidebar's controls back."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{(built / 'index.html').as_uri()}?T=9&seed=5")
    _drawn(page)
    before = _view(page)["version"]
    page.get_by_label("Presentation mode").check()
    _drawn(page, before)
    assert not page.locator("#sidebar").is_visible() and _controls(page)["present"] == "true"
    assert page.locator("#row-controls .control").evaluate_all("rows => rows.map(r => r.dataset.control)") == \
        list(PRESENT_CONTROLS)
    assert _plots(page) == list(PRESENT_VIEWS)
    folder = shots(tmp_path)
    page.screenshot(path=folder / "site-presentation.png")
    page.get_by_role("button", name="Start the lesson").click()
    steps = [step for step in lesson.STEPS if step.page == "energy"]
    for index, step in enumerate(steps):
        where = f"presented step {index + 1}"
        page.locator("#lesson-title").get_by_text(f"step {index + 1} of {len(lesson.STEPS)}: {step.title}").wait_for()
        _drawn(page)
        assert _controls(page)["lesson"] == str(index + 1) and _controls(page)["present"] == "true"
        for selector in ("#lesson-bar", "#beside-say", "#beside-note", "#beside-controls"):
            _on_screen(page, selector, (where, selector))
        assert page.locator("#beside-note").inner_text() == _expected_note(**step.state)[0], where
        shown = page.locator("#beside-controls .control").evaluate_all("rows => rows.map(r => r.dataset.control)")
        assert shown == list(step.used()), where
        assert _plots(page) == list(step.views), where
        for name in step.views:
            _on_screen(page, f".playback [data-name={name}]", (where, name))
        sizes = [px for _, px in page.evaluate(PLOT_TEXT)]
        assert sizes and min(sizes) >= FONT_PX * 1.2, (where, sorted(sizes)[:3])    # larger type for the room
        page.screenshot(path=folder / f"site-presentation-{index + 1}.png")
        if index < len(steps) - 1:
            page.locator("#lesson-next").click()
    page.locator("#lesson-end").click()
    page.wait_for_function("() => document.querySelector('#lesson-bar').hidden")
    _drawn(page)
    assert page.locator("#sidebar").is_visible() and not page.locator("#present").is_checked()
    assert "present" not in _controls(page) and "lesson" not in _controls(page)
    assert (_controls(page)["T"], _controls(page)["seed"]) == ("9", "5")
    assert page.locator("#controls .control").count() == len(EnergyControls.specs())   # every control back home
    page.close()


@pytest.mark.slow
def test_a_held_key_is_drawn_once_it_stops_and_loses_no_press(built, browser):
    """Twenty presses of an arrow key, as fast as the keyboard sends them, on a state that takes tens of
    milliseconds to compute and draw: the presses that arrive while a state is drawn are merged, so the page
    draws far fewer states than presses, and it ends on the state all twenty make, with that state's note."""
    values = dict(layer="block", width=64, seq_len=64, T=16)
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{(built / 'index.html').as_uri()}?{urlencode(values)}")
    _drawn(page)
    thumb = page.locator("input[type=range][aria-label='step size eta']")
    thumb.focus()
    before, draws = _view(page)["version"], page.evaluate("CEMExplorer.page.serial")
    for _ in range(20):
        page.keyboard.press("ArrowRight")
    _drawn(page, before)
    drawn = page.evaluate("CEMExplorer.page.serial") - draws
    assert float(_controls(page)["eta"]) == pytest.approx(2.0)                # 1 + 20 x 0.05: no press lost
    assert _notes(page) == _expected_note(**values, eta=2.0)
    assert 1 <= drawn <= 10, f"{drawn} states drawn for 20 presses"
    page.close()


def test_every_control_is_in_one_group_of_the_sidebar():
    """The app's sidebar and the site's draw EnergyControls.GROUPS: every control once."""
    grouped = [name for names in EnergyControls.GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(EnergyControls.specs())


@pytest.mark.slow
def test_a_links_words_are_shown_as_written_and_a_failed_draw_is_said_and_survived(built, browser):
    """A link's value goes into the message literally, as the app's plain() shows it (`*5*` is not emphasis); a draw
    that fails (Plotly refusing once) is said on the page, and the next change draws again; a link to a lesson step
    of another page opens that page's step."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{(built / 'index.html').as_uri()}?T=*5*")
    _drawn(page)
    assert _messages(page) == [app_link("T=*5*")["error"]]
    assert "*5*" in _messages(page)[0] and page.locator("#messages em").count() == 0
    page.evaluate("""() => { const react = Plotly.react; let once = true;
        Plotly.react = (...args) => { if (once) { once = false; return Promise.reject(new Error("no canvas")); }
                                      return react(...args); }; }""")
    thumb = page.locator("input[type=range][aria-label='steps T']")
    thumb.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function("document.body.dataset.state === 'error'", timeout=30000)
    assert any("no canvas" in m for m in _messages(page))
    before = _view(page)["version"]
    page.keyboard.press("ArrowRight")
    _drawn(page, before)
    assert _controls(page)["T"] == "6" and _view(page)["step"] == 6
    assert _notes(page) == _expected_note(T=6)
    gp_step = next(i + 1 for i, step in enumerate(lesson.STEPS) if step.page != "energy")
    page.goto(f"{(built / 'index.html').as_uri()}?lesson={gp_step}")     # a step of another page: opened there
    page.wait_for_selector("body[data-ready=true]", timeout=60000)
    assert page.url.endswith(f"/gp.html?lesson={gp_step}")
    assert page.locator("#lesson-title").inner_text().startswith(f"Lesson · step {gp_step} of {len(lesson.STEPS)}")
    page.close()


@pytest.mark.slow
def test_a_lesson_step_taken_while_keys_are_drawn_shows_the_steps_state(built, browser):
    """Changes still waiting to be drawn when the lesson starts (three moves of eta in the same task as the click,
    on a state that takes tens of milliseconds) do not leak into its first step: the step's state replaces them."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{(built / 'index.html').as_uri()}?layer=block&width=64&seq_len=64&T=16")
    _drawn(page)
    page.evaluate("""() => {                 // three moves of eta, then the lesson's first step, in one task
        const eta = document.querySelector("input[type=range][aria-label='step size eta']");
        for (const value of ["1.05", "1.1", "1.15"]) {
          eta.value = value;
          eta.dispatchEvent(new Event("input"));
        }
        document.getElementById("lesson-start").click(); }""")
    page.wait_for_function("document.body.dataset.state === 'drawn' && new URLSearchParams(location.search)"
                           ".get('lesson') === '1'", timeout=30000)
    step = next(s for s in lesson.STEPS if s.page == "energy")
    assert {k: v for k, v in _controls(page).items() if k != "lesson"} == {
        k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in step.controls().to_query().items()}
    assert _notes(page) == _expected_note(**step.controls().values())
    page.close()


@pytest.mark.slow
def test_the_site_works_from_a_static_host(built, browser):
    """Served as it is by a plain static server (Python's http.server, as any host serves files): the page draws
    the state its link names, with the note Python writes, and every file it asks for is found."""
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                               str(built)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(re.search(r"port (\d+)", server.stdout.readline())[1])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        missing = []
        page.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
        page.goto(f"http://127.0.0.1:{port}/index.html?T=16&anchor=1.0")
        _drawn(page)
        assert missing == []
        assert _controls(page)["T"] == "16" and _notes(page) == _expected_note(T=16, anchor=1.0)
        page.close()
    finally:
        server.kill()
        server.wait()
