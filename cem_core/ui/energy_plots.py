"""Matplotlib figures of a CEM layer itself, for figures/ and the notebooks: the energy's descent and its fall per
token, one token's landscape, the energy page's first phase, the preconditioners' spectra, parameter counts and a
worked attention step. Builders only draw: the numbers come from cem_core.ui.figdata and cem_core.ui.explore."""
from __future__ import annotations

import itertools

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker

from cem_core.nn.precondition import PRECONDITIONERS
from cem_core.ui import figdata
from cem_core.ui.plot_style import finish_axes


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
    return finish_axes(fig, ax, xlabel="eigenvalue index", ylabel="eigenvalue of P",
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
    return finish_axes(fig, ax, xlabel="parameters (millions)", title="Parameters: Llama vs CEM variants")


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


CEM_FIGURES = {"energy_descent": (figdata.energy_descent, mpl_energy_descent),
               "energy_landscape": (figdata.energy_landscape, mpl_energy_landscape),
               "preconditioner_spectra": (figdata.preconditioner_spectra, mpl_preconditioner_spectra),
               "parameter_counts": (figdata.parameter_counts, mpl_parameter_counts)}
