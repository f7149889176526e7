"""The energy explorer computed in the browser, as a Streamlit component: the energy page's Instant mode.

Its folder (app_pages/explorer/, not committed) is the static site that cem_core.ui.site builds, plus bridge.js
(app_pages/explorer_bridge.js: the Streamlit side) loaded before the explorer's own script; built on first use
and whenever it differs from what the site and the bridge would be now, beside the folder and renamed into
place (``site.build``), so a reader never sees half of one. The server sends the kept controls and the pinned
state; the component computes and draws every change itself and, once idle, returns the state it drew.
"""
from __future__ import annotations

import filecmp
import functools
import threading
from pathlib import Path

import streamlit.components.v1 as components

from app_pages.common import ROOT
from cem_core.ui import site, site_data

FRONTEND = Path(__file__).resolve().parent / "explorer"
BRIDGE = Path(__file__).resolve().parent / "explorer_bridge.js"
_BUILDING = threading.Lock()


def index_html() -> str:
    """The site's page with the bridge loaded before the explorer's script."""
    page = (site.WEB / site.PAGE).read_text(encoding="utf-8")
    script = '<script src="explorer.js"></script>'
    assert page.count(script) == 1, "explorer.html loads explorer.js once"
    return page.replace(script, f'<script src="bridge.js"></script>\n{script}')


def _finish(folder: Path) -> None:
    (folder / "index.html").write_text(index_html(), encoding="utf-8")
    (folder / "bridge.js").write_bytes(BRIDGE.read_bytes())


def current(folder: Path) -> bool:
    """Whether `folder` holds the site and the bridge as they would be built now (MathJax: its marked build)."""
    texts = {"index.html": index_html(), "site-data.js": site_data.script(ROOT)}
    files = {"bridge.js": BRIDGE, "plotly.min.js": site.PLOTLY_JS, **{name: site.WEB / name for name in site.FILES}}
    return ((folder / site.MARK).is_file()
            and all((folder / n).is_file() and (folder / n).read_text(encoding="utf-8") == t for n, t in texts.items())
            and all((folder / n).is_file() and filecmp.cmp(folder / n, source, shallow=False)
                    for n, source in files.items()))


def frontend(folder: Path = FRONTEND) -> Path:
    """The component's folder, built where it is missing or stale."""
    with _BUILDING:
        if not current(folder):
            site.build(folder, finish=_finish, root=ROOT)
    return folder


@functools.cache
def _component():                      # declared on first use: the build reads the Python core once (about 1 s)
    return components.declare_component("cem_explorer", path=str(frontend()))


def explorer(values: dict, pinned: dict | None, report: int, key: str, on_change=None):
    """Draw the explorer at the controls `values` with the `pinned` state, `report` the number of the last report
    of the explorer's that the server has taken (its bridge ignores a state the server sends before it has taken
    the latest). Returns the last state it drew once idle, {"values": ..., "pinned": ..., "report": n}, or None."""
    return _component()(values=values, pinned=pinned, report=report, key=key, default=None, on_change=on_change)
