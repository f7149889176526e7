"""The language-model page's Plotly figures: training curves, the LM sweep's validation perplexity and the width
ladders' gap to Llama. The numbers come from cem_core.experiments.lm.report and lm.ladder."""
from __future__ import annotations

import math

import plotly.graph_objects as go

from cem_core.experiments.lm import ladder as lm_ladder
from cem_core.experiments.lm import report as lm_report

from .figure_style import PALETTE, faint, figure, layout, legend_below


def curves_figure(series: dict, title: str, xaxis: str, yaxis: str) -> go.Figure:
    """One line per name: series = {name: (xs, ys)}."""
    fig = figure()
    for i, (name, (xs, ys)) in enumerate(series.items()):
        fig.add_scatter(x=list(xs), y=list(ys), mode="lines+markers" if len(xs) < 20 else "lines", name=name,
                        line=dict(color=PALETTE[i % len(PALETTE)]))
    fig.update_layout(showlegend=True)                                 # Plotly hides the legend of a single line
    return layout(fig, title, xaxis, yaxis)


def lm_sweep_figure(records) -> go.Figure:
    """Validation perplexity against tokens per variant: the mean over seeds, and a band from the lowest
    to the highest seed."""
    fig = figure()
    for i, (name, c) in enumerate(lm_report.validation_curves(records).items()):
        color = PALETTE[i % len(PALETTE)]
        x = [t / 1e6 for t in c["tokens"]]
        fig.add_scatter(x=x, y=c["low"], mode="lines", line=dict(width=0, color=color), showlegend=False,
                        hoverinfo="skip", name=f"{name} lowest seed")
        fig.add_scatter(x=x, y=c["high"], mode="lines", line=dict(width=0, color=color), fill="tonexty",
                        fillcolor=faint(color, 0.2), showlegend=False, hoverinfo="skip", name=f"{name} seeds")
        fig.add_scatter(x=x, y=c["mean"], mode="lines+markers", name=name, line=dict(color=color))
    fig.update_yaxes(type="log")
    return layout(fig, "Validation perplexity (mean over seeds; band: lowest to highest seed)",
                   "tokens trained (millions)", "validation perplexity")


def lm_ladder_figure(records, preset: str = "ladder") -> go.Figure:
    """A width ladder (``lm.ladder.trends``): each CEM variant's gap to Llama against the Llama model's parameters
    (every seed faint, the mean per width with its 95% t-interval) and the line fitted to the width means over the
    widths measured; nothing is drawn beyond them (where a line would reach at the paper's scale is an
    extrapolation, given in the ladder's table only)."""
    fig = figure()
    for i, (name, t) in enumerate(lm_ladder.trends(records, preset).items()):
        color, line, means = PALETTE[i % len(PALETTE)], t["line"], lm_ladder.width_means(t)
        fig.add_scatter(x=means["N"], y=[100 * g for g in means["gap"]], mode="markers", name=lm_ladder.legend(name, t),
                        marker=dict(color=color, size=8),
                        error_y=dict(type="data", symmetric=False, array=[100 * e for e in means["plus"]],
                                     arrayminus=[100 * e for e in means["minus"]]))
        fig.add_scatter(x=[p["N"] for p in t["points"]], y=[100 * p["gap"] for p in t["points"]], mode="markers",
                        name=f"{name} seeds", showlegend=False, opacity=0.6,
                        marker=dict(color=color, size=5, symbol="circle-open"))
        if math.isfinite(line["b"]):
            fitted = lm_ladder.line_points(line, min(means["N"]), max(means["N"]))
            fig.add_scatter(x=fitted["N"], y=[100 * g for g in fitted["gap"]], mode="lines", showlegend=False,
                            line=dict(color=color), name=f"{name} fitted line")
    fig.add_hline(y=0, line=dict(color="#4d4d4d", width=1))
    widths = {w["width"]: w["N"] for t in lm_ladder.trends(records, preset).values() for w in t["widths"]}
    fig.update_xaxes(type="log", tickvals=list(widths.values()),
                     ticktext=[f"{n / 1e3:,.0f}K (d = {w})" for w, n in widths.items()])
    title = f"{lm_ladder.LADDERS[preset].capitalize()}: gap to Llama per width (mean ± 95% t-interval)"
    return legend_below(layout(fig, title, "Llama parameters at the width (log scale)",
                          "gap to Llama, ppl / ppl(Llama) − 1 (%)"))


def lm_budget_ladder_figure(records) -> go.Figure:
    """The width ladder at the paper's budget (``lm sweep --preset budget-ladder``), as ``lm_ladder_figure``."""
    return lm_ladder_figure(records, "budget-ladder")
