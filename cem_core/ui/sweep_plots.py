"""The sweeps' figures for figures/ and the notebooks. A sweep figure the app shows has one builder, its Plotly one
(cem_core.ui.gp_figures, lm_figures), and its static form here is derived from it (``derived``, by
cem_core.ui.static); the LM sweep's perplexity per variant is matplotlib's own. The numbers come from
cem_core.experiments.gp.sweep and cem_core.experiments.lm.report."""
from __future__ import annotations

import matplotlib.pyplot as plt

from cem_core.experiments.lm import report as lm_report
from cem_core.ui import gp_figures, lm_figures, question_figures, static


def mpl_lm_perplexity(records):
    """The LM sweep's final validation perplexity per variant (mean ± 2 se over seeds), with its parameters as a
    ratio to the first variant's."""
    rows = lm_report.summarize(records)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    y = list(range(len(rows)))
    means, errors = [r["ppl_mean"] for r in rows], [2 * r["ppl_se"] for r in rows]
    ax.errorbar(means, y, xerr=errors, fmt="o", color="#4c78a8", capsize=4)
    right = max(m + e for m, e in zip(means, errors))
    left = min(m - e for m, e in zip(means, errors))
    for k, r in enumerate(rows):
        ax.annotate(f"{r['ppl_mean']:.3f}  ({r['params'] / rows[0]['params']:.2f}x params)", (right, k),
                    xytext=(8, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(y, [r["name"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(left - 0.05 * (right - left), right + 0.8 * (right - left))
    ax.grid(axis="x", alpha=0.3)
    ax.set(xlabel="final validation perplexity (mean ± 2 se over seeds)",
           title="LM sweep: final validation perplexity per variant")
    fig.tight_layout()
    return fig


def derived(builder):
    """The static form of a figure whose one builder is the app's Plotly one (cem_core.ui.gp_figures,
    lm_figures), drawn from it by cem_core.ui.static: what figures/ and the notebooks show."""
    def static_figure(records):
        return static.to_matplotlib(builder(records))

    static_figure.__name__ = static_figure.__qualname__ = f"static {builder.__name__}"
    return static_figure


GP_FIGURES = {"gp_rmse_vs_context": derived(gp_figures.gp_context_figure),
              "gp_ratio_vs_T": derived(gp_figures.gp_ratio_figure),
              "gp_test_time_scaling": derived(gp_figures.gp_scaling_figure)}
LM_FIGURES = {"lm_validation_curves": derived(lm_figures.lm_sweep_figure), "lm_perplexity": mpl_lm_perplexity}
LADDER_FIGURES = {"lm_ladder": derived(lm_figures.lm_ladder_figure)}
BUDGET_LADDER_FIGURES = {"lm_budget_ladder": derived(lm_figures.lm_budget_ladder_figure)}
TIE_LADDER_FIGURES = {"lm_tie_ladder": derived(question_figures.tie_ladder_figure)}
GP_TEST_TIME_FIGURES = {"gp_test_time_base": derived(question_figures.gp_test_time_base),
                        "gp_test_time_joint_long": derived(question_figures.gp_test_time_joint_long)}
LM_TEST_TIME_FIGURES = {"lm_test_time": derived(question_figures.lm_test_time)}
