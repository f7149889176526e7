"""Lesson mode and presentation mode, across the pages.

Lesson mode runs the classroom lesson (cem_core.ui.lesson) as a bar above every page: the step's title and
sentence, Back / Next / End and a link to the step. Going to a step sets its complete state from a clean one:
its page's controls, and the energy page's pinned state, then opens its page; a link ``?lesson=k`` does the
same in a new session. The element the step points at is framed.

Presentation mode (``?present=true`` or the sidebar toggle) collapses the sidebar, shows only the controls the
step uses and the plots it talks about, in larger fonts, so that they fit a projected 1280 x 720 page.
"""
from __future__ import annotations

import streamlit as st

from app_pages.common import app_address, committed, gp_sweep_records, link_switch, plain, url_toggle
from cem_core.ui import lesson
from cem_core.ui.energy_mode import EnergyMode

LESSON = "lesson"              # session key: the index of the lesson step, or None
PRESENT = "present"            # session key (and the toggle's): presentation mode
APPLIED = "_lesson_applied"    # the ?lesson= value this session has applied
GOTO = "_lesson_goto"          # a step was chosen: open its page on the next run
PREFIXES = {"energy": "en_", "gp": "gp_", "inside": "in_"}
BEFORE = "_before_lesson"      # what the lesson's steps replace (the pages' controls, the pinned states)
PINS = ("_pinned_energy", "_pinned_inside")    # the states pinned on the energy page and on the inside page


def forget_widgets(*pages: str) -> None:
    """Clear the pages' widget keys: their widgets start again from the kept controls."""
    state, prefixes = st.session_state, tuple(PREFIXES[page] for page in pages)
    for key in [k for k in state if isinstance(k, str) and k.startswith(prefixes)]:
        del state[key]


def go(index: int) -> None:
    """Set lesson step `index`'s complete state (a callback: it runs before the page draws a widget). Entering
    the lesson keeps what its steps replace, for End to give back."""
    state, step = st.session_state, lesson.STEPS[index]
    if state.get(LESSON) is None:
        state[BEFORE] = {key: state.get(key) for key in (*(f"_controls_{page}" for page in PREFIXES), *PINS)}
    forget_widgets(step.page)
    state[f"_controls_{step.page}"] = step.controls().values()
    state["_pinned_energy"] = None if step.pinned is None else step.pinned_controls().values()
    state["_pinned_inside"] = None                     # the inside page's steps pin nothing
    set_mode(lesson=index)
    state[APPLIED] = str(index + 1)
    state[GOTO] = step.page


def end() -> None:
    """Leave the lesson as it was entered, the page of its last step shown: the pages' controls and the pinned
    state as they were before its first step (a lesson opened by a link: the defaults), and presentation mode off,
    so that the app is the reader's again. The link's step (still in the URL until the next run) is not applied
    again."""
    state = st.session_state
    before = state.pop(BEFORE, None) or {}
    forget_widgets(*PREFIXES)
    for page in PREFIXES:                              # a page first seen in the lesson: its defaults
        state[f"_controls_{page}"] = before.get(f"_controls_{page}") or lesson.CONTROLS[page]().values()
    for key in PINS:
        state[key] = before.get(key)
    set_mode(lesson=None, present=False)
    state[APPLIED] = st.query_params.get("lesson")


def set_mode(**mode) -> None:
    """The one writer of the pages' mode in the session: `lesson`, the index of the lesson step shown (None: no
    lesson), and `present`, presentation mode (which its sidebar toggle, a widget, also sets)."""
    keys = {"lesson": LESSON, "present": PRESENT}
    for name, value in mode.items():
        st.session_state[keys[name]] = value


def current_step(page: str) -> lesson.Step | None:
    """The lesson step shown, when it belongs to `page`."""
    index = st.session_state.get(LESSON)
    return None if index is None or lesson.STEPS[index].page != page else lesson.STEPS[index]


def presentation() -> bool:
    """Presentation mode, mirrored in the URL as ?present=true (read before the page config is set): as set in this
    session, else from the link."""
    if PRESENT not in st.session_state:
        set_mode(present=link_switch(PRESENT))
    return st.session_state[PRESENT]


def energy_mode() -> EnergyMode:
    """The energy page's mode this run: presentation mode, and the lesson step shown if it is one of that page."""
    step = current_step("energy")
    return EnergyMode(present=bool(st.session_state.get(PRESENT)),
                      lesson=None if step is None else st.session_state[LESSON])


def start(pages: dict) -> None:
    """Before the page runs: apply a ``?lesson=k`` link once per session and open a chosen step's page."""
    wanted = st.query_params.get("lesson")        # a link's step; a button's step (GOTO) comes before it
    if GOTO not in st.session_state and wanted is not None and wanted != st.session_state.get(APPLIED):
        problem = lesson.missing_step(wanted, lambda value: plain(repr(value)))
        if problem is not None:
            st.error(problem)
            st.session_state[APPLIED] = wanted
        else:
            go(int(wanted) - 1)
    page = st.session_state.pop(GOTO, None)
    if page is not None:
        query = {"lesson": st.session_state[APPLIED]} | ({"present": "true"} if st.session_state.present else {}) | (
            {"teacher": "true"} if st.session_state.get("teacher") else {})
        st.switch_page(pages[page], query_params=query)


def sidebar() -> None:
    """The sidebar's lesson button and presentation toggle."""
    if st.session_state.get(LESSON) is None:
        st.sidebar.button("Start the lesson", icon=":material/school:", on_click=go, args=(0,), key="lesson-start",
                          help=f"The classroom lesson, {len(lesson.STEPS)} steps, each setting its own state.")
    url_toggle(PRESENT, "Presentation mode",
               "Collapse the sidebar and show only the controls and plots the step uses, larger.")


def say(step: lesson.Step) -> None:
    """What the lecturer says at a step."""
    with st.container(key="lesson-say"):
        if step.page != "gp":
            st.markdown(lesson.text(step))
        elif (records := committed(gp_sweep_records, "This step's numbers (from the committed GP sweep)")) is not None:
            st.markdown(lesson.text(step, records))


def bar() -> None:
    """The lesson bar above the page, and the frame around the element the step points at. Its container is
    drawn in every state, so that the page's elements keep their places
    (docs/design.md#78-a-component-that-moves-is-a-new-iframe)."""
    with st.container():
        index = st.session_state.get(LESSON)
        if index is None:
            if "lesson" in st.query_params and st.query_params["lesson"] == st.session_state.get(APPLIED):
                del st.query_params["lesson"]
            if st.session_state.get("present"):           # the sidebar is collapsed: its button, here
                st.button("Start the lesson", icon=":material/school:", on_click=go, args=(0,),
                          key="lesson-start-present")
            return
        step, n = lesson.STEPS[index], len(lesson.STEPS)
        st.query_params["lesson"] = str(index + 1)
        with st.container(key="lesson-bar", border=True):
            c1, c2, c3, c4 = st.columns([4, 1, 1, 1], vertical_alignment="center")
            c1.markdown(f"**Lesson · step {index + 1} of {n}: {step.title}** · "
                        f"[link to this step]({lesson.link(index, app_address())})")
            c2.button("Back", key="lesson-back", icon=":material/arrow_back:", disabled=index == 0, on_click=go,
                      args=(index - 1,), width="stretch")
            c3.button("Next", key="lesson-next", icon=":material/arrow_forward:", disabled=index == n - 1,
                      on_click=go, args=(index + 1,), width="stretch")
            c4.button("End", key="lesson-end", icon=":material/close:", on_click=end, width="stretch")
            if energy_mode().bar_says:                   # else the energy page says it, beside the step's controls
                say(step)
        st.html(f"<style>[class*='st-key-lesson-{step.points_at}'] {{ outline: 4px solid #f59e0b; "
                "outline-offset: 4px; border-radius: 0.5rem; }</style>")
