"""GP recursion: the committed sweep, a sampled function with the GP posterior, a model trained live."""
from __future__ import annotations

import io

import matplotlib.pyplot as plt
import streamlit as st
import torch

from app_pages import lesson_mode, questions
from app_pages.common import (
    ROOT,
    cem_widget,
    committed,
    control,
    control_values,
    explain,
    gp_sweep_records,
    job_board,
    keep_controls,
    notebook_links,
    restore_controls,
    results_heading,
    run_safely,
    show_figure,
    verdict_table,
    widget_keys,
)
from cem_core.experiments.gp import study as gp_study
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.gp import task as gp_task
from cem_core.experiments.gp import train as gp_train
from cem_core.experiments.integrity import FolderBusy
from cem_core.ui import gp_figures, study_plots
from cem_core.ui.gp_controls import GPControls
from cem_core.ui.jobs import duration

KEYS = widget_keys(GPControls, "gp_")


@st.cache_data(show_spinner=False, max_entries=256)       # a few KB each: 10,000 seeds x 3 kernels
def sampled_function(kernel: str, seed: int):
    xs, ys, grid, f = gp_task.sample_function_on_grid(gp_task.GPTaskConfig(kernel=kernel), seed)
    return xs.numpy(), ys.numpy(), grid.numpy(), f.numpy()


@st.cache_data(show_spinner=False, max_entries=1024)      # a few KB each: x 33 points seen
def posterior(kernel: str, seed: int, k: int):
    xs, ys, grid, _ = sampled_function(kernel, seed)
    to = lambda a: torch.from_numpy(a)[None, :, None]  # noqa: E731
    mean, std = gp_task.gp_posterior_on_grid(gp_task.GPTaskConfig(kernel=kernel), to(xs[:k]),
                                             torch.from_numpy(ys[:k])[None], to(grid))
    return mean[0].numpy(), std[0].numpy()


def sweep_section(records) -> None:
    if not results_heading("The committed sweep", records, len(gp_sweep.stale_hashes(records, "default")[0]),
                           "No sweep results found: run `make gp-sweep` (about 20 minutes on 2 cores).",
                           "the default sweep", "the plots"):
        return
    st.caption(f"{len(records)} runs: depth-1 and depth-2 models trained on fresh GP functions "
               "(RBF kernel, 32 points); RMSE on a fixed held-out set. Command: "
               "`python -m cem_core gp sweep --out results/gp-default --preset default`.")
    c1, c2 = st.columns(2)
    for column, name in ((c1, "gp-ratio"), (c2, "gp-context"), (st.container(), "gp-scaling")):
        figure, title, words = gp_figures.GP_SWEEP_VIEWS[name]
        with column, st.container(key=f"lesson-{name}"):
            show_figure(figure(records), title, name)
            explain(words)


@st.cache_data(show_spinner=False, max_entries=1)
def study_records():
    return gp_sweep.GP_SWEEP.load(ROOT / gp_study.COMMITTED_STUDY / "results.json")


@st.cache_data(show_spinner=False, max_entries=8)
def study_figure(name: str) -> bytes:
    """A figure of the committed study (study_plots.GP_STUDY_FIGURES) as PNG, drawn once per app process, not on every
    rerun of the page (the three take seconds to draw; the records do not change while the app runs)."""
    fig = study_plots.app_study_figure(name, study_records())                     # larger text, two or three a row
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=200, bbox_inches="tight")             # as st.pyplot draws a figure
    plt.close(fig)
    return png.getvalue()


def study_image(name: str, records) -> None:
    caption, alt = study_plots.study_caption(name, records)
    st.image(study_figure(name), width="stretch", caption=caption, alt=alt)


def study_section(records) -> None:
    st.subheader(gp_figures.GP_STUDY_HEADING)
    if not records:
        st.info("The factor study's results are not in this checkout yet: `make gp-study` runs it (about two "
                "hours on 2 cores) into results/gp-study.")
        return
    missing, _ = gp_sweep.stale_hashes(records, "study")
    if missing:
        st.warning(f"{len(missing)} runs of the study are missing; the map and table show what is there.")
    study_image("gp_conditions_map", records)
    verdict_table(gp_study.table_rows(records))
    st.caption(f"Verdict rule, fixed before the study ran: {gp_study.STUDY_RULE} The t-based reading beside it is "
               "the project's one statistical reading (the LM claims' rule: a 95% Student's t interval, seeds - 1 "
               "degrees of freedom, instead of 2 se) on the same records. " + gp_study.holm_sentence(records))
    study_image("gp_step_diagnostics", records)
    explain("Each panel changes one thing about the setup and asks again whether more steps T lower the error. "
            "The diagnostic above shows what the steps of the trained layers do: whether the energy falls, how "
            "far each step moves, how peaked the attention is, and how good the prediction is after each step.")
    st.markdown("**The forms of the energy.** Plain attention's energy is unbounded below; the distance-form "
                "diagonal bounds it, and the block as one energy descends attention and MLP together. The same "
                "diagnostics, trained at T = 8 and long: does the energy settle, does the attention stay soft?")
    study_image("gp_form_diagnostics", records)


def demo_section(controls: GPControls) -> None:
    st.subheader("One function, the GP posterior and a model")
    xs, ys, grid, f = sampled_function(controls.kernel, controls.seed)
    k = min(controls.context, len(xs))
    mean, std = posterior(controls.kernel, controls.seed, k)
    trained = st.session_state.get("gp_model")
    pred = None
    if trained is not None and k > 0 and trained.task.kernel == controls.kernel:
        pred = trained.predict_at(torch.from_numpy(xs[:k, None]).float(), torch.from_numpy(ys[:k]).float(),
                                  torch.from_numpy(grid[:, None]).float()).numpy()
    show_figure(gp_figures.gp_demo_figure(grid, f, xs, ys, k, mean, std, pred), "gp sampled function", "gp-demo")
    explain("Black dots are the points the predictor has seen. The blue band is where the GP posterior "
            "puts the function (± 2 sd). A trained transformer (red) should follow the blue mean: that is "
            "the Bayes-optimal prediction.")
    seconds = training_estimate(GPControls(kernel=controls.kernel, shape=controls.shape, cem=controls.cem,
                                           steps=controls.steps))
    st.caption(f"Training this model ({controls.steps} steps, T = {controls.cem.T}, diagonal {controls.cem.diagonal}) "
               f"takes about {duration(seconds)} on this machine now (measured on a few steps).")
    if st.button("Train a small model now", icon=":material/play_arrow:"):
        lock = job_board().live_training_lock()
        try:
            lock.acquire()
        except FolderBusy:
            st.warning("Another session is training a model right now; one runs at a time, so that each "
                       "finishes quickly. Try again in a few seconds.")
            return
        try:
            train_live(controls)
        finally:
            lock.release()
        st.rerun()
    if "gp_result" in st.session_state:
        st.success(st.session_state.gp_result)


@st.cache_data(show_spinner="Timing a few training steps…", ttl=120, max_entries=64)
def training_estimate(controls: GPControls) -> float:
    """Seconds to train this model here, from a few timed steps (re-measured after two minutes: the load changes).
    The caller passes only what sets the speed (kernel, switches, steps), so moving the demo's seed or points
    seen does not time it again."""
    return gp_train.training_seconds(controls.task(), controls.model(), controls.train(), probe_steps=5)


def train_live(controls: GPControls) -> None:
    bar = st.progress(0.0, text="training")
    steps = controls.train().steps

    def progress(step, loss):
        if step % 10 == 0 or step == steps - 1:
            bar.progress((step + 1) / steps, text=f"step {step + 1}/{steps}, loss {loss:.4f}")

    result = gp_train.train_gp(controls.task(), controls.model(), controls.train(), progress=progress)
    st.session_state.gp_model = result.model
    base = gp_train.baseline_rmses(controls.task(), controls.train())
    st.session_state.gp_result = (f"Trained CEM attention, T={controls.cem.T}, diagonal {controls.cem.diagonal}, "
                                  f"φ {controls.shape.activation}, "
                                  f"{controls.steps} steps in {result.seconds:.1f} s: held-out RMSE "
                                  f"{result.rmse:.3f}, GP optimum {base['gp']['rmse']:.3f} "
                                  f"(ratio {result.rmse / base['gp']['rmse']:.2f}).\n\n"
                                  + _live_comparison(controls))


def _live_comparison(controls: GPControls) -> str:
    """The trained model beside the committed sweep's runs of its configuration ('' without the sweep)."""
    records = committed(gp_sweep_records, "The comparison with the committed sweep")
    return "" if records is None else gp_sweep.live_comparison(records, controls.task(), controls.model(),
                                                               controls.train())


PRESENT_HEIGHT = 470          # the step's two plots side by side under the lesson bar, inside 1280 x 720


def presented(step) -> None:
    """Presentation mode at a lesson step: only the two plots the step talks about, side by side and larger."""
    if (records := committed(gp_sweep_records, "The committed GP sweep")) is None:
        return
    for column, name in zip(st.columns(2), step.views):
        figure, title, _ = gp_figures.GP_SWEEP_VIEWS[name]
        with column, st.container(key=f"lesson-{name}"):
            show_figure(figure(records), title, name, height=PRESENT_HEIGHT)


def body() -> None:
    step = lesson_mode.current_step("gp")
    if st.session_state.get("present") and step is not None:
        return presented(step)
    st.title(gp_figures.GP_PAGE_TITLE)
    st.markdown(gp_figures.GP_PAGE_INTRO)
    notebook_links("gp")
    restore_controls("gp", GPControls, KEYS)
    with st.sidebar:
        st.header("GP demo")
        control(GPControls, "kernel", KEYS["kernel"], "kernel")
        control(GPControls, "seed", KEYS["seed"], "function seed", st.number_input)
        control(GPControls, "context", KEYS["context"], "points seen")
        st.header("Model to train")
        for name in GPControls.CEM:
            cem_widget(GPControls, name, KEYS[name])
        control(GPControls, "activation", KEYS["activation"], "MLP activation φ")
        control(GPControls, "steps", KEYS["steps"], "training steps", step=50)
    controls = GPControls.from_values(**control_values("gp", KEYS))
    keep_controls("gp", controls)
    if (records := committed(gp_sweep_records, "The committed GP sweep")) is not None:
        sweep_section(records)
    if (records := committed(study_records, "The factor study")) is not None:
        study_section(records)
    questions.test_time_section("gp")
    demo_section(controls)


run_safely(body)
