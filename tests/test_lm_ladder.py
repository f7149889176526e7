"""The referee's evidence: each variant at its own learning rate, and the width ladder with its fitted trend
(docs/design.md#55-the-language-model-sweep)."""
import json
import math
import random
import re

import numpy as np
import pytest
from conftest import ROOT, page_tables, row_values

from cem_core.experiments import verdicts
from cem_core.experiments.lm import decisions, ladder, presets, rates, report, rules, runner, variants
from cem_core.experiments.sweep import SWEEP_MANIFEST
from cem_core.nn.model import LanguageModel, ModelConfig


@pytest.fixture(scope="module")
def committed_lm_sweep():
    return runner.LM_SWEEP.load(ROOT / presets.COMMITTED_SWEEP / "results.json")


def _decisions(folder):
    return decisions.read_decisions(ROOT / folder)


def test_the_own_rate_preset_trains_each_variant_at_its_own_rate():
    own_rates = _decisions(presets.COMMITTED_OWN)["own_rates"]
    specs = presets.preset_runs("own", decisions=_decisions(presets.COMMITTED_OWN))
    p = presets.SWEEP_PRESETS["own"]
    assert len(specs) == 3 * len(own_rates) == 33
    assert set(variants.PAPER_VARIANTS) <= set(own_rates) and tuple(own_rates) == p.variants
    assert all(s.config.optim.lr == own_rates[s.name] for s in specs)
    assert {s.config.steps for s in specs} == {presets.steps_for(presets.SWEEP_PRESETS["default"])}
    assert sorted({s.config.seed for s in specs}) == [0, 1, 2] and p.budget == 1.0
    manifest = runner.manifest("own", presets.default_data("own"), specs)
    assert manifest["verdict_rule"] == rules.T_RULE and manifest["rate_rule"] == rules.RATE_RULE
    assert "97.5% quantile of Student's t" in rules.T_RULE and "4.30" in rules.T_RULE


def test_the_ladder_preset_spans_four_times_the_width_at_one_budget_fraction():
    """Counted on the built models: at every width the steps are the same fraction of 20 tokens per Llama
    parameter, the head width is fixed, and each variant's grid is 1/2, 1 and 2 x its own d = 96 rate, with the
    extensions its decisions table holds."""
    p = presets.SWEEP_PRESETS["ladder"]
    parts = p.parts()
    assert [q.shape.d_model for q in parts] == [32, 64, 128] and parts[-1].shape.d_model == 4 * parts[0].shape.d_model
    for q in parts:
        assert q.shape.d_model // q.shape.n_heads == presets.LADDER_HEAD_WIDTH and q.shape.d_ff % 8 == 0
        llama = LanguageModel(ModelConfig.variant("llama", shape=q.shape, vocab_size=257, max_seq_len=q.seq_len))
        params = sum(t.numel() for t in llama.parameters())
        assert presets.steps_for(q) == math.ceil(presets.LADDER_BUDGET * 20 * params / (q.batch_size * q.seq_len))
    table = _decisions(presets.COMMITTED_LADDER)
    own, extensions = table["own_rates"], table["extensions"]
    specs = presets.preset_runs("ladder", decisions=table)
    assert len(specs) == 3 * 4 * 3 * 2 + 2 * len(extensions) and len({s.folder for s in specs}) == len(specs)
    for q in parts:
        for name in variants.LADDER_VARIANTS:
            found = sorted({s.config.optim.lr for s in specs
                            if s.name == name and s.config.shape.d_model == q.shape.d_model})
            grid = [own[name] / 2, own[name], own[name] * 2]       # exact
            grid += [r for w, n, r in extensions if (w, n) == (q.shape.d_model, name)]
            assert found == sorted(grid)
    for width, name, r in extensions:                       # steps of 2 past an edge
        assert abs(math.log2(r / own[name])) in (2, 3, 4)
    manifest = runner.manifest("ladder", presets.default_data("ladder"), specs)
    assert manifest["verdict_rule"] == rules.LADDER_RULE and "rate_rule" not in manifest


def test_the_paper_scale_is_the_86m_preset():
    assert 85.0e6 < ladder.paper_scale() < 85.5e6


def _widths(means, ses, seeds=3, spread=None):
    """Width rows as ``ladder.width_gaps`` makes them, from means and standard errors (seeds spread to match)."""
    rows = []
    for n, m, se in zip((3e4, 1e5, 4e5), means, ses):
        half = se * math.sqrt(seeds) * math.sqrt((seeds - 1) / 2)            # +-half, 0, ... give this se at 3 seeds
        gs = [m - half, m, m + half][:seeds] if spread is None else [m + e for e in spread]
        rows.append({"width": int(n), "N": n, "gs": gs, "diverged": 0} | verdicts.t_interval(gs))
    return rows


@pytest.mark.slow                       # imports scipy.stats (0.7 s)
def test_the_weighted_line_its_interval_and_the_lack_of_fit_test_match_numpy_and_scipy():
    """BUDGET_LADDER_RULE's trend: weighted least squares on the width means (weights 1 / se^2), the slope's
    t-interval with pairs - widths degrees of freedom, and the lack-of-fit F test with the seeds as pure error."""
    import scipy.stats

    rng = random.Random(3)
    widths = []
    for n in (3e4, 1e5, 4e5):
        gs = [0.2 - 0.03 * math.log10(n) + 0.01 * math.log10(n) ** 2 + rng.gauss(0, 0.01) for _ in range(3)]
        widths.append({"width": int(n), "N": n, "gs": gs, "diverged": 0} | verdicts.t_interval(gs))
    line = ladder.fit_means(widths)
    x = np.log10([w["N"] for w in widths])
    y = np.array([w["mean"] for w in widths])
    se = np.array([w["se"] for w in widths])
    b, a = np.polyfit(x, y, 1, w=1 / se)                       # numpy weights multiply residuals: 1 / se
    assert (line["a"], line["b"]) == pytest.approx((a, b), rel=1e-10)
    W = np.diag(1 / se ** 2)
    X = np.column_stack([np.ones_like(x), x])
    se_b = math.sqrt(np.linalg.inv(X.T @ W @ X)[1, 1])
    q = scipy.stats.t.ppf(0.975, 9 - 3)
    assert line["dof"] == 6 and (line["b_low"], line["b_high"]) == pytest.approx((b - q * se_b, b + q * se_b), rel=1e-9)
    pure = sum(sum((g - w["mean"]) ** 2 for g in w["gs"]) for w in widths)
    lack = sum(3 * (w["mean"] - a - b * xi) ** 2 for w, xi in zip(widths, x))
    f = (lack / 1) / (pure / 6)
    assert line["lof_F"] == pytest.approx(f, rel=1e-9)
    assert line["lof_p"] == pytest.approx(scipy.stats.f.sf(f, 1, 6), rel=1e-9)
    assert math.isnan(ladder.fit_means(widths[:1])["b"])                      # one width: no line
    assert math.isnan(ladder.fit_means(widths[:2])["lof_p"])                  # two widths: a line, no lack-of-fit
    one_seed = [w | verdicts.t_interval(w["gs"][:1]) | {"gs": w["gs"][:1]} for w in widths]
    assert math.isnan(ladder.fit_means(one_seed)["b"])                        # no standard errors: no weights


@pytest.mark.parametrize("means, expected", [
    ((0.25, 0.20, 0.15), "narrowing"),        # a positive gap falling with scale
    ((0.05, 0.10, 0.15), "growing"),          # a positive gap growing
    ((-0.25, -0.20, -0.15), "narrowing"),     # a negative gap rising towards 0 (CEM ahead, Llama catching up)
    ((-0.05, -0.10, -0.15), "growing"),       # a negative gap growing more negative
    ((-0.19, 0.09, 0.22), "growing"),         # the quarter ladder's attention T = 1: -17% to +25%, growing in size
    ((0.12, 0.02, -0.06), "narrowing"),       # +13% falling through 0 to -6%: smaller in size at the largest width
    ((0.10, 0.11, 0.10), "no trend shown"),   # flat within the noise
])
def test_the_verdict_reads_the_size_of_the_gap_not_its_sign(means, expected):
    """BUDGET_LADDER_RULE: "narrowing" and "growing" are about |g| at the line's ends; a gap that changes sign and
    ends larger in size than it started is growing (the quarter ladder's rule called such a slope the opposite)."""
    widths = _widths(means, (0.005, 0.005, 0.005))
    line = ladder.fit_means(widths)
    assert ladder.size_verdict(line, 3e4, 4e5) == expected


def _record(name, width, lr, seed, ppl, params=1000, diverged=False):
    return {"name": name, "lr": lr, "seed": seed, "val_ppl": ppl, "diverged": diverged, "params": params,
            "tokens": 20 * params, "identity": {"config": {"d_model": width}, "data": {"source": "demo"}}}


def test_best_rates_and_gaps_on_hand_made_records():
    """The best rate is the lowest mean over seeds (a diverged run never wins), and each gap pairs a variant's
    seed with Llama's same seed, both at their best rates."""
    records = [_record("llama", 32, 1e-3, s, p, params=500) for s, p in ((0, 10.0), (1, 12.0))]
    records += [_record("llama", 32, 2e-3, s, p, params=500) for s, p in ((0, 9.0), (1, 11.0))]
    records += [_record("llama", 32, 4e-3, s, p, params=500) for s, p in ((0, 8.0), (1, 30.0))]   # mean 19
    records += [_record("attn T=1", 32, 2e-3, s, p) for s, p in ((0, 9.9), (1, 12.1))]
    records += [_record("attn T=1", 32, 4e-3, 0, 1.0, diverged=True), _record("attn T=1", 32, 4e-3, 1, 1.0)]
    best = ladder.best_rates(records)
    assert (best[(32, "llama")]["lr"], best[(32, "llama")]["ppl"], best[(32, "llama")]["inside"]) == (2e-3, 10.0, True)
    assert (best[(32, "attn T=1")]["lr"], best[(32, "attn T=1")]["inside"]) == (2e-3, False)
    points = ladder.gap_points(records)["attn T=1"]
    assert [(p["seed"], p["N"]) for p in points] == [(0, 500), (1, 500)]
    assert [p["g"] for p in points] == pytest.approx([math.log(9.9 / 9.0), math.log(12.1 / 11.0)], rel=1e-12)
    assert [p["gap"] for p in points] == pytest.approx([9.9 / 9.0 - 1, 12.1 / 11.0 - 1], rel=1e-12)
    row = next(r for r in ladder.rows(records) if r["variant"] == "attn T=1")
    assert row["rate"] == "0.002 (at the grid's edge)" and row[ladder.GAP_COLUMN].startswith("+10.0% [")
    assert "(g = +0.0953 ± 0.0000 se)" in row[ladder.GAP_COLUMN]


def test_a_diverged_llama_run_is_left_out_of_the_gap_not_read_as_a_win():
    records = [_record("llama", 32, 2e-3, 0, 9.0, params=500), _record("llama", 32, 2e-3, 1, 1.0, diverged=True)]
    records += [_record("attn T=1", 32, 4e-3, s, 9.9) for s in (0, 1)]
    points = ladder.gap_points(records)["attn T=1"]
    assert points[0]["gap"] == pytest.approx(0.1) and math.isnan(points[1]["g"])
    found = ladder.trends(records)["attn T=1"]
    assert found["diverged"] == 1 and found["widths"][0]["mean"] == pytest.approx(math.log(1.1))
    row = next(r for r in ladder.rows(records) if r["variant"] == "attn T=1")
    assert row[ladder.GAP_COLUMN].endswith(", 1 diverged") and "1 diverged pairs left out" in ladder.summary(records)


def _own_like(common, shift):
    """Records shaped like the own-rate sweep's, made from the committed sweep's: each variant's perplexity
    moved by shift(name, seed), and the two learned-step-size variants added."""
    out = [r | {"val_ppl": r["val_ppl"] + shift(r["name"], r["seed"])} for r in common
           if r["name"] in variants.PAPER_VARIANTS]
    base = [r for r in out if r["name"] == "attn T=2, diag shared"]
    out += [r | {"name": "attn T=2, diag shared, eta per step", "val_ppl": r["val_ppl"] - 0.3 - 0.01 * r["seed"]}
            for r in base]
    out += [r | {"name": "attn T=2, diag shared, P dlr, eta per step",
                 "val_ppl": r["val_ppl"] - 0.3 + 0.02 * (r["seed"] - 1)} for r in base]
    return out


def test_the_claims_side_by_side_and_what_learned_step_sizes_say(committed_lm_sweep):
    common = committed_lm_sweep
    own = _own_like(common, lambda name, seed: -1.0 if name == "llama" else 0.0)
    rows = report.side_by_side_rows(common, own)
    assert [r["#"] for r in rows] == [str(k) for k in range(1, 9)]              # ours (9, 10) are not at own rates
    shown = {r["#"]: r for r in report.claim_rows(common)}
    for r in rows:
        assert r["recorded verdict (± 2 se)"] == shown[r["#"]]["verdict"]        # the recorded verdicts unmoved
        assert r[f"common rate {presets.DEFAULT_LR:g}: A − B"] == shown[r["#"]]["ppl(A) − ppl(B), mean ± se"]
    first = report.variant_difference(common, "attn T=1", "llama")
    assert rows[0]["own rates: A − B"].startswith(f"{first['mean'] + 1.0:+.3f}")   # Llama 1.0 better at its rate
    text = report.step_size_summary(own)
    assert "consistent with reading dlr's gain as step-size control" in text and "-0.310 ± 0.006 (better" in text


def _moved(records, names, shift):
    return [r | {"val_ppl": r["val_ppl"] + shift(r["seed"])} if r["name"] in names else r for r in records]


ETA, BOTH = "attn T=2, diag shared, eta per step", "attn T=2, diag shared, P dlr, eta per step"


@pytest.mark.parametrize("names, shift, expected", [
    ((BOTH,), lambda s: 0.5 + 0.01 * s, "dlr is worse on top of learned"),
    ((BOTH,), lambda s: -0.5 - 0.01 * s, "dlr improves on top of learned"),
    (("attn T=2, diag shared, P dlr",), lambda s: 0.345 + 0.01 * (s - 1), "dlr shows no gain at its own rate (no "),
    ((ETA, BOTH), lambda s: 0.6 + 0.01 * s, "learned step sizes alone show a loss"),
    ((ETA, BOTH), lambda s: 0.28 + 0.03 * s, "learned step sizes alone show no measurable gain"),
])
def test_what_learned_step_sizes_say_follows_the_numbers(committed_lm_sweep, names, shift, expected):
    own = _moved(_own_like(committed_lm_sweep, lambda n, seed: 0.0), names, shift)
    assert expected in report.step_size_summary(own)


def test_a_diverged_run_is_named_in_what_learned_step_sizes_say(committed_lm_sweep):
    own = [r | {"diverged": True, "val_ppl": math.nan} if r["name"] == "attn T=2, diag shared, eta per step"
           and r["seed"] == 1 else r for r in _own_like(committed_lm_sweep, lambda n, seed: 0.0)]
    text = report.step_size_summary(own)
    assert "(a run diverged, 3 seeds)" in text and "So a run diverged" in text


def test_the_own_rate_summary_names_the_claims_whose_reading_changes(committed_lm_sweep):
    """Llama 0.5 better at its own rate than at the common one makes claim 2 (the CEM MLP competitive with
    SwiGLU, +0.064 ± 0.037 today) a measured loss: its reading changes, and only its."""
    own = _own_like(committed_lm_sweep, lambda name, seed: -0.5 if name == "llama" else 0.0)
    text = report.own_summary(committed_lm_sweep, own)
    assert text.endswith("the claims whose reading changes are 2.")
    assert "against the paper: claims 1, 2, 5 and 8;" in text


def test_the_own_rate_summary_names_each_claim_once(committed_lm_sweep):
    own = _own_like(committed_lm_sweep, lambda name, seed: 0.0)
    text = report.own_summary(committed_lm_sweep, own)
    assert "the claims whose reading changes are none." in text and "(3 seeds," in text   # the same records
    named = []
    for label in verdicts.DIRECTIONS:
        found = re.search(re.escape(label) + r": (?:claims )?([^;.]+)", text).group(1)
        named += [c for c in found.replace(" and ", ", ").split(", ") if c != "none"]
    assert sorted(named, key=int) == [str(k) for k in range(1, 9)]
    markdown = report.own_markdown(committed_lm_sweep, own)
    assert text in markdown and report.step_size_summary(own) in markdown and markdown.count("\n| 8 |") == 1


CENTRES = {"llama": 2e-3, "attn T=1": 4e-3, "attn T=2": 4e-3, "cem-full": 1e-3}    # the centres of made-up grids


def _ladder_like(gaps: dict, noise: float = 0.03, seed: int = 0) -> list[dict]:
    """Hand-made ladder records: at every width and rate of the preset, Llama's perplexity falls with width and
    each CEM variant's sits at gaps[name](log10 N) above it, worse away from its grid's middle rate."""
    rng = random.Random(seed)
    records = []
    for q in presets.SWEEP_PRESETS["ladder"].parts():
        n = presets.llama_params(q)
        for name in variants.LADDER_VARIANTS:
            for k in presets.LADDER_STEPS:
                for s in (0, 1):
                    ppl = (12 - math.log10(n)) * (1 + gaps.get(name, lambda x: 0.0)(math.log10(n)))
                    records.append(_record(name, q.shape.d_model, CENTRES[name] * k, s,
                                           ppl * (1 + 0.01 * abs(math.log2(k))) + rng.gauss(0, noise), params=n))
    return records


@pytest.mark.slow
def test_the_ladder_figures_and_summary_show_the_trend_and_no_interval_past_the_data():
    records = _ladder_like({"attn T=1": lambda x: 0.25 - 0.03 * x, "attn T=2": lambda x: 0.2,
                            "cem-full": lambda x: -0.1 + 0.06 * x}, noise=0.01)
    found = ladder.trends(records)
    assert [found[n]["verdict"] for n in ("attn T=1", "attn T=2", "cem-full")] == \
        ["narrowing", "no trend shown", "growing"]
    assert found["attn T=1"]["line"]["b"] == pytest.approx(-0.03, abs=0.01)
    text = ladder.summary(records)
    assert "attn T=1 goes from" in text and "(narrowing;" in text and "is not a result" in text
    assert "an extrapolation)" in text and "95% [" in text and "Every chosen rate lies strictly inside" in text
    assert "5 tokens per Llama parameter" in text and "not SlimPajama" in text
    assert "Multiplicity: 9 width gaps tested against 0" in text

    reach = found["attn T=1"]["reach"]
    assert reach == pytest.approx(math.expm1(ladder.value_at(found["attn T=1"]["line"], ladder.paper_scale())))
    row = next(r for r in ladder.trend_rows(records) if r["variant"] == "attn T=1")
    assert row[ladder.reach_column()] == ladder.pct(reach, 0) and "[" not in row[ladder.reach_column()]
    from cem_core.ui import lm_figures, sweep_plots
    fig = lm_figures.lm_ladder_figure(records)
    assert max(max(t.x) for t in fig.data) == pytest.approx(max(r["params"] for r in records if r["name"] == "llama"))
    assert not fig.layout.annotations and "projection" not in str(fig.to_dict()).lower()
    mpl = sweep_plots.LADDER_FIGURES["lm_ladder"](records)                       # derived from the Plotly figure
    labels = [t.get_text() for t in mpl.axes[0].get_legend().get_texts()]
    assert labels[0].startswith("attn T=1: |gap| narrowing, slope of g") and not mpl.axes[0].texts


def test_the_ladder_multiplicity_sentence_counts_the_width_gaps_that_survive_holm():
    strong, weak = _widths((0.30, 0.31, 0.32), (0.005, 0.005, 0.005)), _widths((0.01, 0.0, -0.01), (0.02,) * 3)
    found = {"attn T=1": {"widths": strong}, "cem-full": {"widths": weak}}
    text = ladder.multiplicity(found)
    assert text.startswith("Multiplicity: 6 width gaps tested against 0") and "3 remain: attn T=1 at d = " in text
    assert "cem-full" not in text and ladder.multiplicity({}) == "Multiplicity: no width has two seeds yet."


# -- the committed results ---------------------------------------------------------------------------


def _committed(folder):
    return runner.LM_SWEEP.load(ROOT / folder / "results.json")


def test_the_own_rate_sweep_is_whole_under_the_rule_fixed_before_it_ran():
    records = _committed(presets.COMMITTED_OWN)
    own_rates = _decisions(presets.COMMITTED_OWN)["own_rates"]
    assert runner.stale_runs(records, "own", decisions=_decisions(presets.COMMITTED_OWN)) == (set(), set())
    assert len(records) == 33 and {(r["name"], r["lr"]) for r in records} == set(own_rates.items())
    assert all(sorted(r["seed"] for r in records if r["name"] == n) == [0, 1, 2] for n in own_rates)
    manifest = json.loads((ROOT / presets.COMMITTED_OWN / SWEEP_MANIFEST).read_text())
    assert (manifest["verdict_rule"], manifest["rate_rule"]) == (rules.T_RULE, rules.RATE_RULE)


def test_the_ladder_is_whole_under_the_rule_fixed_before_it_ran():
    """At least 3 widths x 4 variants x 2 seeds at each best rate, every best strictly inside its grid."""
    records = _committed(presets.COMMITTED_LADDER)
    assert runner.stale_runs(records, "ladder", decisions=_decisions(presets.COMMITTED_LADDER)) == (set(), set())
    assert len(records) >= 72
    best = ladder.best_rates(records)
    assert len(best) == 3 * 4 and {w for w, _ in best} == set(presets.LADDER_WIDTHS)
    assert all(len(b["runs"]) >= 2 and b["inside"] for b in best.values()), best
    manifest = json.loads((ROOT / presets.COMMITTED_LADDER / SWEEP_MANIFEST).read_text())
    assert manifest["verdict_rule"] == rules.LADDER_RULE


def test_each_decisions_table_holds_the_rates_its_source_sweep_chose():
    """The committed decisions tables against the records they were decided from: the own rates of the own-rate
    sweep and of the ladder are the rates sweep's choices (rules.RATE_RULE), the budget ladder's base rates are the
    quarter ladder's best rates (and its manifest's, fixed before its first run)."""
    chosen = decisions.derive_decisions("own", "rates", _committed(presets.COMMITTED_RATES))
    assert _decisions(presets.COMMITTED_OWN) == chosen
    ladder_rates = _decisions(presets.COMMITTED_LADDER)["own_rates"]
    assert ladder_rates == {name: chosen["own_rates"][name] for name in variants.LADDER_VARIANTS}
    base = _decisions(presets.COMMITTED_BUDGET_LADDER)
    assert base == decisions.derive_decisions("budget-ladder", "ladder", _committed(presets.COMMITTED_LADDER))
    manifest = json.loads((ROOT / presets.COMMITTED_BUDGET_LADDER / SWEEP_MANIFEST).read_text())
    assert manifest["base_rates"] == base["base_rates"]


def test_each_ladder_extension_is_one_the_rule_asked_for():
    """rules.LADDER_RULE on the committed ladder: each extension in its decisions table, in the order added, is a
    factor of 2 past the edge of its grid (as extended so far) where that grid's best mean lay."""
    records, table = _committed(presets.COMMITTED_LADDER), _decisions(presets.COMMITTED_LADDER)
    grids = {}
    for width, name, lr in table["extensions"]:
        grid = grids.setdefault((width, name), [table["own_rates"][name] * k for k in presets.LADDER_STEPS])
        runs = {g: [r for r in records if (r["name"], r["lr"], r["identity"]["config"]["d_model"]) == (name, g, width)]
                for g in grid}
        best = rates.best_rate(runs)
        assert not best["inside"] and lr == (min(grid) / 2 if best["lr"] == min(grid) else max(grid) * 2), (width, name)
        grid.append(lr)


def test_a_decided_preset_without_its_table_is_refused_and_rates_from_writes_it(tmp_path):
    """A fresh own-rate sweep gets its rates from a finished rates sweep (``--rates-from``: ``adopt_decisions``);
    without its decisions table it is refused with what to do, and a table that differs from the source is refused."""
    with pytest.raises(ValueError, match=r"decisions.json is missing: the own preset trains at rates decided from a "
                                         r"finished rates sweep; .*--rates-from DIR"):
        runner.run_sweep(tmp_path / "own", "own")
    with pytest.raises(ValueError, match="decided from a rates sweep, not from a default sweep"):
        runner.adopt_decisions(tmp_path / "own", "own", ROOT / presets.COMMITTED_SWEEP)
    with pytest.raises(ValueError, match="the default preset trains at no decided rates"):
        runner.adopt_decisions(tmp_path / "default", "default", ROOT / presets.COMMITTED_RATES)
    table = runner.adopt_decisions(tmp_path / "own", "own", ROOT / presets.COMMITTED_RATES)
    assert table == _decisions(presets.COMMITTED_OWN) == decisions.read_decisions(tmp_path / "own")
    assert runner.stale_runs(_committed(presets.COMMITTED_OWN), "own", decisions=table) == (set(), set())
    edited = table | {"own_rates": table["own_rates"] | {"llama": 1e-3}}
    decisions.write_decisions(tmp_path / "own", edited)
    with pytest.raises(ValueError, match="holds other own_rates than"):
        runner.adopt_decisions(tmp_path / "own", "own", ROOT / presets.COMMITTED_RATES)
    assert runner.stale_runs(_committed(presets.COMMITTED_OWN), "own", decisions=edited) != (set(), set())
    (tmp_path / "own" / decisions.DECISIONS_FILE).write_text('{"own_rates": {"llama": 2}}')
    with pytest.raises(ValueError, match="is not a decisions table: own_rates must map"):
        decisions.read_decisions(tmp_path / "own")


@pytest.mark.parametrize("preset, key, edit, message", [
    ("ladder", "extensions", lambda rows: rows + [[32, "mlp T=1", 0.01]],
     r"extensions row \[32, 'mlp T=1', 0.01\] is not one of this preset's widths"),
    ("ladder", "extensions", lambda rows: rows + [[96, "llama", 0.01]], r"extensions row \[96, 'llama', 0.01\]"),
    ("budget-ladder", "base_rates", lambda rows: rows[1:], r"base_rates must give one rate to every width and "
                                                            r"variant; it lacks \(32, 'llama'\)"),
    ("budget-ladder", "base_rates", lambda rows: rows[1:] + rows[1:2], r"it lacks \(32, 'llama'\)"),
])
def test_a_decisions_table_that_names_what_its_preset_does_not_train_is_refused(preset, key, edit, message):
    """A table can be well formed and still not fit its preset: an extension at a variant or width the ladder does
    not train, base rates that miss a width and variant. Old: a KeyError deep in the runner, or silently ignored."""
    folder = presets.COMMITTED_LADDER if preset == "ladder" else presets.COMMITTED_BUDGET_LADDER
    table = _decisions(folder)
    presets.SWEEP_PRESETS[preset].decide(table)                                  # the committed table fits
    with pytest.raises(ValueError, match=message):
        presets.SWEEP_PRESETS[preset].decide(table | {key: edit(table[key])})


def test_rates_from_into_another_sweeps_folder_writes_nothing(tmp_path):
    """`--rates-from` with --out at another preset's sweep is refused before a decisions table is written there."""
    out = tmp_path / "default"
    out.mkdir()
    (out / SWEEP_MANIFEST).write_bytes((ROOT / presets.COMMITTED_SWEEP / SWEEP_MANIFEST).read_bytes())
    with pytest.raises(ValueError, match="holds the default preset's sweep, not the own preset's"):
        runner.adopt_decisions(out, "own", ROOT / presets.COMMITTED_RATES)
    assert not (out / decisions.DECISIONS_FILE).exists()


def test_lm_sweep_refuses_a_fresh_own_rate_folder_until_rates_from_writes_its_table(tmp_path, capsys):
    """The own-rate sweep's records without its table: `lm sweep` says what to do, and `--rates-from` the rates
    sweep's folder writes the committed table again (every run already done: nothing trains)."""
    from cem_core.__main__ import main

    out = tmp_path / "own"
    out.mkdir()
    for name in (SWEEP_MANIFEST, "results.json"):
        (out / name).write_bytes((ROOT / presets.COMMITTED_OWN / name).read_bytes())
    command = ["lm", "sweep", "--preset", "own", "--out", str(out), "--jobs", "1"]
    assert main(command) == 2 and "--rates-from DIR" in capsys.readouterr().err
    assert main([*command, "--rates-from", str(ROOT / presets.COMMITTED_RATES)]) == 0
    assert decisions.read_decisions(out) == _decisions(presets.COMMITTED_OWN)
    assert len(runner.LM_SWEEP.load(out / "results.json")) == 33


@pytest.mark.slow                      # a whole app page and the notebook's committed outputs
def test_the_docs_the_app_and_notebook_05_show_the_same_own_rate_and_ladder_numbers():
    common, own = _committed(presets.COMMITTED_SWEEP), _committed(presets.COMMITTED_OWN)
    ladders = {"budget-ladder": _committed(presets.COMMITTED_BUDGET_LADDER),
               "ladder": _committed(presets.COMMITTED_LADDER)}
    page = (ROOT / "docs" / "results-lm.md").read_text()
    assert report.own_markdown(common, own) in page
    at, frames = page_tables("lm")
    shown = [row_values(f) for f in frames]
    for rows in (report.own_variant_rows(common, own), report.side_by_side_rows(common, own)):
        assert row_values(rows) in shown
    text = " ".join(m.value for m in (*at.markdown, *at.caption))
    assert report.step_size_summary(own) in text and report.own_summary(common, own) in text
    warnings = " ".join(w.value for w in at.warning)
    notebook = (ROOT / "notebooks" / "05_what_the_evidence_says.ipynb").read_text()
    for preset, rungs in ladders.items():
        assert ladder.ladder_markdown(rungs, preset) in page
        assert row_values(ladder.trend_rows(rungs, preset)) in shown and row_values(ladder.rows(rungs, preset)) in shown
        assert ladder.summary(rungs, preset) in text and ladder.progress_note(rungs, preset) in warnings
        assert json.dumps(ladder.summary(rungs, preset), ensure_ascii=False)[1:-1] in notebook
    for sentence in (report.own_summary(common, own), report.step_size_summary(own)):
        assert json.dumps(sentence, ensure_ascii=False)[1:-1] in notebook


def test_partial_own_rate_results_say_what_is_missing(committed_lm_sweep):
    own = [r for r in _own_like(committed_lm_sweep, lambda name, seed: 0.0) if r["name"] == "llama"]
    assert report.side_by_side_rows(committed_lm_sweep, own) == []
    assert report.step_size_summary(own).startswith("Claim 6 and learned step sizes: no runs yet of attn T=2, diag")


@pytest.mark.slow
def test_a_ladder_with_one_width_so_far_shows_its_points_and_no_line():
    records = [r for r in _ladder_like({"attn T=1": lambda x: 0.1}) if r["identity"]["config"]["d_model"] == 32]
    rows = ladder.trend_rows(records)
    assert all(r["trend of the gap's size"] == "no trend shown" and r["widths"] == "1" for r in rows)
    assert rows[0][ladder.SLOPE_COLUMN].startswith("– (a line needs")
    assert "(no line yet: it needs 2 widths" in ladder.summary(records) and "nan" not in ladder.ladder_markdown(records)
    from cem_core.ui import lm_figures, sweep_plots
    assert not any("fitted line" in (t.name or "") for t in lm_figures.lm_ladder_figure(records).data)
    sweep_plots.LADDER_FIGURES["lm_ladder"](records)


@pytest.mark.slow
def test_a_ladder_grid_extends_at_one_width_and_keeps_every_run_it_had():
    """rules.LADDER_RULE's extension: a rate added to the decisions table for one variant at one width adds just
    those runs, and the folder's manifest accepts the grown sweep (its earlier runs a subset)."""
    table = _decisions(presets.COMMITTED_LADDER)

    def extended(*rows):
        return table | {"extensions": [*table["extensions"], *rows]}

    p, grown = presets.decided("ladder", table), presets.decided("ladder", extended([32, "attn T=2", 6.4e-2]))
    parts = {q.shape.d_model: q for q in grown.parts()}
    assert parts[32].lrs_of("attn T=2")[-1] == 6.4e-2 and 6.4e-2 not in parts[64].lrs_of("attn T=2")
    assert parts[32].lrs_of("llama") == p.parts()[0].lrs_of("llama")
    before_order = [s.folder for s in presets.preset_runs("ladder", decisions=table)]
    before = set(before_order)
    after_order = [s.folder for s in presets.preset_runs("ladder", decisions=extended([32, "attn T=2", 6.4e-2]))]
    after = set(after_order)
    assert after - before == {"attn-t-2-d32-lr0.064-seed0", "attn-t-2-d32-lr0.064-seed1"} and before <= after
    assert [f for f in after_order if f in before] == before_order                  # the earlier runs keep their order
    assert parts[32].lrs_of("llama") == presets.decided("ladder", extended([32, "llama", 2e-3])).parts()[0].lrs_of(
        "llama")                                                               # a rate already there adds nothing


@pytest.mark.slow
def test_a_gap_that_changes_sign_and_grows_in_size_is_growing_everywhere_it_is_shown():
    """CEM ahead at the smallest width and further behind at the largest: the quarter ladder's recorded rule read
    this slope as moving towards 0; read on the gap's size it is growing, in the table, the summary and the legend
    of both figures."""
    records = _ladder_like({"attn T=1": lambda x: -0.3 + 0.06 * x}, noise=0.005)
    found = ladder.trends(records)["attn T=1"]
    assert found["verdict"] == "growing" and "attn T=1" in ladder.growing_gaps(records)
    assert found["widths"][0]["mean"] < 0 < found["widths"][-1]["mean"]
    assert "(growing;" in ladder.summary(records)
    from cem_core.ui import lm_figures, sweep_plots
    label = "attn T=1: |gap| growing, slope of g"
    assert [t.name for t in lm_figures.lm_ladder_figure(records).data][0].startswith(label)
    legend = sweep_plots.LADDER_FIGURES["lm_ladder"](records).axes[0].get_legend()
    assert legend.get_texts()[0].get_text().startswith(label)


# -- words that must match the numbers ---------------------------------------------------------------

NAMES = {"attn T=1": ("attn t=1", "attention t = 1", "attention (t = 1)"),
         "attn T=2": ("attn t=2", "attention t = 2", "attention (t = 2)"),
         "cem-full": ("cem-full", "fully cem")}
SHRINK_WORDS = re.compile(r"\b(clos(?:ing|es|ed)|narrow(?:ing|s|ed))\b")


def mislabelled(text: str, growing: set) -> list[str]:
    """The sentences of `text` that name a gap and a variant whose gap grows in size, and call it closing or
    narrowing."""
    found = []
    for sentence in re.split(r"(?<=[.!?])\s+|\n\s*\n", text):
        low = " ".join(sentence.lower().split())
        if "gap" in low and SHRINK_WORDS.search(low) and any(a in low for name in growing for a in NAMES[name]):
            found.append(sentence.strip()[:200])
    return found


def documents() -> dict[str, str]:
    paths = [ROOT / "README.md", ROOT / "figures" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")), *sorted((ROOT / "app_pages").glob("*.py"))]
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths}


def test_no_document_calls_a_gap_that_grows_in_size_closing_or_narrowing():
    """The quarter ladder's recorded rule called gaps that grew from -17% to +25-35% "closing". Every
    document a reader sees (README, docs, figure captions, notebooks and the lecture, the app's pages) and every
    sentence the ladders generate is checked against the records: a variant whose mean gap is larger in size at the
    largest width than at the smallest is never called closing or narrowing."""
    growing = set()
    generated = []
    for preset, folder in (("ladder", presets.COMMITTED_LADDER), ("budget-ladder", presets.COMMITTED_BUDGET_LADDER)):
        records = _committed(folder)
        growing |= set(ladder.growing_gaps(records, preset))
        found = ladder.trends(records, preset)
        assert all(t["verdict"] != "narrowing" for name, t in found.items() if name in ladder.growing_gaps(
            records, preset))
        generated.append(ladder.ladder_markdown(records, preset))
    assert {"attn T=1", "attn T=2", "cem-full"} <= growing                  # the quarter ladder's three
    assert mislabelled("The gap of attn T=1 to Llama is closing with scale.", growing)      # the check can fail
    assert mislabelled("CEM attention T = 1 narrows its\ngap as it grows.", growing)
    assert not mislabelled("The gap of attn T=1 grows; closing a sweep cancels its jobs.", set())
    bad = {name: hits for name, text in {**documents(), "generated": "\n\n".join(generated)}.items()
           if (hits := mislabelled(text, growing))}
    assert not bad, bad
