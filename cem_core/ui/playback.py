"""Step playback of one phase of the energy page, as data for the browser.

``view`` turns a phase of ``explore`` into what the page's playback component (app_pages/playback/) draws:
the phase's figures as Plotly JSON and, for every step t = 0..T, the updates that show step t: the marker on
the landscape moves to x^(t), the cursor and the marker on the energy and update-norm plots move to t, and the
heatmap shows the attention weights of step t. The browser applies them with Plotly.restyle, so play, pause,
step and the scrubber need no server round trip. Nothing here draws or imports Streamlit.
"""
from __future__ import annotations

import base64
import hashlib
import json

import numpy as np

from . import descent_figures, symlog
from .descent_figures import cursor_y
from .figure_style import CURSOR, NOW, WEIGHTS

PLOTS = ("energy", "norm", "landscape", "heatmap")     # a phase's figures, by name, in the page's order
PICK = {"energy": "customdata", "norm": "customdata", "heatmap": "y"}   # how a click there names a token


def _per_token(name: str, values: np.ndarray, first_step: int, token: int, t: int, pinned=None) -> list[dict]:
    """Step t on a per-token plot: the cursor at t, the marker on the followed token (none before first_step).
    `values` and `pinned` are on the plot's axis (symlog.SymLog.on_axis)."""
    here = t - first_step
    return [{"figure": name, "meta": CURSOR, "x": [t, t], "y": cursor_y(values, pinned)},
            {"figure": name, "meta": NOW, "x": [t] if here >= 0 else [],
             "y": [float(values[here, token])] if here >= 0 else []}]


def frames(phase: dict, token: int, head: int, pinned: dict | None = None) -> list[list[dict]]:
    """For t = 0..T, the updates that show step t (see the module doc). A heatmap update names its weights
    by step index into the view's "weights" array."""
    # each per-token plot's values on its axis (a symmetric log one where its builder chose it), once
    energies, pinned_energies, _ = symlog.SymLog.on_axis(phase["energies"],
                                                              None if pinned is None else pinned["energies"])
    norms, pinned_norms, _ = symlog.SymLog.on_axis(phase["update_norms"],
                                                        None if pinned is None else pinned["update_norms"])
    trajectory = phase["landscape"]["trajectory"]
    steps = len(energies) - 1
    out = []
    for t in range(steps + 1):
        frame = (_per_token("energy", energies, 0, token, t, pinned_energies)
                 + _per_token("norm", norms, 1, token, t, pinned_norms)
                 + [{"figure": "landscape", "meta": NOW, "x": [float(trajectory[t, 0])],
                     "y": [float(trajectory[t, 1])]}])
        if phase["weights"] is not None:
            frame.append({"figure": "heatmap", "meta": WEIGHTS, "z": {"array": "weights", "index": max(t, 1) - 1},
                          "title": descent_figures.heatmap_title(t, steps, head)})
        out.append(frame)
    return out


def typed_array(array: np.ndarray) -> dict:
    """An array as Plotly's typed-array JSON: little-endian float32, base64."""
    data = np.ascontiguousarray(array, dtype="<f4")
    return {"dtype": "f4", "shape": list(data.shape), "bdata": base64.b64encode(data.tobytes()).decode()}


def view(phase: dict, figures: dict, token: int, head: int, pinned: dict | None = None,
         start: int | None = None) -> dict:
    """The playback component's arguments for one phase: `figures` by name (PLOTS; the heatmap may be None),
    the frames, the weights of the shown head, and a version that changes when any of them does (the browser
    rebuilds its plots only then, and otherwise keeps the step the reader is on)."""
    shown = [(name, figures[name]) for name in PLOTS if figures.get(name) is not None]
    texts = [fig.to_json() for _, fig in shown]
    arrays = {} if phase["weights"] is None else {"weights": typed_array(phase["weights"][:, head])}
    steps = len(phase["energies"]) - 1
    payload = {"figures": [{"name": name, "figure": json.loads(text)} for (name, _), text in zip(shown, texts)],
               "frames": frames(phase, token, head, pinned), "arrays": arrays, "steps": steps,
               "start": steps if start is None else start, "pick": PICK}
    digest = hashlib.sha1("".join(texts).encode())
    digest.update(json.dumps(payload["frames"]).encode())
    return payload | {"version": digest.hexdigest()}


def pinned_path(phase: dict, pinned: dict) -> np.ndarray | None:
    """The pinned phase's iterates x^(t) of its token in the plane of this phase's landscape (None when the
    two live in different spaces: another width)."""
    land = phase["landscape"]
    path = pinned["path"]
    if path.shape[1] != land["origin"].shape[0]:
        return None
    return (path - land["origin"]) @ land["basis"].T                # (a, b) of x^(t): x = origin + a e1 + b e2
