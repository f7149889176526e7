"""The look every Plotly figure of the app shares: the palette, the fonts (legible on a projector), the template,
the axes, a presentation's larger fonts, and the ``meta`` marks of the traces that playback moves.

Builders only draw: their numbers come from cem_core's data functions; their static form (PNG, SVG) is derived from
them by cem_core.ui.static.
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


def faint(color: str, alpha: float) -> str:
    """A PALETTE colour as rgba with this alpha: a band's fill (a trace's opacity leaves a fill opaque)."""
    return f"rgba({int(color[1:3], 16)},{int(color[3:5], 16)},{int(color[5:7], 16)},{alpha})"


TEMPLATE = pio.templates["plotly_white"].to_plotly_json()
FONT_PX = 14          # every plot text at least this size: legible on a projector
TITLE_PX = 17


def figure(*traces) -> go.Figure:
    """A new figure on the white template, which is set without Plotly's validation of the template
    (validating it costs about 13 ms a figure, the most of a page's figure building). Traces without a colour of
    their own take PALETTE's in order, as their static form does (cem_core.ui.static)."""
    return go.Figure(data=list(traces), layout=dict(template=TEMPLATE, colorway=PALETTE), _validate=False)


def layout(fig: go.Figure, title: str, xaxis: str, yaxis: str, log2_x: bool = False,
            height: int | None = None, x: dict | None = None, y: dict | None = None) -> go.Figure:
    """The look every app figure shares: readable fonts, plain or scientific tick labels (Plotly's default
    SI suffixes print 3.5T for 3.5e12, which reads as a step count), thousands separators, and a
    ``uirevision`` so that a redraw with new data keeps the reader's zoom. `x`, `y`: more axis settings.
    One update call: each of Plotly's validated updates costs about a millisecond."""
    ticks = dict(exponentformat="power", separatethousands=True)
    x_axis = dict(title=xaxis) | ticks | (_log2_ticks(fig) if log2_x else {}) | (x or {})
    return fig.update_layout(title=dict(text=title, font_size=TITLE_PX), font_size=FONT_PX,
                             legend_font_size=FONT_PX, height=height, uirevision=title, xaxis=x_axis,
                             yaxis=dict(title=yaxis) | ticks | (y or {}),
                             margin=dict(l=70, r=20, t=60 if "<br>" in title else 45, b=50))


def _log2_ticks(fig: go.Figure) -> dict:
    """A log x axis with a tick at every power of two of the data, labelled as the number itself (1, 2, 4, 8, 16):
    Plotly's own labels at dtick log10(2) are powers of ten rounded to one digit, so 16 read "2x10". The dtick
    stays in the layout, unused by Plotly, so that the static form draws the axis in base 2 (static._axes)."""
    xs = [v for trace in fig.data for v in (trace.x if trace.x is not None else ())
          if isinstance(v, (int, float, np.number)) and np.isfinite(v) and v > 0]
    axis = dict(type="log", dtick=np.log10(2))
    if not xs:
        return axis
    powers = [2 ** k for k in range(math.floor(math.log2(min(xs))), math.ceil(math.log2(max(xs))) + 1)]
    return axis | dict(tickmode="array", tickvals=powers, ticktext=[f"{p:g}" for p in powers])


def legend_below(fig: go.Figure) -> go.Figure:
    """The legend under the axes, for long labels or a figure the app shows in half its width (the plot keeps the
    width)."""
    return fig.update_layout(legend=dict(orientation="h", x=0, y=-0.22, yanchor="top"), margin_b=140, height=560)


def integer_ticks(axis: dict, last: int) -> dict:
    """Integer ticks 0..last on a step or index axis (about six of them at most: a plot may be 270 px wide), never
    1.5."""
    return axis | dict(tickmode="linear", tick0=0, dtick=max(1, -(-last // 6)))


PINNED = dict(color="rgba(40,40,40,0.45)", dash="dash", width=2)      # the pinned state's faint overlay
CURSOR, NOW, WEIGHTS = "cursor", "now", "weights"   # the `meta` of the traces playback moves (to_json drops uids)


def enlarged(fig: go.Figure, scale: float) -> go.Figure:
    """A copy of the figure with every font of its layout `scale` times larger (presentation mode)."""
    def grow(node):
        if isinstance(node, dict):
            return {k: (round(v * scale) if k == "size" and isinstance(v, (int, float)) else grow(v))
                    for k, v in node.items() if k != "template"}
        return [grow(v) for v in node] if isinstance(node, list) else node
    out = go.Figure(fig)
    return out.update_layout(grow(fig.to_plotly_json()["layout"]))
