"""The GP page's Plotly figures: the sweep's RMSE by context length, by T and at test-time T, and one sampled
function with the GP posterior and the model. The numbers come from cem_core.experiments.gp.sweep."""
from __future__ import annotations

import plotly.graph_objects as go

from cem_core.experiments.gp import sweep as gp_sweep

from .figure_style import PALETTE, figure, layout, legend_below


def gp_context_figure(records) -> go.Figure:
    data = gp_sweep.context_curves(records)
    fig = figure()
    for label, curve in data["curves"].items():
        fig.add_scatter(x=list(range(len(curve))), y=curve, mode="lines", name=label)
    fig.add_scatter(x=list(range(len(data["gp"]))), y=data["gp"], mode="lines", name="GP posterior mean (optimum)",
                    line=dict(color="black", dash="dash", width=3))
    return legend_below(layout(fig, "RMSE vs context length (depth 1)", "context length j (points seen)",
                          "held-out RMSE of y<sub>j</sub> (mean over seeds)"))


def gp_ratio_figure(records) -> go.Figure:
    data = gp_sweep.ratio_vs_T(records)
    fig = figure()
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
    return legend_below(layout(fig, "RMSE / GP optimum vs T (depth 1)", "in-layer steps T",
                          "RMSE / GP optimum (mean ± std over seeds)", log2_x=True))


def gp_scaling_figure(records) -> go.Figure:
    fig = figure()
    for T, d in gp_sweep.eval_T_curves(records).items():
        fig.add_scatter(x=d["eval_T"], y=d["ratio"], mode="lines+markers", name=f"trained at T={T}")
    return layout(fig, "Test-time scaling: trained at T, evaluated at T'", "T at evaluation", "RMSE / GP optimum",
                   log2_x=True)


def gp_demo_figure(grid, f_grid, xs, ys, k, mean, std, model_pred=None) -> go.Figure:
    """A sampled function, the first k observed points, the GP posterior band and the model."""
    fig = figure()
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
    return layout(fig, f"One sampled function after {k} points", "x", "y")


# The GP page's figures of the committed sweep, by the name a lesson step calls them: the figure, its file title and
# what the page says under it (the app's page and the static site's show the same)
GP_SWEEP_VIEWS = {
    "gp-ratio": (gp_ratio_figure, "gp ratio vs T",
                 "Each point is a model's RMSE divided by the best any predictor can reach (the exact GP posterior "
                 "mean, ratio 1). The paper reports that more steps T keep lowering the error; compare the CEM curves "
                 "with the dashed Llama line to see what we measured."),
    "gp-context": (gp_context_figure, "gp rmse vs context",
                   "The error at position j, after seeing j points. With more context every predictor improves; the "
                   "dashed GP curve is the floor."),
    "gp-scaling": (gp_scaling_figure, "gp test-time scaling",
                   "Test-time scaling: a model trained with T steps is run with more or fewer steps, with no "
                   "retraining. A flat or rising curve means the extra steps do not refine the prediction."),
}

GP_PAGE_TITLE = "GP recursion: does in-layer recursion help?"      # the GP page's title and words, app and site
GP_STUDY_HEADING = "The factor study: under which conditions does recursion help?"
TEST_TIME_HEADING = "Can in-layer recursion scale at test time? Four training regimes"
GP_PAGE_INTRO = ("In-context regression on Gaussian-process functions, where the best possible prediction is known "
                 "exactly. The paper reports that deeper recursion (T = 4, 8) keeps lowering the RMSE; here is what we "
                 "measure, against that optimum.")
