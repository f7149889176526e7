"""Step playback's data (cem_core.ui.playback): every frame moves the traces it names to step t's values, the
weights travel intact, and the pinned state's overlay lies in the current landscape's plane."""
import base64
import json

import numpy as np
import pytest

from cem_core.ui import descent_figures, playback, symlog
from cem_core.ui.controls import EnergyControls
from cem_core.ui.explore import explore


def _figures(c: EnergyControls, pinned=None):
    data = explore(c)
    phase, token = data["phases"][0], data["token"]
    other = None if pinned is None else explore(pinned)["phases"][0]
    names = None if pinned is None else (c.changes(pinned), pinned.changes(c))
    figures = {
        "energy": descent_figures.per_token_figure(phase["energies"], "E", "energy", rose=phase["rose"], token=token,
                                               pinned=None if other is None else other["energies"], names=names),
        "norm": descent_figures.per_token_figure(phase["update_norms"], "n", "norm", first_step=1, token=token),
        "landscape": descent_figures.landscape_figure(
            phase["landscape"], token, pinned=None if other is None else playback.pinned_path(phase, other),
            names=names),
        "heatmap": None if phase["weights"] is None else descent_figures.attention_heatmap_figure(
            phase["weights"], len(phase["weights"]), 1, token=token)}
    return phase, token, figures, other


@pytest.mark.slow
@pytest.mark.parametrize("values", [dict(T=16), dict(T=3, seq_len=24, token=5), dict(layer="mlp", T=6)])
def test_each_frame_moves_the_named_traces_to_step_t(values):
    c = EnergyControls.from_values(**values)
    phase, token, figures, _ = _figures(c)
    view = playback.view(phase, figures, token, 1)
    T = c.cem.T
    assert len(view["frames"]) == T + 1 == view["steps"] + 1 and view["start"] == T
    shown = {f["name"]: f["figure"] for f in view["figures"]}
    assert set(shown) == {n for n, f in figures.items() if f is not None}
    energies = symlog.SymLog.on_axis(phase["energies"], None)[0]      # the values on each plot's axis (symlog
    norms = symlog.SymLog.on_axis(phase["update_norms"], None)[0]      # where they span orders of magnitude)
    for t, frame in enumerate(view["frames"]):
        for update in frame:
            metas = [trace.get("meta") for trace in shown[update["figure"]]["data"]]
            assert update["meta"] in metas, (t, update)                 # the browser finds every trace it moves
        by = {(u["figure"], u["meta"]): u for u in frame}
        assert by["energy", "cursor"]["x"] == [t, t]
        assert by["energy", "now"]["y"] == [pytest.approx(energies[t, token])]
        assert by["norm", "now"]["y"] == ([] if t == 0 else [pytest.approx(norms[t - 1, token])])
        np.testing.assert_allclose([by["landscape", "now"]["x"][0], by["landscape", "now"]["y"][0]],
                                   phase["landscape"]["trajectory"][t])
        if phase["weights"] is not None:
            assert by["heatmap", "weights"]["z"] == {"array": "weights", "index": max(t, 1) - 1}
            assert f"step {t} of {T}" in by["heatmap", "weights"]["title"] or t == 0


def test_the_weights_travel_as_float32_and_decode_back():
    c = EnergyControls.from_values(T=5, seq_len=6)
    phase, token, figures, _ = _figures(c)
    spec = playback.view(phase, figures, token, 1)["arrays"]["weights"]
    weights = np.frombuffer(base64.b64decode(spec["bdata"]), dtype="<f4").reshape(spec["shape"])
    np.testing.assert_allclose(weights, phase["weights"][:, 1], atol=1e-7)


def _view(**values) -> dict:
    phase, token, figures, _ = _figures(EnergyControls.from_values(**values))
    return playback.view(phase, figures, token, 0)


@pytest.mark.slow
def test_the_version_changes_with_the_state_and_only_then():
    a = _view(T=4)
    assert _view(T=4)["version"] == a["version"]
    assert _view(T=5)["version"] != a["version"]
    assert _view(T=4, token=2)["version"] != a["version"]
    json.dumps(a)                                                      # what Streamlit sends must be JSON


@pytest.mark.slow
def test_the_followed_token_is_bold_and_every_point_names_its_token():
    for n in (8, 24):                                                  # coloured lines, and one grey trace
        c = EnergyControls.from_values(seq_len=n, token=3)
        _, token, figures, _ = _figures(c)
        assert token == 3
        fig = figures["energy"]
        bold = [t for t in fig.data if t.name == "token 3"]
        assert len(bold) == 1 and bold[0].line.width >= 3
        for trace in fig.data:
            if trace.meta is None and trace.customdata is not None:
                for x, k in zip(trace.x, trace.customdata):
                    assert x is None or k is None or 0 <= k < n
        assert {k for t in fig.data if t.customdata is not None for k in t.customdata if k is not None} == set(range(n))
        shape, = figures["heatmap"].layout.shapes                     # the followed row is framed
        assert (shape.y0, shape.y1) == (2.5, 3.5)
        assert "token 3" in figures["landscape"].layout.title.text


@pytest.mark.slow
def test_pinned_overlay_names_both_states_and_lies_in_this_plane():
    now, pinned = EnergyControls.from_values(T=16, anchor=1.0, eta=0.25), EnergyControls.from_values(
        T=1, anchor=1.0, eta=0.25)
    phase, _, figures, other = _figures(now, pinned)
    names = [t.name for t in figures["energy"].data if t.name]
    assert "pinned: T 1" in names and "now: T 16" in names
    path = playback.pinned_path(phase, other)
    land = phase["landscape"]
    residual = other["path"] - (land["origin"] + path @ land["basis"])   # what the plane cannot show of the path
    np.testing.assert_allclose(residual @ land["basis"].T, 0.0, atol=1e-10)   # is orthogonal to it: a projection
    np.testing.assert_allclose(path[:2], land["trajectory"][:2], atol=1e-10)   # same first step: same points
    assert playback.pinned_path(phase, explore(EnergyControls.from_values(width=6))["phases"][0]) is None
    assert any(t.name and t.name.startswith("x⁽ᵗ⁾ pinned") for t in figures["landscape"].data)


def test_changes_name_what_differs():
    a, b = EnergyControls.from_values(T=16, anchor=1.0), EnergyControls()
    assert a.changes(b) == "T 16, anchor 1.0" and b.changes(a) == "T 4, anchor 0.0"
    assert a.changes(a) == "the same state"


def test_the_playback_script_names_the_plotly_js_it_was_written_for_and_that_is_the_one_installed():
    """The playback reads Plotly's drawing beyond its public API (an axis's c2p through _fullLayout, the
    .scatterlayer and .heatmaplayer nodes), so a Plotly upgrade could break it in silence. The script names the
    plotly.js it was written against and, on another, says so above the plots; this test fails when the installed
    plotly package brings another plotly.js, so the upgrade is checked before it ships."""
    import re
    from pathlib import Path

    import plotly

    root = Path(__file__).resolve().parents[1]
    script = (root / "cem_core" / "web" / "player.js").read_text()    # the drawing core of the app and the site
    written_for = re.search(r'const PLOTLY_WRITTEN_FOR = "([\d.]+)";', script).group(1)
    bundled = (Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js").read_text()[:300]
    assert re.search(r"plotly\.js v([\d.]+)", bundled).group(1) == written_for
    assert "Plotly.version !== PLOTLY_WRITTEN_FOR" in script


@pytest.mark.slow                      # a browser
def test_on_another_plotly_js_the_playback_says_so_above_the_plots(tmp_path):
    """The component's page, opened with its script expecting another plotly.js: a warning above the plots names
    both versions (the installed one is what the page runs)."""
    import re
    import shutil
    from pathlib import Path

    from appdriver import chromium

    from app_pages.playback import COPIED, FRONTEND

    folder = tmp_path / "playback"
    shutil.copytree(FRONTEND, folder, ignore=shutil.ignore_patterns(*COPIED))
    for name, source in COPIED.items():
        shutil.copyfile(source, folder / name)
    script = folder / "player.js"
    written_for = re.search(r'const PLOTLY_WRITTEN_FOR = "([\d.]+)";', script.read_text()).group(1)
    script.write_text(script.read_text().replace(f'"{written_for}";', '"0.0.1";', 1))
    with chromium() as browser:
        page = browser.new_page()
        page.goto(Path(folder / "index.html").as_uri())
        warning = page.locator("#plotly-version")
        warning.wait_for(timeout=10000)
        version = page.evaluate("Plotly.version")
        assert version == written_for
        assert f"written for plotly.js 0.0.1 and this page runs {written_for}" in warning.inner_text()
