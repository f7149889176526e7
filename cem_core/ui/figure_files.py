"""Every figure of figures/ written as PNG and SVG: the CEM figures on their defaults, the sweeps' and the GP
study's from their results, and the trained models'."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

from cem_core.experiments.checkpoints import MODELS
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.lm import presets as lm_presets
from cem_core.experiments.lm import runner as lm_runner
from cem_core.experiments.records import atomic_write, refuse_links
from cem_core.experiments.test_time import COMMITTED_GP_TEST_TIME, COMMITTED_LM_TEST_TIME
from cem_core.ui.energy_plots import CEM_FIGURES
from cem_core.ui.study_plots import GP_STUDY_FIGURES
from cem_core.ui.sweep_plots import (
    BUDGET_LADDER_FIGURES,
    GP_FIGURES,
    GP_TEST_TIME_FIGURES,
    LADDER_FIGURES,
    LM_FIGURES,
    LM_TEST_TIME_FIGURES,
    TIE_LADDER_FIGURES,
)
from cem_core.ui.trained_plots import TRAINED_FIGURES


def _save(fig, out: Path, name: str) -> list[Path]:
    """Write fig as out/name.png and out/name.svg (SVG without a date, so reruns do not churn)."""
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    with plt.rc_context({"svg.hashsalt": "cem-lab"}):        # written under a temporary name, then renamed
        atomic_write(paths[0], lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
        atomic_write(paths[1], lambda tmp: fig.savefig(tmp, metadata={"Date": None}, format="svg"))
    plt.close(fig)
    return paths


def write_all_figures(out_dir, gp_results, lm_results, gp_study_results, ladder_results, budget_ladder_results,
                      models=MODELS, tie_ladder_results=lm_presets.COMMITTED_TIE_LADDER / "results.json",
                      gp_test_time_results=COMMITTED_GP_TEST_TIME / "results.json",
                      lm_test_time_results=COMMITTED_LM_TEST_TIME / "results.json") -> list[Path]:
    """Write every figure (CEM_FIGURES on their defaults, GP_FIGURES from the GP sweep's results.json
    `gp_results`, LM_FIGURES from the LM sweep's `lm_results`, GP_STUDY_FIGURES from the GP factor study's
    `gp_study_results`, LADDER_FIGURES from the quarter-budget width ladder's `ladder_results`,
    BUDGET_LADDER_FIGURES from the ladder at the paper's budget, `budget_ladder_results`, TRAINED_FIGURES from the
    trained models in the folder `models`, TIE_LADDER_FIGURES, GP_TEST_TIME_FIGURES and LM_TEST_TIME_FIGURES from
    the tie ladder's and the test-time study's results) as PNG and SVG into out_dir; return the paths written."""
    matplotlib.use("Agg")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [*CEM_FIGURES, *GP_FIGURES, *LM_FIGURES, *GP_STUDY_FIGURES, *LADDER_FIGURES, *BUDGET_LADDER_FIGURES,
             *TRAINED_FIGURES, *TIE_LADDER_FIGURES, *GP_TEST_TIME_FIGURES, *LM_TEST_TIME_FIGURES]
    refuse_links([out / f"{name}.{ext}" for name in names for ext in ("png", "svg")], "figures")
    paths = []
    for name, (data, builder) in CEM_FIGURES.items():
        paths += _save(builder(data()), out, name)
    for figures, load, results, command in (
            (GP_FIGURES, gp_sweep.GP_SWEEP.load, gp_results, "make gp-sweep"),
            (LM_FIGURES, lm_runner.LM_SWEEP.load, lm_results, "make lm-sweep"),
            (GP_STUDY_FIGURES, gp_sweep.GP_SWEEP.load, gp_study_results, "make gp-study"),
            (LADDER_FIGURES, lm_runner.LM_SWEEP.load, ladder_results, "make lm-ladder"),
            (BUDGET_LADDER_FIGURES, lm_runner.LM_SWEEP.load, budget_ladder_results, "make lm-budget-ladder"),
            (TIE_LADDER_FIGURES, lm_runner.LM_SWEEP.load, tie_ladder_results, "make lm-tie-ladder"),
            (GP_TEST_TIME_FIGURES, gp_sweep.GP_SWEEP.load, gp_test_time_results, "make gp-test-time"),
            (LM_TEST_TIME_FIGURES, lm_runner.LM_SWEEP.load, lm_test_time_results, "make lm-test-time")):
        records = load(results)
        if not records:
            raise ValueError(f"results={str(results)!r} is invalid: no sweep results found (the figures before "
                             f"these were written; run `{command}`)")
        for name, builder in figures.items():
            paths += _save(builder(records), out, name)
    for name, (data, builder) in TRAINED_FIGURES.items():
        paths += _save(builder(data(root=models)), out, name)
    return paths
