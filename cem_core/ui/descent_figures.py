"""The energy page's Plotly figures: each token's energy or step length per step, the attention weights of a step,
and one token's energy landscape with its path; playback moves their cursors and markers."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .figure_style import CURSOR, NOW, PALETTE, PINNED, WEIGHTS, figure, integer_ticks, layout
from .symlog import SymLog

TOKEN_LINES = len(PALETTE)      # up to this many tokens, one coloured line each; beyond, one grey trace for all


def state_legend(fig: go.Figure, names: tuple[str, str]) -> None:
    """Legend entries naming the state now shown and the pinned one (`names`: now, pinned)."""
    fig.add_scatter(x=[None], y=[None], mode="lines", name=f"now: {names[0]}", line=dict(color="black", width=2))


def cursor_y(values, pinned=None) -> list[float]:
    """The vertical extent of a step cursor: the values' range (and the pinned state's)."""
    everything = np.concatenate([np.ravel(values)] + ([] if pinned is None else [np.ravel(pinned)]))
    return [float(everything.min()), float(everything.max())]


def per_token_figure(values, title: str, yaxis: str, first_step: int = 0, rose=None, height: int | None = None,
                     token: int | None = None, step: int | None = None, pinned=None,
                     names: tuple[str, str] | None = None, legend: str = "all") -> go.Figure:
    """One line per token over the steps: values (steps, n), the followed `token` (default the last) drawn
    bold. Past TOKEN_LINES tokens the others are one grey trace (a legend of 128 entries says nothing, and
    128 traces are slow to draw). ``rose`` (steps - 1, n), for energies: where token i's value rose at step
    t + 1, ringed in red so that a rise too small for the axis is seen. A dotted cursor and a marker on the
    followed token show step `step` (default the last; playback moves them). ``pinned`` (steps', n'): the
    pinned state's values as faint dashed lines, with `names` (now, pinned) in the legend. Every line point
    carries its token as customdata, so that a click can choose the token to follow. Values that span orders of
    magnitude are drawn on a symmetric log axis (``SymLog``), with the values themselves on hover. ``legend``:
    "all" tokens, or only the "followed" one (and the states and rises), which then never scrolls out of a short
    legend."""
    raw = np.asarray(values, dtype=float)
    values, pinned, scale = SymLog.on_axis(raw, pinned)
    fig = figure()
    steps = list(range(first_step, first_step + values.shape[0]))
    n = values.shape[1]
    token = n - 1 if token is None else token
    step = steps[-1] if step is None else step
    _token_lines(fig, values, steps, token)
    if scale is not None or legend == "followed":
        for trace in fig.data:
            i = trace.customdata[0]
            if scale is not None:                                     # hover: the values, not their log
                trace.update(text=[f"{v:.4g}" for v in raw[:, i]], hovertemplate=f"{trace.name}, step %{{x}}: "
                             "%{text}<extra></extra>")
            if legend == "followed" and i != token and trace.name != "other tokens":
                trace.showlegend = False
    if rose is not None and np.any(rose):
        _rises(fig, values, np.asarray(rose), first_step)
    if pinned is not None:
        steps = sorted(set(steps) | set(_pinned_lines(fig, np.asarray(pinned), first_step, names)))
    fig.add_scatter(x=[step, step], y=cursor_y(values, pinned), mode="lines", meta=CURSOR, showlegend=False,
                    hoverinfo="skip", line=dict(color="#555", dash="dot", width=1.5))
    here = step - first_step                          # the step shown's ring, whole at the axis's end (not clipped)
    fig.add_scatter(x=[step] if here >= 0 else [], y=[float(values[here, token])] if here >= 0 else [],
                    mode="markers", meta=NOW, showlegend=False, hoverinfo="skip", cliponaxis=False,
                    marker=dict(size=16, color="rgba(0,0,0,0)", line=dict(color="black", width=3)))
    return layout(fig, title + (" · symmetric log" if scale is not None else ""), "step t", yaxis,
                   height=height, x=integer_ticks(dict(range=[steps[0] - 0.4, steps[-1] + 0.4]), steps[-1]),
                   y=scale.axis() if scale is not None else None)


def _pinned_lines(fig: go.Figure, pinned: np.ndarray, first_step: int, names: tuple[str, str]) -> list[int]:
    """The pinned state's lines, faint and dashed, with a cross where each ends, and the legend naming both
    states. Returns the pinned state's steps."""
    steps = list(range(first_step, first_step + pinned.shape[0]))
    fig.add_scatter(x=(steps + [None]) * pinned.shape[1],
                    y=[v for i in range(pinned.shape[1]) for v in pinned[:, i].tolist() + [None]],
                    mode="lines", name=f"pinned: {names[1]}", line=PINNED, hoverinfo="skip")
    fig.add_scatter(x=[steps[-1]] * pinned.shape[1], y=pinned[-1].tolist(), mode="markers",
                    name=f"pinned: {names[1]}, its last step", showlegend=False, hoverinfo="skip",
                    marker=dict(symbol="x-thin", size=12, line=dict(color=PINNED["color"], width=2.5)))
    state_legend(fig, names)
    return steps


def _token_lines(fig: go.Figure, values: np.ndarray, steps: list, token: int) -> None:
    """Each token's line, the followed one bold; past TOKEN_LINES tokens the others as one grey trace."""
    n = values.shape[1]
    if n <= TOKEN_LINES:
        for i in range(n):
            bold = i == token
            fig.add_scatter(x=steps, y=values[:, i].tolist(), mode="lines+markers", name=f"token {i}",
                            customdata=[i] * len(steps), opacity=1.0 if bold else 0.55,
                            line=dict(color=PALETTE[i % len(PALETTE)], width=4 if bold else 1.5),
                            marker=dict(size=8 if bold else 5))
        return
    breaks = [None]                                                    # None separates the tokens' lines
    others = [i for i in range(n) if i != token]
    fig.add_scatter(x=(steps + breaks) * len(others),
                    y=[v for i in others for v in values[:, i].tolist() + breaks],
                    customdata=[i for i in others for _ in range(len(steps) + 1)],
                    mode="lines", name="other tokens", line=dict(color="#b0b0b0", width=1))
    fig.add_scatter(x=steps, y=values[:, token].tolist(), mode="lines+markers", name=f"token {token}",
                    customdata=[token] * len(steps), line=dict(color=PALETTE[0], width=3))


def _rises(fig: go.Figure, values: np.ndarray, rose: np.ndarray, first_step: int) -> None:
    """A red ring where token i's value rose at step t + 1 (rose: (steps - 1, n)), with the rise on hover."""
    t, i = np.nonzero(rose)
    rise = values[t + 1, i] - values[t, i]
    fig.add_scatter(x=(first_step + t + 1).tolist(), y=values[t + 1, i].tolist(), mode="markers",
                    name="energy rose", customdata=i.tolist(),
                    marker=dict(size=15, color="rgba(0,0,0,0)", line=dict(color="red", width=2.5)),
                    text=[f"token {a}, step {b + 1}: +{r:.3g}" for a, b, r in zip(i, t, rise)],
                    hovertemplate="%{text}<extra></extra>")


def heatmap_title(step: int, steps: int, head: int) -> str:
    """The attention heatmap's title at playback step `step` (0: the weights step 1 uses)."""
    at = " at x⁽⁰⁾" if step == 0 else f", step {step} of {steps}"        # short: a quarter of a page at 1024 px
    return f"Attention{at}, head {head}"


def attention_heatmap_figure(weights, step: int, head: int, height: int | None = None,
                             token: int | None = None) -> go.Figure:
    """a^k_ij of step `step` (1..T; 0 shows step 1's) and head: rows are queries i, columns keys j (zero above
    the diagonal). The followed `token`'s row is framed."""
    weights = np.asarray(weights)
    w = weights[max(step, 1) - 1, head]
    fig = figure(go.Heatmap(z=w.tolist(), x=list(range(w.shape[1])), y=list(range(w.shape[0])), meta=WEIGHTS,
                             colorscale="Viridis", zmin=0, zmax=1, name=f"head {head}"))
    if token is not None:
        fig.add_shape(type="rect", x0=-0.5, x1=w.shape[1] - 0.5, y0=token - 0.5, y1=token + 0.5,
                      line=dict(color="red", width=3))
    return layout(fig, heatmap_title(step, len(weights), head), "key j", "query i",
                   height=height, x=integer_ticks({}, w.shape[1] - 1),
                   y=integer_ticks(dict(autorange="reversed"), w.shape[0] - 1))


def landscape_figure(land: dict, token: int, height: int | None = None, step: int | None = None,
                     pinned=None, names: tuple[str, str] | None = None) -> go.Figure:
    """Contours of one token's energy on a plane, its trajectory with a marker at x^(step) (default the last;
    playback moves it), and (attention) the key points. ``pinned`` (k, 2): the pinned state's trajectory in this
    plane's coordinates, dashed, with `names` (now, pinned) in the legend."""
    fig = figure(go.Contour(x=land["a"].tolist(), y=land["b"].tolist(), z=land["energy"].tolist(),
                             colorscale="Viridis", ncontours=30, name="energy",
                             colorbar=dict(title="E", exponentformat="power")))
    traj = land["trajectory"]
    step = len(traj) - 1 if step is None else step
    fig.add_scatter(x=traj[:, 0].tolist(), y=traj[:, 1].tolist(), mode="lines+markers",
                    name="x⁽ᵗ⁾" if pinned is None else f"x⁽ᵗ⁾ now: {names[0]}",
                    line=dict(color="white", width=2),
                    marker=dict(size=7, color="white", line=dict(color="black", width=1)))
    fig.add_scatter(x=[float(traj[0, 0])], y=[float(traj[0, 1])], mode="markers", name="x⁽⁰⁾",
                    marker=dict(size=12, color="orange", symbol="star"))
    if land["key_tips"] is not None:
        heads = len(land["key_tips"])
        for k, tips in enumerate(land["key_tips"]):                  # one legend entry for every head's keys
            fig.add_scatter(x=tips[:, 0].tolist(), y=tips[:, 1].tolist(), mode="markers",
                            name=f"keys h{k}" if k or heads == 1 else f"keys, heads 0–{heads - 1}",
                            legendgroup="keys", showlegend=k == 0,
                            marker=dict(size=8, symbol="x", color=PALETTE[(k + 3) % len(PALETTE)]))
    if pinned is not None:
        pinned = np.asarray(pinned)
        fig.add_scatter(x=pinned[:, 0].tolist(), y=pinned[:, 1].tolist(), mode="lines+markers",
                        name=f"x⁽ᵗ⁾ pinned: {names[1]}", hoverinfo="skip",
                        line=dict(color="rgba(255,255,255,0.75)", dash="dash", width=2),
                        marker=dict(size=5, color="rgba(255,255,255,0.75)"))
    fig.add_scatter(x=[float(traj[step, 0])], y=[float(traj[step, 1])], mode="markers", meta=NOW,
                    name="x⁽ᵗ⁾ shown", hoverinfo="skip",
                    marker=dict(size=15, color="#d62728", line=dict(color="white", width=2)))
    plane = "the true plane (width 2)" if land["true_plane"] else "the plane of x⁽⁰⁾, x⁽¹⁾, x⁽²⁾"
    # Below the plot, each entry as wide as its text (fixed fractions let long names run into the next entry)
    fig.update_layout(legend=dict(orientation="h", y=-0.22, yanchor="top"))
    return layout(fig, f"Energy of token {token}<br>on {plane}", "a", "b", height=height,
                   x=dict(range=[land["a"][0], land["a"][-1]]), y=dict(range=[land["b"][0], land["b"][-1]]))
