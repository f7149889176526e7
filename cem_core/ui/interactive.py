"""Plotly figure builders for the app, plus the exports behind its download buttons.

Builders only draw: their numbers come from cem_core's data functions (gp_sweep, gp, lm.report,
flops, config, descent). Their static form (PNG, SVG) is derived from them by cem_core.ui.static;
``to_html`` embeds plotly.js so the file works offline.
"""
from __future__ import annotations

import csv
import io
import math

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.lm import ladder as lm_ladder
from cem_core.experiments.lm import report as lm_report

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


def _faint(color: str, alpha: float) -> str:
    """A PALETTE colour as rgba with this alpha: a band's fill (a trace's opacity leaves a fill opaque)."""
    return f"rgba({int(color[1:3], 16)},{int(color[3:5], 16)},{int(color[5:7], 16)},{alpha})"


TEMPLATE = pio.templates["plotly_white"].to_plotly_json()
FONT_PX = 14          # every plot text at least this size: legible on a projector
TITLE_PX = 17


def _figure(*traces) -> go.Figure:
    """A new figure on the white template, which is set without Plotly's validation of the template
    (validating it costs about 13 ms a figure, the most of a page's figure building). Traces without a colour of
    their own take PALETTE's in order, as their static form does (cem_core.ui.static)."""
    return go.Figure(data=list(traces), layout=dict(template=TEMPLATE, colorway=PALETTE), _validate=False)


def _layout(fig: go.Figure, title: str, xaxis: str, yaxis: str, log2_x: bool = False,
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


def _below(fig: go.Figure) -> go.Figure:
    """The legend under the axes, for long labels or a figure the app shows in half its width (the plot keeps the
    width)."""
    return fig.update_layout(legend=dict(orientation="h", x=0, y=-0.22, yanchor="top"), margin_b=140, height=560)


def _integer_ticks(axis: dict, last: int) -> dict:
    """Integer ticks 0..last on a step or index axis (about six of them at most: a plot may be 270 px wide), never
    1.5."""
    return axis | dict(tickmode="linear", tick0=0, dtick=max(1, -(-last // 6)))


# -- energy descent -----------------------------------------------------------------------------


TOKEN_LINES = len(PALETTE)      # up to this many tokens, one coloured line each; beyond, one grey trace for all
PINNED = dict(color="rgba(40,40,40,0.45)", dash="dash", width=2)      # the pinned state's faint overlay
CURSOR, NOW, WEIGHTS = "cursor", "now", "weights"   # the `meta` of the traces playback moves (to_json drops uids)


def state_legend(fig: go.Figure, names: tuple[str, str]) -> None:
    """Legend entries naming the state now shown and the pinned one (`names`: now, pinned)."""
    fig.add_scatter(x=[None], y=[None], mode="lines", name=f"now: {names[0]}", line=dict(color="black", width=2))


SYMLOG_SPAN = 1e2     # values whose largest is more than this many times their first step's: a symmetric log axis


class SymLog:
    """A symmetric log scale y -> sign(y) log10(1 + |y| / c), linear within about c of zero: an axis whose values
    span orders of magnitude (a diverging descent's energies reach 1e28) keeps its early steps apart instead of
    flat at zero. c is the early values' typical size (the median magnitude of the first step's). Calling it maps
    values; ``axis`` gives the y axis's ticks, labelled with the values they stand for (±10^k)."""

    def __init__(self, c: float, values: np.ndarray):
        finite = values[np.isfinite(values)]
        self.c, self.top = c, float(np.abs(finite).max())
        self.signs = (bool((finite < 0).any()), bool((finite > 0).any()))

    @staticmethod
    def needed(values, pinned=None) -> SymLog | None:
        """The scale for per-step values (steps, n) and the pinned state's, or None when a linear axis shows
        them: when the largest is more than SYMLOG_SPAN times the first step's typical size."""
        values = np.asarray(values, dtype=float)
        everything = np.concatenate([np.ravel(values)] + ([] if pinned is None else [np.ravel(pinned)]))
        first = np.abs(values[0][np.isfinite(values[0])])
        first = first[first > 0]
        top = np.abs(everything[np.isfinite(everything)])
        if not len(first) or not len(top) or top.max() <= SYMLOG_SPAN * np.median(first):
            return None
        return SymLog(float(np.median(first)), everything)

    @staticmethod
    def on_axis(values, pinned=None) -> tuple:
        """The values (and the pinned state's) as a per-token plot draws them, and the scale (None: linear)."""
        scale = SymLog.needed(values, pinned)
        if scale is None:
            return np.asarray(values, dtype=float), pinned, None
        return scale(values), None if pinned is None else scale(pinned), scale

    def __call__(self, values):
        values = np.asarray(values, dtype=float)
        return np.sign(values) * np.log10(1 + np.abs(values) / self.c)

    def axis(self) -> dict:
        """Ticks at 0 and at ±10^k from ten times c (nearer, a tick would sit on the zero's) to the largest value,
        at most three a side (a short plot has room for no more)."""
        high = math.floor(math.log10(self.top))
        low = min(math.ceil(math.log10(self.c)) + 1, high)
        every = max(1, -(-(high - low + 1) // 3))
        powers = list(range(low, high + 1, every))
        vals, text = [0.0], ["0"]
        for sign, shown in ((-1, self.signs[0]), (1, self.signs[1])):
            if shown:
                vals += [float(self(sign * 10.0 ** k)) for k in powers]
                text += [f"{'−' if sign < 0 else ''}10<sup>{k}</sup>" for k in powers]
        return dict(tickmode="array", tickvals=vals, ticktext=text)


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
    fig = _figure()
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
    here = step - first_step
    fig.add_scatter(x=[step] if here >= 0 else [], y=[float(values[here, token])] if here >= 0 else [],
                    mode="markers", meta=NOW, showlegend=False, hoverinfo="skip",
                    marker=dict(size=16, color="rgba(0,0,0,0)", line=dict(color="black", width=3)))
    return _layout(fig, title + (" · symmetric log" if scale is not None else ""), "step t", yaxis,
                   height=height, x=_integer_ticks(dict(range=[steps[0] - 0.4, steps[-1] + 0.4]), steps[-1]),
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


def enlarged(fig: go.Figure, scale: float) -> go.Figure:
    """A copy of the figure with every font of its layout `scale` times larger (presentation mode)."""
    def grow(node):
        if isinstance(node, dict):
            return {k: (round(v * scale) if k == "size" and isinstance(v, (int, float)) else grow(v))
                    for k, v in node.items() if k != "template"}
        return [grow(v) for v in node] if isinstance(node, list) else node
    out = go.Figure(fig)
    return out.update_layout(grow(fig.to_plotly_json()["layout"]))


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
    fig = _figure(go.Heatmap(z=w.tolist(), x=list(range(w.shape[1])), y=list(range(w.shape[0])), meta=WEIGHTS,
                             colorscale="Viridis", zmin=0, zmax=1, name=f"head {head}"))
    if token is not None:
        fig.add_shape(type="rect", x0=-0.5, x1=w.shape[1] - 0.5, y0=token - 0.5, y1=token + 0.5,
                      line=dict(color="red", width=3))
    return _layout(fig, heatmap_title(step, len(weights), head), "key j", "query i",
                   height=height, x=_integer_ticks({}, w.shape[1] - 1),
                   y=_integer_ticks(dict(autorange="reversed"), w.shape[0] - 1))


def landscape_figure(land: dict, token: int, height: int | None = None, step: int | None = None,
                     pinned=None, names: tuple[str, str] | None = None) -> go.Figure:
    """Contours of one token's energy on a plane, its trajectory with a marker at x^(step) (default the last;
    playback moves it), and (attention) the key points. ``pinned`` (k, 2): the pinned state's trajectory in this
    plane's coordinates, dashed, with `names` (now, pinned) in the legend."""
    fig = _figure(go.Contour(x=land["a"].tolist(), y=land["b"].tolist(), z=land["energy"].tolist(),
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
    return _layout(fig, f"Energy of token {token}<br>on {plane}", "a", "b", height=height,
                   x=dict(range=[land["a"][0], land["a"][-1]]), y=dict(range=[land["b"][0], land["b"][-1]]))


# -- GP -----------------------------------------------------------------------------------------


def gp_context_figure(records) -> go.Figure:
    data = gp_sweep.context_curves(records)
    fig = _figure()
    for label, curve in data["curves"].items():
        fig.add_scatter(x=list(range(len(curve))), y=curve, mode="lines", name=label)
    fig.add_scatter(x=list(range(len(data["gp"]))), y=data["gp"], mode="lines", name="GP posterior mean (optimum)",
                    line=dict(color="black", dash="dash", width=3))
    return _below(_layout(fig, "RMSE vs context length (depth 1)", "context length j (points seen)",
                          "held-out RMSE of y<sub>j</sub> (mean over seeds)"))


def gp_ratio_figure(records) -> go.Figure:
    data = gp_sweep.ratio_vs_T(records)
    fig = _figure()
    for label, d in data.items():
        if label != "Llama":
            fig.add_scatter(x=d["T"], y=d["mean"], error_y=dict(type="data", array=d["std"]),
                            mode="lines+markers", name=label)
    Ts = sorted({T for label, d in data.items() if label != "Llama" for T in d["T"]}) or [1]
    llama, ends = data["Llama"], [Ts[0], Ts[-1]]
    fig.add_scatter(x=ends, y=[llama["mean"] - llama["std"]] * 2, mode="lines", line=dict(width=0, color="gray"),
                    showlegend=False, hoverinfo="skip", name="Llama attention - std")
    fig.add_scatter(x=ends, y=[llama["mean"] + llama["std"]] * 2, mode="lines", line=dict(width=0, color="gray"),
                    fill="tonexty", fillcolor="rgba(128,128,128,0.15)", showlegend=False, hoverinfo="skip",
                    name="Llama attention ± std")
    fig.add_scatter(x=ends, y=[llama["mean"]] * 2, mode="lines", name="Llama attention (T = 1)",
                    line=dict(color="gray", dash="dash"))
    fig.add_scatter(x=ends, y=[1.0, 1.0], mode="lines", name="GP optimum", line=dict(color="black", width=1.5))
    return _below(_layout(fig, "RMSE / GP optimum vs T (depth 1)", "in-layer steps T",
                          "RMSE / GP optimum (mean ± std over seeds)", log2_x=True))


def gp_scaling_figure(records) -> go.Figure:
    fig = _figure()
    for T, d in gp_sweep.eval_T_curves(records).items():
        fig.add_scatter(x=d["eval_T"], y=d["ratio"], mode="lines+markers", name=f"trained at T={T}")
    return _layout(fig, "Test-time scaling: trained at T, evaluated at T'", "T at evaluation", "RMSE / GP optimum",
                   log2_x=True)


def gp_demo_figure(grid, f_grid, xs, ys, k, mean, std, model_pred=None) -> go.Figure:
    """A sampled function, the first k observed points, the GP posterior band and the model."""
    fig = _figure()
    fig.add_scatter(x=grid, y=mean + 2 * std, mode="lines", line=dict(width=0), showlegend=False, name="upper")
    fig.add_scatter(x=grid, y=mean - 2 * std, mode="lines", line=dict(width=0), fill="tonexty",
                    fillcolor="rgba(31,119,180,0.2)", name="GP posterior ± 2 sd")
    fig.add_scatter(x=grid, y=f_grid, mode="lines", name="true function f", line=dict(color="black", dash="dot"))
    fig.add_scatter(x=grid, y=mean, mode="lines", name="GP posterior mean", line=dict(color=PALETTE[0]))
    if model_pred is not None:
        fig.add_scatter(x=grid, y=model_pred, mode="lines", name="trained model", line=dict(color=PALETTE[3]))
    fig.add_scatter(x=xs[:k], y=ys[:k], mode="markers", name=f"observed ({k})",
                    marker=dict(color="black", size=8))
    fig.add_scatter(x=xs[k:], y=ys[k:], mode="markers", name="not yet seen",
                    marker=dict(color="lightgray", size=6))
    return _layout(fig, f"One sampled function after {k} points", "x", "y")


# -- inside a trained model ---------------------------------------------------------------------


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
    fig = _figure()                     # (lists, not arrays: the browser then holds plain arrays, as playback sends)
    grid = grid.tolist()
    fig.add_scatter(x=grid, y=(mean + 2 * sd).tolist(), mode="lines", line=dict(width=0), showlegend=False,
                    name="upper", hoverinfo="skip")
    fig.add_scatter(x=grid, y=(mean - 2 * sd).tolist(), mode="lines", line=dict(width=0), fill="tonexty",
                    fillcolor="rgba(31,119,180,0.18)", name="GP ± 2 sd", hoverinfo="skip")
    fig.add_scatter(x=grid, y=data["truth"], mode="lines", name="true f", line=dict(color="black", dash="dot"))
    fig.add_scatter(x=grid, y=mean.tolist(), mode="lines", name="GP mean", line=dict(color=PALETTE[0], width=2.5))
    if pinned is not None:
        fig.add_scatter(x=pinned["grid"], y=pinned["prediction"], mode="lines", name=f"pinned: {names[1]}",
                        line=PINNED)
    fig.add_scatter(x=grid, y=layer["prediction"][step] if layer else data["prediction"], mode="lines", meta=NOW,
                    name="model" if pinned is None else f"now: {names[0]}", line=dict(color=PALETTE[3], width=3))
    fig.add_scatter(x=data["context_x"], y=data["context_y"], mode="markers", name=f"context ({data['context']})",
                    marker=dict(color="black", size=9))
    top = float(np.max(np.abs(np.concatenate([mean + 2 * sd, mean - 2 * sd, np.asarray(data["truth"])]))))
    _layout(fig, inside_curve_title(data, step), "x", "y", height=height, x=dict(range=[grid[0], grid[-1]]),
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
    truth = layer["rmse_to_truth"] if layer else [data["rmse_to_truth"]] * 2
    step = (steps[-1] if layer else 0) if step is None else step
    fig = _figure()
    fig.add_scatter(x=steps, y=posterior, mode="lines+markers", name="to GP mean",
                    line=dict(color=PALETTE[0], width=3))
    fig.add_scatter(x=steps, y=truth, mode="lines+markers", name="to true f", line=dict(color="black", width=1.5),
                    marker=dict(size=5))
    values = posterior + truth
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
    fig.add_scatter(x=[step, step], y=[posterior[step], truth[step]], mode="markers", meta=NOW, showlegend=False,
                    hoverinfo="skip", marker=dict(size=15, color="rgba(0,0,0,0)", line=dict(color="black", width=3)))
    _layout(fig, "RMSE of the prediction after step t", "step t", "RMSE", height=height,
            x=_integer_ticks(dict(range=[steps[0] - 0.4, steps[-1] + 0.4]), steps[-1]))
    return inside_legend(fig, legend)


def inside_scaling_figure(measured: dict, T: int, height: int | None = None) -> go.Figure:
    """What test-time T does over the held-out functions (``models.test_time``): the mean RMSE ratio to the GP
    optimum at each T with its standard error, the trained T and the T shown marked."""
    Ts, by_T = measured["T"], measured["by_T"]
    means, ses = [b["mean"] for b in by_T], [b["se"] for b in by_T]
    fig = _figure()
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
    return _layout(fig, f"RMSE / GP optimum by test-time T ({measured['functions']} functions)", "test-time T",
                   "RMSE / GP optimum", height=height, x=_integer_ticks({}, max(Ts)) if len(Ts) > 1 else None)


# -- language models ------------------------------------------------------------------------


def curves_figure(series: dict, title: str, xaxis: str, yaxis: str) -> go.Figure:
    """One line per name: series = {name: (xs, ys)}."""
    fig = _figure()
    for i, (name, (xs, ys)) in enumerate(series.items()):
        fig.add_scatter(x=list(xs), y=list(ys), mode="lines+markers" if len(xs) < 20 else "lines", name=name,
                        line=dict(color=PALETTE[i % len(PALETTE)]))
    fig.update_layout(showlegend=True)                                 # Plotly hides the legend of a single line
    return _layout(fig, title, xaxis, yaxis)


def lm_sweep_figure(records) -> go.Figure:
    """Validation perplexity against tokens per variant: the mean over seeds, and a band from the lowest
    to the highest seed."""
    fig = _figure()
    for i, (name, c) in enumerate(lm_report.validation_curves(records).items()):
        color = PALETTE[i % len(PALETTE)]
        x = [t / 1e6 for t in c["tokens"]]
        fig.add_scatter(x=x, y=c["low"], mode="lines", line=dict(width=0, color=color), showlegend=False,
                        hoverinfo="skip", name=f"{name} lowest seed")
        fig.add_scatter(x=x, y=c["high"], mode="lines", line=dict(width=0, color=color), fill="tonexty",
                        fillcolor=_faint(color, 0.2), showlegend=False, hoverinfo="skip", name=f"{name} seeds")
        fig.add_scatter(x=x, y=c["mean"], mode="lines+markers", name=name, line=dict(color=color))
    fig.update_yaxes(type="log")
    return _layout(fig, "Validation perplexity (mean over seeds; band: lowest to highest seed)",
                   "tokens trained (millions)", "validation perplexity")


def lm_ladder_figure(records, preset: str = "ladder") -> go.Figure:
    """A width ladder (``lm.ladder.trends``): each CEM variant's gap to Llama against the Llama model's parameters
    (every seed faint, the mean per width with its 95% t-interval) and the line fitted to the width means over the
    widths measured; nothing is drawn beyond them (where a line would reach at the paper's scale is an
    extrapolation, given in the ladder's table only)."""
    fig = _figure()
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
    return _below(_layout(fig, title, "Llama parameters at the width (log scale)",
                          "gap to Llama, ppl / ppl(Llama) − 1 (%)"))


def lm_budget_ladder_figure(records) -> go.Figure:
    """The width ladder at the paper's budget (``lm sweep --preset budget-ladder``), as ``lm_ladder_figure``."""
    return lm_ladder_figure(records, "budget-ladder")


# -- design space ---------------------------------------------------------------------------


def bar_figure(labels, series: dict, title: str, yaxis: str) -> go.Figure:
    """Grouped bars: one bar group per label, one colour per series."""
    fig = _figure()
    for name, values in series.items():
        fig.add_bar(x=list(labels), y=list(values), name=name)
    fig.update_layout(barmode="group")
    return _layout(fig, title, "", yaxis)


def eigenvalue_figure(eigs: dict) -> go.Figure:
    """Sorted eigenvalues of each preconditioner P; below zero means a step can raise the energy."""
    fig = _figure()
    for name, values in eigs.items():
        fig.add_scatter(x=list(range(1, len(values) + 1)), y=sorted(values), mode="lines+markers", name=name)
    n = max((len(v) for v in eigs.values()), default=1)
    fig.add_scatter(x=[1, n], y=[0.0, 0.0], mode="lines", name="zero", line=dict(color="red", dash="dot"))
    return _layout(fig, "Eigenvalues of P", "index (sorted)", "eigenvalue")


# -- exports ---------------------------------------------------------------------------------


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
