"""Energy descent (the default page): one CEM layer, or a block as its two phases, on a random input."""
from __future__ import annotations

import streamlit as st

from app_pages.common import (
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
from cem_core.ui import interactive
from cem_core.ui.controls import LAYER_LABELS, EnergyControls
from cem_core.ui.equations import update_latex
from cem_core.ui.explore import diagnose, explore

KEYS = widget_keys(EnergyControls, "en_")
PLOT_HEIGHT = 330          # two plots side by side fit under the title at 1280 x 720


@st.cache_resource(show_spinner=False, max_entries=64)
def page_data(controls: EnergyControls):
    """The page's data, its diagnoses and its figures for one state. A resource cache: a revisited state
    costs no recomputation, no unpickling and no rebuilding of its Plotly figures (which are never mutated)."""
    data = explore(controls)
    figures = []
    for phase in data["phases"]:
        name = phase["name"]
        weights = phase["weights"]
        heatmap = None
        if weights is not None:
            step, head = min(controls.heat_step, weights.shape[0]) - 1, min(controls.heat_head, weights.shape[1] - 1)
            heatmap = interactive.attention_heatmap_figure(weights, step, head)
        figures.append({
            "energy": interactive.per_token_figure(phase["energies"], f"{LAYER_LABELS[name]}: energy E(x⁽ᵗ⁾ | c) "
                                                   "per token", "energy", rose=phase["rose"], height=PLOT_HEIGHT),
            "norm": interactive.per_token_figure(phase["update_norms"], "update norm |x⁽ᵗ⁺¹⁾ − x⁽ᵗ⁾|", "norm",
                                                 first_step=1, height=PLOT_HEIGHT),
            "landscape": interactive.landscape_figure(phase["landscape"], data["token"]),
            "heatmap": heatmap})
    return data, diagnose(controls, data), figures


def sidebar_controls() -> EnergyControls:
    shown = restore_controls("energy", EnergyControls, KEYS,
                             lambda values: EnergyControls.shown(values["layer"], values["preconditioner"]))
    state, kept = st.session_state, st.session_state["_controls_energy"]
    if "heat_step" in shown:
        # The heatmap follows T when it showed the last step. Both are assigned on every run: to Streamlit a
        # slider whose range changed is a new widget, which would start at its minimum.
        step, T = state[KEYS["heat_step"]], state[KEYS["T"]]
        state[KEYS["heat_step"]] = T if step >= kept["T"] else min(step, T)
        state[KEYS["heat_head"]] = min(state[KEYS["heat_head"]], state[KEYS["heads"]] - 1)
    with st.sidebar:
        st.header("Layer")
        control(EnergyControls, "layer", KEYS["layer"], "layer", st.radio, format_func=LAYER_LABELS.get)
        for name in EnergyControls.CEM:                                # every CEM switch of an untrained layer
            if name in shown:
                cem_widget(EnergyControls, name, KEYS[name])
        if "p_scale" in shown:
            control(EnergyControls, "p_scale", KEYS["p_scale"], "preconditioner scale", step=0.1,
                    help="U and V entries ~ N(0, scale²/d). Above about 1.1 the paper's form has negative eigenvalues.")
        st.header("Sizes")
        if "heads" in shown:
            control(EnergyControls, "heads", KEYS["heads"], "heads")
        for name, label in (("width", "width d"), ("seq_len", "sequence length"), ("seed", "seed")):
            control(EnergyControls, name, KEYS[name], label, st.number_input)
        if "rope" in shown:
            control(EnergyControls, "rope", KEYS["rope"], "RoPE")
        if "heat_step" in shown and (state[KEYS["T"]] > 1 or state[KEYS["heads"]] > 1):
            st.header("Attention heatmap")
            if state[KEYS["T"]] > 1:
                st.slider("step", 1, state[KEYS["T"]], key=KEYS["heat_step"])
            if state[KEYS["heads"]] > 1:
                st.slider("head", 0, state[KEYS["heads"]] - 1, key=KEYS["heat_head"])
    controls = EnergyControls.from_values(**control_values("energy", KEYS))
    keep_controls("energy", controls)
    return controls


def note(diagnosis) -> None:
    (st.warning if diagnosis.level == "warning" else st.info)(diagnosis.text)


def equations(layer: str, cem) -> None:
    for line in update_latex(layer, cem):
        st.latex(line)


def phase_section(controls: EnergyControls, name: str, figures: dict, diagnosis, index: int) -> None:
    c1, c2 = st.columns(2)
    with c1:
        show_figure(figures["energy"], f"{name} energy", f"energy-{index}")
        explain("Each line is one token's energy as its iterate x⁽ᵗ⁾ takes gradient steps. Step 0 is the "
                "normalized input; step 1 is exactly what a standard (tied) layer computes.")
    with c2:
        show_figure(figures["norm"], f"{name} update norm", f"norm-{index}")
        explain("How far each step moves. Shrinking steps mean the iterate is settling into a minimum; "
                "constant steps mean it is running off (the attention energy has no minimum without the anchor).")
    note(diagnosis)
    c3, c4 = st.columns(2)
    with c3:
        show_figure(figures["landscape"], f"{name} landscape", f"land-{index}")
        explain("The energy of the last token over a 2-D slice; the white path is its descent. For attention "
                "the crosses are the keys as seen from x⁽⁰⁾ (x⁽⁰⁾ + ηPvⱼ): with one head the first step lands "
                "inside their convex hull, pulled toward the keys with the most softmax weight.")
    with c4:
        if figures["heatmap"] is not None:
            show_figure(figures["heatmap"], f"{name} attention", f"heat-{index}")
            explain("Row i is where token i looks at this step. As x moves, the queries W_Q x change while the "
                    "keys stay fixed, so later steps re-weigh the same history.")
        else:
            st.markdown("**The update**")
            equations("mlp", controls.cem)
    if figures["heatmap"] is not None:
        st.markdown("**The update**")
        equations("attention", controls.cem)


def body() -> None:
    st.title("Energy descent")
    st.markdown("A CEM layer is **T gradient steps on an energy**: move the controls and watch the energy fall, "
                "the iterates move and the attention shift (random weights and input, seeded).")
    notebook_links("energy")
    controls = sidebar_controls()
    data, diagnoses, figures = page_data(controls)
    if controls.layer == "block":
        st.caption("A block runs attention, then the MLP on the attention's output: two descents, shown in turn.")
    for index, (phase, diagnosis, figs) in enumerate(zip(data["phases"], diagnoses, figures)):
        if len(data["phases"]) > 1:
            st.subheader(f"Phase {index + 1}: {LAYER_LABELS[phase['name']]}")
        phase_section(controls, phase["name"], figs, diagnosis, index)


run_safely(body)
