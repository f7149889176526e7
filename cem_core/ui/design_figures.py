"""The design-space page's Plotly figures: grouped bars (parameters, FLOPs, cache) and the preconditioners'
eigenvalues."""
from __future__ import annotations

import plotly.graph_objects as go

from .figure_style import figure, layout


def bar_figure(labels, series: dict, title: str, yaxis: str) -> go.Figure:
    """Grouped bars: one bar group per label, one colour per series."""
    fig = figure()
    for name, values in series.items():
        fig.add_bar(x=list(labels), y=list(values), name=name)
    fig.update_layout(barmode="group")
    return layout(fig, title, "", yaxis)


def eigenvalue_figure(eigs: dict) -> go.Figure:
    """Sorted eigenvalues of each preconditioner P; below zero means a step can raise the energy."""
    fig = figure()
    for name, values in eigs.items():
        fig.add_scatter(x=list(range(1, len(values) + 1)), y=sorted(values), mode="lines+markers", name=name)
    n = max((len(v) for v in eigs.values()), default=1)
    fig.add_scatter(x=[1, n], y=[0.0, 0.0], mode="lines", name="zero", line=dict(color="red", dash="dot"))
    return layout(fig, "Eigenvalues of P", "index (sorted)", "eigenvalue")
