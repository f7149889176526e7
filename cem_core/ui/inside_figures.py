"""The Plotly figures of the page "Inside a trained model": a GP model's prediction after step t, its RMSE per step,
and what test-time T does over the held-out functions."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from .figure_style import CURSOR, NOW, PALETTE, PINNED, figure, integer_ticks, layout


def inside_curve_title(data: dict, t: int) -> str:
    """The GP curve's title at step t of the shown CEM layer (``gp.inspect.inspect_function``'s data)."""
    if not data["layers"]:
        return f"Prediction, {data['context']} points seen (no in-layer steps)"
    return f"Prediction after step {t} of {data['layers'][0]['T']}, {data['context']} points seen"


def inside_curve_figure(data: dict, step: int | None = None, pinned: dict | None = None,
                        names: tuple[str, str] | None = None, height: int | None = None,
                        legend: str = "below") -> go.Figure:
    """A trained GP model's prediction f̂ with its first CEM layer stopped after step `step` (default the last),
    against the GP posterior mean ± 2 sd, the truth and the K context points; ``pinned`` (another state's data):
    its final prediction, faint and dashed, with `names` (now, pinned) in the legend."""
    grid, mean, sd = (np.asarray(data[k]) for k in ("grid", "posterior_mean", "posterior_sd"))
    layer = data["layers"][0] if data["layers"] else None
    step = (layer["T"] if layer else 0) if step is None else step
    fig = figure()                     # (lists, not arrays: the browser then holds plain arrays, as playback sends)
    grid = grid.tolist()
    fig.add_scatter(x=grid, y=(mean + 2 * sd).tolist(), mode="lines", line=dict(width=0), showlegend=False,
                    name="upper", hoverinfo="skip")
    fig.add_scatter(x=grid, y=(mean - 2 * sd).tolist(), mode="lines", line=dict(width=0), fill="tonexty",
                    fillcolor="rgba(31,119,180,0.18)", name="GP ± 2 sd", hoverinfo="skip")
    if data["truth"] is not None:                                     # a drawn function (a learner's points: none)
        fig.add_scatter(x=grid, y=data["truth"], mode="lines", name="true f", line=dict(color="black", dash="dot"))
    fig.add_scatter(x=grid, y=mean.tolist(), mode="lines", name="GP mean", line=dict(color=PALETTE[0], width=2.5))
    if pinned is not None:
        fig.add_scatter(x=pinned["grid"], y=pinned["prediction"], mode="lines", name=f"pinned: {names[1]}",
                        line=PINNED)
    fig.add_scatter(x=grid, y=layer["prediction"][step] if layer else data["prediction"], mode="lines", meta=NOW,
                    name="model" if pinned is None else f"now: {names[0]}", line=dict(color=PALETTE[3], width=3))
    fig.add_scatter(x=data["context_x"], y=data["context_y"], mode="markers", name=f"context ({data['context']})",
                    marker=dict(color="black", size=9))
    seen = data["context_y"] if data["truth"] is None else data["truth"]   # a learner's points stay on the plot
    top = float(np.max(np.abs(np.concatenate([mean + 2 * sd, mean - 2 * sd, np.asarray(seen, dtype=float)]))))
    layout(fig, inside_curve_title(data, step), "x", "y", height=height, x=dict(range=[grid[0], grid[-1]]),
            y=dict(range=[-1.2 * top, 1.2 * top]))                    # fixed axes: a step redraws no autorange
    return inside_legend(fig, legend)


def inside_legend(fig: go.Figure, where: str) -> go.Figure:
    """The inside page's legends: to the "right" of the plot (presentation mode: its few entries beside a tall
    plot), or "below" it (the page: room across for long names, such as a pinned state's)."""
    if where == "right":
        return fig.update_layout(legend=dict(x=1.02, y=1, yanchor="top", orientation="v"), margin_r=10)
    return fig.update_layout(legend=dict(x=0, y=-0.2, yanchor="top", orientation="h"), margin_b=110)


def inside_rmse_figure(data: dict, step: int | None = None, pinned: dict | None = None,
                       names: tuple[str, str] | None = None, height: int | None = None,
                       legend: str = "below") -> go.Figure:
    """The RMSE of the prediction after each step t to the posterior mean and to the truth (first CEM layer), the
    trained T marked; a cursor and markers at step `step` (playback moves them). ``pinned``: the other state's
    RMSE to the posterior mean per step, dashed. A model without steps is a level line across the other's."""
    layer = data["layers"][0] if data["layers"] else None
    other = None if pinned is None or not pinned["layers"] else pinned["layers"][0]["rmse_to_posterior"]
    steps = list(range(layer["T"] + 1)) if layer else [0, max(1, len(other or ()) - 1)]
    posterior = layer["rmse_to_posterior"] if layer else [data["rmse_to_posterior"]] * 2
    truth = None if data["truth"] is None else layer["rmse_to_truth"] if layer else [data["rmse_to_truth"]] * 2
    step = (steps[-1] if layer else 0) if step is None else step
    fig = figure()
    fig.add_scatter(x=steps, y=posterior, mode="lines+markers", name="to GP mean",
                    line=dict(color=PALETTE[0], width=3))
    if truth is not None:
        fig.add_scatter(x=steps, y=truth, mode="lines+markers", name="to true f",
                        line=dict(color="black", width=1.5), marker=dict(size=5))
    values = posterior + (truth or [])
    if pinned is not None:
        xs = list(range(len(other))) if other else [steps[0], steps[-1]]
        ys = other or [pinned["rmse_to_posterior"]] * 2
        fig.add_scatter(x=xs, y=ys, mode="lines", name=f"pinned: {names[1]}", line=PINNED)
        values += ys
        steps = sorted(set(steps) | set(xs))
    finite = [v for v in values if math.isfinite(v)] or [0.0, 1.0]
    if layer:
        fig.add_scatter(x=[data["trained_T"]] * 2, y=[min(finite), max(finite)], mode="lines",
                        name=f"trained T={data['trained_T']}", hoverinfo="skip",
                        line=dict(color="#888", dash="dash", width=1.5))
    fig.add_scatter(x=[step, step], y=[min(finite), max(finite)], mode="lines", meta=CURSOR, showlegend=False,
                    hoverinfo="skip", line=dict(color="#555", dash="dot", width=1.5))
    fig.add_scatter(x=[step] * (1 if truth is None else 2), y=[posterior[step]] + ([] if truth is None else
                    [truth[step]]), mode="markers", meta=NOW, showlegend=False,
                    hoverinfo="skip", marker=dict(size=15, color="rgba(0,0,0,0)", line=dict(color="black", width=3)))
    layout(fig, "RMSE of the prediction after step t", "step t", "RMSE", height=height,
            x=integer_ticks(dict(range=[steps[0] - 0.4, steps[-1] + 0.4]), steps[-1]))
    return inside_legend(fig, legend)


def inside_scaling_figure(measured: dict, T: int, height: int | None = None) -> go.Figure:
    """What test-time T does over the held-out functions (``models.test_time``): the mean RMSE ratio to the GP
    optimum at each T with its standard error, the trained T and the T shown marked."""
    Ts, by_T = measured["T"], measured["by_T"]
    means, ses = [b["mean"] for b in by_T], [b["se"] for b in by_T]
    fig = figure()
    fig.add_scatter(x=Ts, y=means, error_y=dict(type="data", array=ses), mode="lines+markers",
                    name="mean ± se", line=dict(color=PALETTE[0]))
    if measured["trained_T"] in Ts:
        i = Ts.index(measured["trained_T"])
        fig.add_scatter(x=[Ts[i]], y=[means[i]], mode="markers", name=f"trained T = {Ts[i]}",
                        marker=dict(size=14, symbol="diamond-open", color="black", line=dict(width=2.5)))
    if T in Ts:
        i = Ts.index(T)
        fig.add_scatter(x=[T], y=[means[i]], mode="markers", name=f"shown: T = {T}",
                        marker=dict(size=12, color=PALETTE[3]))
    return layout(fig, f"RMSE / GP optimum by test-time T ({measured['functions']} functions)", "test-time T",
                   "RMSE / GP optimum", height=height, x=integer_ticks({}, max(Ts)) if len(Ts) > 1 else None)
