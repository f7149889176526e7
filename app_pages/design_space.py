"""Design space: parameters, FLOPs, the update equations and the preconditioner's spectrum."""
from __future__ import annotations

import streamlit as st
import torch

from app_pages.common import (
    busy_note,
    cem_widget,
    control,
    control_values,
    explain,
    keep_controls,
    notebook_links,
    restore_controls,
    run_safely,
    show_figure,
    widget_keys,
)
from cem_core.nn.block_modes import BLOCK_MODES
from cem_core.nn.config import CEMOptions
from cem_core.nn.model import VARIANTS
from cem_core.nn.precondition import PRECONDITIONERS
from cem_core.nn.ties import not_an_energy
from cem_core.ui import design_figures, figdata
from cem_core.ui.cache import shared
from cem_core.ui.design_controls import DesignControls
from cem_core.ui.equations import update_latex

KEYS = widget_keys(DesignControls, "ds_")
SPECTRUM_MAX_D = 256


SPECTRA_BYTES = 8 * 2 ** 20               # the spectra kept, shared by every session: about 1,600 of the largest


def spectra(d: int, rank: int, scale: float, seed: int) -> dict:
    """Eigenvalues of the paper-form (dlr) and positive-definite (psd) P, factor entries N(0, scale^2/d), from a
    cache bounded in bytes (every distinct link used to add an entry that was never dropped)."""
    def make():
        eigs = figdata.preconditioner_spectra(d_model=d, rank=rank, init_scale=scale ** 2, seed=seed)
        return {PRECONDITIONERS[kind].label: values.tolist() for kind, values in eigs.items()}

    return shared("design spectra", SPECTRA_BYTES, busy_note).get((d, rank, scale, seed), make)


def body() -> None:
    st.title("Design space")
    st.markdown("What tying, D+LR interactions, preconditioners and recursion cost, at sizes you choose.")
    notebook_links("design")
    restore_controls("design", DesignControls, KEYS)
    with st.sidebar:
        st.header("Model sizes")
        number = st.number_input
        control(DesignControls, "d_model", KEYS["d_model"], "d_model", number, step=64)
        control(DesignControls, "n_layers", KEYS["n_layers"], "layers", number)
        heads = DesignControls.heads_options(st.session_state[KEYS["d_model"]])
        st.selectbox(DesignControls.label("n_heads"), heads, key=KEYS["n_heads"],
                     help="The head counts that divide d_model into even head widths d_model / heads (RoPE).")
        control(DesignControls, "d_ff", KEYS["d_ff"], "d_ff", number, step=64)
        control(DesignControls, "vocab_size", KEYS["vocab_size"], "vocabulary", number, step=1000)
        control(DesignControls, "seq_len", KEYS["seq_len"], "sequence length", number, step=128)
        st.header("CEM options")
        for name in DesignControls.CEM:
            cem_widget(DesignControls, name, KEYS[name])
        control(DesignControls, "p_scale", KEYS["p_scale"], "low-rank scale (spectrum demo)", step=0.1)
        control(DesignControls, "seed", KEYS["seed"], "seed", number)
    c = DesignControls.from_values(**control_values("design", KEYS))
    keep_controls("design", c)

    configs = {name: c.model_config(name) for name in VARIANTS}
    st.subheader("Parameters")
    if not_an_energy(c.cem):
        dropped = [f"{label} {getattr(c.cem, name)}" for name, label in (("attn_ties", "attention ties"),
                                                                          ("mlp_ties", "MLP tie"))
                   if getattr(c.cem, name) != CEMOptions.__dataclass_fields__[name].default]
        st.warning(f"With {' and '.join(dropped)} the CEM layers are not energy descent: a dropped tie leaves the "
                   "energy view, so the update is no longer −ηP∇E of an energy and the layer has no energy, trace or "
                   "autograd reference (docs/design.md#215-the-ties). The counts, FLOPs and updates below are the "
                   "untied layers'; the Energy descent and GP recursion pages offer only the tied layers.")
    parts, ratios = figdata.variant_tables(figdata.variant_table(configs, torch.bfloat16))
    st.table(parts)                                        # static tables wrap: whole in a 1280 px window
    st.table(ratios)
    st.caption(figdata.info_comparison({name: DesignControls().model_config(name) for name in VARIANTS}))
    explain("Tying W_V = W_K and W_O = W_Q^T halves the attention weights (2d² instead of 4d²); tying the MLP's "
            "down projection to its up projection leaves 2 of SwiGLU's 3 matrices. The CEM KV cache holds keys "
            "only, since the values are the keys. With the block as one energy (block = joint) cem-full's "
            "attention and MLP share one norm, one step size and one preconditioner (block precond). The ties "
            "switches drop a tie: each adds its free projection's parameters (d² for W_V or W_O, d × d_ff for "
            "the MLP's W_D), and the layer leaves the energy view.")


    st.subheader("FLOPs per token (forward, matmuls only)")
    n = c.seq_len
    flops = figdata.flops_per_token(configs, n)
    series = {part: [flops[v][part] / 1e9 for v in VARIANTS] for part in ("attention", "MLP", "LM head")}
    show_figure(design_figures.bar_figure(list(VARIANTS), series, f"GFLOPs per token at sequence length {n}",
                                       "GFLOPs per token"), "design flops per token", "ds-flops")
    total = {v: sum(flops[v].values()) for v in VARIANTS}
    st.caption(" · ".join(f"{v}: {total[v] / total['llama']:.2f}× Llama" for v in VARIANTS)
               + ". A diagonal per head makes each head's attention core d_h + d wide, "
               f"(H + 1) = {c.shape.n_heads + 1}× "
               "the plain core; one shared diagonal adds a head-independent bias and readout, 2× the plain core."
               + (" cem-full as one energy runs its T steps in x space (the MLP term needs x at every step) and "
                  "applies P once per step, to the summed gradient." if BLOCK_MODES[c.cem.block].one_energy else ""))
    explain("Tying saves parameters, not matmuls: a CEM layer at T = 1 still multiplies by W_Q, W_K and W_Q^T. "
            "Each extra step T adds the query side and the attention core again, but reuses the keys.")

    st.subheader("The update for these options")
    layers = (("attention", "CEM attention"), ("mlp", "CEM gated MLP"))
    one_energy = BLOCK_MODES[c.cem.block].one_energy
    for layer, title in layers + ((("joint", "cem-full's block as one energy"),) if one_energy else ()):
        st.markdown(f"**{title}**")
        for line in update_latex(layer, c.cem, c.shape.activation):
            st.latex(line)

    st.subheader("Eigenvalues of the preconditioner P")
    d = min(c.shape.d_model, SPECTRUM_MAX_D)
    show_figure(design_figures.eigenvalue_figure(spectra(d, min(c.cem.rank, d), c.p_scale, c.seed)),
                "preconditioner eigenvalues", "ds-eigs")
    st.caption(f"Random factors at d = {d}" + (f" (capped from {c.shape.d_model})" if d < c.shape.d_model else "")
               + f", rank {min(c.cem.rank, d)}, softplus(p) = 1. Raise the low-rank scale to make the paper's form "
               "indefinite.")
    explain("A step x - ηP∇E lowers the energy for small η only if P is positive definite along the gradient. "
            "The paper's P = diag + UVᵀ + VUᵀ can have negative eigenvalues (below the red line): then a step can "
            "raise the energy. diag + UUᵀ never can.")


run_safely(body)
