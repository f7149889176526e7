"""Inside a trained model: the trained GP models' prediction after every in-layer step against the exact posterior
(step playback in the browser, test-time T, pin and compare across checkpoints), and the trained language models
read through a logit lens along their steps. The checkpoints are read from models/ (``CEM_LAB_MODELS_DIR``), never
written: a missing, damaged or stale one is a message, not a traceback."""
from __future__ import annotations

import threading
from pathlib import Path

import streamlit as st

from app_pages import common, lesson_mode
from app_pages.common import (
    busy_note,
    control,
    control_values,
    explain,
    keep_controls,
    notebook_links,
    plain,
    restore_controls,
    run_safely,
    show_figure,
    widget_keys,
)
from app_pages.playback import playback
from cem_core.experiments import checkpoints
from cem_core.experiments import models as trained_models
from cem_core.experiments.gp import inspect as gp_inspect
from cem_core.experiments.gp.trained import GP_MODELS, gp_card, load_gp_model
from cem_core.experiments.lm import inspect as lm_inspect
from cem_core.experiments.lm.trained import LM_MODELS, PROSE, lm_card, load_lm_model
from cem_core.ui import descent_figures, inside, inside_figures
from cem_core.ui.cache import shared
from cem_core.ui.inside_controls import InsideControls

KEYS = widget_keys(InsideControls, "in_")
PINNED = "_pinned_inside"      # the pinned GP state's control values, or None
SIDES = {"gp": "GP regression", "lm": "Language model"}
PLOT_HEIGHT = 420
PRESENT_HEIGHT = 330
PRESENT_FONTS = 1.25
CACHE_BYTES = 96 * 2 ** 20     # inspected states and their views, shared by every session


def models_root() -> Path:
    """Where the trained models are read from: CEM_LAB_MODELS_DIR, default the repository's models/
    (``checkpoints.models_folder``, read at each call: a test moves it)."""
    return checkpoints.models_folder()


def stamp(name: str) -> tuple:
    """The model's files as they are now (size and time of each), so that a retrained model is read again."""
    out = []
    for file in ("card.json", "weights.pt", trained_models.TEST_TIME):
        try:
            info = (models_root() / name / file).stat()
            out.append((info.st_size, info.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


@st.cache_resource(show_spinner=False, max_entries=12)
def loaded(name: str, root: str, files: tuple):
    """A trained model, read once per version of its files: (model, task or tokenizer, a lock: reading the steps
    changes a layer's T for a moment, so one session reads a model at a time)."""
    load = load_gp_model if name in GP_MODELS else load_lm_model
    model, other = load(name, Path(root))
    return model, other, threading.Lock()


def model(name: str):
    return loaded(name, str(models_root()), stamp(name))


def computed():
    return shared("inside", CACHE_BYTES, busy_note)


def gp_data(name: str, seed: int, context: int, T: int | None, points: tuple | None = None) -> dict:
    """``inspect_function`` of one state (T None: the trained T; `points`: a learner's own context instead of the
    seed's function), computed once."""
    def make():
        net, task, lock = model(name)
        with lock:
            return gp_inspect.inspect_function(net, task, seed, context, T, points=points)
    return computed().get(("gp", name, stamp(name), seed, context, T, points), make)


def lm_data(name: str, text: str, T: int | None) -> dict:
    def make():
        net, tokenizer, lock = model(name)
        with lock:
            return lm_inspect.inspect_text(net, tokenizer, text, T)
    return computed().get(("lm", name, stamp(name), text, T), make)


def measured(name: str) -> dict:
    """The model's test_time.json (``models.test_time``), read once per version of its files."""
    return computed().get(("test-time", name, stamp(name)), lambda: trained_models.test_time(name, models_root()))


@st.cache_data(show_spinner="Reading the validation text…", max_entries=1)
def samples() -> list[str]:
    from cem_core.experiments.lm.sources import iter_documents

    return inside.sample_sentences(iter_documents(PROSE, "validation"))


# -- controls ----------------------------------------------------------------------------------------


def shown(values: dict, present: tuple | None) -> tuple:
    if present is not None:
        return present
    gp = ("side", "gp_model", "seed", "context") + (() if InsideControls.gp_most_T(values["gp_model"]) == 1
                                                     else ("gp_T",)) + ("points",)
    lm = ("side", "lm_model", "text") + (() if InsideControls.lm_most_T(values["lm_model"]) == 1
                                          else ("lm_T", "layer", "step", "head"))
    return gp if values["side"] == "gp" else lm


def follow_model() -> None:
    """A new checkpoint starts at its trained T (not at the last one's test-time T, which it may not offer)."""
    state, kept = st.session_state, st.session_state.get("_controls_inside")
    if kept is None:
        return
    for model_key, T_key, trained in (("gp_model", "gp_T", lambda n: GP_MODELS[n].T),
                                      ("lm_model", "lm_T", lambda n: InsideControls.lm_most_T(n) // 4 or 1)):
        now = state.get(KEYS[model_key])
        if now is not None and now != kept[model_key]:
            state[KEYS[T_key]] = trained(now)
    if KEYS["lm_T"] in state and KEYS["step"] in state and state[KEYS["step"]] == kept["lm_T"]:
        state[KEYS["step"]] = state[KEYS["lm_T"]]                        # the last step stays the last as T moves


def current(name: str):
    """A control's value this run: its widget's, or (hidden) as settled."""
    return st.session_state.get(KEYS[name], st.session_state["_settled_inside"][name])


def draw_control(name: str) -> None:
    state = st.session_state
    if name == "side":
        control(InsideControls, "side", KEYS["side"], "model kind", st.radio, format_func=SIDES.get, horizontal=True)
    elif name == "gp_model":
        control(InsideControls, "gp_model", KEYS["gp_model"], "GP checkpoint",
                format_func=lambda n: f"{n}: {GP_MODELS[n].title}")
    elif name == "seed":
        control(InsideControls, "seed", KEYS["seed"], "function seed", st.number_input)
    elif name == "context":
        control(InsideControls, "context", KEYS["context"], "points seen")
    elif name == "gp_T":
        most = InsideControls.gp_most_T(current("gp_model"))
        state[KEYS["gp_T"]] = min(state[KEYS["gp_T"]], most)
        st.slider("test-time T", 1, most, key=KEYS["gp_T"],
                  help=f"Steps of the CEM layer, up to 4 times the trained T = {GP_MODELS[current('gp_model')].T}.")
    elif name == "lm_model":
        control(InsideControls, "lm_model", KEYS["lm_model"], "language model",
                format_func=lambda n: f"{n}: {LM_MODELS[n].title}")
    elif name == "lm_T":
        most = InsideControls.lm_most_T(current("lm_model"))
        state[KEYS["lm_T"]] = min(state[KEYS["lm_T"]], most)
        st.slider("test-time T (LM)", 1, most, key=KEYS["lm_T"], help="Steps of every CEM layer, up to 4 times the "
                  "trained T.")
    elif name == "points":
        st.text_input("your points (x:y, …)", key=KEYS["points"], placeholder="e.g. -0.5:0.2, 0.1:-1, 0.6:0.8",
                      help="Your own context points instead of the seed's function: x in [-1, 1], at most 31, in the "
                           "order the model reads them. Empty: the seed's function. The static site's page lets you "
                           "click and drag them on the plot.")
    elif name == "text":
        st.text_input("text for the model to read", key=KEYS["text"],
                      help="At most 128 bytes of UTF-8 (the models' context) and the next one.")


def page_controls(present: tuple | None, step) -> InsideControls:
    follow_model()
    drawn = restore_controls("inside", InsideControls, KEYS, lambda values: shown(values, present))
    main_side = ("text",)                                # drawn in the page (the LM's text, the lens's view)
    if present is None:
        with st.sidebar:
            st.header("Trained model")
            for name in drawn:
                if name not in main_side + ("layer", "step", "head"):
                    draw_control(name)
    else:                                                # presentation: the step's controls, stacked
        for name in drawn:
            draw_control(name)
    if "text" in drawn and present is None:
        text_row()
    values = control_values("inside", KEYS)
    return InsideControls.from_values(**values)


def use_sample() -> None:
    chosen = st.session_state.get("in-sample")
    if chosen:
        st.session_state[KEYS["text"]] = chosen


def text_row() -> None:
    left, right = st.columns([3, 2])
    with left:
        draw_control("text")
    with right:
        st.selectbox("or a sentence of the validation text", samples(), index=None, key="in-sample",
                     placeholder="a sample sentence", on_change=use_sample)


# -- the GP side ---------------------------------------------------------------------------------------


def names_of(now: InsideControls, pinned: InsideControls) -> tuple[str, str]:
    """How the legends name the state shown and the pinned one: the checkpoint and T, and the function if it
    differs."""
    def name(c: InsideControls, other: InsideControls) -> str:
        parts = [c.gp_model] + ([f"T {c.gp_T}"] if InsideControls.gp_most_T(c.gp_model) > 1 else [])
        parts += [f"seed {c.seed}"] if c.seed != other.seed else []
        return ", ".join(parts + ([f"{c.context} points"] if c.context != other.context else []))
    return name(now, pinned), name(pinned, now)


def pinned_state() -> InsideControls | None:
    kept = st.session_state.get(PINNED)
    return None if kept is None else InsideControls.from_values(**kept)


def pin_bar(controls: InsideControls) -> InsideControls | None:
    """Pin the checkpoint and state shown, or unpin; returns the pinned state."""
    pinned = pinned_state()
    common.pin_bar(PINNED, controls, pinned, "Pin this checkpoint",
                   "Later states draw this one's prediction and RMSE faint and dashed beside theirs, to compare.",
                   names_of)
    return pinned


def gp_state(c: InsideControls, trained: bool = False) -> dict:
    """The state's inspect_function at its test-time T (`trained`: at the trained T), on its points if it has them."""
    T = None if trained or InsideControls.gp_most_T(c.gp_model) == 1 else c.gp_T
    points = c.own_points()
    return gp_data(c.gp_model, c.seed, c.context, T, None if points is None else tuple(points))


def gp_args(c: InsideControls, pinned: InsideControls | None, views, present: bool, start_key: str) -> dict:
    """The playback's arguments for a state (with the pinned one's overlay), computed once."""
    def make():
        data = gp_state(c)
        other = None if pinned is None else gp_state(pinned)
        figures = inside.gp_figures(data, other, None if pinned is None else names_of(c, pinned),
                                    PRESENT_HEIGHT if present else PLOT_HEIGHT, "right" if present else "below")
        return inside.gp_view(data, figures, views, PRESENT_FONTS if present else 1.0,
                              hint="▶ plays the steps t = 0 … T; ← → step through them")
    args = computed().get(("gp-view", c, pinned, tuple(views), present, stamp(c.gp_model),
                           None if pinned is None else stamp(pinned.gp_model)), make)
    return args | {"start_key": start_key}


def gp_note(c: InsideControls) -> str:
    data = gp_state(c)
    layer = data["layers"][0] if data["layers"] else None
    trained = None
    if layer is not None and layer["T"] < data["trained_T"]:
        trained = gp_state(c, trained=True)["layers"][0]["rmse_to_posterior"][-1]
    return inside.gp_reading(data, trained)


def card_caption(name: str, card) -> None:
    metric = card["metric"]
    st.caption(f"**{name}**: {plain(card['title'])}; trained {card['steps']:,} steps (seed {card['seed']}); "
               f"{plain(metric['name'])} {metric['value']:.3f}. Retrain: `{card['command']}`.")


def scaling_section(c: InsideControls, present: bool) -> None:
    """What test-time T does over the held-out functions, measured once after training."""
    try:
        study = measured(c.gp_model)
    except ValueError as err:
        st.warning(f"{plain(str(err))}", icon=":material/hourglass:")
        return
    T = c.gp_T if InsideControls.gp_most_T(c.gp_model) > 1 else 1
    left, right = st.columns([3, 2])
    with left:
        show_figure(inside_figures.inside_scaling_figure(study, T, height=300), f"{c.gp_model} test-time T",
                    "inside-scaling")
    with right:
        st.markdown(f"**Over {study['functions']} held-out functions** (measured once, after training).")
        st.markdown(plain(inside.scaling_words(study, T)))


def gp_side(c: InsideControls, step, present: bool, slots: dict) -> None:
    card = gp_card(c.gp_model, models_root())                        # a ValueError says what is wrong
    with slots["pins"]:
        pinned = pin_bar(c) if not present else pinned_state()
        if not present:
            card_caption(c.gp_model, card)
    views = step.views if (present and step) else inside.GP_PLOTS
    with slots["note"], st.container(key="lesson-note-0"):
        st.info(gp_note(c), icon=":material/insights:")
    args = gp_args(c, pinned, views, present,
                   "free" if step is None else f"lesson-{lesson_mode.lesson.STEPS.index(step)}")
    if step is not None and step.page == "inside":
        args["highlight"] = step.points_at
    with slots["playback"]:
        playback(args, key="inside-playback")
    if present:
        return
    with slots["rest"]:
        explain("**Curve**: the red line is the model's prediction with its CEM layer stopped after step t (step 0: "
                "the layer skipped); the blue line and band are the exact GP posterior, the best any predictor can "
                "do. **RMSE**: how far the prediction after each step is from the posterior mean and from the truth. "
                "**Energy**: each token's energy along the steps; the query token is bold.")
        scaling_section(c, present)


# -- the language-model side -------------------------------------------------------------------------------


def lens_controls(data: dict) -> tuple[int, int, int]:
    """The lens's layer, step and head, drawn above it (their ranges follow the model and the test-time T)."""
    state, layers = st.session_state, data["layers"]
    state[KEYS["layer"]] = min(state[KEYS["layer"]], len(layers) - 1)
    heads = max((len(layer["attention"][0]) for layer in layers if layer["attention"]), default=1)
    state[KEYS["head"]] = min(state[KEYS["head"]], heads - 1)
    c1, c2, c3 = st.columns(3)
    c1.selectbox("CEM layer", range(len(layers)), key=KEYS["layer"], format_func=lambda i: layers[i]["name"])
    c2.slider("step t", 0, data["T_test"], key=KEYS["step"], help="The layer stopped after step t; the layers after "
              "it run as trained.")
    if heads > 1:
        c3.slider("attention head", 0, heads - 1, key=KEYS["head"])
    return state[KEYS["layer"]], state[KEYS["step"]], state[KEYS["head"]]


def llama_beside(c: InsideControls) -> dict | None:
    """Llama's reading of the same text, when it is there to compare."""
    if c.lm_model == "lm-llama":
        return None
    try:
        return lm_data("lm-llama", c.text, None)
    except ValueError as err:
        st.caption(f"Llama's prediction is not shown: {plain(str(err))}")
        return None


def lm_side(c: InsideControls) -> None:
    card = lm_card(c.lm_model, models_root())
    card_caption(c.lm_model, card)
    data = lm_data(c.lm_model, c.text, c.lm_T if InsideControls.lm_most_T(c.lm_model) > 1 else None)
    llama = llama_beside(c)
    if data["layers"]:
        layer, t, head = lens_controls(data)
        lens = data["layers"][layer]
        loss, mean = lens["loss"][t], lens["mean_loss"][t]
        where = f"{lens['name']} stopped after step {t} of {lens['T']}"
    else:
        layer, t, head, lens = None, 0, 0, None
        loss, mean, where = data["final"]["loss"], data["final"]["mean_loss"], "Llama (no in-layer steps)"
    left, right = st.columns(2)
    with left:
        st.markdown(f"**{plain(c.lm_model)}, {plain(where)}**: mean loss {mean:.3f} nats "
                    f"(its own forward pass: {data['final']['mean_loss']:.3f})")
        st.html(inside.loss_html(data["tokens"], data["targets"], loss))
    with right:
        if llama is not None:
            st.markdown(f"**lm-llama beside it**: mean loss {llama['final']['mean_loss']:.3f} nats")
            st.html(inside.loss_html(llama["tokens"], llama["targets"], llama["final"]["loss"]))
    st.caption("Each token is coloured by the loss of the next token predicted there (white: sure and right; red: "
               f"{inside.LOSS_SCALE:.0f} nats or more). Hover a token for its numbers.")
    st.dataframe(inside.lens_rows(data, layer, t, llama), hide_index=True, height=300, width="stretch")
    explain("**Logit lens along the steps**: the CEM layer chosen is stopped after step t and the layers after it "
            "run as trained; the table gives the model's top 5 next tokens at each position from there, and the "
            "colours the loss of the true next token. Step T is the model itself; step 0 skips the layer's update. "
            "Turn the test-time T to run the layer's descent further than it was trained.")
    if lens is not None:
        lm_plots(c, lens, t, head)
    lm_test_time(c)


def lm_plots(c: InsideControls, lens: dict, t: int, head: int) -> None:
    import numpy as np

    left, right = st.columns(2)
    with left:
        if lens["attention"] is not None:
            show_figure(descent_figures.attention_heatmap_figure(np.asarray(lens["attention"]), t, head,
                                                             height=PLOT_HEIGHT + 60),
                        f"{c.lm_model} attention", "inside-lm-attention")
        else:
            st.caption("The gated MLP has no attention weights.")
    with right:
        show_figure(descent_figures.per_token_figure(np.asarray(lens["energies"]), "energy E(x⁽ᵗ⁾ | c) per token",
                                                 "energy", height=PLOT_HEIGHT + 60, step=t, legend="followed"),
                    f"{c.lm_model} energies", "inside-lm-energy")


def lm_test_time(c: InsideControls) -> None:
    try:
        study = measured(c.lm_model)
    except ValueError as err:
        st.warning(plain(str(err)), icon=":material/hourglass:")
        return
    pairs = ", ".join(f"T = {T}: {ppl:.3f}" for T, ppl in zip(study["T"], study["val_ppl"]))
    st.markdown(f"**Test-time T over the validation text** ({study.get('sequences', '?')} sequences, measured once "
                f"after training; trained T = {study['trained_T']}): validation perplexity {pairs}.")


# -- the page ---------------------------------------------------------------------------------------------


def body() -> None:
    slots = {name: st.container() for name in ("header", "controls", "pins", "note", "playback", "rest")}
    step = lesson_mode.current_step("inside")
    present = bool(st.session_state.get("present")) and step is not None
    if not present:
        with slots["header"]:
            st.title("Inside a trained model")
            st.markdown("The trained checkpoints in `models/`, read inside their CEM layers: what the prediction is "
                        "after each in-layer step t, and what more steps than trained (test-time T) do. Press ▶ to "
                        "play the steps.")
            notebook_links("inside")
    with slots["controls"]:
        if present:                                  # the step's controls beside the note, under the lesson bar
            left, slots["note"] = st.columns([1, 3], vertical_alignment="center")
            with left:
                controls = page_controls(step.used(), step)
        else:
            controls = page_controls(None, step)
    keep_controls("inside", controls)
    try:
        if controls.side == "gp":
            gp_side(controls, step, present, slots)
        else:
            with slots["rest"]:
                lm_side(controls)
    except ValueError as err:                      # a checkpoint missing, damaged, stale; a text it cannot read
        with slots["note"]:
            st.error(plain(str(err)))


run_safely(body)
