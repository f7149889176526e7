"""Mini language model: the committed LM sweep (the paper's claims with seeds and verdicts), and Llama vs
CEM variants trained in a supervised background run."""
from __future__ import annotations

import streamlit as st
import torch

from app_pages import questions
from app_pages.common import (
    ROOT,
    committed,
    explain,
    job_board,
    keep_controls,
    notebook_links,
    plain,
    restore_controls,
    results_heading,
    run_safely,
    show_figure,
    verdict_table,
)
from cem_core.experiments.lm import decisions as lm_decisions
from cem_core.experiments.lm import ladder
from cem_core.experiments.lm import presets as lm_presets
from cem_core.experiments.lm import report as lm_report
from cem_core.experiments.lm import rules as lm_rules
from cem_core.experiments.lm import runner as lm_runner
from cem_core.experiments.lm.compare import data_line
from cem_core.experiments.lm.stdlib_corpus import DEMO_LABEL, PROSE_LABEL
from cem_core.experiments.lm.train_config import TRAIN_PRESETS, LMTrainConfig
from cem_core.nn.model import VARIANTS
from cem_core.ui import jobs, lm_figures

HAS_GPU = torch.cuda.is_available()
KEYS = {"preset": "lm_preset", "variants": "lm_variants", "data": "lm_data"}


def launcher(board: jobs.JobBoard) -> None:
    st.subheader("Start a run")
    presets = list(TRAIN_PRESETS) if HAS_GPU else ["cpu-tiny"]
    restore_controls("lm", jobs.JobSpec, KEYS)
    choices, skipped = data_entries(board)
    if st.session_state[KEYS["data"]] not in choices:               # a link naming a folder that is not here
        st.error(plain(f"The link's data={st.session_state[KEYS['data']]!r} is not a shard folder of "
                       f"{board.data_dir}; showing the demo corpus instead."))
        st.session_state[KEYS["data"]] = "demo"
    c1, c2, c3 = st.columns(3)
    preset = c1.selectbox("preset", presets, key=KEYS["preset"], help="The paper-sized presets need a GPU.")
    variants = c2.multiselect("variants", list(VARIANTS), key=KEYS["variants"])
    data = c3.selectbox("data", choices, key=KEYS["data"],
                        help=f"demo = {DEMO_LABEL}; prose = {PROSE_LABEL}; slimpajama = Hugging Face streaming "
                             "(needs network); "
                             f"other entries are shard folders in {board.data_dir}")
    spec = jobs.JobSpec(preset=preset, variants=tuple(variants), data=data)
    keep_controls("lm", spec)
    if data in ("demo", "prose"):
        st.caption(f"Data: {DEMO_LABEL if data == 'demo' else PROSE_LABEL}.")
    if skipped:
        st.caption(plain(f"Not offered from {board.data_dir}: {'; '.join(skipped[:4])}"
                         + (f" (and {len(skipped) - 4} more)" if len(skipped) > 4 else "") + "."))
    if not HAS_GPU:
        st.caption("No GPU here: the cpu-tiny preset only.")
    guess = None
    if variants:
        try:
            guess = step_estimates(preset, tuple(variants))
        except ValueError as err:                      # the timing's process failed or took too long
            st.warning(plain(f"No first guess of the run's length: {err}."))
    if guess:
        seconds = jobs.plan({"preset": preset, "variants": variants}, guess)
        st.caption(f"First guess, from {jobs.GUESS_STEPS} steps of each variant timed on this machine now "
                   f"({jobs.JOB_THREADS} torch thread{'s' * (jobs.JOB_THREADS > 1)}, as the run uses): "
                   + ", ".join(f"{v} {jobs.duration(t)}" for v, t in seconds.items())
                   + f"; {jobs.duration(sum(seconds.values()))} in all. Once the run goes, its progress bar "
                     "says what is left at the speed it measures.")
    if st.button("Start", type="primary", icon=":material/play_arrow:"):
        try:
            board.start(spec, guess)
        except ValueError as err:                      # another run is going (or just started elsewhere)
            st.warning(plain(str(err)))
            return
        st.rerun()


@st.cache_data(show_spinner="Listing the shard folders…", ttl=60, max_entries=4, hash_funcs={jobs.JobBoard: repr})
def data_entries(board: jobs.JobBoard) -> tuple[list[str], list[str]]:
    """The board's data choices and the entries left out, listed once a minute: every shard a folder's run would
    read is checked, and a large data folder takes seconds to walk (Start checks the chosen folder again)."""
    return board.data_entries()


@st.cache_data(show_spinner="Timing a few training steps…", ttl=300, max_entries=32)
def step_estimates(preset: str, variants: tuple[str, ...]) -> dict[str, float]:
    """Seconds one training step of each variant takes here, timed as the job runs, in a process of its own
    (re-measured after five minutes)."""
    return jobs.first_guess(preset, variants, cwd=ROOT)


@st.fragment(run_every=2.0)
def live(board: jobs.JobBoard, job: dict) -> None:
    run_safely(lambda: watch(board, job))            # a fragment reruns alone: it needs its own guard


def watch(board: jobs.JobBoard, job: dict) -> None:
    state = jobs.progress(job)
    now = board.current()
    running = bool(now and now.get("pid") == job["pid"] and now["running"])
    st.subheader("The run")
    st.markdown(f"**Started {plain(job['started'])}** ({plain(', '.join(job['spec']['variants']))}, preset "
                f"{plain(job['spec']['preset'])}, data {plain(job['spec']['data'])}): "
                + ("running." if running else "finished." if state["table"] else "stopped."))
    where = state["standing"]
    if where is not None and running:
        st.progress(where["step"] / where["steps"],
                    text=f"variant {where['index'] + 1} of {where['of']} ({where['variant']}): step {where['step']:,} "
                         f"of {where['steps']:,} · {where['tokens_per_s']:,.0f} tokens/s · about "
                         f"{jobs.duration(where['seconds_left'])} left at this speed, "
                         f"{jobs.duration(where['seconds_done'] + where['seconds_left'])} in all"
                         + (f" (first guess {jobs.duration(sum(jobs.plan(job['spec'], guess).values()))})"
                            if (guess := state["step_seconds"]) else ""))
    elif running:
        st.progress(0.0, text="preparing the data and the model…")
    if running and st.button("Stop the run", icon=":material/stop:"):
        board.stop()
    for problem in state["problems"]:
        st.warning(plain(problem))
    if state["curves"]:
        loss = {v: ([r["step"] for r in rs], [r["loss"] for r in rs]) for v, rs in state["curves"].items()}
        ppl = {v: ([r["step"] for r in rs if "val_ppl" in r], [r["val_ppl"] for r in rs if "val_ppl" in r])
               for v, rs in state["curves"].items()}
        c1, c2 = st.columns(2)
        with c1:
            show_figure(lm_figures.curves_figure(loss, "training loss", "step", "cross-entropy (nats/token)"),
                        "lm training loss", "lm-loss")
        with c2:
            if any(xs for xs, _ in ppl.values()):
                show_figure(lm_figures.curves_figure({v: c for v, c in ppl.items() if c[0]}, "validation perplexity",
                                                      "step", "perplexity"), "lm validation perplexity", "lm-ppl")
            else:
                cfg = LMTrainConfig.from_preset(job["spec"]["preset"])
                st.info(f"Validation perplexity appears here after the first evaluation, at step {cfg.eval_every:,}.")
    if state["table"]:
        st.dataframe([{k: r[k] for k in ("variant", "params", "tokens_per_s", "val_ppl")} for r in state["table"]],
                     hide_index=True)
        if "data_stats" in state["table"][0]:                          # runs from before the counts were kept lack them
            st.caption(data_line(state["table"][0]["data_stats"]))
        for r in state["table"]:
            st.markdown(f"**{plain(r['variant'])}** sample: {plain(r['sample'][:300])}")
        explain("The CEM variants use about half of Llama's attention weights and two thirds of its MLP weights. "
                "The paper reports that at full scale they reach Llama's perplexity and that T = 2 helps; a "
                "short CPU run only shows that the comparison runs.")
    with st.expander("log"):
        st.code(state["log"] or "(empty)")
    was_running = st.session_state.get("_lm_was_running", False)
    st.session_state["_lm_was_running"] = running
    if was_running and not running:
        st.rerun(scope="app")                                          # the run just ended: show the launcher



@st.cache_data(show_spinner=False, max_entries=8)
def sweep_records(folder=lm_presets.COMMITTED_SWEEP):
    return lm_runner.LM_SWEEP.load(ROOT / folder / "results.json")


def sweep_section(records) -> None:
    if not results_heading("The committed sweep: the paper's claims in miniature", records,
                           len(lm_runner.stale_runs(records, "default")[0]),
                           "No LM sweep results found: run `make lm-sweep` (about an hour on 2 cores).",
                           "the default sweep"):
        return
    st.caption(f"{len(records)} runs on the {DEMO_LABEL}: {lm_presets.preset_summary('default')}. "
               "Every variant sees the same tokens. Command: `python -m cem_core lm sweep --preset default`.")
    st.dataframe(lm_report.variant_rows(records), hide_index=True)
    show_figure(lm_figures.lm_sweep_figure(records), "lm sweep validation perplexity", "lm-sweep")
    st.markdown("**The claims, each with a verdict**")
    verdict_table(lm_report.claim_rows(records))
    st.caption(f"Verdict rule, fixed before the sweep ran: {lm_rules.VERDICT_RULE}")
    st.caption("The last column reads the same records with a t-based interval, each verdict labelled with its "
               "direction relative to the paper; the verdict column keeps the recorded rule. "
               + lm_report.reading_summary(records))
    explain("Each claim compares two variants trained on the same tokens with the same seeds: the difference in "
            "validation perplexity is averaged over seeds, and only a difference larger than twice its standard "
            "error counts. At this size (a quarter of a million parameters) a verdict is about the direction of "
            "a claim, not about the paper's scale.")


def missing_runs(records, preset: str, folder) -> int | None:
    """How many runs of the preset the committed folder's records lack, at the rates of its decisions table; None,
    with the reason shown, when that table is missing or refused (the section is left out, the page stays)."""
    if not records:
        return 0
    return committed(_missing_runs, f"The {preset} sweep (its decisions table)", records, preset, folder)


def _missing_runs(records, preset: str, folder) -> int:
    decided = lm_decisions.folder_decisions(ROOT / folder, preset)
    return len(lm_runner.stale_runs(records, preset, decisions=decided)[0])


def own_rate_section(common, own) -> None:
    missing = missing_runs(own, "own", lm_presets.COMMITTED_OWN)
    if missing is None or not results_heading(
            "Each variant at its own learning rate", own, missing,
            "No own-rate sweep results found: run `make lm-own` (about 2 hours on 2 cores).", "the own-rate sweep"):
        return
    st.caption(f"{len(own)} runs on the {DEMO_LABEL}: {lm_presets.preset_summary('own')}. Each rate is the best of a "
               "6-rate grid at a "
               "quarter of the budget (`results/lm-rates`, every best strictly inside its grid). "
               "Command: `make lm-own`.")
    rows = lm_report.own_variant_rows(common, own)
    st.dataframe(rows, hide_index=True, height=35 * (len(rows) + 1) + 3)          # every variant, no inner scroll
    st.markdown("**The claims twice: at the common rate and with each variant at its own rate**")
    if rows := lm_report.side_by_side_rows(common, own):
        verdict_table(rows)
        st.caption(lm_report.own_summary(common, own))
    else:
        st.info("No claim has both its variants in the own-rate sweep yet.")
    st.caption(f"Rule for the own-rate runs, fixed before they trained: {lm_rules.T_RULE}")
    st.markdown(lm_report.step_size_summary(own))


LADDER_SECTIONS = {
    "budget-ladder": ("The width ladder at the paper's budget: does the gap to Llama narrow or grow with scale?",
                      "No results of the width ladder at the paper's budget found: run `make lm-budget-ladder` (about "
                      "3 hours on 2 cores)."),
    "ladder": ("The earlier, quarter-budget width ladder (5 tokens per parameter)",
               "No quarter-budget ladder results found: run `make lm-ladder` (about 50 minutes on 2 cores)."),
}


RECORDED_RULE = ("Rule recorded before the quarter ladder ran, kept in its sweep.json; the tables and the figure above "
                 "read its records with the budget ladder's rule instead:")


def ladder_section(records, preset: str, folder) -> None:
    title, absent = LADDER_SECTIONS[preset]
    staged = bool(lm_presets.SWEEP_PRESETS[preset].rate_steps)     # its runs grow: the note below says what is left
    missing = 0 if staged else missing_runs(records, preset, folder)
    if missing is None or not results_heading(title, records, missing, absent, "the ladder", "the figure and tables"):
        return
    if note := ladder.progress_note(records, preset):
        st.warning(note)
    st.caption(f"{len(records)} runs: {lm_presets.preset_summary(preset)}.")
    show_figure(lm_figures.lm_ladder_figure(records, preset), f"lm width ladder {preset}", f"lm-{preset}")
    st.markdown(ladder.summary(records, preset))
    st.dataframe(ladder.trend_rows(records, preset), hide_index=True)
    with st.expander("every width and variant at its chosen rate"):
        st.dataframe(ladder.rows(records, preset), hide_index=True)
    if preset == "budget-ladder":
        st.caption(f"Rule, fixed before the ladder ran: {lm_rules.RULES[preset]}")
    else:
        st.caption(f"{RECORDED_RULE} {lm_rules.RULES[preset]}")


def body() -> None:
    st.title("Mini language model")
    st.markdown("The paper's main comparison in miniature: Llama vs CEM variants on the same data, with "
                "parameters, tokens/s and validation perplexity. Runs go on in the background: you can move "
                "around the app and come back.")
    notebook_links("lm")
    board = job_board()
    job = board.current()
    if job is not None and job["status"] in ("stale", "corrupt"):
        st.warning(plain(stale_message(job)))
        board.clear()
        job = None
    if job is not None:
        live(board, job)
    if job is None or not job["running"]:
        launcher(board)
    common = committed(sweep_records, "The committed sweep")           # the committed evidence, beside any run
    own = committed(sweep_records, "The own-rate sweep", lm_presets.COMMITTED_OWN)
    if common is not None:
        sweep_section(common)
        if own is not None:
            own_rate_section(common, own)
    for preset, folder in (("budget-ladder", lm_presets.COMMITTED_BUDGET_LADDER),
                           ("ladder", lm_presets.COMMITTED_LADDER)):
        if (records := committed(sweep_records, LADDER_SECTIONS[preset][0], folder)) is not None:
            ladder_section(records, preset, folder)
    questions.tie_ladder_section()
    questions.test_time_section("lm")


def stale_message(job: dict) -> str:
    if job["status"] == "corrupt":
        return f"The record of the last run could not be used ({job['problem']}); it has been cleared."
    return (f"The record of the last run names process {job['pid']}, which is no longer that run (the run "
            f"ended and its process id was reused); the record has been cleared. Its files are in {job['out']}.")


run_safely(body)
