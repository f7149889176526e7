"""The sections of the two questions our results raise, on the pages that hold their evidence: which tie costs the
perplexity (the tie ladder, Mini language model) and whether in-layer recursion scales at test time (the test-time
study: Mini language model for the LM, GP recursion for the GP). Committed records only."""
from __future__ import annotations

import streamlit as st

from app_pages.common import ROOT, committed, show_figure
from cem_core.experiments import test_time
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.lm import ladder, tie_ladder
from cem_core.experiments.lm import presets as lm_presets
from cem_core.experiments.lm import rules as lm_rules
from cem_core.experiments.lm import runner as lm_runner
from cem_core.ui import gp_figures, question_figures


def tie_ladder_section() -> None:
    st.subheader("Which tie costs the perplexity? The tie ladder")
    records = committed(lm_runner.LM_SWEEP.load, "The tie ladder", ROOT / lm_presets.COMMITTED_TIE_LADDER /
                        "results.json")
    if records is None:
        return
    if not records:
        st.warning("No results of the tie ladder found: run `make lm-tie-ladder` (about 3.5 hours on 2 cores).")
        return
    if note := ladder.progress_note(records, tie_ladder.PRESET):
        st.warning(note)
    show_figure(question_figures.tie_ladder_figure(records), "lm tie ladder", "lm-tie-ladder")
    st.markdown(tie_ladder.tie_summary(records))
    st.dataframe(tie_ladder.effect_rows(records), hide_index=True)
    with st.expander("every width and variant at its chosen rate"):
        st.dataframe(ladder.rows(records, tie_ladder.PRESET), hide_index=True)
    st.caption(f"Rule, fixed before the ladder ran: {lm_rules.TIE_LADDER_RULE}")


def test_time_section(task: str) -> None:
    st.subheader(gp_figures.TEST_TIME_HEADING)
    folder, load = ((test_time.COMMITTED_GP_TEST_TIME, gp_sweep.GP_SWEEP.load) if task == "gp" else
                    (test_time.COMMITTED_LM_TEST_TIME, lm_runner.LM_SWEEP.load))
    records = committed(load, "The test-time study", ROOT / folder / "results.json")
    if records is None:
        return
    if not records:
        st.warning(f"No results of the {task.upper()} test-time study found: run `make {task}-test-time`.")
        return
    if (left := test_time.planned(task) - len(records)) > 0:
        st.warning(f"{left} of the study's {test_time.planned(task)} runs are not there yet; the figures and the "
                   f"table show what is (`make {task}-test-time` resumes it).")
    conditions = test_time.GP_CONDITIONS if task == "gp" else (None,)
    for condition in conditions:
        show_figure(question_figures.test_time_figure(task, records, condition),
                    f"{task} test-time {condition or ''}".strip(), f"{task}-test-time-{condition or 'lm'}")
    st.markdown(test_time.test_time_summary(task, records))
    st.dataframe(test_time.test_time_rows(task, records), hide_index=True)
    st.caption(f"Rule, fixed before the study ran: {test_time.TEST_TIME_RULE}")
