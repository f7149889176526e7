"""CEM Lab web app (Streamlit). A minimal energy-descent page until the full app lands.

Launch with `make app` (or `streamlit run app.py`).
"""
from __future__ import annotations

import streamlit as st
import torch

from cem_core import AttentionConfig, CEMAttention

st.set_page_config(page_title="CEM Lab", layout="wide")
st.title("CEM Lab: watch the energy fall")
st.caption("One CEM attention layer is T gradient steps on a causal log-sum-exp energy "
           "(arXiv 2605.07588). Random weights, random input; every token's energy per step.")


@st.cache_data(show_spinner=False)
def energy_trace(T: int, eta: float, anchor: float, seed: int) -> list[dict]:
    torch.manual_seed(seed)
    layer = CEMAttention(AttentionConfig(d_model=16, n_heads=2, T=T, eta=eta, anchor=anchor))
    trace = layer.trace(torch.randn(1, 6, 16))
    energies = trace.energies[:, 0]                      # (T+1, n)
    return [{f"token {i}": float(energies[t, i]) for i in range(energies.shape[1])}
            for t in range(T + 1)]


col_controls, col_plot = st.columns([1, 3])
with col_controls:
    T = st.slider("steps T", 1, 16, 4)
    eta = st.slider("step size eta", 0.05, 2.0, 1.0, 0.05)
    anchor = st.slider("anchor lambda (our extension; 0 = paper)", 0.0, 2.0, 0.0, 0.1)
    seed = st.number_input("seed", 0, 10_000, 0)
with col_plot:
    st.line_chart(energy_trace(T, eta, anchor, int(seed)), x_label="step t", y_label="energy E(x_i^(t))")
    st.info("The attention energy is concave in x, so every step lowers it, but it has no minimum: "
            "without the anchor the iterates run off. With lambda > 0 the energy has a minimum and "
            "the trace levels out.")
