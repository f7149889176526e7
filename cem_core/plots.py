"""Figure builders. Matplotlib (Agg) for the static figures in figures/ (Plotly's static export
needs a browser download, design.md §7); the app builds Plotly figures from the same data
functions. Builders only draw: the numbers come from cem_core's data functions.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import gp_sweep  # noqa: E402


def _finish(fig, ax, log2_x=False, **labels):
    if log2_x:
        ax.set_xscale("log", base=2)
    ax.set(**labels)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def mpl_gp_rmse_vs_context(records):
    data = gp_sweep.context_curves(records)
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, curve in data["curves"].items():
        ax.plot(range(len(curve)), curve, label=label, lw=1.5)
    ax.plot(range(len(data["gp"])), data["gp"], "k--", lw=2, label="GP posterior mean (optimum)")
    return _finish(fig, ax, xlabel="context length j (points seen)", ylabel="held-out RMSE of y_j",
                   title="GP regression, depth 1: RMSE vs context length")


def mpl_gp_ratio_vs_T(records):
    data = gp_sweep.ratio_vs_T(records)
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, d in data.items():
        if label == "Llama":
            continue
        ax.errorbar(d["T"], d["mean"], yerr=d["std"], marker="o", capsize=3, label=label)
    llama = data["Llama"]
    ax.axhline(llama["mean"], color="gray", ls="--", label="Llama attention (T = 1)")
    ax.axhspan(llama["mean"] - llama["std"], llama["mean"] + llama["std"], color="gray", alpha=0.15)
    ax.axhline(1.0, color="k", lw=1, label="GP optimum")
    return _finish(fig, ax, log2_x=True, xlabel="in-layer steps T",
                   ylabel="RMSE / GP optimum (mean ± std over seeds)",
                   title="GP regression, depth 1: does recursion help?")


def mpl_gp_test_time_scaling(records):
    data = gp_sweep.eval_T_curves(records)
    fig, ax = plt.subplots(figsize=(6, 4))
    for T, d in data.items():
        ax.plot(d["eval_T"], d["ratio"], marker="o", label=f"trained at T={T}")
    return _finish(fig, ax, log2_x=True, xlabel="T at evaluation", ylabel="RMSE / GP optimum",
                   title="Test-time scaling: trained at T, evaluated at T'")


GP_FIGURES = {"gp_rmse_vs_context": mpl_gp_rmse_vs_context, "gp_ratio_vs_T": mpl_gp_ratio_vs_T,
              "gp_test_time_scaling": mpl_gp_test_time_scaling}


def write_all_figures(out_dir, gp_results=None) -> list[Path]:
    """Write every figure as PNG and SVG into out_dir; return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = gp_sweep.load_results(gp_results or gp_sweep.RESULTS_DIR / "results.json")
    if not records:
        raise ValueError(f"gp_results={str(gp_results)!r} is invalid: no sweep results found")
    paths = []
    for name, builder in GP_FIGURES.items():
        fig = builder(records)
        for ext in ("png", "svg"):
            path = out / f"{name}.{ext}"
            fig.savefig(path, dpi=120)
            paths.append(path)
        plt.close(fig)
    return paths
