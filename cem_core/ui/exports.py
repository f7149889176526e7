"""The files behind the app's download buttons: a Plotly figure as an HTML page that works offline (plotly.js
embedded) and its data as CSV rows (its PNG is cem_core.ui.static's)."""
from __future__ import annotations

import csv
import io

import numpy as np
import plotly.graph_objects as go

from .figure_style import CURSOR, NOW


def to_html(fig: go.Figure) -> str:
    return fig.to_html(include_plotlyjs=True, full_html=True)


def figure_rows(fig: go.Figure) -> list[dict]:
    """The data behind a figure as long-format rows: trace, x, y (and z for heatmaps/contours)."""
    rows = []
    for trace in fig.data:
        if trace.meta in (CURSOR, NOW):                                  # playback's marks repeat the data
            continue
        name = trace.name or trace.type
        if trace.type in ("heatmap", "contour"):
            z = np.asarray(trace.z)
            xs = trace.x if trace.x is not None else range(z.shape[1])
            ys = trace.y if trace.y is not None else range(z.shape[0])
            rows += [{"trace": name, "x": x, "y": y, "z": float(z[i, j])}
                     for i, y in enumerate(ys) for j, x in enumerate(xs)]
        else:
            rows += [{"trace": name, "x": x, "y": y} for x, y in zip(trace.x, trace.y) if x is not None]   # not breaks
    return rows


def to_csv(fig: go.Figure) -> str:
    rows = figure_rows(fig)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["trace", "x", "y", "z"], extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
