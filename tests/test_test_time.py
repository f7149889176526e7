"""The test-time study (test_time): its regimes and runs against the studies it reuses, its rule fixed before the
runs, its reading checked against an independent t-interval, and the committed records against the configuration and
the docs."""
import json
import math

import pytest
from conftest import ROOT
from scipy import stats

from cem_core.experiments import doc_blocks, sweep, test_time
from cem_core.experiments.gp import study as gp_study
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.lm import ladder, presets, rules, runner
from cem_core.experiments.lm.variants import SWEEP_VARIANTS, TEST_TIME_VARIANTS, TRAIN_DEPTH_OF


def test_the_gp_runs_are_the_factor_studys_at_t4_in_each_regime_and_reuse_its_fixed_and_anchor_runs():
    runs = test_time.gp_runs()
    assert len(runs) == len(test_time.GP_CONDITIONS) * len(test_time.REGIMES) * len(gp_study.SEEDS) == 24
    study = {s.hash: s for s in gp_study.study_runs()}
    default = {r["hash"] for r in gp_sweep.GP_SWEEP.load(ROOT / "results" / "gp-default" / "results.json")}
    for spec in runs:
        condition, regime = spec.group.split(" · ")
        r = test_time.REGIMES[regime]
        assert spec.model.cem.T == 4 and spec.model.cem.anchor == r.anchor and spec.train.train_depth == r.train_depth
        assert (spec.hash in study) == (regime == "fixed T")                     # the study's own runs, hash for hash
        if regime == "fixed T":
            assert study[spec.hash].group == condition
        if regime == "anchor" and condition == "base":
            assert spec.hash in default                                          # the claims sweep's eta:anchor runs
    assert {s.train.steps for s in runs if s.group.startswith("joint long")} == {gp_study.LONG_STEPS}
    assert {s.model.cem.block for s in runs if s.group.startswith("joint long")} == {"joint"}


def test_the_lm_preset_trains_attention_t2_at_d64_in_each_regime_at_the_budget_ladders_rate():
    p = presets.SWEEP_PRESETS["test-time"]
    budget = runner.LM_SWEEP.load(ROOT / presets.COMMITTED_BUDGET_LADDER / "results.json")
    assert ladder.best_rates(budget, "budget-ladder")[(64, "attn T=2")]["lr"] == presets.TEST_TIME_LR == p.lrs[0]
    specs = presets.preset_runs("test-time")
    assert len(specs) == 12 and {s.config.shape.d_model for s in specs} == {64}
    for s in specs:
        regime = test_time.REGIMES[TEST_TIME_VARIANTS[s.name]]
        assert s.config.eval_T == tuple(range(1, 9)) and s.config.train_depth == regime.train_depth
        assert s.config.cem_options().anchor == regime.anchor and s.config.cem_options().T == 2
        assert s.config.data_order == s.config.seed
    assert set(TRAIN_DEPTH_OF) == set(TEST_TIME_VARIANTS) and all(name in SWEEP_VARIANTS for name in TEST_TIME_VARIANTS)
    assert rules.RULES["test-time"] == test_time.TEST_TIME_RULE


def _independent_interval(values):
    n = len(values)
    mean = sum(values) / n
    se = stats.tstd(values) / math.sqrt(n)
    q = stats.t.ppf(0.975, n - 1)
    return mean - q * se, mean + q * se


@pytest.mark.parametrize("shift, verdict", [(-0.2, "scales at test time"), (+0.2, "worse past T"),
                                            (0.0, "neither shown")])
def test_a_cell_is_read_by_the_paired_interval_at_2T_and_4T(shift, verdict):
    """Three seeds whose metric moves by `shift` (plus a seed's own noise) from T to 2T and 4T: the verdict, and the
    intervals against scipy's t quantile."""
    noise = {0: 0.01, 1: -0.02, 2: 0.015}
    by_seed = {s: {1: 2.0, 2: 1.5 + n, 4: 1.2 + n, 8: 1.2 + shift + 2 * n, 16: 1.2 + 1.5 * shift - n}
               for s, n in noise.items()}
    cell = test_time.read_cell("gp", by_seed, None)
    assert cell["verdict"] == verdict and cell["seeds"] == 3 and cell["Ts"] == [1, 2, 4, 8, 16]
    for t in (8, 16):
        diffs = [by_seed[s][t] - by_seed[s][4] for s in noise]
        low, high = _independent_interval(diffs)
        assert cell["d"][t]["low"] == pytest.approx(low, rel=1e-9, abs=1e-12)
        assert cell["d"][t]["high"] == pytest.approx(high, rel=1e-9, abs=1e-12)


def test_a_diverged_seed_is_left_out_and_counted():
    by_seed = {0: {4: 1.0, 8: 0.9, 16: 0.8}, 1: {4: 1.1, 8: 1.0, 16: 0.85}, 2: {}}
    cell = test_time.read_cell("gp", by_seed, by_seed)
    assert cell["seeds"] == 2 and cell["diverged"] == 1


def _committed(task):
    folder = test_time.COMMITTED_GP_TEST_TIME if task == "gp" else test_time.COMMITTED_LM_TEST_TIME
    load = gp_sweep.GP_SWEEP.load if task == "gp" else runner.LM_SWEEP.load
    return folder, load(ROOT / folder / "results.json")


def test_the_committed_gp_study_holds_only_its_runs_under_the_rule_fixed_before_them():
    folder, records = _committed("gp")
    missing, extra = gp_sweep.stale_hashes(records, "test-time")
    assert not extra and len(records) + len(missing) == 24 and len({r["hash"] for r in records}) == len(records)
    manifest = gp_sweep.read_manifest(ROOT / folder / sweep.SWEEP_MANIFEST)
    assert manifest["preset"] == "test-time" and manifest["verdict_rule"] == test_time.TEST_TIME_RULE
    assert all(set(map(int, r["rmse_by_eval_T"])) >= {1, 4, 8, 16} for r in records if not r["diverged"])


def test_the_committed_lm_study_holds_only_its_runs_and_its_fixed_runs_reproduce_the_budget_ladder():
    """The fixed-regime runs are the budget ladder's attention T = 2 runs at d = 64 with more test-time T: trained
    again they reach the same validation perplexity at T = 2 (to 1e-9 relative)."""
    folder, records = _committed("lm")
    missing, strangers = runner.stale_runs(records, "test-time")
    assert not strangers and len(records) + len(missing) == 12
    manifest = json.loads((ROOT / folder / sweep.SWEEP_MANIFEST).read_text())
    assert manifest["preset"] == "test-time" and manifest["verdict_rule"] == test_time.TEST_TIME_RULE
    budget = {(r["seed"]): r for r in runner.LM_SWEEP.load(ROOT / presets.COMMITTED_BUDGET_LADDER / "results.json")
              if r["name"] == "attn T=2" and r["identity"]["config"]["d_model"] == 64 and r["lr"] == 0.004}
    fixed = [r for r in records if r["name"] == "attn T=2"]
    assert fixed
    for r in fixed:
        assert r["val_ppl"] == pytest.approx(budget[r["seed"]]["val_ppl"], rel=1e-9)
        assert r["val_ppl_by_T"]["4"] == pytest.approx(budget[r["seed"]]["val_ppl_by_T"]["4"], rel=1e-9)


def test_the_docs_show_every_generated_block_as_the_committed_records_give_it():
    """docs/results-lm.md, docs/results-gp.md and docs/trained-models.md: `python -m cem_core docs --check`."""
    assert doc_blocks.stale_blocks(ROOT) == [], "run `python -m cem_core docs` and commit the docs"


def test_a_prediction_that_is_not_finite_at_a_test_time_T_counts_as_infinitely_bad():
    """One seed's metric at 4T is not finite (a NaN prediction): d(4T) is +inf with no finite interval, the cell can
    only read 'worse past T' (never 'scales'), and the figures leave that T' out of the line."""
    by_seed = {0: {4: 1.0, 8: 1.1, 16: math.inf}, 1: {4: 1.1, 8: 1.25, 16: 1.4}, 2: {4: 1.05, 8: 1.2, 16: 1.3}}
    cell = test_time.read_cell("gp", by_seed, None)
    assert cell["d"][16]["mean"] == cell["d"][16]["low"] == math.inf and cell["verdict"] == "worse past T"
    better = {s: {**m, 8: m[4] - 0.1} for s, m in by_seed.items()}
    assert test_time.read_cell("gp", better, None)["verdict"] == "neither shown"
    record = {"diverged": False, "rmse_gp": 0.5, "rmse_by_eval_T": {"4": 0.6, "16": math.nan}}
    assert test_time._metric("gp", record) == {4: pytest.approx(1.2), 16: math.inf}


def test_the_readmes_test_time_finding_is_the_committed_records():
    """The README's headline on the LM study: its verdict words and its four perplexities, from the records (to the
    printed digits)."""
    _, records = _committed("lm")
    readme = " ".join((ROOT / "README.md").read_text().split())
    found = test_time.read_study("lm", records)
    assert len(found) == 4 and all(c["seeds"] == 3 for c in found.values())
    assert all(c["verdict"] == "worse past T" for c in found.values())
    assert "none of the four training regimes (fixed T, T drawn per batch, the anchor, the loss after every step) " \
           "scales at test time; all four are worse at T' = 4 and 8" in readme
    anchor, fixed = found[("d = 64", "anchor")]["mean"], found[("d = 64", "fixed T")]["mean"]
    assert (f"validation perplexity {math.exp(anchor[2]):.2f} at T' = 2, {math.exp(anchor[8]):.2f} at T' = 8; fixed T "
            f"{math.exp(fixed[2]):.2f} and {math.exp(fixed[8]):.1f}") in readme
    assert max(c["d"][8]["mean"] for c in found.values()) == found[("d = 64", "fixed T")]["d"][8]["mean"]
    assert min(c["d"][8]["mean"] for c in found.values()) == found[("d = 64", "anchor")]["d"][8]["mean"]


def test_the_readmes_gp_test_time_finding_is_the_committed_records():
    """The README's headline on the GP study: no cell scales, how many read each other verdict, the parameter range
    and the closest cell's two ratios, from the records (to the printed digits)."""
    _, records = _committed("gp")
    readme = " ".join((ROOT / "README.md").read_text().split())
    found = test_time.read_study("gp", records)
    verdicts = [c["verdict"] for c in found.values()]
    assert len(found) == 8 and all(c["seeds"] == 3 for c in found.values())
    assert "none of the 8 pairs of condition" in readme and "scales at test time" not in verdicts
    assert (f"{verdicts.count('worse past T')} are worse at T' = 8 and 16 than at the trained T = 4 and "
            f"{verdicts.count('neither shown')} show neither") in readme
    params = sorted({r["params"] for r in records})
    assert f"{params[0]:,} to {params[-1]:,} parameters" in readme
    closest = min(found, key=lambda k: found[k]["mean"][16])
    assert closest == ("base", "loss every step"), closest
    mean = found[closest]["mean"]
    assert f"(RMSE / GP optimum {mean[4]:.3f} at T' = 4, {mean[16]:.3f} at T' = 16)" in readme
