"""Energy descent (the default page): one CEM layer, or a block as its two phases, on a random input, with step
playback in the browser, a followed token, pin-and-compare, the lesson's highlights and presentation mode."""
from __future__ import annotations

from dataclasses import replace

import streamlit as st

from app_pages import common, lesson_mode
from app_pages.common import (
    busy_note,
    cem_widget,
    control,
    control_values,
    download_buttons,
    explain,
    keep_controls,
    notebook_links,
    plain,
    restore_controls,
    run_safely,
    url_toggle,
    widget_keys,
)
from app_pages.explorer import explorer
from app_pages.playback import playback
from cem_core.ui import descent_figures
from cem_core.ui import playback as steps
from cem_core.ui.cache import SizedCache, shared
from cem_core.ui.controls import LAYER_CAPTIONS, LAYER_LABELS, EnergyControls
from cem_core.ui.energy_mode import EnergyMode, PlotStyle
from cem_core.ui.equations import update_latex
from cem_core.ui.explore import diagnose, explore

KEYS = widget_keys(EnergyControls, "en_")
PINNED = "_pinned_energy"      # the pinned state's control values, or None
INSTANT = "_instant"           # the Instant switch as last set, kept while other pages are shown
LAST = EnergyControls.SPECS["token"][1][1]     # the stored token that means "the last one", however long
# the computed states kept (`computed`): about three of the largest (72 MB each: the attention weights of 16 steps x
# 8 heads x 256 x 256 tokens, and their figures), hundreds of ordinary ones
CACHE_BYTES = 128 * 2 ** 20


def computed() -> SizedCache:
    """The states computed so far, shared by every session, within CACHE_BYTES: a revisited state costs no
    recomputation and no unpickling (the arrays are never mutated)."""
    return shared("energy", CACHE_BYTES, busy_note)


def descent(controls: EnergyControls):
    """The page's data and its diagnoses for one state."""
    def make():
        data = explore(controls)
        return data, diagnose(controls, data)

    return computed().get(("descent", controls), make)


def phase_views(controls: EnergyControls, pinned: EnergyControls | None, style: PlotStyle) -> list[dict]:
    """Per phase, the playback component's arguments and the figures (for the downloads), drawn in `style` (the
    mode's). The pinned state's curves and path are drawn faint on a phase of the same layer."""
    return computed().get(("views", controls, pinned, style), lambda: _phase_views(controls, pinned, style))


def _relative(phase: dict | None) -> dict | None:
    """A phase whose energies are measured from their step 0 (E(x⁽ᵗ⁾) − E(x⁽⁰⁾), per token)."""
    return None if phase is None else phase | {"energies": phase["energies"] - phase["energies"][:1]}


def _phase_views(controls: EnergyControls, pinned: EnergyControls | None, style: PlotStyle) -> list[dict]:
    data, _ = descent(controls)
    pinned_phases = {} if pinned is None else {p["name"]: p for p in descent(pinned)[0]["phases"]}
    names = None if pinned is None else (controls.changes(pinned), pinned.changes(controls))
    token, out = data["token"], []
    height, legend = style.height, style.legend
    for phase in data["phases"]:
        other = pinned_phases.get(phase["name"])
        relative = style.relative and other is not None
        if relative:
            phase, other = _relative(phase), _relative(other)
        overlay = dict(names=names) if other is not None else {}
        path = None if other is None else steps.pinned_path(phase, other)   # None too in another width
        head = None if phase["weights"] is None else min(controls.heat_head, phase["weights"].shape[1] - 1)
        # (a phase's name is its heading; titles short enough for half the page with the sidebar open)
        title = "energy from step 0: E(x⁽ᵗ⁾) − E(x⁽⁰⁾)" if relative else "energy E(x⁽ᵗ⁾ | c)"
        figures = {
            "energy": descent_figures.per_token_figure(
                phase["energies"], title, "energy from step 0" if relative else "energy", rose=phase["rose"],
                height=height, token=token, pinned=None if other is None else other["energies"], legend=legend,
                **overlay),
            "norm": descent_figures.per_token_figure(
                phase["update_norms"], "update norm |x⁽ᵗ⁺¹⁾ − x⁽ᵗ⁾|", "norm", first_step=1, height=height,
                token=token, pinned=None if other is None else other["update_norms"], legend=legend, **overlay),
            "landscape": descent_figures.landscape_figure(
                phase["landscape"], token, height=height + style.landscape_extra,
                pinned=path, **(overlay if path is not None else {})),
            "heatmap": None if head is None else descent_figures.attention_heatmap_figure(
                phase["weights"], len(phase["weights"]), head, height=height, token=token)}
        out.append({"args": steps.view(phase, figures, token, head or 0, other), "figures": figures})
    return out


def follow_clicked(key: str) -> None:
    """A click on a line or a heatmap row chose a token: every view follows it (runs before the page)."""
    value = st.session_state.get(key)
    if value and "token" in value:
        st.session_state[KEYS["token"]] = int(value["token"])
        st.session_state["_controls_energy"]["token"] = int(value["token"])


def draw_control(name: str) -> None:
    """The widget of one energy-page control, wherever it is drawn (the sidebar, or presentation mode's row)."""
    state = st.session_state
    if name == "layer":
        control(EnergyControls, "layer", KEYS["layer"], "layer", st.radio, format_func=LAYER_LABELS.get)
    elif name in EnergyControls.CEM:
        cem_widget(EnergyControls, name, KEYS[name])
    elif name == "p_scale":
        control(EnergyControls, "p_scale", KEYS["p_scale"], "preconditioner scale", step=0.1,
                help=EnergyControls.HELPS["p_scale"])
    elif name in ("width", "seq_len", "seed"):
        control(EnergyControls, name, KEYS[name], {"width": "width d", "seq_len": "sequence length"}.get(name, name),
                st.number_input)
    elif name == "token":
        st.slider("followed token", 0, state[KEYS["seq_len"]] - 1, key=KEYS["token"],
                  help=EnergyControls.HELPS["token"])
    elif name == "heat_head":
        if state[KEYS["heads"]] > 1:
            st.slider("heatmap head", 0, state[KEYS["heads"]] - 1, key=KEYS["heat_head"])
    elif name == "activation":
        control(EnergyControls, name, KEYS[name], "activation φ", help=EnergyControls.HELPS["activation"])
    elif name == "heads":
        st.select_slider("heads", EnergyControls.heads_options(state[KEYS["width"]], state[KEYS["rope"]]),
                         key=KEYS["heads"], help=EnergyControls.HELPS["heads"])
    else:
        control(EnergyControls, "rope", KEYS["rope"], "RoPE", disabled=state[KEYS["width"]] % 2 == 1,
                help=EnergyControls.HELPS["rope"])


def page_controls(mode: EnergyMode):
    """Draw the controls where the mode puts them (in the sidebar, or only the mode's above the plots: in a row, or
    stacked beside what the lesson step says) and read the state. Returns it and where its caption goes."""
    shown = restore_controls("energy", EnergyControls, KEYS,
                             lambda values: tuple(name for name in EnergyControls.shown(values["layer"],
                                                                                         values["preconditioner"],
                                                                                         values["diagonal"])
                                                  if mode.controls is None or name in mode.controls))
    state, slot = st.session_state, None
    # Sliders whose range follows another control are assigned on every run: to Streamlit a slider whose range
    # changed is a new widget, which would start at its minimum.
    if "token" in shown:                         # the last token stays the last as n changes, unless one was chosen
        kept, last = state["_controls_energy"], state[KEYS["seq_len"]] - 1
        unmoved = state[KEYS["token"]] == min(kept["token"], kept["seq_len"] - 1)
        state[KEYS["token"]] = last if unmoved and kept["token"] == LAST else min(state[KEYS["token"]], last)
    if "heat_head" in shown:
        state[KEYS["heat_head"]] = min(state[KEYS["heat_head"]], state[KEYS["heads"]] - 1)
    if mode.controls_at == "sidebar":
        with st.sidebar:
            for header, names in EnergyControls.GROUPS.items():
                st.header(header)
                for name in names:
                    if name in shown:
                        draw_control(name)
    elif mode.controls_at == "beside words":
        text, column = st.columns([5, 2])
        with text:
            lesson_mode.say(mode.step)
            slot = st.container()                 # the pinned state's caption and the note, once the state is read
        with column:
            for name in shown:
                draw_control(name)
    elif shown:
        for column, name in zip(st.columns(len(shown)), shown):
            with column:
                draw_control(name)
    try:
        controls = EnergyControls.from_values(**control_values("energy", KEYS))
    except ValueError as err:                  # the one refusal left (too large): the last state that could be drawn
        controls = EnergyControls.from_values(**state["_controls_energy"])
        st.warning(f"{plain(EnergyControls.explain(err))}. The plots show the last state that could be drawn.",
                   icon=":material/speed:")
        return controls, slot
    if controls.token >= controls.seq_len - 1:
        controls = replace(controls, token=LAST)                   # the last token stays the last as n changes
    keep_controls("energy", controls)
    return controls, slot


def pinned_state() -> EnergyControls | None:
    kept = st.session_state.get(PINNED)
    return None if kept is None else EnergyControls.from_values(**kept)


def pinned_caption(now: EnergyControls) -> None:
    """Presentation mode names the pinned state (it has no pin buttons)."""
    pinned = pinned_state()
    if pinned is not None:
        st.caption(f"Pinned (faint, dashed): **{pinned.changes(now)}**; now: **{now.changes(pinned)}**.")


def pin_bar(controls: EnergyControls) -> EnergyControls | None:
    """Pin the state shown, or unpin; returns the pinned state."""
    pinned = pinned_state()
    common.pin_bar(PINNED, controls, pinned, "Pin this state",
                   "Later states draw this one faint and dashed beside them, to compare.",
                   lambda now, then: (now.changes(then), then.changes(now)))
    return pinned


def note(diagnosis, index: int) -> None:
    with st.container(key=f"lesson-note-{index}"):
        (st.warning if diagnosis.level == "warning" else st.info)(diagnosis.text)


def explanations(has_heatmap: bool) -> None:
    explain("**Energy**: each line is one token's energy as its iterate x⁽ᵗ⁾ takes gradient steps; step 0 is "
            "the normalized input and step 1 is exactly what a standard (tied) layer computes. **Update norm**: "
            "how far each step moves; shrinking steps settle into a minimum, constant ones run off (the "
            "attention energy has no minimum without the anchor). **Landscape**: the followed token's energy "
            "over a 2-D slice, its descent in white and the red marker at the step shown; for attention the "
            "crosses are the keys as seen from x⁽⁰⁾ (x⁽⁰⁾ + ηPvⱼ).")
    if has_heatmap:
        explain("**Attention**: row i is where token i looks at the step shown. As x moves, the queries W_Q x "
                "change while the keys stay fixed, so later steps re-weigh the same history.")


def phase_section(controls: EnergyControls, layer: str, view: dict, diagnosis, index: int, mode: EnergyMode) -> None:
    args = dict(view["args"])                      # the cached view is shared: never changed in place
    names = mode.views([name for name, fig in view["figures"].items() if fig is not None])
    if names is not None:                          # the two views the step talks about (the heatmap: attention only)
        shown = sorted((f for f in args["figures"] if f["name"] in names), key=lambda f: names.index(f["name"]))
        # The landscape's legend would take a third of its height.
        args |= {"font_scale": mode.plots.font_scale, "version": f"{args['version']}-present", "figures": [
            {"name": f["name"], "figure": f["figure"] | ({"layout": f["figure"]["layout"] | {"showlegend": False}}
                                                         if f["name"] == "landscape" else {})} for f in shown]}
    if mode.highlight is not None:
        args["highlight"] = mode.highlight
    args["start_key"] = mode.start_key
    # The note goes above the plots when the step points at it, else below: the plots come first. Both places
    # exist in every state, so the playback keeps its place in the page (a moved component is a new iframe).
    above = st.container()
    key = f"playback-{index}"
    playback(args, key=key, on_change=lambda: follow_clicked(key))
    with above if mode.note_above else st.container():
        if diagnosis is not None:                  # (None: presentation mode drew it beside the step's words)
            note(diagnosis, index)
    if not mode.details:
        return
    explanations(view["figures"]["heatmap"] is not None)
    with st.popover("Download the plots", icon=":material/download:"):
        for name, fig in view["figures"].items():
            if fig is not None:
                st.caption(name)
                download_buttons(fig, f"{controls.layer} {name} {index}", f"{name}-{index}")
    st.markdown("**The update**")
    for line in update_latex(layer, controls.cem, controls.activation):
        st.latex(line)


def instant_toggle(mode: EnergyMode) -> bool:
    """The sidebar's Instant switch (?instant=true), drawn where the controls are in the sidebar; on, the sidebar's
    page (not a lesson step, not presentation mode) is computed in the browser."""
    if mode.controls_at != "sidebar":
        return False
    if "instant" not in st.session_state and INSTANT in st.session_state:   # (another page dropped the widget's)
        st.session_state["instant"] = st.session_state[INSTANT]
    on = url_toggle("instant", "Compute in my browser (instant)",
                    "The plots are computed and drawn in this browser: a change redraws at once, with no round "
                    "trip to the server (the same numbers as the server's). The state still lives in the link.")
    st.session_state[INSTANT] = on
    return on and mode.name == "sidebar"


def took_state() -> None:
    """The explorer drew a state and is idle: it becomes the page's kept controls, its link and its pinned state
    (runs before the page)."""
    value = st.session_state.get("explorer")
    if not value:
        return
    floats = {name for name, (kind, _) in EnergyControls.specs().items() if kind == "float"}   # (JSON's 1.0 is 1)
    values, pinned = ({name: float(v) if name in floats else v for name, v in state.items()} if state else None
                      for state in (value["values"], value["pinned"]))
    try:
        controls = EnergyControls.from_values(**values)
        pinned = None if pinned is None else EnergyControls.from_values(**pinned).values()
    except (TypeError, ValueError):              # not a state the explorer draws: the page keeps the one it has
        return
    keep_controls("energy", controls)
    st.session_state[PINNED] = pinned


def instant() -> None:
    """Instant mode: the explorer (a component) holds the controls, computes and draws every change in the browser,
    and hands back the state drawn once idle (``took_state``). The server computes nothing here."""
    restore_controls("energy", EnergyControls, KEYS, lambda values: ())   # a link's state; no widget drawn
    controls = EnergyControls.from_values(**st.session_state["_controls_energy"])
    keep_controls("energy", controls)
    taken = (st.session_state.get("explorer") or {}).get("report", 0)      # the explorer's last report taken
    explorer(controls.values(), st.session_state.get(PINNED), taken, key="explorer", on_change=took_state)


def body() -> None:
    # Each part of the page is a container drawn in every state, filled or not, so that the playback keeps its
    # place when the title, the controls or a phase come and go (a component that moves is a new iframe, which
    # Streamlit can leave without its data: docs/design.md#78-a-component-that-moves-is-a-new-iframe).
    header, controls_row, pins, caption, *phase_slots = (st.container() for _ in range(6))
    mode = lesson_mode.energy_mode()
    in_browser = instant_toggle(mode)
    if mode.title:                              # in a lesson, its bar heads the page
        with header:
            st.title("Energy descent")
            st.markdown("A CEM layer is **T gradient steps on an energy**: move the controls and watch the energy "
                        "fall, the iterates move and the attention shift (random weights and input, seeded). Press "
                        "▶ to play the steps, or drag the scrubber.")
            notebook_links("energy")
    if in_browser:
        with controls_row:
            instant()
        return
    with controls_row:
        controls, slot = page_controls(mode)
    with pins:
        pinned = pin_bar(controls) if mode.pin_buttons else pinned_state()
    data, diagnoses = descent(controls)
    if mode.pinned_caption:           # beside the step's words (in a lesson), where the room sees them with the plots
        with slot or pins:
            pinned_caption(controls)
            if mode.note_beside_words:
                note(diagnoses[0], 0)
    views = phase_views(controls, pinned, mode.plots)
    if controls.layer in LAYER_CAPTIONS and mode.layer_caption:
        caption.caption(LAYER_CAPTIONS[controls.layer])
    for index, (phase, diagnosis, view) in enumerate(zip(data["phases"], diagnoses, views)):
        with phase_slots[index]:
            heading = st.container()
            if len(data["phases"]) > 1:
                heading.subheader(f"Phase {index + 1}: {LAYER_LABELS[phase['name']]}")
            phase_section(controls, phase["name"], view, None if mode.note_beside_words and index == 0 else diagnosis,
                          index, mode)


run_safely(body)
