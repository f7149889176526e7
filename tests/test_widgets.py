"""The Jupyter explorers (cem_core.ui.widgets): a control's callback redraws the figure from the same data
as the app's energy page, a refused combination shows its reason instead of a figure, and the app link
opens the app in the explorer's state; the notebooks link to the app and the app to the notebooks
(cem_core.ui.links)."""
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlparse

import pytest

from cem_core.ui import links, widgets
from cem_core.ui.controls import DesignControls, EnergyControls, GPControls


def test_moving_a_slider_redraws_the_figure_and_the_link():
    explorer = widgets.EnergyExplorer(T=2)
    before = bytes(explorer.image.value)
    assert before.startswith(b"\x89PNG") and "T=2" in explorer.link.value
    explorer.controls["T"].value = 8                      # what dragging the slider does: the callback runs
    assert bytes(explorer.image.value) != before
    assert explorer.state().cem.T == 8 and "T=8" in explorer.link.value and explorer.message.value == ""
    explorer.controls["anchor"].value = 1.0
    assert explorer.state().cem.anchor == 1.0


def test_a_refused_combination_shows_its_reason_and_keeps_the_last_figure():
    explorer = widgets.EnergyExplorer(controls=("T", "width", "seq_len"), T=16, seq_len=256)
    before = bytes(explorer.image.value)
    explorer.controls["width"].value = 512                # too large for an interactive page (COST_LIMIT)
    assert "refused" in explorer.message.value and "too large" in explorer.message.value
    assert bytes(explorer.image.value) == before
    explorer.controls["width"].value = 16                 # back within the limit: drawn again, no message
    assert explorer.message.value == "" and bytes(explorer.image.value) != before


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


@pytest.mark.slow                      # every app page
def test_every_app_page_links_to_the_notebooks_behind_it():
    from conftest import run_page

    for page, names in links.PAGE_NOTEBOOKS.items():
        assert all((NOTEBOOKS / f"{name}.py").exists() for name in names), page
        at = run_page(page)
        assert not at.exception
        shown = " ".join(caption.value for caption in at.caption)
        assert all(f"notebooks/{name}.ipynb" in shown and links.notebook_link(name) in shown for name in names), page
