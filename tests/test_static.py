"""A sweep figure has one builder, the app's Plotly one; its static form (figures/, the notebooks, the app's PNG
download) is drawn from it by cem_core.ui.static. Checked on the committed results: the derived figure carries
every trace's numbers, names, bands, error bars, scales, rules and notes."""
import numpy as np
import plotly.graph_objects as go
import pytest
from conftest import ROOT

from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.lm import runner
from cem_core.ui import energy_plots, gp_figures, lm_figures, static, study_plots, sweep_plots, trained_plots

COMMITTED = {gp_figures.gp_context_figure: (gp_sweep.GP_SWEEP, "gp-default"),
             gp_figures.gp_ratio_figure: (gp_sweep.GP_SWEEP, "gp-default"),
             gp_figures.gp_scaling_figure: (gp_sweep.GP_SWEEP, "gp-default"),
             lm_figures.lm_sweep_figure: (runner.LM_SWEEP, "lm-own"),
             lm_figures.lm_ladder_figure: (runner.LM_SWEEP, "lm-ladder")}


def _records(builder):
    sweep, folder = COMMITTED[builder]
    return sweep.load(ROOT / "results" / folder / "results.json")


def _drawn_lines(ax) -> list[np.ndarray]:
    return [np.asarray(line.get_ydata(), dtype=float) for line in ax.lines]


@pytest.mark.slow
@pytest.mark.parametrize("builder", list(COMMITTED), ids=lambda b: b.__name__)
def test_the_static_figure_carries_every_trace_of_the_plotly_one(builder):
    fig = builder(_records(builder))
    ax = static.to_matplotlib(fig).axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    named = [t.name for t in fig.data if t.showlegend is not False and t.name]
    assert legend == named                                                   # the same entries, in order
    drawn = _drawn_lines(ax)
    for trace in fig.data:
        visible = trace.fill != "tonexty" and not (trace.mode == "lines" and trace.line.width == 0)
        if visible:                                                          # its numbers are on the axes
            assert any(len(y) == len(trace.y) and np.allclose(y, trace.y) for y in drawn), trace.name
    bands = sum(t.fill == "tonexty" for t in fig.data)
    assert len([c for c in ax.collections if type(c).__name__ == "FillBetweenPolyCollection"]) == bands
    bars = sum(t.error_y.array is not None for t in fig.data)
    assert len(ax.containers) == bars                                        # one errorbar container each
    assert ax.get_xscale() == ("log" if fig.layout.xaxis.type == "log" else "linear")
    assert ax.get_yscale() == ("log" if fig.layout.yaxis.type == "log" else "linear")
    assert ax.get_title() == fig.layout.title.text.replace("<br>", "\n")
    texts = [t.get_text() for t in ax.texts]
    assert texts == [a.text.replace("<br>", "\n") for a in fig.layout.annotations]


def test_asymmetric_error_bars_rules_notes_and_log_axes_are_translated():
    fig = go.Figure(layout=dict(xaxis=dict(type="log", dtick=np.log10(2)), yaxis=dict(type="log")))
    fig.add_scatter(x=[1, 2, 4], y=[3.0, 2.0, 1.5], mode="markers", name="m",
                    error_y=dict(type="data", symmetric=False, array=[0.5, 0.5, 0.5], arrayminus=[0.1, 0.2, 0.3]))
    fig.add_scatter(x=[1, 4], y=[1.2, 1.2], mode="lines", line=dict(width=0), showlegend=False, name="low")
    fig.add_scatter(x=[1, 4], y=[2.2, 2.2], mode="lines", line=dict(width=0), fill="tonexty",
                    fillcolor="rgba(255,0,0,0.25)", showlegend=False, name="band")
    fig.add_vline(x=2, line=dict(dash="dot"))
    fig.add_hline(y=1.0)
    fig.add_annotation(x=np.log10(4), y=0.5, yref="paper", text="a<br>note", showarrow=False)
    ax = static.to_matplotlib(fig).axes[0]
    caps = ax.containers[0].lines[1]
    assert [c.get_ydata().tolist() for c in caps] == [[2.9, 1.8, 1.2], [3.5, 2.5, 2.0]]   # minus, plus
    band = ax.collections[-1]
    assert band.get_facecolor()[0].tolist() == pytest.approx([1.0, 0.0, 0.0, 0.25])
    assert ax.xaxis.get_transform().base == 2 and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["m"]
    rules = [line for line in ax.lines if line.get_linestyle() in (":", "-") and len(line.get_xdata()) == 2]
    assert {(tuple(r.get_xdata()), tuple(r.get_ydata())) for r in rules} >= {((2, 2), (0, 1)), ((0, 1), (1.0, 1.0))}
    note = ax.texts[0]
    assert note.get_text() == "a\nnote" and note.xy == pytest.approx((4.0, 0.5))          # log10 x back to x


def test_the_figures_of_figures_folder_come_from_the_app_builders():
    """The static GP and LM sweep figures are derived: no second builder draws them."""
    assert sweep_plots.GP_FIGURES["gp_ratio_vs_T"].__name__ == "static gp_ratio_figure"
    assert sweep_plots.LADDER_FIGURES["lm_ladder"].__name__ == "static lm_ladder_figure"
    assert sweep_plots.LM_FIGURES["lm_validation_curves"].__name__ == "static lm_sweep_figure"
    assert not [name for module in (energy_plots, study_plots, sweep_plots, trained_plots) for name in dir(module)
                if name.startswith("mpl_") and ("gp_r" in name or "ladder" in name or "validation" in name
                                                or "scaling" in name)]


def test_sub_and_superscripts_reach_the_static_form():
    """Plotly's y<sub>j</sub> and 10<sup>26</sup> become mathtext, not "yj" and "1026"; other tags are dropped;
    matplotlib draws the result."""
    import matplotlib.pyplot as plt

    from cem_core.ui.static import _plain

    assert _plain("RMSE of y<sub>j</sub>") == r"RMSE of y$\mathregular{_{j}}$"
    assert _plain("10<sup>26</sup><br><b>b</b>") == "10$\\mathregular{^{26}}$\nb"
    fig, ax = plt.subplots()
    ax.set_ylabel(_plain("RMSE of y<sub>j</sub> at 10<sup>3</sup>"))
    fig.canvas.draw()                                                    # mathtext parses
    plt.close(fig)
