"""What the static site's explorer (cem_core/web/) reads from the Python core, exported once at build time: the
energy page's controls (specs, labels, helps, defaults, the switches' own validation, what hides which control, the
cost limit), the lesson's energy-page steps, what presentation mode shows and the update's equations. ``script`` writes
it as a classic script (``globalThis.CEMSiteData``), so the page opens from file:// without loading a data file.

The JavaScript mirrors the functions these come from (``EnergyControls.from_link``, ``settle``, ``shown``, ``cost``,
``explain``; ``equations.update_latex``); tests/test_site.py holds each mirror to its Python original.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

from cem_core.nn.activations import ACTIVATIONS
from cem_core.nn.config import CEMOptions, switches
from cem_core.nn.diagonals import DIAGONAL_FORMS, DIAGONALS
from cem_core.nn.precondition import PRECONDITIONERS

from . import lesson
from .controls import COST_LIMIT, LANDSCAPE_GRID, LAYER_CAPTIONS, LAYER_LABELS, EnergyControls
from .energy_mode import PRESENT_CONTROLS, PRESENT_VIEWS
from .equations import update_latex

EQUATION_LAYERS = ("attention", "mlp", "joint")     # a phase's name: the layer whose update it shows


def controls() -> dict:
    """The energy page's controls as the explorer builds, validates and names them."""
    E = EnergyControls
    cem_default = E.__dataclass_fields__["cem"].default_factory()
    return {
        "specs": {name: [kind, None if allowed is None else list(allowed)]
                  for name, (kind, allowed) in E.specs().items()},
        "labels": {name: E.label(name) for name in E.specs()},
        "helps": {name: CEMOptions.__dataclass_fields__[name].metadata["help"] if name in E.CEM else E.HELPS.get(name)
                  for name in E.specs()},
        "defaults": E().values(),
        # every switch of CEMOptions in its order, as its own validation checks it (before the page's ranges)
        "switches": [{"name": f.name, "kind": f.metadata["kind"], "allowed": list(f.metadata["allowed"]),
                      "default": getattr(cem_default, f.name)} for f in switches()],
        "needs_diagonal": [name for name, form in DIAGONAL_FORMS.items() if form.needs_diagonal],
        "attention_only": sorted({*E.ATTENTION_ONLY, *(f.name for f in switches() if f.metadata["attention_only"])}),
        "preconditioner_only": list(E.PRECONDITIONER_ONLY),
        "diagonal_only": list(E.DIAGONAL_ONLY),
        "mlp_only": list(E.MLP_ONLY),
        "cost_limit": COST_LIMIT,
        "landscape_grid": LANDSCAPE_GRID,
        "layer_labels": LAYER_LABELS,
        "layer_captions": LAYER_CAPTIONS,
        "groups": {header: list(names) for header, names in E.GROUPS.items()},
    }


def lesson_steps() -> list[dict]:
    """The lesson's energy-page steps, numbered as in the app (its ?lesson=k), each with its complete state."""
    return [{"number": index + 1, "title": step.title, "say": lesson.text(step), "state": step.controls().values(),
             "pinned": None if step.pinned is None else step.pinned_controls().values(), "points_at": step.points_at,
             "used": list(step.used()), "views": list(step.views)}
            for index, step in enumerate(lesson.STEPS) if step.page == "energy"]


def equation_key(layer: str, diagonal: str, diagonal_form: str, anchored: bool, preconditioner: str,
                 activation: str) -> str:
    """The choices update_latex's lines depend on, besides T (the last line: explorer.js mirrors it)."""
    return "|".join((layer, diagonal, diagonal_form, "anchored" if anchored else "free", preconditioner, activation))


def equations() -> dict:
    """update_latex's lines for every combination of its discrete choices, without the T-dependent last line:
    {"lines": the distinct lines, "keys": {equation_key: indices into lines}}."""
    lines, keys = [], {}

    def number(line: str) -> int:
        if line not in lines:
            lines.append(line)
        return lines.index(line)

    for layer, diagonal, form, anchored, preconditioner, activation in itertools.product(
            EQUATION_LAYERS, DIAGONALS, DIAGONAL_FORMS, (False, True), PRECONDITIONERS, ACTIVATIONS):
        if DIAGONAL_FORMS[form].needs_diagonal and diagonal == "none":
            continue
        cem = CEMOptions(diagonal=diagonal, diagonal_form=form, anchor=1.0 if anchored else 0.0,
                         preconditioner=preconditioner)
        keys[equation_key(layer, diagonal, form, anchored, preconditioner, activation)] = [
            number(line) for line in update_latex(layer, cem, activation)[:-1]]
    return {"lines": lines, "keys": keys}


LESSON_FILES = {"energy": "index.html", "gp": "gp.html", "inside": "inside.html"}   # the site's page of each step


def gp_records(root: Path = Path(".")) -> list[dict]:
    """The committed GP sweep's records (results/gp-default under the repository's `root`), which the GP page draws."""
    from cem_core.experiments.gp.sweep import COMMITTED_GP_SWEEP, GP_SWEEP

    return GP_SWEEP.load(root / COMMITTED_GP_SWEEP / "results.json")


def other_steps(records: list[dict]) -> list[dict]:
    """The lesson's steps on the site's other pages (the GP study, inside a trained model), numbered as in the app,
    each with its page's file, words (the GP step's numbers from the committed sweep), state and views."""
    return [{"number": index + 1, "page": step.page, "file": LESSON_FILES[step.page], "title": step.title,
             "say": lesson.text(step, records), "state": step.controls().values(), "views": list(step.views),
             "points_at": step.points_at}
            for index, step in enumerate(lesson.STEPS) if step.page != "energy"]


STUDY_IMAGES = ("gp_conditions_map", "gp_step_diagnostics", "gp_form_diagnostics")   # figures/<name>.png, copied


def gp_study(root: Path = Path(".")) -> dict:
    """The GP page's factor study: its figures (the committed figures/<name>.png, with the app's captions and alt
    texts), its conditions table (verdict first) and its rule."""
    from cem_core.experiments.gp import study
    from cem_core.experiments.gp.sweep import GP_SWEEP

    from . import study_plots, tables

    records = GP_SWEEP.load(root / study.COMMITTED_STUDY / "results.json")
    return {"images": [dict(zip(("name", "caption", "alt"), (name, *study_plots.study_caption(name, records))))
                       for name in STUDY_IMAGES],
            "table": tables.verdict_first(study.table_rows(records)),
            "rule": f"Verdict rule, fixed before the study ran: {study.STUDY_RULE} " + study.holm_sentence(records)}


def gp_test_time(root: Path = Path(".")) -> dict:
    """The GP page's test-time study: a figure per condition (Plotly JSON), its finding, its table and its rule."""
    from cem_core.experiments import test_time
    from cem_core.experiments.gp.sweep import GP_SWEEP

    from .question_figures import test_time_figure

    records = GP_SWEEP.load(root / test_time.COMMITTED_GP_TEST_TIME / "results.json")
    return {"figures": [json.loads(test_time_figure("gp", records, c).to_json()) for c in test_time.GP_CONDITIONS],
            "summary": test_time.test_time_summary("gp", records), "table": test_time.test_time_rows("gp", records),
            "rule": f"Rule, fixed before the study ran: {test_time.TEST_TIME_RULE}"}


def gp_page(records: list[dict], root: Path = Path(".")) -> dict:
    """The GP page: the committed sweep's figures (Plotly JSON) with their titles and words by view name, the factor
    study and the test-time study."""
    from .gp_figures import GP_PAGE_INTRO, GP_PAGE_TITLE, GP_STUDY_HEADING, GP_SWEEP_VIEWS, TEST_TIME_HEADING

    return {"title": GP_PAGE_TITLE, "intro": GP_PAGE_INTRO, "runs": len(records), "study_heading": GP_STUDY_HEADING,
            "test_time_heading": TEST_TIME_HEADING,
            "views": {name: {"figure": json.loads(make(records).to_json()), "title": title, "words": words}
                      for name, (make, title, words) in GP_SWEEP_VIEWS.items()},
            "study": gp_study(root), "test_time": gp_test_time(root)}


def data(root: Path = Path(".")) -> dict:
    """Everything site-data.js holds; the committed results read under the repository's `root`."""
    records = gp_records(root)
    return {"controls": controls(), "lesson": lesson_steps(), "lesson_total": len(lesson.STEPS),
            "lesson_other": other_steps(records), "lesson_files": LESSON_FILES, "gp_page": gp_page(records, root),
            "equations": equations(), "present": {"controls": list(PRESENT_CONTROLS), "views": list(PRESENT_VIEWS)}}


def script(root: Path = Path(".")) -> str:
    """The data as the classic script the page loads before its own (site-data.js)."""
    return ("// Written by cem_core/ui/site_data.py from the Python core at build time (python -m cem_core site): do "
            "not edit.\nglobalThis.CEMSiteData = " + json.dumps(data(root), indent=None, separators=(",", ":")) + ";\n")
