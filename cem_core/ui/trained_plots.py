"""Matplotlib figures of the trained models (cem_core.ui.figdata reads them): a GP model's prediction step by step,
test-time T for the GP models, and the language models' logit lens and perplexity at test-time T."""
from __future__ import annotations

import math

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker

from cem_core.ui import figdata
from cem_core.ui.plot_style import finish_axes, subscripts


def _step_ramp(T: int):
    """The colour of step t = 0 .. T (light to dark) and a colour bar's mappable for it."""
    norm = matplotlib.colors.Normalize(0, T)
    return (lambda t: matplotlib.colormaps["viridis_r"](0.1 + 0.85 * norm(t))), \
        matplotlib.cm.ScalarMappable(norm=norm, cmap=matplotlib.colormaps["viridis_r"])


def _powers_of_two(ax, values) -> None:
    """A log2 x axis ticked at the powers of two from 1 to the largest of `values`, as plain numbers."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator([2 ** k for k in range(int(max(values)).bit_length())]))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def mpl_trained_steps(data: dict):
    """figdata.gp_steps_on_function: one panel per model, its prediction on the grid after each step t (a colour
    ramp) against the posterior mean +- 2 sd and the context points; the last panel the RMSE to the posterior mean
    after each step."""
    names = list(data["models"])
    fig, axes = plt.subplots(1, len(names) + 1, figsize=(5 * len(names) + 4.5, 4.2),
                             gridspec_kw={"width_ratios": [1.25] * len(names) + [1]})
    grid, mean, sd = data["grid"], data["posterior_mean"], data["posterior_sd"]
    seen = data["context_y"] if data["truth"] is None else data["truth"]      # a learner's points: no truth
    low, high = min((mean - 2 * sd).min(), seen.min(initial=0.0)), max((mean + 2 * sd).max(), seen.max(initial=0.0))
    for ax, name in zip(axes, names):
        m = data["models"][name]
        colour, mappable = _step_ramp(m["T"])
        ax.fill_between(grid, mean - 2 * sd, mean + 2 * sd, color="0.85", label="GP posterior ± 2 sd")
        ax.plot(grid, mean, "k--", lw=1.5, label="posterior mean (the optimum)")
        for t, prediction in enumerate(m["prediction"]):
            ax.plot(grid, prediction, color=colour(t), lw=2.2 if t == m["T"] else 1.1, zorder=3,
                    label=f"model after step t = {t}" if t in (0, m["T"]) else None)
        ax.scatter(data["context_x"], data["context_y"], color="red", zorder=4, s=22,
                   label=f"the {data['context']} context points")
        ax.set_ylim(low - 0.35 * (high - low), high + 0.35 * (high - low))
        ax.set(xlabel="x", ylabel="prediction of y", title=f"{subscripts(m['title'])}")
        fig.colorbar(mappable, ax=ax, label="in-layer step t", ticks=range(0, m["T"] + 1, max(1, m["T"] // 4)))
    axes[0].legend(fontsize=7, loc="lower left")
    for k, name in enumerate(names):
        m = data["models"][name]
        axes[-1].plot(range(len(m["rmse_to_posterior"])), m["rmse_to_posterior"], "o-", color=f"C{k}",
                      label=m["title"].split(" (")[0])
    axes[-1].set_ylim(bottom=0)
    axes[-1].xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[-1].set(xlabel="in-layer step t", ylabel="RMSE to the posterior mean (grid)",
                 title="Distance to the optimum, step by step")
    axes[-1].legend(fontsize=7)
    on = f"one function (seed {data['seed']}) of the prior" if data["truth"] is not None else \
        f"your {data['context']} points"
    fig.suptitle(f"Trained GP models on {on}, step by step")
    fig.tight_layout()
    return fig


def _overflow_note(ax, c: dict, colour: str) -> None:
    """Where a model's predictions overflow (not finite: no ratio), a marker at its last finite ratio and a note."""
    over = [k for k, n in enumerate(c["overflowed"]) if n]
    if not over:
        return
    first, last = over[0], over[-1]
    ax.annotate(f"from T = {c['T'][first]}: not finite on {c['overflowed'][first]} of {c['functions']} functions"
                f"\n(all of them from T = {next(c['T'][k] for k in over if c['overflowed'][k] == c['functions'])})"
                if c["overflowed"][last] == c["functions"] else
                f"from T = {c['T'][first]}: not finite on {c['overflowed'][first]} of {c['functions']} functions",
                xy=(c["T"][first - 1], c["mean"][first - 1]), xytext=(0.98, 0.6), textcoords="axes fraction",
                ha="right", color=colour, fontsize=8, arrowprops=dict(arrowstyle="->", color=colour))
    ax.plot(c["T"][first - 1], c["mean"][first - 1], "x", ms=10, mew=2, color=colour, zorder=5)


def mpl_trained_test_time(curves: dict):
    """figdata.gp_test_time_curves: each GP model's RMSE ratio to the GP optimum by test-time T (mean +- se over
    the held-out functions), its trained T starred; a model without steps (Llama) is a dashed line."""
    fig, ax = plt.subplots(figsize=(8, 5.8))
    for k, (name, c) in enumerate(curves.items()):
        if len(c["T"]) == 1:
            ax.axhline(c["mean"][0], color=f"C{k}", ls="--", lw=1.2, label=f"{c['title']} (no in-layer steps)")
            continue
        ax.errorbar(c["T"], c["mean"], yerr=c["se"], fmt="o-", ms=3, lw=1.3, capsize=2, color=f"C{k}",
                    label=c["title"])
        at = list(c["T"]).index(c["trained_T"])
        ax.plot(c["T"][at], c["mean"][at], "*", ms=15, color=f"C{k}", mec="black", zorder=4)
        _overflow_note(ax, c, f"C{k}")
    ax.axhline(1, color="black", lw=0.8)
    ax.plot([], [], "*", ms=12, color="0.6", mec="black", label="the trained T")
    _powers_of_two(ax, [T for c in curves.values() for T in c["T"]])
    functions = next(iter(curves.values()))["functions"]
    ax.grid(alpha=0.3)
    ax.set(xlabel="test-time T (in-layer steps run)", ylabel=f"RMSE / GP optimum (mean ± se, {functions} functions)",
           title="Do more steps help? Trained GP models at test-time T (1 = the optimum)")
    ax.legend(fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    fig.tight_layout()
    return fig


def mpl_trained_lm_steps(data: dict):
    """figdata.lm_test_time_curves: the true next token's mean loss with each CEM layer stopped after step t, and
    each model's validation perplexity by test-time T (the trained T starred; a model without steps dashed)."""
    fig, (ax_s, ax_p) = plt.subplots(1, 2, figsize=(12, 4.6))
    styles = ("-", "--", "-.", ":")
    for k, (name, layers) in enumerate(data["steps"].items()):
        for j, (layer, losses) in enumerate(layers.items()):
            ax_s.plot(range(len(losses)), losses, styles[j % 4], marker="o", ms=3, color=f"C{k}",
                      label=f"{name}: {layer}")
    ax_s.set(xlabel="in-layer step t of the layer read (the others as trained)",
             ylabel="true next token's loss (nats per byte, mean)",
             title=f"Logit lens along the steps ({data['sequences']} validation sequences)")
    ax_s.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    for k, (name, c) in enumerate(data["ppl"].items()):
        if len(c["T"]) == 1:
            ax_p.axhline(c["ppl"][0], color=f"C{k}", ls="--", label=f"{name} (no in-layer steps)")
            ax_s.axhline(math.log(c["ppl"][0]), color=f"C{k}", ls="--", label=f"{name}: its validation loss")
            continue
        ax_p.plot(c["T"], c["ppl"], "o-", color=f"C{k}", label=name)
        at = list(c["T"]).index(c["trained_T"])
        ax_p.plot(c["T"][at], c["ppl"][at], "*", ms=14, color=f"C{k}", mec="black", zorder=4)
    _powers_of_two(ax_p, [T for c in data["ppl"].values() for T in c["T"]])
    ax_p.set_yscale("log")
    ax_p.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax_p.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _: f"{v:g}" if f"{v:g}"[0] in "2358" else ""))
    ax_s.legend(fontsize=7)
    finish_axes(fig, ax_p, xlabel="test-time T (★ the trained T)", ylabel="validation perplexity (log scale)",
            title="Validation perplexity at test-time T")
    fig.suptitle("Trained language models on the English prose corpus (not SlimPajama)")
    fig.tight_layout()
    return fig


TRAINED_FIGURES = {"trained_steps": (figdata.gp_steps_on_function, mpl_trained_steps),
                   "trained_test_time": (figdata.gp_test_time_curves, mpl_trained_test_time),
                   "trained_lm_steps": (figdata.lm_test_time_curves, mpl_trained_lm_steps)}
