"""The tie ladder (lm sweep --preset tie-ladder): its rates decided from the budget ladder by the recorded rule, its
tied runs the budget ladder's, its committed records against the preset, and its reading recomputed from the raw
records (docs/results-lm.md)."""
import json
import math

import pytest
from conftest import ROOT
from scipy import stats

from cem_core.experiments.lm import decisions, ladder, presets, rules, runner, tie_ladder
from cem_core.experiments.lm.variants import TIE_LADDER_VARIANTS, TIE_RELATIVES
from cem_core.experiments.sweep import SWEEP_MANIFEST

FOLDER = ROOT / presets.COMMITTED_TIE_LADDER


def _load(folder):
    return runner.LM_SWEEP.load(folder / "results.json")


def test_the_decisions_table_is_the_budget_ladders_base_rates_and_the_tied_relatives_chosen_rates():
    budget_folder = ROOT / presets.COMMITTED_BUDGET_LADDER
    chosen = ladder.best_rates(_load(budget_folder), "budget-ladder")
    base = {(w, n): lr for w, n, lr in decisions.read_decisions(budget_folder)["base_rates"]}
    table = decisions.read_decisions(FOLDER)
    assert len(table["base_rates"]) == 2 * len(TIE_LADDER_VARIANTS)
    for width, name, lr in table["base_rates"]:
        relative = TIE_RELATIVES.get(name)
        assert lr == (base[(width, name)] if relative is None else chosen[(width, relative)]["lr"]), (width, name)
    derived = decisions.derive_decisions("tie-ladder", "budget-ladder", _load(budget_folder),
                                         decisions.read_decisions(budget_folder))
    assert derived == table


def test_the_committed_tie_ladder_holds_only_its_runs_under_the_rule_and_its_tied_runs_are_the_budget_ladders():
    records = _load(FOLDER)
    missing, strangers = runner.stale_runs(records, "tie-ladder", decisions=decisions.read_decisions(FOLDER))
    assert not strangers and records
    manifest = json.loads((FOLDER / SWEEP_MANIFEST).read_text())
    assert manifest["preset"] == "tie-ladder" and manifest["verdict_rule"] == rules.TIE_LADDER_RULE
    assert {r["identity"]["data"]["source"] for r in records} == {"demo"}
    budget = {r["hash"]: r for r in _load(ROOT / presets.COMMITTED_BUDGET_LADDER)}
    for r in records:
        if r["name"] not in TIE_RELATIVES:                         # a tied variant or Llama: the budget ladder's run
            assert r["hash"] in budget and r["val_ppl"] == budget[r["hash"]]["val_ppl"]
        else:
            assert r["hash"] not in budget
    for words in ("dropping it helps", "share of the relative's gap", "No line through widths"):
        assert words in rules.TIE_LADDER_RULE


def test_what_dropping_a_tie_does_is_recomputed_from_the_raw_records():
    """d = ln ppl(tied) - ln ppl(untied) per seed at each side's chosen rate, its t-interval by scipy, the verdict
    words of the rule and the share of the relative's gap (mean d over mean g, g against Llama by seed)."""
    records = _load(FOLDER)
    chosen = ladder.best_rates(records, "tie-ladder")
    found = tie_ladder.effects(records)
    assert found
    for e in found:
        ppl = {name: {r["seed"]: r["val_ppl"] for r in chosen[(e["width"], name)]["runs"]}
               for name in (e["variant"], e["relative"], "llama")}
        seeds = sorted(set(ppl[e["variant"]]) & set(ppl[e["relative"]]))
        d = [math.log(ppl[e["relative"]][s] / ppl[e["variant"]][s]) for s in seeds]
        assert e["n"] == len(seeds) and e["mean"] == pytest.approx(sum(d) / len(d), rel=1e-12)
        if len(d) > 1:
            q = stats.t.ppf(0.975, len(d) - 1) * stats.tstd(d) / math.sqrt(len(d))
            assert (e["low"], e["high"]) == pytest.approx((e["mean"] - q, e["mean"] + q), rel=1e-9)
            word = "dropping it helps" if e["low"] > 0 else "dropping it hurts" if e["high"] < 0 else "no effect shown"
            assert e["verdict"] == word
        g = [math.log(ppl[e["relative"]][s] / ppl["llama"][s]) for s in ppl[e["relative"]] if s in ppl["llama"]]
        assert e["share"] == pytest.approx((sum(d) / len(d)) / (sum(g) / len(g)), rel=1e-9)
    assert {e["dropped"] for e in found} <= {"W_O = W_Q^T", "W_V = W_K", "W_V = W_K and W_O = W_Q^T", "down = U^T"}
