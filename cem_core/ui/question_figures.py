"""The figures of the two questions our results raise (docs/results-lm.md): the tie ladder's gap to Llama per
variant and width (``experiments.lm.tie_ladder``), and the test-time study's metric along test-time T per regime
(``experiments.test_time``). One Plotly builder each; figures/ and the notebooks draw their static forms."""
from __future__ import annotations

import math

import plotly.graph_objects as go

from cem_core.experiments import test_time
from cem_core.experiments.lm import ladder, tie_ladder

from .figure_style import PALETTE, figure, layout, legend_below


def tie_ladder_figure(records) -> go.Figure:
    """Each variant's perplexity gap to Llama at each width: the mean over seeds with its 95% t-interval (one
    marker per width, side by side), the variants along x in the ladder's order, 0 (Llama) as a rule."""
    fig = figure()
    trends = ladder.trends(records, tie_ladder.PRESET)
    names = list(trends)
    widths = sorted({w["width"] for t in trends.values() for w in t["widths"]})
    for k, width in enumerate(widths):
        rows = [(names.index(name), w) for name, t in trends.items() for w in t["widths"]
                if w["width"] == width and math.isfinite(w["mean"])]
        gap = [100 * math.expm1(w["mean"]) for _, w in rows]
        plus = [100 * (math.expm1(w["high"]) - math.expm1(w["mean"])) if math.isfinite(w["high"]) else 0.0
                for _, w in rows]
        minus = [100 * (math.expm1(w["mean"]) - math.expm1(w["low"])) if math.isfinite(w["low"]) else 0.0
                 for _, w in rows]
        offset = 0.15 * (k - (len(widths) - 1) / 2)
        fig.add_scatter(x=[i + offset for i, _ in rows], y=gap, mode="markers", name=f"d = {width}",
                        marker=dict(color=PALETTE[k % len(PALETTE)], size=9),
                        error_y=dict(type="data", symmetric=False, array=plus, arrayminus=minus))
    fig.add_hline(y=0, line=dict(color="#4d4d4d", width=1))
    fig.update_xaxes(tickvals=list(range(len(names))), ticktext=[name.replace(", ", "<br>") for name in names])
    return legend_below(layout(fig, "The tie ladder: gap to Llama per variant (mean ± 95% t-interval over seeds)",
                               "", "gap to Llama, ppl / ppl(Llama) − 1 (%)"))


def test_time_figure(task: str, records, condition: str | None = None) -> go.Figure:
    """One condition of the test-time study: each regime's mean metric (RMSE over the GP optimum's, or validation
    perplexity) along test-time T', with the 95% t-interval of its paired change from the trained T as error
    bars, and the trained T marked."""
    fig = figure()
    T = test_time.TRAINED_T[task]
    for k, ((cond, regime), c) in enumerate(test_time.curves(task, records).items()):
        if condition is not None and cond != condition:
            continue
        lost = f" (not finite at T' = {', '.join(map(str, c['not_finite']))})" if c["not_finite"] else ""
        fig.add_scatter(x=c["T"], y=c["value"], mode="lines+markers", name=f"{regime}: {c['verdict']}{lost}",
                        line=dict(color=PALETTE[list(test_time.REGIMES).index(regime) % len(PALETTE)]),
                        error_y=dict(type="data", symmetric=False, array=c["plus"], arrayminus=c["minus"]))
    fig.add_vline(x=T, line=dict(color="#4d4d4d", width=1, dash="dot"))
    fig.add_annotation(x=math.log10(T), y=1, yref="paper", text=f"trained T = {T}", showarrow=False, xanchor="left",
                       yanchor="top")                 # on a log axis Plotly places x at 10^x
    where = f"GP, {condition}" if task == "gp" else "LM, CEM attention T = 2 at d = 64"
    metric = "RMSE / GP optimum" if task == "gp" else "validation perplexity"
    if task == "lm":
        fig.update_yaxes(type="log")
    return legend_below(layout(fig, f"Test-time steps, {where}",
                               "test-time steps T' (log scale)", metric, log2_x=True))


def gp_test_time_base(records) -> go.Figure:
    return test_time_figure("gp", records, "base")


def gp_test_time_joint_long(records) -> go.Figure:
    return test_time_figure("gp", records, "joint long")


def lm_test_time(records) -> go.Figure:
    return test_time_figure("lm", records)
