"""``python -m cem_core figures``: the static figures (PNG and SVG) into a folder."""
from __future__ import annotations

from pathlib import Path

from cem_core.experiments import checkpoints, test_time
from cem_core.experiments.gp import study as gp_study
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.lm import presets as lm_presets


def add_figures(figures) -> None:
    """The flags of ``figures``, on its parser."""
    figures.add_argument("--out", default="figures", help="the folder (default figures)")
    figures.add_argument("--lm-results", default=str(lm_presets.COMMITTED_SWEEP / "results.json"),
                         help="the LM sweep's results.json (default: the committed sweep, from the repository root)")
    figures.add_argument("--ladder-results", default=str(lm_presets.COMMITTED_LADDER / "results.json"),
                         help="the quarter-budget LM width ladder's results.json (default: the committed ladder, "
                              "from the repository root)")
    figures.add_argument("--budget-ladder-results", default=str(lm_presets.COMMITTED_BUDGET_LADDER / "results.json"),
                         help="the LM width ladder at the paper's budget: its results.json (default: the committed "
                              "ladder, from the repository root)")
    figures.add_argument("--gp-results", default=str(gp_sweep.COMMITTED_GP_SWEEP / "results.json"),
                         help="the GP sweep's results.json (default: the committed sweep, from the repository root)")
    figures.add_argument("--gp-study-results", default=str(gp_study.COMMITTED_STUDY / "results.json"),
                         help="the GP factor study's results.json (default: the committed study, from the repository "
                              "root)")
    for flag, folder, what in (("--tie-ladder-results", lm_presets.COMMITTED_TIE_LADDER, "the LM tie ladder"),
                               ("--gp-test-time-results", test_time.COMMITTED_GP_TEST_TIME, "the GP test-time study"),
                               ("--lm-test-time-results", test_time.COMMITTED_LM_TEST_TIME, "the LM test-time study")):
        figures.add_argument(flag, default=str(folder / "results.json"),
                             help=f"{what}: its results.json (default: the committed one, from the repository root)")
    figures.add_argument("--models", default=str(checkpoints.MODELS),
                         help="the folder of the trained models (default: the committed models/, from the repository "
                              "root)")
    figures.set_defaults(run=write_figures)


def write_figures(args) -> int:
    from cem_core.ui.figure_files import write_all_figures
    out = Path(args.out)
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise ValueError(f"out={args.out!r} is invalid: it is a file (or a link to no folder), not a folder")
    for path in write_all_figures(args.out, gp_results=args.gp_results, lm_results=args.lm_results,
                                   gp_study_results=args.gp_study_results, ladder_results=args.ladder_results,
                                   budget_ladder_results=args.budget_ladder_results, models=Path(args.models),
                                   tie_ladder_results=args.tie_ladder_results,
                                   gp_test_time_results=args.gp_test_time_results,
                                   lm_test_time_results=args.lm_test_time_results):
        print(path)
    return 0


