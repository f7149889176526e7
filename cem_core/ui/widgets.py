"""Jupyter explorers: ipywidgets controls over the app's controls, drawing cem_core's figure data.

The notebooks derive; these only arrange. ``EnergyExplorer`` puts sliders for the energy page's
controls (``EnergyControls``: T, eta, anchor, preconditioner, seed, ...) over one PNG drawn by
``energy_plots.mpl_energy_explorer`` from ``explore.explore``, the same data as the app's energy page, and a
link that opens the app in the same state (with how to start the app when none answers). A
combination the controls refuse shows its reason in place of the figure and the link, never a
traceback. Displayed, an explorer also carries a static PNG of its
current state, which is what GitHub and nbviewer show where widgets do not run.
"""
from __future__ import annotations

import base64
import io

import ipywidgets as widgets
import matplotlib.pyplot as plt

from . import energy_plots, explore
from .controls import EnergyControls
from .links import APP_ADDRESS, app_link, app_running

FIGURE_DPI = 150


def png(fig, dpi: int = FIGURE_DPI) -> bytes:
    """A matplotlib figure as PNG bytes at ``dpi``, cropped to what is drawn (nothing cut off); closes it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _slider(kind: str, allowed, value, description: str):
    style = {"description_width": "initial"}
    if kind == "int":
        return widgets.IntSlider(value=value, min=allowed[0], max=allowed[1], description=description, style=style,
                                 continuous_update=False)
    if kind == "float":
        low, high, *step = allowed
        return widgets.FloatSlider(value=value, min=low, max=high, step=step[0] if step else (high - low) / 100,
                                   description=description, style=style, continuous_update=False)
    if kind == "bool":
        return widgets.Checkbox(value=value, description=description)
    return widgets.Dropdown(options=list(allowed), value=value, description=description, style=style)


class EnergyExplorer:
    """Sliders over ``EnergyControls`` (the names in ``controls``), the figure, and the app link.

    ``EnergyExplorer(T=8, eta=0.5)`` starts from the energy page's defaults with those values changed;
    moving a control redraws (``update``)."""

    CONTROLS = {"T": "steps T", "eta": "step size η", "anchor": "anchor λ", "preconditioner": "preconditioner P",
                "seed": "seed", "layer": "layer"}
    # the sliders' ranges (and step): eta starts above 0, which the controls refuse (no step at all)
    RANGES = {"T": (1, 16), "eta": (0.05, 2.0, 0.05), "anchor": (0.0, 2.0), "seed": (0, 20)}

    def __init__(self, controls=tuple(CONTROLS), **values):
        start = EnergyControls.from_values(**values)          # bad values raise here, before any widget exists
        specs, current = EnergyControls.specs(), start.values()
        self.fixed = {name: value for name, value in current.items() if name not in controls}
        self.controls = {name: _slider(specs[name][0], self.RANGES.get(name, specs[name][1]), current[name],
                                       self.CONTROLS.get(name, name)) for name in controls}
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.message = widgets.HTML()
        self.link = widgets.HTML(layout=widgets.Layout(max_width="100%"))
        self.box = widgets.VBox([widgets.HBox(list(self.controls.values()),
                                              layout=widgets.Layout(flex_flow="row wrap")),
                                 self.message, self.image, self.link])
        for control in self.controls.values():
            control.observe(lambda _: self.update(), names="value")
        self.update()

    def state(self) -> EnergyControls:
        """The controls' current values as validated EnergyControls (ValueError with the reason if refused)."""
        return EnergyControls.from_values(**self.fixed, **{name: w.value for name, w in self.controls.items()})

    def update(self) -> None:
        try:
            state = self.state()
        except ValueError as error:                 # no figure or link of another state stays beneath the reason
            self.message.value = f"<b>This combination is refused:</b> {error}"
            self.image.value, self.link.value, self.url = b"", "", None
            return
        self.message.value = ""
        self.image.value = png(energy_plots.mpl_energy_explorer(explore.explore(state)))
        self.url = url = app_link("energy", state)
        hint = "" if app_running() else (f" <i>No app answers at {APP_ADDRESS}: start it with <code>make app</code> "
                                         "in a terminal at the repository root, then follow the link.</i>")
        self.link.value = (f'<div style="overflow-wrap: anywhere; word-break: break-all">'
                           f'<a href="{url}" target="_blank">Open this state on the app\'s energy page</a> '
                           f'(<code>{url}</code>).{hint}</div>')

    def _repr_mimebundle_(self, **kwargs):
        """The live widget where widgets run, the current figure (PNG) and the link where they do not."""
        bundle = self.box._repr_mimebundle_(**kwargs)
        if self.url is None:
            bundle["text/plain"] = f"EnergyExplorer: this combination is refused: {self.message.value}"
            return bundle
        bundle["image/png"] = base64.b64encode(self.image.value).decode()
        bundle["text/plain"] = f"EnergyExplorer: {self.url}"
        return bundle
