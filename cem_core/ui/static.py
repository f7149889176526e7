"""The static form of a Plotly figure, drawn by matplotlib: each figure has one builder (in the app's figure
modules: cem_core.ui.descent_figures, gp_figures, lm_figures, ...), and its PNG and SVG for figures/ and the
notebooks are derived from it here, since Plotly's own static export needs a Chromium on the machine
(docs/design.md#74-static-plotly-export-needs-chrome; the app's PNG is Plotly's own, drawn in the reader's browser).

What is translated: scatter traces (lines, markers, both; dashes, widths, open and filled symbols, opacity;
symmetric and asymmetric error bars; a band filled to the trace before it), bars, heatmaps and contours, the
layout's title, axis titles and log axes (base 2 where the ticks step by powers of 2), horizontal and vertical
line shapes, text annotations (in data or in paper coordinates) and a legend inside the axes, which leaves out
traces with ``showlegend=False``.
"""
from __future__ import annotations

import math
import re

import numpy as np
import plotly.graph_objects as go
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from cem_core.ui.figure_style import PALETTE

DASHES = {"dash": "--", "dot": ":", "dashdot": "-.", "longdash": "--", "solid": "-", None: "-"}
SYMBOLS = {"diamond": "D", "square": "s", "triangle-up": "^", "x": "x", "cross": "P", "circle": "o"}
PLAIN = FuncFormatter(lambda value, _: f"{value:g}")   # a log axis's tick as a plain number
PX = 0.75                          # points per CSS pixel: Plotly's widths and sizes are pixels, matplotlib's points


def _colour(value, fallback: str) -> tuple[str, float]:
    """A colour and its alpha from Plotly's '#rrggbb', 'rgba(r,g,b,a)' or a named colour."""
    if not value:
        return fallback, 1.0
    rgba = re.fullmatch(r"rgba?\(([^)]*)\)", str(value).replace(" ", ""))
    if not rgba:
        return str(value), 1.0
    parts = [float(p) for p in rgba.group(1).split(",")]
    return "#" + "".join(f"{int(p):02x}" for p in parts[:3]), parts[3] if len(parts) > 3 else 1.0


def _plain(text) -> str:
    """Plotly's HTML text as matplotlib's: line breaks kept, sub- and superscripts as mathtext (y<sub>j</sub> is
    y$_{j}$, not "yj"), other tags dropped."""
    text = re.sub(r"<su([bp])>(.*?)</su\1>", lambda m: f"$\\mathregular{{{'_' if m[1] == 'b' else '^'}{{{m[2]}}}}}$",
                  (text or "").replace("<br>", "\n"))
    return re.sub(r"<[^>]+>", "", text)


def _errors(error) -> np.ndarray | None:
    if not error or error.array is None or error.visible is False:
        return None
    plus = np.asarray(error.array, dtype=float)
    minus = plus if error.symmetric is not False or error.arrayminus is None else np.asarray(error.arrayminus,
                                                                                                dtype=float)
    return np.vstack([minus, plus])


def _marker(trace) -> dict:
    symbol = str(trace.marker.symbol or "circle")
    shape = SYMBOLS.get(symbol.removesuffix("-open"), "o")
    return dict(marker=shape, ms=(trace.marker.size or 6) * PX, mfc="white" if symbol.endswith("-open") else None)


def _scatter(ax, fig: go.Figure, i: int, trace):
    """One scatter trace: a band filled to the trace before it, or lines and markers with their error bars; the
    artist drawn (None if nothing)."""
    colour, alpha = _colour(trace.line.color or trace.marker.color, PALETTE[i % len(PALETTE)])
    label = trace.name if trace.showlegend is not False and trace.name else None
    x, y = np.asarray(trace.x, dtype=float), np.asarray(trace.y, dtype=float)
    if trace.fill == "tonexty":
        fill, fill_alpha = _colour(trace.fillcolor, colour)
        return ax.fill_between(x, np.asarray(fig.data[i - 1].y, dtype=float), y, color=fill,
                               alpha=fill_alpha if trace.fillcolor else 0.2, lw=0, label=label)
    mode = trace.mode or "lines"
    lines = "lines" in mode and trace.line.width != 0
    if not lines and "markers" not in mode:
        return None
    style = dict(color=colour, alpha=alpha * (1.0 if trace.opacity is None else trace.opacity), label=label,
                 ls=DASHES.get(trace.line.dash, "-") if lines else "none", lw=(trace.line.width or 2) * PX)
    if "markers" in mode:
        style |= _marker(trace)
    errors = _errors(trace.error_y)
    if errors is None:
        return ax.plot(x, y, **style)[0]
    return ax.errorbar(x, y, yerr=errors, capsize=3, **style)


def _grid(ax, mfig, fig: go.Figure, trace) -> None:
    """A bar, heatmap or contour trace."""
    if trace.type == "bar":
        bars = [t for t in fig.data if t.type == "bar"]
        k = bars.index(trace)
        pos = np.arange(len(trace.x)) + (k - (len(bars) - 1) / 2) * 0.8 / len(bars)
        ax.bar(pos, trace.y, width=0.8 / len(bars), label=trace.name, color=PALETTE[k % len(PALETTE)])
        ax.set_xticks(np.arange(len(trace.x)), list(trace.x))
        return
    z = np.asarray(trace.z, dtype=float)
    if trace.type == "heatmap":
        image = ax.imshow(z, origin="upper", cmap="viridis", aspect="auto")
    else:
        image = ax.contourf(np.asarray(trace.x), np.asarray(trace.y), z, levels=25, cmap="viridis")
    mfig.colorbar(image, ax=ax)


def _axes(ax, layout) -> None:
    """Titles and scales: a log axis whose ticks step by log10(2) is drawn in base 2, and one spanning less than
    two decades labels its ticks as plain numbers (5, 6, 7, not 5 x 10^0)."""
    ax.set_title(_plain(layout.title.text), fontsize=11)
    for axis, name in ((layout.xaxis, "x"), (layout.yaxis, "y")):
        getattr(ax, f"set_{name}label")(_plain(axis.title.text))
        if axis.type == "log":
            base2 = axis.dtick is not None and math.isclose(float(axis.dtick), math.log10(2))
            getattr(ax, f"set_{name}scale")("log", **({"base": 2} if base2 else {}))
            low, high = getattr(ax, f"get_{name}lim")()
            if base2 or high < 100 * low:
                getattr(ax, f"{name}axis").set_major_formatter(PLAIN)
                getattr(ax, f"{name}axis").set_minor_formatter(PLAIN)
        if axis.tickvals is not None:                  # ticks named by the figure: those only
            getattr(ax, f"set_{name}ticks")(list(axis.tickvals), None if axis.ticktext is None else
                                            [_plain(t) for t in axis.ticktext])
            getattr(ax, f"{name}axis").set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3)


def _decorations(ax, layout) -> None:
    """Line shapes (vertical and horizontal rules) and text annotations; on a log axis Plotly places an
    annotation at log10 of its x."""
    for shape in layout.shapes:
        colour, _ = _colour(shape.line.color, "0.4")
        style = dict(color=colour, ls=DASHES.get(shape.line.dash, "-"), lw=(shape.line.width or 1) * PX)
        if shape.x0 == shape.x1 and str(shape.yref).endswith("domain"):
            ax.axvline(shape.x0, **style)
        elif shape.y0 == shape.y1 and str(shape.xref).endswith("domain"):
            ax.axhline(shape.y0, **style)
    for note in layout.annotations:
        x = 10 ** note.x if layout.xaxis.type == "log" and note.xref != "paper" else note.x
        y = 10 ** note.y if layout.yaxis.type == "log" and note.yref != "paper" else note.y
        coords = ("axes fraction" if note.xref == "paper" else "data", "axes fraction" if note.yref == "paper"
                  else "data")
        colour, _ = _colour(note.font.color, "0.15")
        ax.annotate(_plain(note.text), (x, y), xycoords=coords, fontsize=7.5, color=colour,
                    ha={"left": "left", "right": "right"}.get(note.xanchor, "center"),
                    va={"top": "top", "bottom": "bottom"}.get(note.yanchor, "center"),
                    xytext=(note.xshift or 0, note.yshift or 0), textcoords="offset points")


def to_matplotlib(fig: go.Figure) -> Figure:
    """The figure drawn by matplotlib (no pyplot: no global backend state), sized from its layout."""
    layout = fig.layout
    mfig = Figure(figsize=((layout.width or 750) / 100, (layout.height or 460) / 100))
    ax = mfig.subplots()
    entries = []                                                       # the legend, in the traces' order
    for i, trace in enumerate(fig.data):
        if trace.type == "scatter":
            artist = _scatter(ax, fig, i, trace)
            label = None if artist is None else artist.get_label()
            if label and not label.startswith("_"):                    # matplotlib's name for an unlabelled one
                entries.append((artist, label))
        elif trace.type in ("bar", "heatmap", "contour"):
            _grid(ax, mfig, fig, trace)
    _axes(ax, layout)
    _decorations(ax, layout)
    drawn = {artist for artist, _ in entries}
    entries += [(h, label) for h, label in zip(*ax.get_legend_handles_labels()) if h not in drawn]   # bars
    if entries:
        ax.legend(*zip(*entries), fontsize=7.5)                 # inside the axes, wherever it covers least
    mfig.tight_layout()
    return mfig
