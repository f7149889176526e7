"""The step-playback component: a small page (app_pages/playback/) that draws a phase's plots with plotly.js and
moves through the steps in the browser, from the data cem_core.ui.playback builds.

It is a Streamlit component (components.v1, served from a folder): the folder holds our index.html and
playback.js, and plotly.js is copied into it from the installed plotly package on first use (not committed:
the copy always matches the Python package that builds the figures).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import plotly
import streamlit.components.v1 as components

FRONTEND = Path(__file__).resolve().parent / "playback"
PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def _with_plotly_js(folder: Path) -> Path:
    """The folder, with plotly.min.js beside our files: copied to a temporary name and renamed into place, so a
    reader never sees half a file and a planted link at the target is replaced, not followed."""
    target = folder / "plotly.min.js"
    if target.is_symlink() or not target.is_file() or target.stat().st_size != PLOTLY_JS.stat().st_size:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".plotly-", suffix=".tmp")
        os.close(fd)
        try:
            shutil.copyfile(PLOTLY_JS, tmp)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return folder


_component = components.declare_component("cem_playback", path=str(_with_plotly_js(FRONTEND)))


def playback(args: dict, key: str, on_change=None):
    """Draw one phase's playback (args from cem_core.ui.playback.view). Returns the last token a click chose,
    as {"token": i, "click": n}, or None."""
    return _component(**args, key=key, default=None, on_change=on_change)
