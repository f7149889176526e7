"""Figure builders. Matplotlib (Agg) for the static figures in figures/ that the app does not show; a sweep
figure the app shows has one builder, its Plotly one in cem_core.ui.interactive, and its static form here is
derived from it (``derived``, by cem_core.ui.static). Builders only draw: the numbers come from
cem_core.ui.figdata (CEM figures), cem_core.experiments.gp.sweep and gp_study (GP figures) and
cem_core.experiments.lm.report (language-model figures).
"""
from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker

from cem_core.experiments.checkpoints import MODELS
from cem_core.experiments.gp import study as gp_study
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.lm import report as lm_report
from cem_core.experiments.lm import runner as lm_runner
from cem_core.experiments.records import atomic_write, refuse_links
from cem_core.nn.precondition import PRECONDITIONERS
from cem_core.ui import figdata, interactive, static


def _finish(fig, ax, log2_x=False, **labels):
    if log2_x:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())   # 1 2 4 8, not 2^k
    ax.set(**labels)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def mpl_energy_descent(data):
    """Energy and radius |x^(t)| of every token along the recursion, plain vs anchored."""
    fig, (ax_e, ax_r) = plt.subplots(1, 2, figsize=(10, 4))
    for color, (anchor, run) in zip(("C0", "C3"), data["runs"].items()):
        label = "λ = 0 (the paper): no minimum" if anchor == 0 else f"λ = {anchor:g} (our anchor)"
        for k, (energy, radius) in enumerate(zip(run["energy"].T, run["radius"].T)):
            ax_e.plot(data["t"], energy, color=color, lw=1, alpha=0.8, label=label if k == 0 else None)
            ax_r.plot(data["t"], radius, color=color, lw=1, alpha=0.8, label=label if k == 0 else None)
    ax_e.set(xlabel="in-layer step t", ylabel="E(x_i^(t) | c_1..i)", title="The energy falls at every step")
    ax_r.set(xlabel="in-layer step t", ylabel="|x_i^(t)|", title="Without the anchor the iterates run off")
    for ax in (ax_e, ax_r):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def mpl_energy_fall(data):
    """The lecture's figure (figdata.energy_descent with an anchored and a plain run): each token's energy relative
    to its start, E(x_i^(t)) - E(x_i^(0)), so that its fall at every step shows whatever the spread between
    tokens, and each token's step length |x^(t+1) - x^(t)|, shrinking with the anchor and growing without it."""
    with plt.rc_context({"font.size": 14}):
        fig, (ax_e, ax_u) = plt.subplots(1, 2, figsize=(12, 4.6))
        for color, (anchor, run) in zip(("C0", "C3"), data["runs"].items()):
            label = f"λ = {anchor:g}" + (" (no minimum)" if anchor == 0 else " (anchored)")
            relative = run["energy"] - run["energy"][:1]
            for k in range(relative.shape[1]):
                ax_e.plot(data["t"], relative[:, k], color=color, lw=1.5, alpha=0.8, label=label if k == 0 else None)
                ax_u.plot(data["t"][1:], run["update_norm"][:, k], color=color, lw=1.5, alpha=0.8,
                          label=label if k == 0 else None)
        ax_e.axhline(0, color="0.4", lw=0.8)
        ax_e.set(xlabel="in-layer step $t$", ylabel=r"$E(x_i^{(t)}) - E(x_i^{(0)})$",
                 title="Every token's energy falls")
        ax_u.set(xlabel="in-layer step $t$", ylabel=r"$|x_i^{(t)} - x_i^{(t-1)}|$",
                 title="Steps shrink only with the anchor", yscale="log")
        for ax in (ax_e, ax_u):
            ax.legend(fontsize=12)
        fig.tight_layout()
    return fig


def _draw_landscape(fig, ax, land: dict, legend_size: float = 8) -> None:
    """A landscape (figdata.landscape) on ax: filled contours, the key tips as arrows from x^(0), the path."""
    filled = ax.contourf(land["a"], land["b"], land["energy"], levels=30, cmap="viridis")
    ax.contour(land["a"], land["b"], land["energy"], levels=15, colors="white", linewidths=0.4, alpha=0.6)
    fig.colorbar(filled, ax=ax, label=r"$E(x \mid c_{1..i})$")
    start = land["trajectory"][0]
    for head, tips in enumerate(land["key_tips"] if land["key_tips"] is not None else ()):
        for tip in tips:
            ax.annotate("", xy=tip, xytext=start, arrowprops=dict(arrowstyle="->", color="orange", lw=1.2))
        ax.scatter(tips[:, 0], tips[:, 1], color="orange", s=18, zorder=3,
                   label=r"key tips $x^{(0)} + \eta A_k c_j$" if head == 0 else None)
    ax.plot(*land["trajectory"].T, "o-", color="red", ms=4, lw=1.5, label=r"$x^{(0)}, \ldots, x^{(T)}$")
    if land["true_plane"]:
        ax.set(xlabel="$x_1$", ylabel="$x_2$")
    else:
        ax.set(xlabel="a (first update direction)", ylabel="b (second update direction)")
    ax.legend(fontsize=legend_size, framealpha=0.85)


def mpl_energy_landscape(data):
    """One token's energy on a plane, with its trajectory and the key tips x^(0) + eta A c_j."""
    fig, ax = plt.subplots(figsize=(6, 5))
    _draw_landscape(fig, ax, data)
    where = "(width 2: the true plane)" if data["d_model"] == 2 else "on the plane of its first two steps"
    ax.set_title(f"Energy of token {data['token']} {where}")
    fig.tight_layout()
    return fig


def mpl_energy_explorer(data: dict):
    """The energy page's first phase (ui.explore.explore) in four panels sized for a notebook cell (about
    1,000 px wide, fonts legible there): every token's energy per step and its step length
    |x^(t) - x^(t-1)|, the followed token's landscape with its path (bold on the line plots), and the
    attention weights of the last step (head 0) or, for an MLP, every token's radius |x^(t)|."""
    phase, token = data["phases"][0], data["token"]
    with plt.rc_context({"font.size": 11, "axes.titlesize": 12, "legend.fontsize": 10}):
        fig, ((ax_e, ax_s), (ax_l, ax_w)) = plt.subplots(2, 2, figsize=(11, 8.5))
        steps = range(1, len(phase["update_norms"]) + 1)
        for ax, values, x, ylabel, title in (
                (ax_e, phase["energies"], range(len(phase["energies"])), r"$E(x_i^{(t)} \mid c_{1..i})$",
                 f"{phase['name']}: energy of every token"),
                (ax_s, phase["update_norms"], steps, r"$|x_i^{(t)} - x_i^{(t-1)}|$", "step length of every token")):
            ax.plot(x, values, lw=1, color="C0", alpha=0.45)
            ax.plot(x, values[:, token], lw=2.5, color="C3", label=f"token {token}")
            ax.set(xlabel="in-layer step $t$", ylabel=ylabel, title=title)
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
            ax.legend()
        _draw_landscape(fig, ax_l, phase["landscape"], legend_size=10)
        ax_l.set_title(f"energy of token {token} and its path")
        if phase["weights"] is not None:
            shown = ax_w.imshow(phase["weights"][-1, 0], cmap="Blues", vmin=0, vmax=1)
            fig.colorbar(shown, ax=ax_w, label="attention weight $a_{ij}$")
            ax_w.set(xlabel="key $j$", ylabel="query $i$", title="attention weights at the last step (head 0)")
        else:
            t = range(len(phase["radius"]))
            ax_w.plot(t, phase["radius"], lw=1, color="C0", alpha=0.45)
            ax_w.plot(t, phase["radius"][:, token], lw=2.5, color="C3", label=f"token {token}")
            ax_w.set(xlabel="in-layer step $t$", ylabel=r"$|x_i^{(t)}|$", title="radius of every token")
            ax_w.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
            ax_w.legend()
        fig.tight_layout()
    return fig


def mpl_preconditioner_spectra(data):
    """Sorted eigenvalues of each form of P in `data` (figdata.preconditioner_spectra: the paper's dlr, our psd),
    labelled by its registered label."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for (kind, values), marker in zip(data.items(), itertools.cycle("os^vD")):
        ax.plot(range(1, len(values) + 1), values, marker, label=PRECONDITIONERS[kind].label)
    ax.axhline(0.0, color="k", lw=1)
    lowest = min(min(values.min() for values in data.values()), 0.0)
    ax.axhspan(lowest - 0.5, 0.0, color="red", alpha=0.08, label="negative: a step can raise E")
    return _finish(fig, ax, xlabel="eigenvalue index", ylabel="eigenvalue of P",
                   title="Preconditioner spectra (random factors)")


def mpl_parameter_counts(data):
    """Stacked parameter counts per variant (millions), with the total as a ratio to Llama."""
    fig, ax = plt.subplots(figsize=(7, 4))
    y = range(len(data["variants"]))
    left = 0
    for group, counts in data["parts"].items():
        ax.barh(y, counts / 1e6, left=left, label=group)
        left = left + counts / 1e6
    for k, total in enumerate(data["total"]):
        ax.text(total / 1e6, k, f" {total / 1e6:.1f}M ({total / data['total'][0]:.2f}x)", va="center", fontsize=8)
    ax.set_yticks(list(y), data["variants"])
    ax.invert_yaxis()
    ax.set_xlim(0, data["total"].max() / 1e6 * 1.3)
    return _finish(fig, ax, xlabel="parameters (millions)", title="Parameters: Llama vs CEM variants")


def mpl_lm_perplexity(records):
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


def _subscripts(text: str) -> str:
    """A name's one-letter subscripts as matplotlib's mathtext: "d_x = 2" is drawn d with a subscript x."""
    return re.sub(r"\b([A-Za-z])_([A-Za-z0-9])\b", r"\1$_\2$", text)


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
        ax.set_title(_subscripts(group))
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


def derived(builder):
    """The static form of a figure whose one builder is the app's Plotly one (cem_core.ui.interactive), drawn
    from it by cem_core.ui.static: what figures/ and the notebooks show."""
    def static_figure(records):
        return static.to_matplotlib(builder(records))

    static_figure.__name__ = static_figure.__qualname__ = f"static {builder.__name__}"
    return static_figure


GP_FIGURES = {"gp_rmse_vs_context": derived(interactive.gp_context_figure),
              "gp_ratio_vs_T": derived(interactive.gp_ratio_figure),
              "gp_test_time_scaling": derived(interactive.gp_scaling_figure)}
LM_FIGURES = {"lm_validation_curves": derived(interactive.lm_sweep_figure), "lm_perplexity": mpl_lm_perplexity}
LADDER_FIGURES = {"lm_ladder": derived(interactive.lm_ladder_figure)}
BUDGET_LADDER_FIGURES = {"lm_budget_ladder": derived(interactive.lm_budget_ladder_figure)}
CEM_FIGURES = {"energy_descent": (figdata.energy_descent, mpl_energy_descent),
               "energy_landscape": (figdata.energy_landscape, mpl_energy_landscape),
               "preconditioner_spectra": (figdata.preconditioner_spectra, mpl_preconditioner_spectra),
               "parameter_counts": (figdata.parameter_counts, mpl_parameter_counts)}


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
    low, high = min((mean - 2 * sd).min(), data["truth"].min()), max((mean + 2 * sd).max(), data["truth"].max())
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
        ax.set(xlabel="x", ylabel="prediction of y", title=f"{_subscripts(m['title'])}")
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
    fig.suptitle(f"Trained GP models on one function (seed {data['seed']}) of the prior, step by step")
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
    _finish(fig, ax_p, xlabel="test-time T (★ the trained T)", ylabel="validation perplexity (log scale)",
            title="Validation perplexity at test-time T")
    fig.suptitle("Trained language models on the English prose corpus (not SlimPajama)")
    fig.tight_layout()
    return fig


TRAINED_FIGURES = {"trained_steps": (figdata.gp_steps_on_function, mpl_trained_steps),
                   "trained_test_time": (figdata.gp_test_time_curves, mpl_trained_test_time),
                   "trained_lm_steps": (figdata.lm_test_time_curves, mpl_trained_lm_steps)}


def _save(fig, out: Path, name: str) -> list[Path]:
    """Write fig as out/name.png and out/name.svg (SVG without a date, so reruns do not churn)."""
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    with plt.rc_context({"svg.hashsalt": "cem-lab"}):        # written under a temporary name, then renamed
        atomic_write(paths[0], lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
        atomic_write(paths[1], lambda tmp: fig.savefig(tmp, metadata={"Date": None}, format="svg"))
    plt.close(fig)
    return paths


def write_all_figures(out_dir, gp_results, lm_results, gp_study_results, ladder_results, budget_ladder_results,
                      models=MODELS) -> list[Path]:
    """Write every figure (CEM_FIGURES on their defaults, GP_FIGURES from the GP sweep's results.json
    `gp_results`, LM_FIGURES from the LM sweep's `lm_results`, GP_STUDY_FIGURES from the GP factor study's
    `gp_study_results`, LADDER_FIGURES from the quarter-budget width ladder's `ladder_results`,
    BUDGET_LADDER_FIGURES from the ladder at the paper's budget, `budget_ladder_results`, TRAINED_FIGURES from the
    trained models in the folder `models`) as PNG and SVG into out_dir; return the paths written."""
    matplotlib.use("Agg")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [*CEM_FIGURES, *GP_FIGURES, *LM_FIGURES, *GP_STUDY_FIGURES, *LADDER_FIGURES, *BUDGET_LADDER_FIGURES,
             *TRAINED_FIGURES]
    refuse_links([out / f"{name}.{ext}" for name in names for ext in ("png", "svg")], "figures")
    paths = []
    for name, (data, builder) in CEM_FIGURES.items():
        paths += _save(builder(data()), out, name)
    for figures, load, results, command in (
            (GP_FIGURES, gp_sweep.GP_SWEEP.load, gp_results, "make gp-sweep"),
            (LM_FIGURES, lm_runner.LM_SWEEP.load, lm_results, "make lm-sweep"),
            (GP_STUDY_FIGURES, gp_sweep.GP_SWEEP.load, gp_study_results, "make gp-study"),
            (LADDER_FIGURES, lm_runner.LM_SWEEP.load, ladder_results, "make lm-ladder"),
            (BUDGET_LADDER_FIGURES, lm_runner.LM_SWEEP.load, budget_ladder_results, "make lm-budget-ladder")):
        records = load(results)
        if not records:
            raise ValueError(f"results={str(results)!r} is invalid: no sweep results found (the figures before "
                             f"these were written; run `{command}`)")
        for name, builder in figures.items():
            paths += _save(builder(records), out, name)
    for name, (data, builder) in TRAINED_FIGURES.items():
        paths += _save(builder(data(root=models)), out, name)
    return paths


def mpl_worked_example(data: dict):
    """One attention step of figdata.worked_example, width 2 and d_h = 2: the head space (the query q = W_Q x,
    the keys kappa_j = W_K c_j, each labelled with its score s_j and weight a_j, marker area ~ a_j) and the
    residual plane (the history c_j, x, the tips x + W_Q^T kappa_j with their convex hull, where x + u lands
    whatever the weights, and the update arrow from x to x + u)."""
    keys, query, weights, scores = data["keys"], data["query"], data["weights"], data["scores"]
    x, tips, i = data["x"], data["tips"], len(data["history"])
    fig, (ax_h, ax_r) = plt.subplots(1, 2, figsize=(11, 5))
    ax_h.scatter(*query, color="red", zorder=4, label=r"query $q = W_Q x$")
    ax_h.annotate("", xy=query, xytext=(0, 0), arrowprops=dict(arrowstyle="->", color="red", lw=2))
    ax_h.scatter(*keys.T, s=40 + 900 * weights, color="C0", alpha=0.5, zorder=3,
                 label=r"keys $\kappa_j = W_K c_j$ (area $\propto a_j$)")
    for j, (key, s, a) in enumerate(zip(keys, scores, weights), start=1):
        ax_h.annotate("", xy=key, xytext=(0, 0), arrowprops=dict(arrowstyle="->", color="C0", lw=1.2))
        ax_h.annotate(rf"$\kappa_{j}$: $s_{j}$ = {s:.3g}, $a_{j}$ = {a:.3f}", xy=key, xytext=(10, -4),
                      textcoords="offset points", color="C0", fontsize=9)
    ax_h.scatter(0, 0, color="gray", s=8)
    ax_h.set(xlabel="head coordinate 1", ylabel="head coordinate 2",
             title=r"head space: scores $s_j = q^\top \kappa_j$, weights $a_j$")
    for j, c in enumerate(data["history"][:-1], start=1):
        ax_r.scatter(*c, marker="x", color="gray", zorder=2, label="history $c_j$" if j == 1 else None)
        ax_r.annotate(rf"$c_{j}$", xy=c, xytext=(8, -4), textcoords="offset points", color="gray")
    ax_r.fill(*data["hull"].T, color="C0", alpha=0.08, ls="--", ec="C0", label="where $x + u$ can land")
    ax_r.scatter(*tips.T, s=40 + 900 * weights, color="C0", alpha=0.5, zorder=3,
                 label=r"$x + W_Q^\top \kappa_j$ (area $\propto a_j$)")
    for j, (tip, a) in enumerate(zip(tips, weights), start=1):
        ax_r.annotate("", xy=tip, xytext=x, arrowprops=dict(arrowstyle="->", color="C0", lw=0.8, alpha=0.6))
        ax_r.annotate(rf"$j = {j}$: $a_{j}$ = {a:.3f}", xy=tip, xytext=(10, -4), textcoords="offset points",
                      color="C0", fontsize=9)
    ax_r.annotate("", xy=data["x_new"], xytext=x, arrowprops=dict(arrowstyle="-|>", color="black", lw=2))
    ax_r.scatter(*x, color="red", zorder=4, label=rf"$x = c_{i}$")
    ax_r.scatter(*data["x_new"], color="black", zorder=4, label=r"$x + u$, $u = \sum_j a_j W_Q^\top \kappa_j$")
    ax_r.set(xlabel=r"$x_1$", ylabel=r"$x_2$", title=r"residual plane: the update $u = -\nabla_x E$ from $x$")
    for ax in (ax_h, ax_r):
        ax.set_aspect("equal", adjustable="datalim")
        ax.axhline(0, color="gray", lw=0.5)
        ax.axvline(0, color="gray", lw=0.5)
        ax.margins(0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, markerscale=0.5)
    fig.tight_layout()
    return fig
