"""Two CSV files compared as the app's download writes them (cem_core/ui/exports.py ``to_csv``) and the browser's
(cem_core/web/exports.js): tests/test_web_figures.py holds the browser's rows to the figures' tolerance, and the
journeys (tests/test_site.py, tests/test_journeys.py) the file a person downloads to explore.js's
(``explore_agrees``). ``app_csvs`` writes the app's files for a state."""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable

import numpy as np
from web_mirror import close

from cem_core.ui import exports
from cem_core.ui.controls import EnergyControls
from cem_core.ui.energy_mode import PAGE_PLOTS, PlotStyle

INTEGER = re.compile(r"-?[0-9]+")


def app_csvs(values: dict, pinned: dict | None = None, style: PlotStyle = PAGE_PLOTS) -> list[dict[str, str]]:
    """Per phase, each figure's CSV as the app's download button writes it (common.download_buttons), by name."""
    from app_pages.energy import _phase_views

    views = _phase_views(EnergyControls.from_values(**values),
                         None if pinned is None else EnergyControls.from_values(**pinned), style)
    return [{name: exports.to_csv(fig) for name, fig in view["figures"].items() if fig is not None} for view in views]


def explore_agrees(py: float, js: float, scale: float) -> bool:
    """A number explore.js computed against Python's, under web_mirror's tolerance (1e-5 relative, with its floor)."""
    return bool(close(js, py, scale)[0])


def csv_difference(py: str, js: str, path: str, agree: Callable[[float, float, float], bool]) -> str | None:
    """The first difference between Python's CSV and JavaScript's: the same lines, each ended with CR LF, the same
    header and trace names, each number written as an int where Python writes an int and as a float where it
    writes a float, the same text where the two numbers are equal (a float's repr is the shortest that reads
    back), and otherwise ``agree(python, javascript, scale)``, `scale` the largest finite |value| of the column."""
    ends = [text.count("\r\n") for text in (py, js)]
    if ends[0] != ends[1] or not js.endswith("\r\n"):
        return f"{path}: {ends[1]} lines ended with CR LF, python {ends[0]}"
    a, b = (list(csv.reader(io.StringIO(text))) for text in (py, js))
    if len(a) != len(b) or a[:1] != b[:1]:
        return f"{path}: {len(b)} rows headed {b[:1]}, python {len(a)} headed {a[:1]}"
    scale = {}
    for k in (1, 2, 3):
        column = np.array([float(row[k]) for row in a[1:] if row[k]])
        finite = column[np.isfinite(column)]
        scale[k] = float(np.abs(finite).max()) if len(finite) else 0.0
    for r, (p, j) in enumerate(zip(a, b)):
        if len(p) != len(j) or p[0] != j[0]:
            return f"{path} row {r}: {j} for {p}"
        for k in (1, 2, 3):
            if p[k] == j[k]:
                continue
            where = f"{path} row {r} {a[0][k]}"
            if not p[k] or not j[k] or bool(INTEGER.fullmatch(p[k])) != bool(INTEGER.fullmatch(j[k])):
                return f"{where}: {j[k]!r} for {p[k]!r}"
            if float(p[k]) == float(j[k]):
                return f"{where}: {j[k]!r} written otherwise than python's {p[k]!r}"
            if not agree(float(p[k]), float(j[k]), scale[k]):
                return f"{where}: {j[k]!r} for {p[k]!r}"
    return None
