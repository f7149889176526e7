"""The step-playback component: a small page (app_pages/playback/) that draws a phase's plots with plotly.js and
moves through the steps in the browser, from the data cem_core.ui.playback builds.

It is a Streamlit component (components.v1, served from a folder): the folder holds our index.html and
playback.js (the Streamlit side), and on first use the drawing core shared with the static site (cem_core/web/'s
player.js and player.css) and plotly.js from the installed plotly package are copied into it (not committed: the
copies always match the core and the Python package that builds the figures).
"""
from __future__ import annotations

import filecmp
import os
import shutil
import tempfile
from pathlib import Path

import streamlit.components.v1 as components

from cem_core.ui.site import PLOTLY_JS, WEB

FRONTEND = Path(__file__).resolve().parent / "playback"
COPIED = {"plotly.min.js": PLOTLY_JS, "player.js": WEB / "player.js", "player.css": WEB / "player.css"}


def _with_copies(folder: Path) -> Path:
    """The folder, with COPIED beside our files, each copied where it is missing or differs: to a temporary name
    and renamed into place, so a reader never sees half a file and a planted link at the target is replaced, not
    followed."""
    for name, source in COPIED.items():
        target = folder / name
        if target.is_symlink() or not target.is_file() or not filecmp.cmp(target, source, shallow=False):
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".copy-", suffix=".tmp")
            os.close(fd)
            try:
                shutil.copyfile(source, tmp)
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    return folder


_component = components.declare_component("cem_playback", path=str(_with_copies(FRONTEND)))


def playback(args: dict, key: str, on_change=None):
    """Draw one phase's playback (args from cem_core.ui.playback.view). Returns the last token a click chose,
    as {"token": i, "click": n}, or None."""
    return _component(**args, key=key, default=None, on_change=on_change)
