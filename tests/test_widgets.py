"""The Jupyter explorers (cem_core.ui.widgets): a control's callback redraws the figure from the same data
as the app's energy page, a refused combination shows its reason instead of a figure, and the app link
opens the app in the explorer's state; the notebooks link to the app and the app to the notebooks
(cem_core.ui.links)."""
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlparse

import pytest

from cem_core.ui import links, widgets
from cem_core.ui.controls import EnergyControls
from cem_core.ui.design_controls import DesignControls
from cem_core.ui.gp_controls import GPControls


@pytest.mark.slow
def test_moving_a_slider_redraws_the_figure_and_the_link():
    explorer = widgets.EnergyExplorer(T=2)
    before = bytes(explorer.image.value)
    assert before.startswith(b"\x89PNG") and "T=2" in explorer.link.value
    explorer.controls["T"].value = 8                      # what dragging the slider does: the callback runs
    assert bytes(explorer.image.value) != before
    assert explorer.state().cem.T == 8 and "T=8" in explorer.link.value and explorer.message.value == ""
    explorer.controls["anchor"].value = 1.0
    assert explorer.state().cem.anchor == 1.0


@pytest.mark.slow
def test_a_refused_combination_shows_its_reason_in_place_of_the_figure_and_the_link():
    """No figure or link of the previous state stays under the reason (they would show another state)."""
    explorer = widgets.EnergyExplorer(controls=("T", "width", "seq_len"), T=16, seq_len=256)
    before = bytes(explorer.image.value)
    explorer.controls["width"].value = 512                # too large for an interactive page (COST_LIMIT)
    assert "refused" in explorer.message.value and "too large" in explorer.message.value
    assert bytes(explorer.image.value) == b"" and explorer.link.value == ""
    bundle = explorer._repr_mimebundle_()
    assert "image/png" not in bundle and "refused" in bundle["text/plain"]
    explorer.controls["width"].value = 16                 # back within the limit: drawn again, no message
    assert explorer.message.value == "" and bytes(explorer.image.value) not in (b"", before)
    assert "width=16" in explorer.link.value


@pytest.mark.slow
def test_the_step_size_slider_starts_above_zero():
    """eta = 0 is refused (no step at all): the slider cannot reach it."""
    explorer = widgets.EnergyExplorer(controls=("eta",))
    assert explorer.controls["eta"].min > 0
    with pytest.raises(ValueError, match="eta"):
        EnergyControls.from_values(eta=0.0)
    explorer.controls["eta"].value = 0.0                  # ipywidgets clamps to the minimum
    assert explorer.controls["eta"].value == explorer.controls["eta"].min and explorer.message.value == ""


@pytest.mark.slow
def test_the_link_wraps_and_says_how_to_start_the_app_when_none_runs(monkeypatch):
    monkeypatch.setattr(widgets, "app_running", lambda: False)
    explorer = widgets.EnergyExplorer(T=2)
    assert "overflow-wrap: anywhere" in explorer.link.value and "make app" in explorer.link.value
    monkeypatch.setattr(widgets, "app_running", lambda: True)
    explorer.controls["T"].value = 3
    assert "make app" not in explorer.link.value and "T=3" in explorer.link.value


def test_app_running_tells_a_listening_port_from_a_closed_one(monkeypatch):
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setattr(links, "APP_ADDRESS", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert links.app_running()
    assert not links.app_running()                        # the same port, now closed


@pytest.mark.slow
def test_the_explorer_figure_shows_step_lengths_for_attention_and_the_mlp():
    """Four panels at notebook width: energy and step length for every layer; weights (attention) or the
    radius (MLP) in the fourth; labels in rendered maths."""
    from cem_core.ui import energy_plots, explore

    for layer, fourth in (("attention", "attention weights at the last step (head 0)"),
                          ("mlp", "radius of every token")):
        fig = energy_plots.mpl_energy_explorer(explore.explore(EnergyControls.from_values(layer=layer, T=4)))
        axes = [ax for ax in fig.axes if ax.get_title()]
        titles = [ax.get_title() for ax in axes]
        assert titles[1] == "step length of every token" and titles[3] == fourth, titles
        assert len(axes[1].lines[0].get_xdata()) == 4                  # one length per step
        assert axes[0].get_ylabel().startswith("$") and fig.get_size_inches()[0] <= 11
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_bad_starting_values_raise_before_any_widget():
    with pytest.raises(ValueError, match="T"):
        widgets.EnergyExplorer(T=0)


def test_the_app_link_round_trips_through_the_app_controls():
    state = EnergyControls.from_values(T=6, eta=0.25, anchor=0.5, seed=3)
    url = urlparse(links.app_link("energy", state))
    assert f"{url.scheme}://{url.netloc}" == links.APP_ADDRESS and url.path == "/"
    assert EnergyControls.from_query(dict(parse_qsl(url.query))) == state
    assert links.app_link("gp") == f"{links.APP_ADDRESS}/gp"
    with pytest.raises(ValueError, match="page"):
        links.app_link("nowhere")


@pytest.mark.slow
def test_displayed_explorer_carries_a_static_figure_for_github():
    bundle = widgets.EnergyExplorer(T=3)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    import base64
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")


# -- links between the notebooks and the app -----------------------------------------------------------

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PAGE_CONTROLS = {"": EnergyControls, "design": DesignControls, "gp": GPControls}


def test_every_notebook_links_to_the_app_in_a_state_the_app_accepts():
    """Each notebook links to at least one app page; every link's query is a valid state of that page
    (the controls accept it; the LM page has no controls in its URL)."""
    for source in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py")):
        urls = re.findall(re.escape(links.APP_ADDRESS) + r"/([a-z]*)(?:\?([^)\s>\"'`]*))?", source.read_text())
        assert urls, f"{source.name} links to no app page"
        for path, query in urls:
            assert path in links.APP_PATHS.values(), f"{source.name}: no app page {path!r}"
            if query:
                PAGE_CONTROLS[path].from_query(dict(parse_qsl(query, strict_parsing=True)))   # raises if refused


def test_every_app_link_in_the_notebooks_says_it_needs_the_app():
    """Outside the machine that runs `make app` (GitHub, nbviewer, a classroom) a link to localhost is dead:
    every Markdown link to the app says on hover how to start it, and no bare app URL is left."""
    for source in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py")):
        markdown = "\n".join(line for line in source.read_text().splitlines() if line.startswith("#"))
        urls = re.findall(re.escape(links.APP_ADDRESS) + r"[^\s)\"]*", markdown)
        hinted = re.findall(r"\]\(" + re.escape(links.APP_ADDRESS) +   # the title may start the next line
                            r"[^\s)\"]*\s+(?:# )?\"needs the app: run make app first\"\)", markdown)
        assert urls and len(hinted) == len(urls), f"{source.name}: {len(urls) - len(hinted)} app links without the hint"


@pytest.mark.slow                      # every app page
def test_every_app_page_links_to_the_notebooks_behind_it():
    from conftest import run_page

    for page, names in links.PAGE_NOTEBOOKS.items():
        assert all((NOTEBOOKS / f"{name}.py").exists() for name in names), page
        at = run_page(page)
        assert not at.exception
        shown = " ".join(caption.value for caption in at.caption)
        assert all(f"notebooks/{name}.ipynb" in shown and links.notebook_link(name) in shown for name in names), page


@pytest.mark.parametrize("url,address", [
    ("http://lab.example:9000/cem/gp?x=1", "http://lab.example:9000/cem"),   # a base path, the GP page
    ("http://127.0.0.1:8501/", "http://127.0.0.1:8501"), ("http://127.0.0.1:8501", "http://127.0.0.1:8501"),
    ("https://school.example/cem/", "https://school.example/cem"), ("http://h:1/design", "http://h:1"),
    ("http://h:1/lm?lesson=2", "http://h:1")])
def test_the_served_address_is_read_from_the_url_the_page_was_opened_at(url, address):
    from cem_core.ui.links import served_address

    assert served_address(url) == address


@pytest.mark.parametrize("url", ["", "localhost:8501", "file:///tmp/app", "/gp"])
def test_a_url_that_is_not_an_app_address_is_refused(url):
    from cem_core.ui.links import served_address

    with pytest.raises(ValueError, match="must be an absolute http"):
        served_address(url)
