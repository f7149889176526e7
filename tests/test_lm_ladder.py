"""Issue 26's evidence: each variant at its own learning rate, and the width ladder with its fitted trend
(docs/design.md#55-the-language-model-sweep)."""
import json
import math
import random
import re

import numpy as np
import pytest
from conftest import ROOT, page_tables, row_values

from cem_core.experiments import verdicts
from cem_core.experiments.lm import ladder, sweep
from cem_core.experiments.sweep import SWEEP_MANIFEST
from cem_core.nn.model import LanguageModel, ModelConfig


@pytest.fixture(scope="module")
def committed_lm_sweep():
    return sweep.LM_SWEEP.load(ROOT / sweep.COMMITTED_SWEEP / "results.json")


def test_the_own_rate_preset_trains_each_variant_at_its_own_rate():
    rates = sweep.own_rates(sweep.LM_SWEEP.load(ROOT / sweep.COMMITTED_RATES / "results.json"))
    assert sweep.OWN_RATES == {name: r["lr"] for name, r in rates.items()}     # as the committed grid found them
    specs = sweep.preset_runs("own")
    p = sweep.SWEEP_PRESETS["own"]
    assert len(specs) == 3 * len(sweep.OWN_RATES) == 33
    assert set(sweep.PAPER_VARIANTS) <= set(sweep.OWN_RATES)
    assert all(s.config.optim.lr == sweep.OWN_RATES[s.name] for s in specs)
    assert {s.config.steps for s in specs} == {sweep.steps_for(sweep.SWEEP_PRESETS["default"])}
    assert sorted({s.config.seed for s in specs}) == [0, 1, 2] and p.budget == 1.0
    manifest = sweep.manifest("own", sweep.default_data("own"), specs)
    assert manifest["verdict_rule"] == sweep.T_RULE and manifest["rate_rule"] == sweep.RATE_RULE
    assert "97.5% quantile of Student's t" in sweep.T_RULE and "4.30" in sweep.T_RULE


def test_the_ladder_preset_spans_four_times_the_width_at_one_budget_fraction():
    """Counted on the built models: at every width the steps are the same fraction of 20 tokens per Llama
    parameter, the head width is fixed, and each variant's grid is 1/2, 1 and 2 x its own d = 96 rate."""
    p = sweep.SWEEP_PRESETS["ladder"]
    parts = p.parts()
    assert [q.shape.d_model for q in parts] == [32, 64, 128] and parts[-1].shape.d_model == 4 * parts[0].shape.d_model
    for q in parts:
        assert q.shape.d_model // q.shape.n_heads == sweep.LADDER_HEAD_WIDTH and q.shape.d_ff % 8 == 0
        llama = LanguageModel(ModelConfig.variant("llama", shape=q.shape, vocab_size=257, max_seq_len=q.seq_len))
        params = sum(t.numel() for t in llama.parameters())
        assert sweep.steps_for(q) == math.ceil(sweep.LADDER_BUDGET * 20 * params / (q.batch_size * q.seq_len))
    specs = sweep.preset_runs("ladder")
    extended = 2 * sum(len(rates) for _, _, rates in sweep.LADDER_EXTENSIONS)
    assert len(specs) == 3 * 4 * 3 * 2 + extended and len({s.folder for s in specs}) == len(specs)
    for q in parts:
        for name in sweep.LADDER_VARIANTS:
            rates = sorted({s.config.optim.lr for s in specs
                            if s.name == name and s.config.shape.d_model == q.shape.d_model})
            grid = [sweep.OWN_RATES[name] / 2, sweep.OWN_RATES[name], sweep.OWN_RATES[name] * 2]       # exact
            grid += [r for w, n, more in sweep.LADDER_EXTENSIONS if (w, n) == (q.shape.d_model, name) for r in more]
            assert rates == sorted(grid)
    for width, name, more in sweep.LADDER_EXTENSIONS:                       # steps of 2 past an edge
        assert all(abs(math.log2(r / sweep.OWN_RATES[name])) in (2, 3, 4) for r in more)
    manifest = sweep.manifest("ladder", sweep.default_data("ladder"), specs)
    assert manifest["verdict_rule"] == sweep.LADDER_RULE and "rate_rule" not in manifest


def test_the_paper_scale_is_the_86m_preset():
    assert 85.0e6 < ladder.paper_scale() < 85.5e6


@pytest.mark.slow                       # imports scipy.stats (0.7 s)
def test_the_fitted_line_and_its_intervals_match_numpy_and_scipy():
    import scipy.stats

    rng = random.Random(3)
    points = [{"N": n, "g": 0.2 - 0.03 * math.log10(n) + rng.gauss(0, 0.01)}
              for n in (3e4, 3e4, 1e5, 1e5, 4e5, 4e5)]
    line = ladder.fit(points, at=85e6)
    x = np.log10([p["N"] for p in points])
    y = np.array([p["g"] for p in points])
    b, a = np.polyfit(x, y, 1)
    assert (line["a"], line["b"]) == pytest.approx((a, b), rel=1e-10)
    X = np.column_stack([np.ones_like(x), x])
    resid = y - X @ np.array([a, b])
    cov = resid @ resid / (len(x) - 2) * np.linalg.inv(X.T @ X)
    q = scipy.stats.t.ppf(0.975, len(x) - 2)
    x0 = np.array([1.0, math.log10(85e6)])
    assert line["q"] == pytest.approx(q, rel=1e-10)
    half = q * math.sqrt(cov[1, 1])
    assert (line["b_low"], line["b_high"]) == pytest.approx((b - half, b + half), rel=1e-9)
    se0 = math.sqrt(x0 @ cov @ x0)
    assert (line["projection"], line["low"], line["high"]) == pytest.approx(
        (x0 @ [a, b], x0 @ [a, b] - q * se0, x0 @ [a, b] + q * se0), rel=1e-9)
    assert math.isnan(ladder.fit(points[:2], at=85e6)["b"])                   # two points: no interval
    left_out = ladder.fit([*points, {"N": 1e6, "g": math.nan}], at=85e6)      # a diverged pair is left out
    assert (left_out["n"], left_out["b"]) == (6, pytest.approx(b, rel=1e-10))


@pytest.mark.parametrize("slope, offset, expected", [
    (-0.03, 0.25, "closing"),          # a positive gap falling with scale
    (+0.03, 0.00, "widening"),         # a positive gap growing
    (+0.03, -0.25, "closing"),         # a negative gap rising towards 0 (CEM ahead, Llama catching up)
    (-0.03, 0.10, "widening"),         # a negative gap growing more negative
    (-0.04, 0.19, "closing"),          # a gap that starts at +1.1% and falls through 0 to -1.3%
    (0.0, 0.10, "no trend shown"),     # flat within the noise
])
def test_the_trend_verdict_follows_the_ladder_rule(slope, offset, expected):
    """The side of 0 the gap starts on is the fitted line's at the smallest width, not one noisy mean."""
    noise = (0.004, -0.004, 0.003, -0.003, 0.002, -0.002)
    ns = (3e4, 3e4, 1e5, 1e5, 4e5, 4e5)
    points = [{"N": n, "g": offset + slope * math.log10(n) + e} for n, e in zip(ns, noise)]
    assert ladder.trend_verdict(ladder.fit(points, at=85e6), min(ns)) == expected


def _record(name, width, lr, seed, ppl, params=1000, diverged=False):
    return {"name": name, "lr": lr, "seed": seed, "val_ppl": ppl, "diverged": diverged, "params": params,
            "identity": {"config": {"d_model": width}}}


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
    assert row["rate"] == "0.002 (at the grid's edge)" and row[ladder.GAP_COLUMN].startswith("+10.0% (g = +0.0953")


def test_a_diverged_llama_run_is_left_out_of_the_gap_not_read_as_a_win():
    records = [_record("llama", 32, 2e-3, 0, 9.0, params=500), _record("llama", 32, 2e-3, 1, 1.0, diverged=True)]
    records += [_record("attn T=1", 32, 4e-3, s, 9.9) for s in (0, 1)]
    points = ladder.gap_points(records)["attn T=1"]
    assert points[0]["gap"] == pytest.approx(0.1) and math.isnan(points[1]["g"])
    found = ladder.trends(records)["attn T=1"]
    assert found["diverged"] == 1 and found["means"][32][1] == pytest.approx(math.log(1.1))
    row = next(r for r in ladder.rows(records) if r["variant"] == "attn T=1")
    assert row[ladder.GAP_COLUMN].endswith(", 1 diverged") and "1 diverged pairs left out" in ladder.summary(records)


def _own_like(common, shift):
    """Records shaped like the own-rate sweep's, made from the committed sweep's: each variant's perplexity
    moved by shift(name, seed), and the two learned-step-size variants added."""
    out = [r | {"val_ppl": r["val_ppl"] + shift(r["name"], r["seed"])} for r in common
           if r["name"] in sweep.PAPER_VARIANTS]
    base = [r for r in out if r["name"] == "attn T=2, diag shared"]
    out += [r | {"name": "attn T=2, diag shared, eta per step", "val_ppl": r["val_ppl"] - 0.3 - 0.01 * r["seed"]}
            for r in base]
    out += [r | {"name": "attn T=2, diag shared, P dlr, eta per step",
                 "val_ppl": r["val_ppl"] - 0.3 + 0.02 * (r["seed"] - 1)} for r in base]
    return out


def test_the_claims_side_by_side_and_what_learned_step_sizes_say(committed_lm_sweep):
    common = committed_lm_sweep
    own = _own_like(common, lambda name, seed: -1.0 if name == "llama" else 0.0)
    rows = sweep.side_by_side_rows(common, own)
    assert [r["#"] for r in rows] == [str(k) for k in range(1, 9)]              # ours (9, 10) are not at own rates
    shown = {r["#"]: r for r in sweep.claim_rows(common)}
    for r in rows:
        assert r["recorded verdict (± 2 se)"] == shown[r["#"]]["verdict"]        # the recorded verdicts unmoved
        assert r[f"common rate {sweep.DEFAULT_LR:g}: A − B"] == shown[r["#"]]["ppl(A) − ppl(B), mean ± se"]
    first = sweep.variant_difference(common, "attn T=1", "llama")
    assert rows[0]["own rates: A − B"].startswith(f"{first['mean'] + 1.0:+.3f}")   # Llama 1.0 better at its rate
    text = sweep.step_size_summary(own)
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
    assert expected in sweep.step_size_summary(own)


def test_a_diverged_run_is_named_in_what_learned_step_sizes_say(committed_lm_sweep):
    own = [r | {"diverged": True, "val_ppl": math.nan} if r["name"] == "attn T=2, diag shared, eta per step"
           and r["seed"] == 1 else r for r in _own_like(committed_lm_sweep, lambda n, seed: 0.0)]
    text = sweep.step_size_summary(own)
    assert "(a run diverged, 3 seeds)" in text and "So a run diverged" in text


def test_the_own_rate_summary_names_the_claims_whose_reading_changes(committed_lm_sweep):
    """Llama 0.5 better at its own rate than at the common one makes claim 2 (the CEM MLP competitive with
    SwiGLU, +0.064 ± 0.037 today) a measured loss: its reading changes, and only its."""
    own = _own_like(committed_lm_sweep, lambda name, seed: -0.5 if name == "llama" else 0.0)
    text = sweep.own_summary(committed_lm_sweep, own)
    assert text.endswith("the claims whose reading changes are 2.")
    assert "against the paper: claims 1, 2, 5 and 8;" in text


def test_the_own_rate_summary_names_each_claim_once(committed_lm_sweep):
    own = _own_like(committed_lm_sweep, lambda name, seed: 0.0)
    text = sweep.own_summary(committed_lm_sweep, own)
    assert "the claims whose reading changes are none." in text and "(3 seeds," in text   # the same records
    named = []
    for label in verdicts.DIRECTIONS:
        found = re.search(re.escape(label) + r": (?:claims )?([^;.]+)", text).group(1)
        named += [c for c in found.replace(" and ", ", ").split(", ") if c != "none"]
    assert sorted(named, key=int) == [str(k) for k in range(1, 9)]
    markdown = sweep.own_markdown(committed_lm_sweep, own)
    assert text in markdown and sweep.step_size_summary(own) in markdown and markdown.count("\n| 8 |") == 1


def _ladder_like(gaps: dict, noise: float = 0.03, seed: int = 0) -> list[dict]:
    """Hand-made ladder records: at every width and rate of the preset, Llama's perplexity falls with width and
    each CEM variant's sits at gaps[name](log10 N) above it, worse away from its grid's middle rate."""
    rng = random.Random(seed)
    records = []
    for q in sweep.SWEEP_PRESETS["ladder"].parts():
        n = sweep.llama_params(q)
        for name in sweep.LADDER_VARIANTS:
            for k in sweep.LADDER_STEPS:
                for s in (0, 1):
                    ppl = (12 - math.log10(n)) * (1 + gaps.get(name, lambda x: 0.0)(math.log10(n)))
                    records.append(_record(name, q.shape.d_model, sweep.OWN_RATES[name] * k, s,
                                           ppl * (1 + 0.01 * abs(math.log2(k))) + rng.gauss(0, noise), params=n))
    return records


@pytest.mark.slow
def test_the_ladder_figures_and_summary_show_the_fitted_trend_as_a_projection():
    records = _ladder_like({"attn T=1": lambda x: 0.25 - 0.03 * x, "attn T=2": lambda x: 0.2,
                            "cem-full": lambda x: -0.1 + 0.06 * x})
    found = ladder.trends(records)
    assert [found[n]["verdict"] for n in ("attn T=1", "attn T=2", "cem-full")] == \
        ["closing", "no trend shown", "widening"]
    assert found["attn T=1"]["line"]["b"] == pytest.approx(-0.03, abs=0.01)
    text = ladder.summary(records)
    assert "attn T=1 goes from" in text and "(closing;" in text and "not results" in text
    assert "Every best rate lies strictly inside its grid." in text and "200 to 2,500 times smaller" in text
    from cem_core.ui import interactive, plots
    fig = interactive.lm_ladder_figure(records)
    projection = next(t for t in fig.data if t.name == "attn T=1 projection")
    assert projection.x == (ladder.paper_scale(),)
    assert projection.y[0] == pytest.approx(100 * math.expm1(found["attn T=1"]["line"]["projection"]), rel=1e-12)
    assert "projection, not a result" in str(fig.layout.annotations[0].text).lower()
    assert fig.layout.annotations[0].x == pytest.approx(math.log10(ladder.paper_scale()))    # on the log axis
    mpl = plots.LADDER_FIGURES["lm_ladder"](records)                       # derived from the Plotly figure
    texts = [t.get_text() for t in mpl.axes[0].texts]
    assert any("PROJECTION, not a result" in t for t in texts)
    assert sum("%" in t and "[" in t for t in texts) == 3                     # one labelled projection per variant


# -- the committed results ---------------------------------------------------------------------------


def _committed(folder):
    return sweep.LM_SWEEP.load(ROOT / folder / "results.json")


def test_the_own_rate_sweep_is_whole_under_the_rule_fixed_before_it_ran():
    records = _committed(sweep.COMMITTED_OWN)
    assert sweep.stale_runs(records, "own") == (set(), set()) and len(records) == 33
    assert {(r["name"], r["lr"]) for r in records} == set(sweep.OWN_RATES.items())
    assert all(sorted(r["seed"] for r in records if r["name"] == n) == [0, 1, 2] for n in sweep.OWN_RATES)
    manifest = json.loads((ROOT / sweep.COMMITTED_OWN / SWEEP_MANIFEST).read_text())
    assert (manifest["verdict_rule"], manifest["rate_rule"]) == (sweep.T_RULE, sweep.RATE_RULE)


def test_the_ladder_is_whole_under_the_rule_fixed_before_it_ran():
    """At least 3 widths x 4 variants x 2 seeds at each best rate, every best strictly inside its grid."""
    records = _committed(sweep.COMMITTED_LADDER)
    assert sweep.stale_runs(records, "ladder") == (set(), set()) and len(records) >= 72
    best = ladder.best_rates(records)
    assert len(best) == 3 * 4 and {w for w, _ in best} == set(sweep.LADDER_WIDTHS)
    assert all(len(b["runs"]) >= 2 and b["inside"] for b in best.values()), best
    manifest = json.loads((ROOT / sweep.COMMITTED_LADDER / SWEEP_MANIFEST).read_text())
    assert manifest["verdict_rule"] == sweep.LADDER_RULE


@pytest.mark.slow                      # a whole app page and the notebook's committed outputs
def test_the_readme_the_app_and_notebook_05_show_the_same_own_rate_and_ladder_numbers():
    common, own = _committed(sweep.COMMITTED_SWEEP), _committed(sweep.COMMITTED_OWN)
    rungs = _committed(sweep.COMMITTED_LADDER)
    readme = (ROOT / "README.md").read_text()
    assert sweep.own_markdown(common, own) in readme and ladder.ladder_markdown(rungs) in readme
    at, frames = page_tables("lm")
    shown = [row_values(f) for f in frames]
    for rows in (sweep.own_variant_rows(common, own), sweep.side_by_side_rows(common, own),
                 ladder.trend_rows(rungs), ladder.rows(rungs)):
        assert row_values(rows) in shown
    text = " ".join(m.value for m in (*at.markdown, *at.caption))
    assert sweep.step_size_summary(own) in text and ladder.summary(rungs) in text
    assert sweep.own_summary(common, own) in text
    notebook = (ROOT / "notebooks" / "05_what_the_evidence_says.ipynb").read_text()
    for sentence in (sweep.own_summary(common, own), sweep.step_size_summary(own), ladder.summary(rungs)):
        assert json.dumps(sentence, ensure_ascii=False)[1:-1] in notebook


def test_partial_own_rate_results_say_what_is_missing(committed_lm_sweep):
    own = [r for r in _own_like(committed_lm_sweep, lambda name, seed: 0.0) if r["name"] == "llama"]
    assert sweep.side_by_side_rows(committed_lm_sweep, own) == []
    assert sweep.step_size_summary(own).startswith("Claim 6 and learned step sizes: no runs yet of attn T=2, diag")


@pytest.mark.slow
def test_a_ladder_with_one_width_so_far_shows_its_points_and_no_line():
    records = [r for r in _ladder_like({"attn T=1": lambda x: 0.1}) if r["identity"]["config"]["d_model"] == 32]
    rows = ladder.trend_rows(records)
    assert all(r["trend"] == "no trend shown" and r["points"] == "2" for r in rows)
    assert rows[0][ladder.SLOPE_COLUMN].startswith("– (a line needs")
    assert "(no line yet: 2 points)" in ladder.summary(records) and "nan" not in ladder.ladder_markdown(records)
    from cem_core.ui import interactive, plots
    assert not any("projection" in (t.name or "") for t in interactive.lm_ladder_figure(records).data)
    plots.LADDER_FIGURES["lm_ladder"](records)


@pytest.mark.slow
def test_a_ladder_grid_extends_at_one_width_and_keeps_every_run_it_had():
    """LADDER_RULE's extension: a rate added for one variant at one width adds just those runs, and the folder's
    manifest accepts the grown sweep (its earlier runs a subset)."""
    from dataclasses import replace

    p = sweep.SWEEP_PRESETS["ladder"]
    grown = replace(p, extra_lrs=(*p.extra_lrs, (32, "attn T=2", (6.4e-2,))))
    parts = {q.shape.d_model: q for q in grown.parts()}
    assert parts[32].lrs_of("attn T=2")[-1] == 6.4e-2 and 6.4e-2 not in parts[64].lrs_of("attn T=2")
    assert parts[32].lrs_of("llama") == p.parts()[0].lrs_of("llama")
    before_order = [s.folder for s in sweep.preset_runs("ladder")]
    before = set(before_order)
    sweep.SWEEP_PRESETS["ladder"] = grown
    try:
        after_order = [s.folder for s in sweep.preset_runs("ladder")]
        after = set(after_order)
    finally:
        sweep.SWEEP_PRESETS["ladder"] = p
    assert after - before == {"attn-t-2-d32-lr0.064-seed0", "attn-t-2-d32-lr0.064-seed1"} and before <= after
    assert [f for f in after_order if f in before] == before_order                  # the earlier runs keep their order
    assert parts[32].lrs_of("llama") == replace(p, extra_lrs=(*p.extra_lrs, (32, "llama", (2e-3,)))).parts()[0].lrs_of(
        "llama")                                                               # a rate already there adds nothing


@pytest.mark.slow
def test_a_gap_whose_line_crosses_zero_is_named_so_not_only_closing():
    """CEM ahead at the smallest width and behind at the largest: LADDER_RULE's word is "closing" (the slope moves
    the starting gap towards 0), and the summary says where the line crosses 0 and that the gap grows past it."""
    records = _ladder_like({"attn T=1": lambda x: -0.3 + 0.06 * x}, noise=0.005)
    found = ladder.trends(records)["attn T=1"]
    assert found["verdict"] == "closing"
    n0 = 10 ** (-found["line"]["a"] / found["line"]["b"])
    assert 6e4 < n0 < 1.6e5                                                  # ln(1 + g) = 0 near log10 N = 5
    assert f"crosses 0 at about {float(f'{n0:.2g}'):,.0f} parameters: CEM ahead of Llama below" in \
        ladder.summary(records)
    from cem_core.ui import interactive, plots
    label = f"attn T=1: closing (crosses 0 at ~{float(f'{n0:.2g}'):,.0f}), slope of g"         # the figures' legend
    assert ladder.legend("attn T=1", found).startswith(label)
    assert label in [t.name for t in interactive.lm_ladder_figure(records).data][0]
    assert plots.LADDER_FIGURES["lm_ladder"](records).axes[0].get_legend().get_texts()[0].get_text().startswith(label)
    still_above = ladder.trends(_ladder_like({"attn T=1": lambda x: 0.25 - 0.03 * x}))["attn T=1"]
    assert "crosses 0" not in ladder.crossing(still_above) + ladder.legend("attn T=1", still_above)
