"""The GP factor study (docs/design.md#56-the-gp-factor-study): each condition changes one factor of the
committed sweep's setup, the plateau rule, and the verdict per condition on hand-made records."""
import pytest
from conftest import ROOT

from cem_core.experiments import gp_study, gp_sweep


def test_each_condition_changes_one_factor_of_the_base_setup():
    conditions = gp_study.conditions()
    # the base condition is the committed sweep's depth-1 Llama and CEM (no diagonal) runs, hash for hash
    assert {s.hash for s in conditions["base"]} == {s.hash for s in gp_sweep.preset_runs("default")
                                                    if s.group == "depth1" and s.model.cem.diagonal == "none"}
    changed = {"long": lambda s: s.train.steps == gp_study.LONG_STEPS,
               "interleaved": lambda s: s.model.tokens == "interleaved",
               "attention only": lambda s: s.model.mlp == "none",
               "64 points": lambda s: s.task.n_points == 64, "d_x = 2": lambda s: s.task.d_x == 2,
               "eta per step": lambda s: s.model.cem.eta_mode == "per_step",
               "P psd": lambda s: s.model.cem.preconditioner == "psd",
               "P dlr": lambda s: s.model.cem.preconditioner == "dlr",
               "depth 4": lambda s: s.model.depth == 4 and s.model.cem.T == 1,
               "looped x4": lambda s: s.model.loops == 4 and s.model.cem.T == 1}
    assert set(conditions) == {"base", *changed}
    for name, is_changed in changed.items():
        assert all(is_changed(s) and s.group == name for s in conditions[name]), name
        assert {s.train.seed for s in conditions[name]} == {0, 1, 2}
    assert len(gp_study.study_runs()) == len({s.hash for s in gp_study.study_runs()}) == 111


def test_the_plateau_is_the_first_length_within_one_percent_of_the_best():
    curve = [[1000, 0.5], [2000, 0.4], [3000, 0.35], [4000, 0.3530], [5000, 0.3500], [6000, 0.349]]
    records = [{"group": "plateau", "attention": "cem", "rmse_curve": curve},
               {"group": "plateau", "attention": "llama", "rmse_curve": [[1000, 0.1]]}]
    assert gp_study.plateau_steps(records) == 3000            # 0.35 <= 1.01 x 0.349


def _record(group, T, seed, ratio, attention="cem"):
    return {"group": group, "T": T, "seed": seed, "rmse_ratio": ratio, "attention": attention, "diverged": False}


@pytest.mark.parametrize("t4, t8, expected", [
    ([1.10, 1.11, 1.12], [1.05, 1.06, 1.07], "supported"),    # both below T = 1 by far more than 2 se
    ([1.30, 1.31, 1.32], [1.05, 1.06, 1.07], "contradicted"),  # T = 4 above T = 1
    ([1.10, 1.40, 1.20], [1.05, 1.06, 1.07], "inconclusive"),  # T = 4's spread covers T = 1
])
def test_conditions_table_applies_the_stated_rule(t4, t8, expected):
    records = [_record("base", 1, s, v) for s, v in enumerate([1.20, 1.21, 1.22])]
    records += [_record("base", 4, s, v) for s, v in enumerate(t4)]
    records += [_record("base", 8, s, v) for s, v in enumerate(t8)]
    row = next(r for r in gp_study.conditions_table(records) if r["condition"] == "base")
    assert row["verdict"] == expected
    assert row["pairs"][1]["mean"] == pytest.approx(sum(t8) / 3 - 1.21)
    missing = next(r for r in gp_study.conditions_table(records) if r["condition"] == "long")
    assert missing["verdict"] == "inconclusive"                 # no runs: nothing is claimed


@pytest.mark.slow                      # 21 tiny training runs and two figures
def test_tiny_study_gives_the_table_map_and_diagnostics(tmp_path):
    """The base and 'P psd' conditions, shrunk to a few steps: every CEM run records its step diagnostics,
    the table has finite differences for base, and the map and diagnostic figures are drawn."""
    import matplotlib
    matplotlib.use("Agg")
    from dataclasses import replace

    from cem_core.ui.plots import mpl_gp_conditions_map, mpl_gp_step_diagnostics

    conditions = gp_study.conditions()
    specs = [replace(s, model=replace(s.model, width=8, d_ff=16, n_heads=2),
                     train=replace(s.train, steps=3, batch_size=4, eval_size=16))
             for s in conditions["base"] + conditions["P psd"]]
    records = gp_sweep.run_sweep(tmp_path, specs, jobs=1)
    cem = [r for r in records if r["attention"] == "cem"]
    assert all(len(r["step_diagnostics"]["rmse_ratio_after_step"]) == r["T"] + 1 for r in cem)
    base = next(r for r in gp_study.conditions_table(records) if r["condition"] == "base")
    assert all(p["seeds"] == 3 for p in base["pairs"])
    assert set(gp_study.conditions_map(records)) == {"base", "P psd"}
    assert sorted(gp_study.diagnostics_by_T(records, "base")) == [1, 2, 4, 8]
    for fig, name in ((mpl_gp_conditions_map(records), "map"), (mpl_gp_step_diagnostics(records, "base"), "diag")):
        fig.savefig(tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000


def test_the_long_condition_trains_for_the_committed_plateau_length():
    """results/gp-plateau is the probe that set LONG_STEPS: CEM T = 1 trained 16,000 steps, its held-out
    RMSE every 1,000 steps; the rule gives the length the study uses."""
    records = gp_sweep.load_results(ROOT / gp_study.COMMITTED_PLATEAU / "results.json")
    assert gp_sweep.stale_hashes(records, "plateau") == (set(), set())
    assert gp_study.plateau_steps(records) == gp_study.LONG_STEPS
