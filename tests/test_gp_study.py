"""The GP factor study (docs/design.md#56-the-gp-factor-study): each condition changes one factor of the
committed sweep's setup, the plateau rule, and the verdict per condition on hand-made records."""
import math

import pytest
from conftest import ROOT, tiny_study_specs

from cem_core.experiments import sweep
from cem_core.experiments.gp import study as gp_study
from cem_core.experiments.gp import sweep as gp_sweep


def test_each_condition_changes_one_factor_of_the_base_setup():
    conditions = gp_study.conditions()
    # the base condition is the committed sweep's depth-1 Llama and CEM (no diagonal) runs, hash for hash
    assert {s.hash for s in conditions["base"]} == {s.hash for s in gp_sweep.gp_preset_runs("default")
                                                    if s.group == "depth1" and s.model.cem.diagonal == "none"}
    changed = {"long": lambda s: s.train.steps == gp_study.LONG_STEPS,
               "interleaved": lambda s: s.model.tokens == "interleaved",
               "attention only": lambda s: s.model.mlp == "none",
               "64 points": lambda s: s.task.n_points == 64, "d_x = 2": lambda s: s.task.d_x == 2,
               "eta per step": lambda s: s.model.cem.eta_mode == "per_step",
               "P psd": lambda s: s.model.cem.preconditioner == "psd",
               "P dlr": lambda s: s.model.cem.preconditioner == "dlr",
               "depth 4": lambda s: s.model.shape.n_layers == 4 and s.model.cem.T == 1,
               "looped x4": lambda s: s.model.loops == 4 and s.model.cem.T == 1}
    # the forms of the energy (design notes §2.14): each against its own control, at base and at the long length
    shared = lambda s: s.model.cem.diagonal == "shared" and s.model.mlp == "llama"              # noqa: E731
    distance = lambda s: s.model.cem.diagonal == "shared" and s.model.cem.diagonal_form == "distance"  # noqa: E731
    joint = lambda s: s.model.mlp == "cem" and s.model.cem.block == "joint"                      # noqa: E731
    forms = {"diagonal shared": lambda s: shared(s) and s.model.cem.diagonal_form == "bilinear",
             "distance": lambda s: shared(s) and distance(s),
             "CEM MLP": lambda s: s.model.mlp == "cem" and s.model.cem.block == "sequential"
             and s.model.cem.diagonal == "none",
             "joint": lambda s: joint(s) and s.model.cem.diagonal == "none",
             "joint + distance": lambda s: joint(s) and distance(s)}
    for name, form in forms.items():
        steps = gp_study.BASE_STEPS if " long" not in name else gp_study.LONG_STEPS
        changed[name] = lambda s, form=form, steps=steps: form(s) and s.train.steps == steps
    for name in ("distance", "joint", "joint + distance"):
        changed[f"{name} long"] = lambda s, form=forms[name]: form(s) and s.train.steps == gp_study.LONG_STEPS
    assert set(conditions) == {"base", *changed}
    for name, is_changed in changed.items():
        assert all(is_changed(s) and s.group == name for s in conditions[name]), name
        assert {s.train.seed for s in conditions[name]} == {0, 1, 2}
    assert {s.model.cem.T for s in conditions["joint"]} == set(gp_study.STUDY_TS)
    assert all({s.model.cem.T for s in conditions[name]} == set(gp_study.LONG_TS)
               for name in ("distance long", "joint long", "joint + distance long"))
    # the bilinear shared diagonal at base is the committed sweep's, hash for hash
    assert {s.hash for s in conditions["diagonal shared"]} == {
        s.hash for s in gp_sweep.gp_preset_runs("default")
        if s.group == "depth1" and s.model.cem.diagonal == "shared" and s.model.cem.T in gp_study.NEW_TS}
    assert len(gp_study.study_runs()) == len({s.hash for s in gp_study.study_runs()}) == 186


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


def test_the_map_draws_depth_and_looping_as_lines_beside_base_and_averages_learned_steps():
    records = [_record("base", T, s, 1.2 + 0.01 * T + 0.001 * s) for T in (1, 2, 4, 8) for s in range(3)]
    records += [_record("base", None, s, 1.1, "llama") | {"T": 1} for s in range(3)]
    records += [_record("depth 4", 1, s, v) for s, v in enumerate([1.0, 1.1, 1.2])]
    records += [_record("eta per step", 4, s, 1.3) | {"learned_eta": [[0.5 * s, 1.0, 2.0, s]]} for s in range(3)]
    base = gp_study.conditions_map(records)["base"]
    assert base["T"] == [1, 2, 4, 8] and base["mean"][2] == pytest.approx(1.241)
    assert base["low"][0] == pytest.approx(1.21) and base["high"][0] == pytest.approx(1.212)
    assert base["lines"] == {"Llama attention": pytest.approx(1.1), "CEM T = 1 (depth 4)": pytest.approx(1.1)}
    assert gp_study.learned_step_sizes(records, "eta per step") == {4: pytest.approx([0.5, 1.0, 2.0, 1.0])}


@pytest.mark.slow
def test_a_condition_compared_at_every_T_is_drawn_as_a_curve_and_every_condition_gets_a_panel(tmp_path):
    """distance is compared with the bilinear diagonal at T = 1, 4 and 8: that comparison is a curve, its
    Llama line is base's; and the map draws one panel per condition, however many there are."""
    import matplotlib
    matplotlib.use("Agg")

    from cem_core.ui.plot_style import subscripts
    from cem_core.ui.study_plots import mpl_gp_conditions_map

    records = [_record(g, T, s, 1.2 + 0.01 * T) for g in gp_study.MAP_CONDITIONS for T in (1, 4, 8) for s in range(3)]
    records += [_record("base", None, s, 1.1, "llama") | {"T": 1} for s in range(3)]
    distance = gp_study.conditions_map(records)["distance"]
    assert distance["curves"] == {"CEM (diagonal shared)": {"T": [1, 4, 8], "mean": pytest.approx([1.21, 1.24, 1.28])}}
    assert distance["lines"] == {"Llama attention (base)": pytest.approx(1.1)}
    assert "CEM T = 1 (looped x4)" not in gp_study.conditions_map(records)["joint"]["lines"]   # no looped runs here
    fig = mpl_gp_conditions_map(records)
    # (a one-letter subscript is drawn as one: "d_x = 2" is titled d$_x$ = 2)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == [subscripts(n) for n in gp_study.MAP_CONDITIONS]


@pytest.mark.slow                      # 21 tiny training runs and two figures
def test_tiny_study_gives_the_table_map_and_diagnostics(tmp_path):
    """The base and 'P psd' conditions, shrunk to a few steps: every CEM run records its step diagnostics,
    the table has finite differences for base, and the map and diagnostic figures are drawn."""
    import matplotlib
    matplotlib.use("Agg")

    from cem_core.ui.study_plots import mpl_gp_conditions_map, mpl_gp_step_diagnostics

    records = gp_sweep.run_gp_sweep(tmp_path, tiny_study_specs(["base", "P psd"]), jobs=1)
    cem = [r for r in records if r["attention"] == "cem"]
    assert all(len(r["step_diagnostics"]["rmse_ratio_after_step"]) == r["T"] + 1 for r in cem)
    base = next(r for r in gp_study.conditions_table(records) if r["condition"] == "base")
    assert all(p["seeds"] == 3 for p in base["pairs"])
    assert set(gp_study.conditions_map(records)) == {"base", "P psd"}
    assert sorted(gp_study.diagnostics_by_T(records, "base")) == [1, 2, 4, 8]
    figures = (mpl_gp_conditions_map(records), "map"), (mpl_gp_step_diagnostics(records, "base", "P psd"), "diag")
    for fig, name in figures:
        fig.savefig(tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000


def test_the_long_condition_trains_for_the_committed_plateau_length():
    """results/gp-plateau is the probe that set LONG_STEPS: CEM T = 1 trained 16,000 steps, its held-out
    RMSE every 1,000 steps; the rule gives the length the study uses."""
    records = gp_sweep.GP_SWEEP.load(ROOT / gp_study.COMMITTED_PLATEAU / "results.json")
    assert gp_sweep.stale_hashes(records, "plateau") == (set(), set())
    assert gp_study.plateau_steps(records) == gp_study.LONG_STEPS


def test_the_committed_study_holds_every_run_of_the_current_configuration():
    """results/gp-study holds exactly the study preset's 186 runs (by configuration hash), so rerunning the
    study on it trains nothing, and its manifest states the verdict rule fixed before it ran."""
    records = gp_sweep.GP_SWEEP.load(ROOT / gp_study.COMMITTED_STUDY / "results.json")
    missing, extra = gp_sweep.stale_hashes(records, "study")
    assert not missing and not extra, f"{len(missing)} runs missing, {len(extra)} stale: run `make gp-study`"
    assert not any(r["diverged"] for r in records)
    assert all("step_diagnostics" in r for r in records if r["group"].endswith("long") and r["attention"] == "cem")
    manifest = gp_sweep.read_manifest(ROOT / gp_study.COMMITTED_STUDY / sweep.SWEEP_MANIFEST)
    assert manifest["verdict_rule"] == gp_study.STUDY_RULE and manifest["tolerance"] == gp_study.STUDY_TOLERANCE


@pytest.mark.slow                      # a whole app page
def test_the_app_and_the_docs_show_the_committed_study():
    from conftest import page_tables, row_values

    records = gp_sweep.GP_SWEEP.load(ROOT / gp_study.COMMITTED_STUDY / "results.json")
    at, frames = page_tables("gp")
    assert row_values(gp_study.table_rows(records)) in [row_values(f) for f in frames]
    assert any(gp_study.STUDY_RULE in caption.value for caption in at.caption)
    assert len(at.get("image")) >= 3                  # the conditions map, the step diagnostics, the forms
    assert gp_study.study_markdown(records) in (ROOT / "docs" / "results-gp.md").read_text()


def _rate_record(T, lr, seed, ratio, diverged=False):
    return {"attention": "cem", "T": T, "seed": seed, "rmse_ratio": ratio, "diverged": diverged,
            "config": {"train": {"lr": lr}}}


def test_the_rate_check_names_a_better_rate_only_when_its_interval_says_so():
    """Hand-made records: at T = 8, 1e-2 is lower on every seed by about 0.1 (interval wholly above 0): it is named;
    at T = 1 the differences straddle 0 and a diverged 1e-3 run is infinitely bad: the study's rate suits."""
    records = []
    for seed, noise in enumerate((0.01, -0.02, 0.015)):
        records += [_rate_record(1, 3e-3, seed, 1.20), _rate_record(1, 1e-2, seed, 1.20 + noise),
                    _rate_record(1, 1e-3, seed, 9.0, diverged=seed == 0),
                    _rate_record(8, 3e-3, seed, 1.30), _rate_record(8, 1e-2, seed, 1.20 + noise / 10),
                    _rate_record(8, 1e-3, seed, 1.35 + noise)]
    rows = {(r["T"], r["lr"]): r for r in gp_study.rate_check_table(records)}
    assert {r["reading"] for r in rows.values() if r["T"] == 1} == {"suits"}
    assert {r["reading"] for r in rows.values() if r["T"] == 8} == {"0.01 is better"}
    assert rows[(8, 1e-2)]["low"] > 0 and rows[(8, 1e-3)]["high"] < 0 and rows[(1, 1e-3)]["mean"] == -math.inf
    assert rows[(8, 1e-2)]["ratio at 3e-3"] == pytest.approx(1.30) and rows[(8, 1e-2)]["seeds"] == 3


def test_the_committed_rate_check_holds_every_run_its_rule_and_the_docs_its_table():
    records = gp_sweep.GP_SWEEP.load(ROOT / gp_study.COMMITTED_RATE_CHECK / "results.json")
    missing, extra = gp_sweep.stale_hashes(records, "rates")
    assert not missing and not extra, f"{len(missing)} runs missing, {len(extra)} stale: run `make gp-rates`"
    manifest = gp_sweep.read_manifest(ROOT / gp_study.COMMITTED_RATE_CHECK / sweep.SWEEP_MANIFEST)
    assert manifest["verdict_rule"] == gp_study.RATE_CHECK_RULE
    page = (ROOT / "docs" / "results-gp.md").read_text()
    start = page.index(gp_study.RATES_START) + len(gp_study.RATES_START) + 1
    assert page[start:page.index(gp_study.RATES_END)] == gp_study.rate_check_markdown(records)


def test_the_study_is_read_with_the_t_interval_beside_the_recorded_rule_and_holm_counts_what_survives(monkeypatch):
    """The committed study under the project's one reading: joint long, supported by the recorded rule (2 se),
    is inconclusive under the 95% t interval (2 degrees of freedom); the p-values are Student's (scipy's
    one-sample test on the paired differences to 1e-9); Holm's step-down stops at the first p above its bound."""
    from scipy import stats

    records = gp_sweep.GP_SWEEP.load(ROOT / gp_study.COMMITTED_STUDY / "results.json")
    rows = {r["condition"]: r for r in gp_study.conditions_table(records)}
    assert rows["joint long"]["verdict"] == "supported" and rows["joint long"]["t_verdict"] == "inconclusive"
    assert all(r["t_verdict"] != "supported" for r in rows.values())
    base = rows["base"]["pairs"][0]                                  # base T = 4 vs base T = 1
    ratio = {(r["T"], r["seed"]): r["rmse_ratio"] for r in records if r["group"] == "base" and r["attention"] == "cem"}
    diffs = [ratio[4, seed] - ratio[1, seed] for seed in gp_study.SEEDS]
    assert base["p"] == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue, abs=1e-9)
    found = gp_study.study_multiplicity(records)
    assert found["comparisons"] == 43 and found["survivors"] == []
    fake = [{"condition": "c", "pairs": [{"p": p} for p in (0.001, 0.02, 0.011, 0.3)]}]
    monkeypatch.setattr(gp_study, "conditions_table", lambda _: fake)
    # sorted 0.001, 0.011, 0.02, 0.3 against 0.05/4, 0.05/3, 0.05/2, 0.05/1: the first three pass, 0.3 stops
    assert [p["p"] for _, p in gp_study.study_multiplicity([])["survivors"]] == [0.001, 0.011, 0.02]
