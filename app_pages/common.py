"""Helpers shared by the pages: teacher mode, URL-mirrored controls, downloads, error display."""
from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.nn.config import CEMOptions
from cem_core.ui import exports, figure_style, jobs, links, tables

log = logging.getLogger("cem_lab.app")
ROOT = Path(__file__).resolve().parents[1]     # the repository: the app keeps its runs and data under it
# Markdown's punctuation (CommonMark lets a backslash escape any of it): a value from a URL, a path or an error
# is shown as itself, never as emphasis, a link, an image, maths or a colour directive
MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\\[-`{-~])")
# GFM turns an address in text into a link after the escapes are read (remark-gfm), unless the character before
# it is a letter-like one: a word joiner (U+2060, invisible) before a scheme or www., and after an @
AUTOLINKED = re.compile(r"(?i)\b(?=(?:https?|ftp|mailto|xmpp)\\:|www\\\.)|(?<=@)")


def plain(text: str) -> str:
    """`text` as literal text in Streamlit's Markdown (st.error, st.markdown, ...)."""
    return AUTOLINKED.sub("\u2060", MARKDOWN_PUNCTUATION.sub(r"\\\1", text))


@st.cache_data(show_spinner=False, max_entries=1)
def gp_sweep_records() -> list[dict]:
    """The committed GP sweep's records (the GP page's plots, the lesson's GP step)."""
    return gp_sweep.GP_SWEEP.load(ROOT / gp_sweep.COMMITTED_GP_SWEEP / "results.json")


_WARM = threading.Lock()


def warm_up() -> None:
    """Import, once and under a lock, the libraries the pages and Streamlit's tables import lazily. The first page
    runs of a class arriving at once import them in thirty threads at the same moment, and pandas then came out
    half-initialised in some ("partially initialized module 'pandas' has no attribute 'Series'"): one thread
    imports them while the others wait."""
    with _WARM:
        import matplotlib.pyplot  # noqa: F401
        import pandas  # noqa: F401
        import plotly.graph_objects  # noqa: F401
        import plotly.io  # noqa: F401
        import pyarrow  # noqa: F401

        from cem_core.ui import design_figures, explore, exports, figdata, figure_files, inside  # noqa: F401


def busy_note():
    """A short note while this session's new state waits for other sessions' computations (``cache.compute_slot``);
    returns what removes it once the computation starts."""
    note = st.empty()
    note.info("The server is busy with other sessions' new states: yours is queued and computed in a moment "
              "(busy, retrying).", icon=":material/hourglass_top:")
    return note.empty


def committed(load, what: str, *args) -> list[dict] | None:
    """The committed records ``load(*args)`` gives, or None with the reason shown (st.error) when its results file
    is refused (edited, damaged): that costs the sections that read it, never the page's others."""
    try:
        return load(*args)
    except ValueError as err:
        st.error(f"{what} cannot be shown: {plain(str(err))}")
        return None


def app_address() -> str:
    """The address this app is served at, as the reader opened it (a classroom server, another port), for the
    links the app shows; links.APP_ADDRESS where the page has no URL (a headless test)."""
    url = st.context.url
    return links.served_address(url) if url else links.APP_ADDRESS


def job_board() -> jobs.JobBoard:
    """The app's background jobs (``CEM_LAB_JOBS_DIR``, default runs/app) and the only data folder it
    reads (``CEM_LAB_DATA_DIR``, default data/)."""
    return jobs.JobBoard(jobs_dir=Path(os.environ.get("CEM_LAB_JOBS_DIR", ROOT / "runs" / "app")),
                         data_dir=Path(os.environ.get("CEM_LAB_DATA_DIR", ROOT / "data")), workdir=ROOT)


def link_switch(key: str) -> bool:
    """A switch's value in the link (?key=true)."""
    return st.query_params.get(key, "false").lower() in ("true", "1")


def url_switch(key: str) -> bool:
    """A switch's value: as set in this session, else from the link (?key=true)."""
    if key not in st.session_state:
        st.session_state[key] = link_switch(key)
    return st.session_state[key]


def url_toggle(key: str, label: str, help: str) -> bool:
    """A sidebar toggle for a switch, mirrored in the URL as ?key=true."""
    url_switch(key)
    on = st.sidebar.toggle(label, key=key, help=help)
    if on:
        st.query_params[key] = "true"
    elif key in st.query_params:
        del st.query_params[key]
    return on


def teacher_mode() -> bool:
    """The sidebar toggle; mirrored in the URL as ?teacher=true."""
    return url_toggle("teacher", "Teacher mode",
                      "Show a short guided explanation of the plots (for projecting in class).")


def notebook_links(page: str) -> None:
    """The notebooks that derive or read what the page shows (links.PAGE_NOTEBOOKS), as one caption."""
    st.caption(links.notebooks_markdown(page))


def explain(text: str) -> None:
    """A guided explanation, shown only in teacher mode."""
    if st.session_state.get("teacher"):
        st.info(text, icon=":material/school:")


def restore_controls(page: str, cls, widget_keys: dict, shown=None) -> tuple[str, ...]:
    """Fill the page's widget keys before its widgets are drawn, on every run.

    Streamlit drops the state of every widget that a run does not draw: a page that is not shown, a
    control hidden in this state, the launcher while a run goes. So each page's last valid controls
    are kept under a key of their own (``keep_controls``) and any widget key that is missing is filled
    from them. They come from the URL on the first visit of a page in a session (a link, an address typed), and
    when the browser's Back or Forward brings values other than the page last wrote there (a bad
    value is reported with st.error and the defaults are used; a number between a slider's steps is snapped,
    with a note). The values are then settled (``cls.settle``): options that make no sense together are reset
    together, with a toast that says so, so no change of one control leads to a refused state.
    `shown(values)` names the controls the page draws in a state (default: all): the keys of the others are
    cleared, so a hidden control keeps its kept value (``control_values``) and, drawn again, starts from it,
    never from a value the browser remembered for the hidden widget. Returns the names of the controls to draw."""
    kept = f"_controls_{page}"
    if kept not in st.session_state or _url_changed(page, cls):
        try:
            controls, snapped = cls.from_link(dict(st.query_params))
        except ValueError as err:
            st.error(f"The link's settings could not be used: {plain(cls.explain(err))}. Showing the defaults "
                     "instead.")
            controls, snapped = cls(), []
        for note in snapped:
            st.info(plain(note), icon=":material/straighten:")
        st.session_state[kept] = controls.values()
        for key in widget_keys.values():
            st.session_state.pop(key, None)                            # drawn again from the link's values
    values = st.session_state[kept]
    for field, key in widget_keys.items():
        if key not in st.session_state:
            value = values[field]
            st.session_state[key] = list(value) if isinstance(value, tuple) else value   # a multiselect holds a list
    current = {f: st.session_state[k] for f, k in widget_keys.items()}
    settled, notes = cls.settle(current)
    for field, key in widget_keys.items():
        if settled[field] != current[field]:
            st.session_state[key] = settled[field]
    st.session_state[f"_settled_{page}"] = settled                     # the hidden controls' values this run
    for note in notes:
        st.toast(plain(note), icon=":material/rule:")
    drawn = tuple(widget_keys) if shown is None else shown(settled)
    for field, key in widget_keys.items():
        if field not in drawn:
            del st.session_state[key]
    return drawn


def _url_changed(page: str, cls) -> bool:
    """Whether the browser's Back or Forward brought a URL whose values of the page's controls are not those the
    page last wrote there: then the URL is the state to show. Only on history navigation: an ordinary rerun can
    start before the browser has applied the URL the run before it wrote (keys held down, runs interrupted), and
    reading that URL would put the controls back and lose the reader's last changes."""
    ctx = get_script_run_ctx()
    if ctx is None or not ctx.is_history_navigation:
        return False
    written = st.session_state.get(f"_url_{page}")
    names = {cls.PREFIX + name for name in cls.specs()}
    now = {k: v for k, v in st.query_params.items() if k in names}
    return written is not None and bool(now) and now != written


def control_values(page: str, widget_keys: dict) -> dict:
    """Every control's value: a drawn control's from its widget, a hidden one's as settled this run."""
    settled = st.session_state[f"_settled_{page}"]
    return {field: st.session_state[key] if key in st.session_state else settled[field]
            for field, key in widget_keys.items()}


def keep_controls(page: str, controls) -> None:
    """Remember the page's valid controls for its next visit and write them into the URL, so that a
    copied link restores this view. The URL is written in one go (one entry in the browser's history per
    change: Back undoes it)."""
    st.session_state[f"_controls_{page}"] = controls.values()
    query = controls.to_query()
    st.session_state[f"_url_{page}"] = query
    if any(st.query_params.get(name) != value for name, value in query.items()):
        st.query_params.from_dict(st.query_params.to_dict() | query)


def widget_keys(cls, prefix: str) -> dict:
    """The session-state key of every control of a controls class."""
    return {name: f"{prefix}{name}" for name in cls.specs()}


def control(cls, name: str, key: str, label: str, widget=None, **kwargs) -> None:
    """The widget of one control, with the range or the options its controls class allows (a page never
    repeats them): by default a slider for a number, a select box for a choice, a toggle for a flag."""
    kind, allowed = cls.specs()[name]
    if kind == "choice":
        (widget or st.selectbox)(label, tuple(allowed), key=key, **kwargs)     # a registry's names, in order
    elif kind == "bool":
        (widget or st.toggle)(label, key=key, **kwargs)
    else:
        (widget or st.slider)(label, allowed[0], allowed[1], key=key, **kwargs)


def cem_widget(cls, name: str, key: str) -> None:
    """The control of one CEM switch, its label, help and step from the switch's metadata."""
    meta = CEMOptions.__dataclass_fields__[name].metadata
    kind, allowed = cls.specs()[name]
    control(cls, name, key, meta["label"], help=meta["help"], **({"step": allowed[2]} if kind == "float" else {}))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


PNG_HINT = "PNG: the chart's camera icon"
PRESENT_FONTS = 1.25          # presentation mode: every plot's fonts this much larger, for the room


def chart_config(name: str) -> dict:
    """Plotly's own toolbar for a chart: its camera saves the chart as the reader sees it, a PNG named after it at
    twice the screen's resolution, drawn by the reader's browser
    (docs/design.md#74-static-plotly-export-needs-chrome)."""
    return {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": _slug(name), "scale": 2}}


def show_figure(fig, name: str, key: str, height: int | None = None) -> None:
    """The chart plus its download buttons; in presentation mode larger, without them (`height`: there)."""
    if st.session_state.get("present"):
        fig = figure_style.enlarged(fig, PRESENT_FONTS).update_layout(**({"height": height} if height else {}))
    st.plotly_chart(fig, key=f"chart-{key}", width="stretch", theme=None,   # our fonts, not the theme's 12 px
                    config=chart_config(name))
    if not st.session_state.get("present"):
        download_buttons(fig, name, key)


def download_buttons(fig, name: str, key: str) -> None:
    """A figure's downloads: interactive HTML and the data as CSV (each built on click); its PNG is the camera of
    the chart's own toolbar (``chart_config``), which the third column points to."""
    slug = _slug(name)
    cols = st.columns(3)
    cols[0].download_button("HTML", lambda: exports.to_html(fig), file_name=f"{slug}.html",
                            mime="text/html", key=f"html-{key}", on_click="ignore", icon=":material/download:")
    cols[1].download_button("CSV", lambda: exports.to_csv(fig), file_name=f"{slug}.csv", mime="text/csv",
                            key=f"csv-{key}", on_click="ignore", icon=":material/download:")
    cols[2].caption(PNG_HINT)


def results_heading(title: str, records: list, missing: int, absent: str, what: str, shown: str = "the tables") -> bool:
    """A section of committed results: its heading, a warning with the command when there are none (False), and
    one when `missing` runs of `what` are not there yet."""
    st.subheader(title)
    if not records:
        st.warning(absent)
        return False
    if missing:
        st.warning(f"{missing} runs of {what} are missing; {shown} show what is there.")
    return True


def verdict_table(rows: list[dict]) -> None:
    """A claims table as a class reads it: the verdict first, then the claim, then the numbers, as a static
    table whose cells wrap (an interactive grid hides its last columns behind a horizontal scroll)."""
    st.table(tables.verdict_first(rows))


def run_safely(body) -> None:
    """Run a page body: a ValueError is the user's input (st.error with the reason); anything else
    is our bug, reported without a traceback and logged for us."""
    try:
        body()
    except ValueError as err:
        st.error(plain(str(err)))
    except Exception as err:  # noqa: BLE001 - the app never shows a traceback
        log.exception("page failed")
        st.error(f"Something went wrong on our side ({type(err).__name__}: {plain(str(err))}). "
                 "Please report it with the link of this page.")


def pin_bar(key: str, controls, pinned, label: str, help: str, names) -> None:
    """The pin button of a page (its state kept under session key `key`), or, with a state pinned, the unpin
    button and both states named beside it: `names(now, pinned) -> (now's name, the pinned state's name)`."""
    page = key.removeprefix("_pinned_")
    c1, c2 = st.columns([2, 5], vertical_alignment="center")     # the button whole at 1024 px, sidebar open
    if pinned is None:
        c1.button(label, key=f"pin-{page}", icon=":material/push_pin:",
                  on_click=lambda: st.session_state.update({key: controls.values()}), help=help)
        return
    c1.button("Unpin", key=f"unpin-{page}", icon=":material/close:",
              on_click=lambda: st.session_state.update({key: None}))
    now, then = names(controls, pinned)
    c2.caption(f"Pinned: **{then}**, drawn faint and dashed; now: **{now}**.")
