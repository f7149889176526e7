"""The energy page's figures built in the browser (cem_core/web/figures.js) are the ones the app builds in Python:
for states covering every layer, one step and sixteen, a pinned state (same layer, another layer, another width),
both plot styles, a symmetric-log axis, rising tokens, more tokens than coloured lines and several heads,
``CEMFigures.phaseViews`` gives the arguments app_pages/energy.py ``_phase_views`` gives the playback component:
every figure's traces and layout, every frame, the weights, steps, start and pick. The data are Python's
``explore`` (nested lists), so this test does not depend on explore.js; and the app's player draws what the
browser built.

Numbers: |js − py| ≤ 1e-9·|py| + 1e-12·(the largest |value| of the list it is in). The floor is the rounding of a
sum of d ≤ 512 products (the pinned path's projection, ~d·2.2e-16 of the list's scale, summed in another order by
numpy's BLAS): a coordinate that cancels to 1e-15 has no relative precision on either side. Strings, booleans,
keys and lengths exactly; Python's JSON writes a NaN or an infinity as null, which a non-finite JS number matches.
"""
import base64
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from appdriver import CHROMIUM, chromium
from conftest import ROOT, require_system_package
from csv_rows import app_csvs, csv_difference

from cem_core.ui.controls import EnergyControls
from cem_core.ui.energy_mode import PAGE_PLOTS, PRESENT_PLOTS, PlotStyle
from cem_core.ui.explore import explore

pytestmark = pytest.mark.slow          # a real Chromium
require_system_package(CHROMIUM is not None, "the browser test", "chromium", module_level=True)

FIGURES_JS = ROOT / "cem_core" / "web" / "figures.js"
EXPORTS_JS = ROOT / "cem_core" / "web" / "exports.js"      # the downloads: a figure's CSV as the app writes it
PYFORMAT_JS = ROOT / "cem_core" / "web" / "pyformat.js"    # Python's number formats, which figures.js uses
# The page's arrays as CEMExplore gives them: nested lists of numbers (or booleans) become {shape, data}.
PACK_JS = """
globalThis.packed = function packed(x) {
  if (Array.isArray(x)) {
    let leaf = x;
    const shape = [];
    while (Array.isArray(leaf)) { shape.push(leaf.length); leaf = leaf[0]; }
    if (typeof leaf === "number") return {shape, data: Float64Array.from(x.flat(Infinity))};
    if (typeof leaf === "boolean") return {shape, data: Uint8Array.from(x.flat(Infinity))};
    return x.map(packed);
  }
  if (x && typeof x === "object") return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, packed(v)]));
  return x;
};
globalThis.views = ([c, data, pc, pdata, style]) =>
  CEMFigures.phaseViews(c, packed(data), pc, pdata && packed(pdata), style);
globalThis.csvs = state => views(state).map(
  view => Object.fromEntries(view.figures.map(f => [f.name, CEMExports.toCsv(f.figure, f.name)])));
"""


def state(**values) -> dict:
    return EnergyControls.from_values(**values).values()


# name: (the state, the pinned state or None, the style, what the Python figures must show for the case to count)
CASES = {
    "attention default": (state(), None, PAGE_PLOTS, "heatmap"),
    "attention T 1": (state(T=1), None, PAGE_PLOTS, "heatmap"),
    "attention T 16, 16 tokens, 4 heads, head 3": (state(T=16, seq_len=16, heads=4, heat_head=3, token=5), None,
                                                   PAGE_PLOTS, "other tokens"),
    "attention, heat_head past the heads": (state(heads=2, heat_head=7, seed=5, rope=True), None,
                                            PAGE_PLOTS, "heatmap"),
    "mlp": (state(layer="mlp", T=6, activation="gelu"), None, PAGE_PLOTS, "mlp"),
    "block": (state(layer="block", T=16, anchor=1.0), None, PAGE_PLOTS, "two phases"),
    "joint": (state(layer="joint", T=4, diagonal="per_head", diagonal_form="distance"), None, PAGE_PLOTS, "joint"),
    "width 2": (state(width=2, heads=1, T=5), None, PAGE_PLOTS, "true plane"),
    "symmetric log (mlp, eta 20)": (state(layer="mlp", eta=20.0, T=16), None, PAGE_PLOTS, "symmetric log"),
    "rises (dlr, p_scale 2)": (state(preconditioner="dlr", p_scale=2.0, T=8), None, PAGE_PLOTS, "energy rose"),
    "rises and symmetric log, 16 tokens (block)": (
        state(layer="block", preconditioner="dlr", p_scale=2.0, T=8, seq_len=16), None, PAGE_PLOTS,
        "symmetric log"),
    "pinned, same layer": (state(T=16, anchor=1.0, eta=0.25), state(T=4, anchor=1.0, eta=0.25), PAGE_PLOTS,
                           "pinned path"),
    "pinned, same layer, presentation (relative)": (state(T=16, anchor=1.0), state(T=4), PRESENT_PLOTS,
                                                    "relative"),
    "pinned, another width (no path), presentation": (state(T=8), state(width=6, T=3, seq_len=5), PRESENT_PLOTS,
                                                      "no pinned path"),
    "pinned, another layer (no overlay)": (state(layer="block", T=3), state(layer="mlp", T=5), PAGE_PLOTS,
                                           "two phases"),
    "pinned block, relative, 16 tokens": (state(layer="block", T=6, seq_len=16), state(layer="block", T=2, seed=3),
                                          PRESENT_PLOTS, "relative"),
    "pinned, symmetric log": (state(layer="mlp", eta=20.0, T=16), state(layer="mlp", T=4), PAGE_PLOTS,
                              "symmetric log"),
    "pinned, T 1, 3 tokens, presentation": (state(T=1, seq_len=3), state(T=1, seq_len=3, seed=9999),
                                                       PRESENT_PLOTS, "pinned path"),
}


def plain(value):
    """explore's result as JSON-able nested lists (what JavaScript reads)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


def python_views(values: dict, pinned: dict | None, style: PlotStyle) -> list[dict]:
    from app_pages.energy import _phase_views

    return [v["args"] for v in _phase_views(EnergyControls.from_values(**values),
                                            None if pinned is None else EnergyControls.from_values(**pinned), style)]


def js_views(page, values: dict, pinned: dict | None, style: PlotStyle, what: str = "views") -> list[dict]:
    data = plain(explore(EnergyControls.from_values(**values)))
    pinned_data = None if pinned is None else plain(explore(EnergyControls.from_values(**pinned)))
    return page.evaluate(what, [values, data, pinned, pinned_data, vars(style)])


def decoded(node):
    """Plotly's typed-array JSON ({dtype, bdata, shape}) as nested lists, anywhere in a figure."""
    if isinstance(node, dict) and "bdata" in node and "dtype" in node:
        array = np.frombuffer(base64.b64decode(node["bdata"]), dtype=np.dtype(node["dtype"]).newbyteorder("<"))
        return array.reshape(node.get("shape", [-1])).tolist()
    if isinstance(node, dict):
        return {k: decoded(v) for k, v in node.items()}
    return [decoded(v) for v in node] if isinstance(node, list) else node


def _scale(values: list) -> float:
    flat = np.asarray([v for v in np.ravel(np.asarray(values, dtype=object)) if isinstance(v, (int, float))
                       and not isinstance(v, bool)], dtype=float)
    flat = flat[np.isfinite(flat)]
    return float(np.abs(flat).max()) if len(flat) else 0.0


def difference(py, js, path: str, scale: float = 0.0) -> str | None:
    """The first difference between Python's value and JavaScript's, as "path: python … != javascript …" (None:
    equal under the module's rule)."""
    def differs(why=""):
        return f"{path}: python {py!r} != javascript {js!r}{why}"

    if isinstance(py, bool) or isinstance(js, bool):
        return None if py is js else differs()
    if py is None:
        return None if js is None or (isinstance(js, float) and not math.isfinite(js)) else differs()
    if isinstance(py, (int, float)):
        if not isinstance(js, (int, float)):
            return differs()
        if math.isnan(py) or math.isnan(js):
            return None if math.isnan(py) and math.isnan(js) else differs()
        if math.isinf(py) or math.isinf(js):
            return None if py == js else differs()
        return None if abs(js - py) <= 1e-9 * abs(py) + 1e-12 * max(scale, abs(py)) else differs(
            f" (off by {abs(js - py):.3g})")
    if isinstance(py, str):
        return None if py == js else differs()
    if isinstance(py, dict):
        if not isinstance(js, dict) or set(py) != set(js):
            keys = set(js) if isinstance(js, dict) else set()
            return f"{path}: keys only in python {sorted(set(py) - keys)}, only in javascript {sorted(keys - set(py))}"
        return next((d for k in py if (d := difference(py[k], js[k], f"{path}.{k}" if path else k, scale))), None)
    if isinstance(py, list):
        if not isinstance(js, list) or len(py) != len(js):
            return f"{path}: python has {len(py)} items, javascript {len(js) if isinstance(js, list) else js!r}"
        inner = _scale(py)
        return next((d for k, (a, b) in enumerate(zip(py, js)) if (d := difference(a, b, f"{path}[{k}]", inner))),
                    None)
    return differs(" (an unexpected type)")


def view_difference(py: dict, js: dict) -> str | None:
    """The first difference between two phases' playback arguments: figures by name (energy.data[3].y[2]), frames,
    the weights (float32, bit for bit), steps, start, pick; the versions are each side's own hash."""
    if set(py) != set(js):
        return f"keys: python {sorted(py)}, javascript {sorted(js)}"
    names = [f["name"] for f in py["figures"]]
    if names != [f["name"] for f in js["figures"]]:
        return f"figures: python {names}, javascript {[f['name'] for f in js['figures']]}"
    for a, b in zip(py["figures"], js["figures"]):
        if found := difference(decoded(a["figure"]), b["figure"], a["name"]):
            return found
    if found := difference(py["frames"], js["frames"], "frames"):
        return found
    if set(py["arrays"]) != set(js["arrays"]):
        return f"arrays: python {sorted(py['arrays'])}, javascript {sorted(js['arrays'])}"
    for name, spec in py["arrays"].items():
        mine = js["arrays"][name]
        if (spec["dtype"], spec["shape"]) != (mine["dtype"], mine["shape"]):
            return f"arrays.{name}: python {spec['dtype']} {spec['shape']}, javascript {mine['dtype']} {mine['shape']}"
        a, b = (np.frombuffer(base64.b64decode(s["bdata"]), dtype="<f4") for s in (spec, mine))
        if not np.array_equal(a, b, equal_nan=True):
            return f"arrays.{name}: float32 values differ first at {int(np.argmax(~((a == b) | np.isnan(a))))}"
        if spec["bdata"] != mine["bdata"]:
            return f"arrays.{name}.bdata: the same values, written otherwise"
    for key in ("steps", "start", "pick"):
        if found := difference(py[key], js[key], key):
            return found
    return None if isinstance(js["version"], str) and js["version"] else f"version: javascript {js['version']!r}"


def shows(args: list[dict], what: str) -> bool:
    """Whether Python's figures show what a case is there for (so the case keeps covering it)."""
    traces = [t for view in args for f in view["figures"] for t in f["figure"]["data"]]
    names = [t.get("name") or "" for t in traces]
    titles = [f["figure"]["layout"]["title"]["text"] for view in args for f in view["figures"]]
    return {"heatmap": any(t["type"] == "heatmap" for t in traces),
            "other tokens": "other tokens" in names and any(t["type"] == "heatmap" and t["name"] == "head 3"
                                                            for t in traces),
            "mlp": len(args) == 1 and not any(t["type"] == "heatmap" for t in traces),
            "two phases": len(args) == 2,
            "joint": len(args) == 1 and any(t["type"] == "heatmap" for t in traces),
            "true plane": any("true plane" in t for t in titles),
            "symmetric log": any("symmetric log" in t for t in titles),
            "energy rose": "energy rose" in names,
            "pinned path": any(n.startswith("x⁽ᵗ⁾ pinned") for n in names),
            "relative": any(t.startswith("energy from step 0") for t in titles),
            "no pinned path": any(n.startswith("pinned: ") for n in names)
            and not any(n.startswith("x⁽ᵗ⁾ pinned") for n in names)}[what]


@pytest.fixture(scope="module")
def browser():
    with chromium() as running:
        yield running


@pytest.fixture(scope="module")
def page(browser):
    """A page with figures.js and the packing of nested lists."""
    tab = browser.new_page()
    tab.add_script_tag(path=str(PYFORMAT_JS))
    tab.add_script_tag(path=str(FIGURES_JS))
    tab.add_script_tag(path=str(EXPORTS_JS))
    tab.add_script_tag(content=PACK_JS)
    yield tab
    tab.close()


@pytest.mark.parametrize("name", list(CASES))
def test_the_browser_builds_the_playback_arguments_python_builds(page, name):
    values, pinned, style, what = CASES[name]
    py = python_views(values, pinned, style)
    assert shows(py, what), f"{name}: the state no longer shows {what!r}; choose another"
    js = js_views(page, values, pinned, style)
    assert len(js) == len(py), f"{name}: {len(py)} phases in python, {len(js)} in javascript"
    for k, (a, b) in enumerate(zip(py, js)):
        found = view_difference(a, b)
        assert found is None, f"{name}, phase {k}: {found}"


def agree(py: float, js: float, scale: float) -> bool:                 # a CSV's numbers, under the module's rule
    return difference(py, js, "", scale) is None


@pytest.mark.parametrize("name", list(CASES))
def test_the_browsers_downloads_are_the_apps_csv(page, name):
    """Each plot's "CSV" download (cem_core/web/exports.js) holds the rows the app's download button writes
    (exports.to_csv), for every case's figures: the playback's marks left out, heatmaps and contours in long
    format, the breaks between a pinned path's segments dropped, names with a comma quoted."""
    values, pinned, style, _ = CASES[name]
    py = app_csvs(values, pinned, style)
    js = js_views(page, values, pinned, style, "csvs")
    assert [list(p) for p in py] == [list(j) for j in js], f"{name}: the figures downloaded"
    for k, (a, b) in enumerate(zip(py, js)):
        for figure in a:
            found = csv_difference(a[figure], b[figure], f"{name}, phase {k}, {figure}", agree)
            assert found is None, found


def test_a_changed_csv_rule_is_found(browser):
    """The CSV comparison is not blind: with the step numbers written as floats, or a comma left unquoted, the
    comparison names the first cell that differs."""
    source = EXPORTS_JS.read_text()
    values = state(T=16, anchor=1.0, eta=0.25)
    py = app_csvs(values, None, PAGE_PLOTS)[0]
    for before, after, figure, where in (('energy: ["x"], ', "", "energy", "energy row 1 x: '0.0' for '0'"),
                                        ("/[\",\\r\\n]/", "/[\"\\r\\n]/", "landscape", "landscape row ")):
        assert source.count(before) == 1, before
        mutated = browser.new_page()
        try:
            for script in (PYFORMAT_JS, FIGURES_JS):
                mutated.add_script_tag(path=str(script))
            mutated.add_script_tag(content=source.replace(before, after))
            mutated.add_script_tag(content=PACK_JS)
            js = js_views(mutated, values, None, PAGE_PLOTS, "csvs")[0]
        finally:
            mutated.close()
        found = csv_difference(py[figure], js[figure], figure, agree)
        assert found is not None and found.startswith(where), found


def test_the_version_changes_with_the_content_and_only_then(page):
    a, again, other = (js_views(page, v, None, PAGE_PLOTS)[0]["version"] for v in (state(), state(), state(token=2)))
    assert a == again != other


def test_the_mirrored_constants_are_pythons(page):
    """The controls' order and kinds (how a legend writes a state) and the two plot styles."""
    got = page.evaluate("[CEMFigures.CONTROLS, CEMFigures.PAGE_PLOTS, CEMFigures.PRESENT_PLOTS]")
    assert got[0] == [[name, kind] for name, (kind, _) in EnergyControls.specs().items()]
    assert (got[1], got[2]) == (vars(PAGE_PLOTS), vars(PRESENT_PLOTS))


def test_a_legend_names_a_state_as_python_does(page):
    pairs = [(state(T=16, anchor=1.0), state()), (state(), state(T=16, anchor=1.0)), (state(), state()),
             (state(eta=0.05, p_scale=3.0, rope=True, width=10, heads=5), state()),
             (state(layer="joint", activation="relu", diagonal="shared", eta=20.0), state(layer="mlp"))]
    got = page.evaluate("pairs => pairs.map(([a, b]) => CEMFigures.changes(a, b))", pairs)
    assert got == [EnergyControls.from_values(**a).changes(EnergyControls.from_values(**b)) for a, b in pairs]


def test_numbers_are_written_as_python_writes_them(page):
    """format(x, ".3g") and ".4g" (hover texts) and str(x) (a legend's float controls), on a few hundred values:
    tiny, huge, negative, zero, exact ties (100.5, 1.125, 12345: to even) and rounding edges (9.995, 0.00099995)."""
    rng = np.random.default_rng(0)
    values = [0.0, -0.0, 1.0, -1.0, 2.5, 0.125, 0.03125, 12345.0, 123456.0, 9.995, 99.95, 0.00099995, 1e-4,
              9.9995e-5, 1e16, 1e15, 123.0, 0.3, 1e-5, 5e-324, 1.7976931348623157e308, math.inf, -math.inf, math.nan,
              0.1 + 0.2, 1 / 3, 2 ** 53, 0.05, 20.0, 100.5, 1.125, -1.0625, 0.0001234375]
    values += list(rng.normal(size=100) * 10.0 ** rng.integers(-12, 30, 100))
    values += [round(v, int(k)) for v, k in zip(rng.uniform(-10, 10, 100), rng.integers(0, 4, 100))]
    got = page.evaluate("vs => vs.map(v => [CEMFormat.formatG(v, 3), CEMFormat.formatG(v, 4), "
                        "CEMFormat.floatRepr(v)])", [float(v) for v in values])
    assert got == [[format(float(v), ".3g"), format(float(v), ".4g"), str(float(v))] for v in values]


MUTATIONS = [   # (a one-line change to figures.js, a state, where the comparison must find it)
    ('line: {color: "#555", dash: "dot", width: 1.5}', 'line: {color: "#555", dash: "dot", width: 2.5}',
     state(), "energy.data[8].line.width"),
    ("Math.sign(v) * Math.log10(1 + Math.abs(v) / this.c)", "Math.sign(v) * Math.log10(1 + Math.abs(v) / this.c / 2)",
     state(layer="mlp", eta=20.0, T=16), "energy.data[0].y[0]"),
    ("(path.data[t * d + k] - origin.data[k]) * basis.data[j * d + k]",
     "(path.data[t * d + k] - origin.data[k]) * basis.data[j * d + k] * 1.000001",
     state(T=16, anchor=1.0, eta=0.25), "landscape.data[5].x[1]"),
]


@pytest.mark.parametrize("before, after, values, where", MUTATIONS)
def test_a_changed_formula_is_found_and_named(browser, before, after, values, where):
    """The comparison is not blind: figures.js with one formula changed differs from Python where it should."""
    source = FIGURES_JS.read_text()
    assert source.count(before) == 1, before
    pinned = state(T=4, anchor=1.0, eta=0.25) if where.startswith("landscape") else None
    py = python_views(values, pinned, PAGE_PLOTS)[0]
    mutated = browser.new_page()
    try:
        mutated.add_script_tag(path=str(PYFORMAT_JS))
        mutated.add_script_tag(content=source.replace(before, after))
        mutated.add_script_tag(content=PACK_JS)
        js = js_views(mutated, values, pinned, PAGE_PLOTS)[0]
    finally:
        mutated.close()
    found = view_difference(py, js)
    assert found is not None and found.startswith(f"{where}:"), found


def test_the_player_draws_what_the_browser_built(tmp_path, browser):
    """The app's player (app_pages/playback/, opened from file:// with the installed plotly.js) draws the
    arguments figures.js builds: every plot with its traces, steps moved by the keys, no console error; then a
    state with other plots (the MLP: no heatmap) replaces them. The heatmap of a step is the weights figures.js wrote
    (float32, as the player reads them)."""
    from app_pages.playback import FRONTEND, PLOTLY_JS

    folder = tmp_path / "playback"
    shutil.copytree(FRONTEND, folder, ignore=shutil.ignore_patterns("plotly.min.js"))
    shutil.copyfile(PLOTLY_JS, folder / "plotly.min.js")
    player = browser.new_page()
    errors = []
    player.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    player.on("pageerror", lambda e: errors.append(str(e)))
    try:
        player.goto(Path(folder / "index.html").as_uri())
        player.add_script_tag(path=str(PYFORMAT_JS))
        player.add_script_tag(path=str(FIGURES_JS))
        player.add_script_tag(content=PACK_JS)
        for values, pinned in ((state(T=16, seq_len=16, heads=4, heat_head=3), state(T=4)),
                               (state(layer="mlp", eta=20.0, T=16), None)):
            data = [plain(explore(EnergyControls.from_values(**v))) if v else None for v in (values, pinned)]
            args = player.evaluate("""([c, d, pc, pd, style]) => {
                const args = views([c, d, pc, pd, style])[0];
                window.postMessage({type: "streamlit:render", args}, "*");
                return {version: args.version, traces: Object.fromEntries(args.figures.map(
                          f => [f.name, f.figure.data.length])), frames: args.frames, steps: args.steps};
            }""", [values, data[0], pinned, data[1], vars(PRESENT_PLOTS)])
            player.wait_for_function("v => document.body.dataset.version === v", arg=args["version"], timeout=20000)
            drawn = player.evaluate("Object.fromEntries([...document.querySelectorAll('.plot')].map("
                                    "d => [d.dataset.name, d.data.length]))")
            assert drawn == args["traces"]
            assert player.locator(".plot .main-svg").count() >= len(drawn)
            player.keyboard.press("Home")
            player.wait_for_function("document.body.dataset.step === '0'", timeout=10000)
            landscape = player.evaluate("(() => { const d = document.querySelector('.plot[data-name=landscape]');"
                                        "return d.data.find(t => t.meta === 'now').x; })()")
            first = next(u for u in args["frames"][0] if u["figure"] == "landscape")
            assert landscape == pytest.approx(first["x"])
            player.keyboard.press("ArrowRight")
            player.wait_for_function("document.body.dataset.step === '1'", timeout=10000)
            if "heatmap" in drawn:               # step 2 shows its weights, read from the weights figures.js wrote
                player.keyboard.press("ArrowRight")
                expected = np.asarray(data[0]["phases"][0]["weights"], dtype=np.float32)[1, 3]
                player.wait_for_function("""expected => {
                    const d = document.querySelector('.plot[data-name=heatmap]');
                    const z = d.data.find(t => t.type === 'heatmap').z;
                    return z.every((row, i) => Array.from(row).every((v, j) => v === expected[i][j]));
                }""", arg=expected.tolist(), timeout=10000)
        assert not errors, errors
    finally:
        player.close()

