"""Matplotlib figures of the GP factor study (cem_core.experiments.gp.study): the conditions map and the step
diagnostics of trained layers, in the wide form of figures/ and the notebooks or the app's (two panels a row,
larger fonts), with their captions."""
from __future__ import annotations

import math

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker

from cem_core.experiments.gp import study as gp_study
from cem_core.ui.plot_style import subscripts


def _symlog(ax, most: int = 6) -> None:
    """A symmetric log y axis with at most `most` ticks, at 0 and at ±10^k every few decades (one a decade
    overlapped when the energies spanned 30 decades)."""
    ax.set_yscale("symlog")
    low, high = ax.get_ylim()
    decades = max(1, math.ceil(math.log10(max(abs(low), abs(high), 10))))
    every = max(1, math.ceil(decades / (most - 1)))
    ticks = [0.0] + [sign * 10.0 ** k for k in range(every if decades > most - 1 else 0, decades + 1, every)
                     for sign in (-1, 1) if low <= sign * 10.0 ** k <= high]
    ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(sorted(ticks)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _: "0" if v == 0 else f"${'-' if v < 0 else ''}10^{{{round(math.log10(abs(v)))}}}$"))
    ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def mpl_gp_conditions_map(records, columns: int = 4, fonts: dict | None = None, shared_legend: bool = False):
    """One panel per condition of the GP factor study with runs (``gp_study.conditions_map``), as many rows as
    they need: the RMSE ratio vs T with its band over seeds, the lines and curves it is compared with. `fonts`:
    matplotlib's rc font sizes (STUDY_FONTS by default; the app's are larger). `shared_legend`: one legend for
    all panels above them (each comparison has one style across panels) instead of one in each panel."""
    with plt.rc_context(fonts or STUDY_FONTS):
        return _conditions_map(gp_study.conditions_map(records), columns, shared_legend)


def _conditions_map(data: dict, columns: int, shared_legend: bool):
    rows = max(1, math.ceil(len(data) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.6 * rows + 0.8), sharex=True, squeeze=False,
                             layout="constrained" if shared_legend else None)
    palette = ["#e45756", "#54a24b", "#4c78a8", "#b279a2", "#f58518", "#72b7b2"]
    styles = {}                                                        # one style per comparison, across panels

    def style(label):
        if label.startswith("Llama attention"):
            return dict(color="gray", ls="--")
        if label not in styles:
            styles[label] = dict(color=palette[len(styles) % len(palette)], ls=(":", "-.")[len(styles) % 2])
        return styles[label]

    for ax, (group, d) in zip(axes.flat, data.items()):
        ax.fill_between(d["T"], d["low"], d["high"], color="#4c78a8", alpha=0.2, lw=0)
        ax.plot(d["T"], d["mean"], "o-", color="#4c78a8", label="CEM (mean; band: seeds)")
        for label, value in d["lines"].items():
            ax.axhline(value, label=label, **style(label))
        for label, curve in d["curves"].items():
            ax.plot(curve["T"], curve["mean"], "s", label=label, **style(label))
        ax.axhline(1.0, color="black", lw=1, label="GP optimum")
        ax.set_xscale("log", base=2)
        ax.set_xticks(gp_study.STUDY_TS, [str(T) for T in gp_study.STUDY_TS])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_title(subscripts(group))
        if not shared_legend:
            ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(data):]:
        ax.axis("off")
    fig.supxlabel("in-layer steps T")
    fig.supylabel("held-out RMSE / GP optimum")
    if not shared_legend:                    # the app's form has its caption for a title, and the legend below
        fig.suptitle("GP regression: where recursion helps (one panel per condition, depth 1)")
    if shared_legend:
        entries = {}
        for ax in axes.flat:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                entries.setdefault("Llama attention (of the condition; of base or long if it has none)"
                                   if label.startswith("Llama attention") else label, handle)
        fig.legend(entries.values(), entries.keys(), loc="outside upper center", ncols=2)
    else:
        fig.tight_layout()
    return fig


def mpl_gp_step_diagnostics(records, group: str = "long", other: str = "attention only",
                            learned: str = "eta per step", columns: int = 3, fonts: dict | None = None):
    """What the steps of trained layers do in condition ``group`` (four panels), the RMSE read out after
    each step in condition ``other``, and the step sizes learned per step in condition ``learned``; six panels,
    `columns` a row. `fonts`: as for mpl_gp_conditions_map."""
    with plt.rc_context(fonts or STUDY_FONTS):
        return _step_diagnostics(records, group, other, learned, columns)


def _step_diagnostics(records, group: str, other: str, learned: str, columns: int):
    data, others = gp_study.diagnostics_by_T(records, group), gp_study.diagnostics_by_T(records, other)
    rows = -(-6 // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.25 * rows))
    panels = ((data, "rmse_ratio_after_step", f"RMSE / optimum, read out after step t ('{group}')", 0),
              (data, "energy_change", f"$E(x^{{(t)}}) - E(x^{{(0)}})$, symlog ('{group}')", 0),
              (data, "update_norm", f"$|x^{{(t)}} - x^{{(t-1)}}|$ ('{group}')", 1),
              (data, "attention_entropy", f"attention entropy, nats ('{group}')", 1),
              (others, "rmse_ratio_after_step", f"RMSE / optimum after step t ('{other}')", 0))
    for ax, (source, key, title, first) in zip(axes.flat, panels):
        for T, d in source.items():
            ax.plot(range(first, first + len(d[key])), d[key], "o-", label=f"trained at T={T}")
        ax.set_title(title)
    _symlog(axes.flat[1])
    ax = axes.flat[5]
    for T, etas in gp_study.learned_step_sizes(records, learned).items():
        ax.plot(range(1, 1 + len(etas)), etas, "s-", label=f"trained at T={T}")
    ax.set_title(f"learned step size η$_t$ ('{learned}')")
    for ax in axes.flat:
        ax.set_xlabel("step t")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.suptitle("What the steps of trained CEM layers do (GP regression, depth 1, mean over seeds)")
    fig.tight_layout()
    return fig


FORM_GROUPS = ("long", "distance long", "joint long", "joint + distance long")


def mpl_gp_form_diagnostics(records, groups: tuple = FORM_GROUPS, T: int = 8, columns: int = 4,
                            fonts: dict | None = None):
    """The step diagnostics of the energy's forms side by side, at one trained T: plain attention, the
    distance-form diagonal, the block as one energy and both (the long conditions by default): does the
    energy settle (energy change, update norm), does the attention stay soft (entropy), and the RMSE read
    out after each step. Conditions without runs at T are left out. Four panels, `columns` a row; `fonts`: as
    for mpl_gp_conditions_map."""
    with plt.rc_context(fonts or STUDY_FONTS):
        return _form_diagnostics(records, groups, T, columns)


def _form_diagnostics(records, groups: tuple, T: int, columns: int):
    rows = -(-4 // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.75 * columns, 3.3 * rows + 0.5) if rows > 1 else (15, 3.8),
                             squeeze=False)
    axes = list(axes.flat)
    keys = (("rmse_ratio_after_step", "RMSE / optimum, read out after step t", 0),
            ("energy_change", "$E(x^{(t)}) - E(x^{(0)})$, symlog", 0),
            ("update_norm", "$|x^{(t)} - x^{(t-1)}|$, log", 1), ("attention_entropy", "attention entropy, nats", 1))
    for group in groups:
        d = gp_study.diagnostics_by_T(records, group).get(T)
        if d is None:
            continue
        for ax, (key, title, first) in zip(axes, keys):
            ax.plot(range(first, first + len(d[key])), d[key], "o-", label=group)
            ax.set_title(title)
    _symlog(axes[1])
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("step t")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.suptitle(f"The forms of the energy, trained at T = {T} (GP regression, depth 1, mean over seeds)")
    fig.tight_layout()
    return fig


GP_STUDY_FIGURES = {"gp_conditions_map": mpl_gp_conditions_map, "gp_step_diagnostics": mpl_gp_step_diagnostics,
                    "gp_form_diagnostics": mpl_gp_form_diagnostics}
STUDY_FONTS = {"font.size": 10, "axes.titlesize": 10, "legend.fontsize": 7}     # figures/ and the notebooks
APP_IMAGE_PX = 800        # the GP page's main column at 1280 px with the sidebar open (a browser test measures it)
APP_TEXT_PX = 12          # the smallest text of a study figure as the app shows it
APP_FORMS = {"gp_conditions_map": dict(columns=3, shared_legend=True), "gp_step_diagnostics": dict(columns=2),
             "gp_form_diagnostics": dict(columns=2)}
APP_FONTS = {"font.size": 12, "axes.titlesize": 12, "legend.fontsize": 10.5, "figure.titlesize": 12.5}


STUDY_CAPTIONS = {        # what each study figure shows: (the caption under it in the app, its alt text)
    "gp_conditions_map": (
        "The factor study, one panel per condition: held-out RMSE / GP optimum against the in-layer steps T "
        "(CEM's mean, band: lowest to highest seed), with Llama attention dashed and the GP optimum at 1.",
        "Grid of small line plots, one per condition of the GP factor study ({conditions}). Each plots the RMSE "
        "ratio to the GP optimum against T = 1, 2, 4, 8 for CEM with a band over seeds, a dashed line for Llama "
        "attention and a solid line at 1 for the optimum."),
    "gp_step_diagnostics": (
        "What the steps of trained CEM layers do, per step t: the RMSE read out after t steps, the energy change, "
        "the update norm, the attention entropy, and the step sizes learned per step.",
        "Six line plots against the step t, one line per trained T: RMSE over optimum read out after each step, "
        "energy change on a symmetric log axis, the norm of each update, attention entropy in nats, the RMSE "
        "after each step with attention-only blocks, and the learned step size per step."),
    "gp_form_diagnostics": (
        "The forms of the energy trained long at T = 8: plain attention, the distance-form diagonal, the block "
        "as one energy and both, per step t.",
        "Four line plots against the step t, one line per form of the energy: RMSE over optimum read out after "
        "each step, energy change on a symmetric log axis, update norm on a log axis, and attention entropy."),
}


def study_caption(name: str, records) -> tuple[str, str]:
    """A study figure's caption and alt text (STUDY_CAPTIONS), the map's naming its conditions."""
    caption, alt = STUDY_CAPTIONS[name]
    return caption, alt.format(conditions=", ".join(gp_study.conditions_map(records)))


def app_study_figure(name: str, records):
    """A study figure as the GP page shows it, at APP_IMAGE_PX wide: two panels a row and larger fonts, so that
    its smallest text is at least APP_TEXT_PX (``displayed_text_px``); figures/ and the notebooks keep the wide
    form."""
    return GP_STUDY_FIGURES[name](records, fonts=APP_FONTS, **APP_FORMS[name])


def displayed_text_px(fig, width_px: float = APP_IMAGE_PX) -> float:
    """The smallest visible text of a figure, in pixels, when its tight bounding box (as savefig with
    bbox_inches="tight" crops it) is shown `width_px` wide."""
    import matplotlib.text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width_in = fig.get_tightbbox(renderer).width
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text)
             if t.get_visible() and t.get_text().strip() and t.get_window_extent(renderer).width > 0]
    return min(sizes) / 72 * width_px / width_in
