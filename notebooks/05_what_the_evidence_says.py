# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,jupyter,-all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · What the evidence says
#
# [Open in Colab](https://colab.research.google.com/github/cem-lab/cem-lab/blob/main/notebooks/05_what_the_evidence_says.ipynb)
#
# The paper (arXiv 2605.07588) makes claims about recursion and about CEM against Llama. This project
# measured them at a small scale, with **seeds and a verdict rule fixed before the runs**. This notebook
# trains nothing: it reads the committed records and says what holds, and every sentence about a result
# below is computed from those records (when a results file is missing or a study is still running, it
# says what is missing instead).
#
# - `results/gp-default/`: the GP regression sweep (the task and its optimum are derived in notebook
#   `04_gp_recursion`);
# - `results/gp-study/`: the GP factor study, one condition changed at a time
#   (docs/design.md#56-the-gp-factor-study);
# - `results/lm-default/`: the paper's eight language-modelling claims in miniature.
#
# The app shows the same evidence, interactively: the [GP page](http://localhost:8501/gp
# "needs the app: run make app first") and the
# [language-model page](http://localhost:8501/lm "needs the app: run make app first") (start it with `make app`).
#
# **Learning goals.** After this notebook you can
#
# 1. state the verdict rule (paired differences by seed, mean ± 2 standard errors, the 2% tolerance of
#    "comparable") and apply it by hand;
# 2. prove what pairing by seed removes (what the two runs of a seed share cancels in the difference),
#    and check how much it removes here;
# 3. say in which conditions of the GP factor study deeper in-layer recursion lowers the error, and in
#    which it does not;
# 4. read the step diagnostics of a trained layer (energy, attention entropy, the error read out after
#    each step) as an explanation;
# 5. read the language-model claims table with its caveats (size, data, compute).

# %% tags=["colab-setup", "hide-input", "slides-skip"] jupyter={"source_hidden": true}
# Set-up, safe to run again (a kernel restart too): away from the project's notebooks (Colab),
# clone the project; notebooks/colab.py installs what is missing and works from its notebooks folder.
import os
import pathlib
import runpy
import subprocess

REPOSITORY = "https://github.com/cem-lab/cem-lab"   # pyproject.toml; a fork: notebooks/colab.py --sync
if not pathlib.Path("nbhelpers.py").exists() and not pathlib.Path("cem-lab").exists():
    source = os.environ.get("CEM_LAB_SOURCE", REPOSITORY)
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", source, "cem-lab"], check=True)
colab = runpy.run_path("colab.py" if pathlib.Path("nbhelpers.py").exists() else "cem-lab/notebooks/colab.py")
colab["set_up"](pathlib.Path.cwd())

# %% tags=["parameters"]
gp_sweep_path = "../results/gp-default/results.json"   # the committed GP sweep (paths from notebooks/)
gp_study_path = "../results/gp-study/results.json"     # the GP factor study (it may still be running)
lm_sweep_path = "../results/lm-default/results.json"   # the LM claims sweep
lm_own_path = "../results/lm-own/results.json"         # each variant at its own learning rate
lm_budget_ladder_path = "../results/lm-budget-ladder/results.json"   # the width ladder at the paper's budget
lm_ladder_path = "../results/lm-ladder/results.json"   # the earlier, quarter-budget width ladder
lm_tie_ladder_path = "../results/lm-tie-ladder/results.json"     # which tie costs the perplexity
gp_test_time_path = "../results/gp-test-time/results.json"       # can recursion scale at test time: GP
lm_test_time_path = "../results/lm-test-time/results.json"       # and language models

# %%
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import sympy as sp
from IPython.display import display
from nbhelpers import check_answer, proved, report, show, show_figure

from cem_core.experiments import test_time, verdicts
from cem_core.experiments.gp import study as gp_study
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.lm import decisions as lm_decisions
from cem_core.experiments.lm import ladder as lm_ladder
from cem_core.experiments.lm import presets as lm_presets
from cem_core.experiments.lm import report as lm_report
from cem_core.experiments.lm import rules as lm_rules
from cem_core.experiments.lm import runner as lm_runner
from cem_core.experiments.lm import tie_ladder
from cem_core.ui import study_plots, sweep_plots


def listing(items, none="none") -> str:
    """'a, b and c' (or `none` for no items)."""
    items = list(items)
    return none if not items else items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def pm(mean: float, se: float, digits: int = 3) -> str:
    """mean ± se, or what is missing."""
    if not math.isfinite(mean):
        return "no runs"
    return f"{mean:+.{digits}f}" + (f" ± {se:.{digits}f}" if math.isfinite(se) else " (1 seed, no se)")


# the study's conditions with the paper's layer (docs/design.md#56-the-gp-factor-study, first paragraph);
# (P psd is our preconditioner in that layer); the others are the forms of the energy, ours (design notes
# §2.14), and their comparisons
PAPER_SETUPS = ("base", "long", "interleaved", "attention only", "64 points", "d_x = 2", "eta per step", "P psd",
                "P dlr", "depth 4", "looped x4")
assert set(PAPER_SETUPS) <= set(gp_study.STUDY_CLAIMS)


def is_paper_claim(text: str) -> bool:
    """An LM claim of the paper (ours are marked '(ours)' in lm_report.CLAIMS)."""
    return not text.startswith("(ours)")


def direction(claim: dict) -> str:
    """Why a contradicted claim is contradicted. Every A is the switch the claim is about and lower is
    better, so m > 0 means A does worse than the claim allows, m < 0 better (only a 'marginal' claim can be
    contradicted that way); a diverged run (no mean) counts as worse."""
    signs = {"better" if p["mean"] < 0 else "worse" for p in claim["pairs"] if p["verdict"] == "contradicted"
             and math.isfinite(p["mean"])} | {"worse" for p in claim["pairs"] if p["verdict"] == "contradicted"
                                                and not math.isfinite(p["mean"])}
    assert all(p["mean"] > 0 for p in claim["pairs"] if p["verdict"] == "contradicted"
               and p["kind"] != "marginal" and math.isfinite(p["mean"])), "an improves/comparable claim " \
        "can only be contradicted by A doing worse"
    return "both" if len(signs) > 1 else signs.pop()


# %% [markdown]
# ## 1. What is on disk
#
# Each results file holds one checked record per finished run (configuration, seed, metrics,
# provenance). A file that is not there yet gives no records; a study that is still running gives
# some.

# %%
def load(loader, path):
    return loader(path) if Path(path).exists() else []


gp = load(gp_sweep.GP_SWEEP.load, gp_sweep_path)
study = load(gp_sweep.GP_SWEEP.load, gp_study_path)
lm = load(lm_runner.LM_SWEEP.load, lm_sweep_path)

gp_missing, _ = gp_sweep.stale_hashes(gp, "default")
study_specs = gp_study.conditions()
have = {r["hash"] for r in study}
study_counts = {name: (len({s.hash for s in specs} & have), len(specs)) for name, specs in study_specs.items()}
study_total = sum(total for _, total in study_counts.values())
lm_preset = lm_presets.SWEEP_PRESETS["default"]
lm_total = len(lm_preset.variants) * len(lm_preset.seeds)
lines = [
    f"- **GP sweep**: {len(gp)} runs loaded from `{gp_sweep_path}`; {len(gp_missing)} runs of the default sweep "
    "not (yet) in it.",
    f"- **GP factor study**: {len(study)} of its {study_total} runs loaded from `{gp_study_path}`. "
    f"Complete conditions: {listing(n for n, (k, t) in study_counts.items() if k == t)}; "
    f"partly run: {listing(f'{n} ({k} of {t})' for n, (k, t) in study_counts.items() if 0 < k < t)}; "
    f"not run yet: {listing(n for n, (k, t) in study_counts.items() if k == 0)}.",
    f"- **LM claims sweep**: {len(lm)} of its {lm_total} runs loaded from `{lm_sweep_path}`.",
]
report("\n".join(lines))
print(f"{len(gp)} GP sweep runs, {len(study)} study runs, {len(lm)} LM runs loaded")

# %% [markdown]
# ## 2. How a claim gets a verdict
#
# A claim compares two configurations A and B by a metric where lower is better (validation perplexity
# for the language models, RMSE divided by the GP optimum for GP regression). Each configuration is
# trained with the same seeds, so runs A and B of seed $i$ share what the seed fixes: in GP regression
# the stream of training functions and the initialisation; in the LM sweep only the initialisation
# (every LM run sees the same tokens whatever its seed). The rule works on the **paired differences**
# $d_i = \text{metric}(A_i) - \text{metric}(B_i)$: their mean $m$ and standard error
# $\text{se} = s_d / \sqrt{n}$ over the $n$ seeds.
#
# | kind of claim | supported when | contradicted when |
# | --- | --- | --- |
# | A **improves** on B | $m < -2\,\text{se}$ | $m > +2\,\text{se}$ |
# | A is **comparable** to B (tolerance $t$ = 2% of B) | $m + 2\,\text{se} \le t$ | $m - 2\,\text{se} > t$ |
# | the gain is **marginal** | $\lvert m\rvert + 2\,\text{se} \le t$ | $\lvert m\rvert - 2\,\text{se} > t$ |
#
# Anything else is **inconclusive**; a claim of several pairs is supported when all its pairs are and
# contradicted when any is. The rule was committed before the runs and is recorded in each sweep's
# `sweep.json`; here it is as recorded, checked against the code that applies it:

# %%
for name, path, rule in (("LM claims sweep", lm_sweep_path, lm_rules.VERDICT_RULE),
                         ("GP factor study", gp_study_path, gp_study.STUDY_RULE)):
    manifest = Path(path).parent / "sweep.json"
    recorded = json.loads(manifest.read_text()).get("verdict_rule") if manifest.exists() else None
    if recorded is None:
        report(f"**{name}**: no recorded rule (`{manifest}` is not there); the code's rule:\n\n> {rule}")
    else:
        same = "the same rule the code applies" if recorded == rule else "**not** the rule the code applies now"
        report(f"**{name}**, as recorded in `{manifest}` ({same}):\n\n> {recorded}")

# %% [markdown]
# **Why pair by seed?** Model the metric of seed $i$ as what the seed does to both runs, $s_i$, plus
# what is particular to each run: $a_i = s_i + u_i$, $b_i = s_i + v_i$. SymPy proves, for three seeds,
# that the mean of the differences is the difference of the means (so pairing does not move the
# estimate) and that the spread of the differences does not contain $s_i$ at all; the unpaired
# standard error $\sqrt{s_a^2/n + s_b^2/n}$ does.

# %%
n = 3                                                   # seeds
s = sp.symbols("s_1:4", real=True)                      # what seed i does to both runs
u = sp.symbols("u_1:4", real=True)                      # the rest of run A_i
v = sp.symbols("v_1:4", real=True)                      # the rest of run B_i
a = [s_i + u_i for s_i, u_i in zip(s, u)]
b = [s_i + v_i for s_i, v_i in zip(s, v)]
d = [a_i - b_i for a_i, b_i in zip(a, b)]


def mean(xs):
    return sum(xs) / len(xs)


def var(xs):                                            # the sample variance (n - 1 in the denominator)
    return sum((x - mean(xs)) ** 2 for x in xs) / (len(xs) - 1)


assert sp.simplify(mean(d) - (mean(a) - mean(b))) == 0
proved(r"\bar d = \bar a - \bar b")
assert sp.simplify(var(d) - var([u_i - v_i for u_i, v_i in zip(u, v)])) == 0
assert all(sp.simplify(sp.diff(var(d), s_i)) == 0 for s_i in s)
proved(r"\mathrm{se}^2_{\text{paired}} = \frac{s_d^2}{n} = \frac{s_{u-v}^2}{n}\quad (\text{free of } s_i)")
unpaired = var(a) / n + var(b) / n
assert sp.simplify(sp.diff(unpaired, s[0])) != 0
show(r"\frac{\partial}{\partial s_1}\Big(\frac{s_a^2}{n} + \frac{s_b^2}{n}\Big)", sp.factor(sp.diff(unpaired, s[0])))

# %% [markdown]
# On the measured pairs: the paired standard error against the one that treats the two sides as
# independent runs. Since $s_d^2 = s_a^2 + s_b^2 - 2\,c_{ab}$ ($c_{ab}$ the sample covariance of the
# two sides over seeds), the paired one is smaller **exactly when $c_{ab} > 0$**; the cell checks this
# identity on every pair (relative tolerance $10^{-9}$). Runs of a seed that share nothing would give
# $c_{ab} > 0$ in about half of the pairs (checked below by simulation).

# %%
def by_seed(records, keep, metric):
    return {r["seed"]: r[metric] for r in records if keep(r) and not r["diverged"]}


compared = [("LM", is_paper_claim(text), f"{a_name} vs {b_name}",
             by_seed(lm, lambda r, n=a_name: r["name"] == n, "val_ppl"),
             by_seed(lm, lambda r, n=b_name: r["name"] == n, "val_ppl"))
            for text, claim_pairs in lm_report.CLAIMS for _, a_name, b_name in claim_pairs]
for c in gp_study.conditions_table(study):
    for p in c["pairs"]:
        (ga, Ta), (gb, Tb) = p["a"], p["b"]
        compared.append(("GP study", c["condition"] in PAPER_SETUPS, f"{ga} T={Ta} vs {gb} T={Tb}",
                         *(by_seed(study, lambda r, g=g, T=T: r["group"] == g and r["attention"] == "cem"
                                   and r["T"] == T, "rmse_ratio") for g, T in ((ga, Ta), (gb, Tb)))))
rows = []
for sweep, paper, name, A, B in compared:
    seeds = sorted(set(A) & set(B))
    if len(seeds) < 2:
        continue
    d = verdicts.paired_difference(A, B)
    a_values, b_values = np.array([A[k] for k in seeds]), np.array([B[k] for k in seeds])
    unpaired_se = math.sqrt(np.var(a_values, ddof=1) / len(seeds) + np.var(b_values, ddof=1) / len(seeds))
    covariance = np.cov(a_values, b_values, ddof=1)[0, 1]
    assert math.isclose(d["se"] ** 2, unpaired_se ** 2 - 2 * covariance / len(seeds), rel_tol=1e-9), name
    rows.append({"sweep": sweep, "A vs B": name, "claim of": "paper" if paper else "ours", "seeds": len(seeds),
                 "m": round(d["mean"], 4), "se paired": round(d["se"], 4), "se unpaired": round(unpaired_se, 4),
                 "paired / unpaired": round(d["se"] / unpaired_se, 2)})
if rows:
    pairing = pd.DataFrame(rows)
    display(pairing.set_index(["sweep", "A vs B"]))
    lines = []
    for sweep, part in pairing.groupby("sweep", sort=False):
        smaller = part["paired / unpaired"] < 1
        paper_part = part["claim of"] == "paper"
        lines.append(f"- **{sweep}**: pairing gives the smaller standard error in {int(smaller[paper_part].sum())} "
                     f"of the {int(paper_part.sum())} pairs of the paper's claims, and in {int(smaller.sum())} of "
                     f"all {len(part)} (ours included); median ratio paired / unpaired "
                     f"{part['paired / unpaired'].median():.2f}.")
    share = float((pairing["paired / unpaired"] < 1).mean())
    report("\n".join(lines) + f"\n\nOverall {share:.0%} of the pairs: "
           + ("no more than runs sharing nothing would give (about half), so what a seed fixes (in GP regression "
              "the training functions and initialisation, in the LM sweep only the initialisation) is small next "
              "to the rest of each run and pairing buys little here." if share <= 0.6 else
              "more than runs sharing nothing would give (about half): what a seed fixes matters here.")
           + " The rule, fixed in advance, uses the paired one.")
else:
    report("No pair has two seeds on both sides yet: nothing to compare.")

# %% [markdown]
# **What ±2 se covers with three seeds.** If the differences are normal, $(m - \mu)/\text{se}$ follows
# Student's $t$ with $n - 1 = 2$ degrees of freedom, whose density is
# $f(t) = \tfrac{1}{2\sqrt 2}(1 + t^2/2)^{-3/2}$. So $m \pm 2\,\text{se}$ is **not** a 95% interval:
# SymPy integrates $f$, and a simulation of 200,000 three-seed $t$ statistics (numpy, seed 0) checks it
# to **5 binomial standard errors**. The same simulation checks the "about half" above.

# %%
n_seeds = len(gp_study.SEEDS)
assert n_seeds == len(lm_preset.seeds) == 3, "this derivation is for three seeds"
t, k = sp.symbols("t", real=True), sp.symbols("k", positive=True)
density = (1 + t ** 2 / 2) ** sp.Rational(-3, 2) / (2 * sp.sqrt(2))
assert sp.simplify(sp.integrate(density, (t, -sp.oo, sp.oo)) - 1) == 0
covers = sp.simplify(sp.integrate(density, (t, -k, k)))
assert sp.simplify(covers - k / sp.sqrt(k ** 2 + 2)) == 0
proved(r"P(|T| \le k) = \frac{k}{\sqrt{k^2 + 2}},\qquad P(|T| \le 2) = \frac{2}{\sqrt 6}")
coverage = 2 / math.sqrt(6)
k95 = 0.95 * math.sqrt(2) / math.sqrt(1 - 0.95 ** 2)          # solves k / sqrt(k^2 + 2) = 0.95
assert math.isclose(float(covers.subs(k, 2)), coverage, rel_tol=1e-12)
assert math.isclose(float(covers.subs(k, k95)), 0.95, rel_tol=1e-12)

rng = np.random.default_rng(0)
draws = 200_000
x = rng.standard_normal((draws, n_seeds))                   # the differences of one pair, true mean 0
t_stat = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n_seeds))
covered = float(np.mean(np.abs(t_stat) <= 2))
mc_tolerance = 5 * math.sqrt(coverage * (1 - coverage) / draws)
assert abs(covered - coverage) < mc_tolerance, (covered, coverage)
a_sim, b_sim = rng.standard_normal((2, draws, n_seeds))     # two sides that share nothing
sample_cov = ((a_sim - a_sim.mean(axis=1, keepdims=True)) * (b_sim - b_sim.mean(axis=1, keepdims=True))).sum(axis=1)
positive = float(np.mean(sample_cov > 0))
assert abs(positive - 0.5) < 5 * math.sqrt(0.25 / draws), positive
report(f"±2 se covers the true difference with probability 2/√6 = **{coverage:.4f}** (simulated: {covered:.4f}, "
       f"tolerance ±{mc_tolerance:.4f}), not 0.95. A pair with no true difference is called supported with "
       f"probability {(1 - coverage) / 2:.3f} and contradicted with the same, and a 95% interval would need "
       f"±{k95:.2f} se. Sides that share nothing: paired se the smaller in {positive:.3f} of simulated pairs.")

# %% [markdown]
# **Recompute one claim by hand.** Claim 3 ("T = 2 improves CEM attention over T = 1") from the raw
# records with numpy, against `cem_core.experiments.lm.report.variant_difference` (which calls
# `cem_core.experiments.verdicts.paired_difference`) and `verdicts.verdict`. **Tolerance: $10^{-12}$
# absolute** on the mean and the standard error (float64; numpy and `statistics` may sum in different
# orders); the verdicts must be equal. Skipped, with a note, while the claim's runs are missing.

# %% tags=["compare-lm-pair"]
a_name, b_name = "attn T=2", "attn T=1"
A = {r["seed"]: r["val_ppl"] for r in lm if r["name"] == a_name}
B = {r["seed"]: r["val_ppl"] for r in lm if r["name"] == b_name}
seeds = sorted(set(A) & set(B))
if len(seeds) < 2 or any(r["diverged"] for r in lm if r["name"] in (a_name, b_name)):
    print(f"skipped: {a_name} vs {b_name} has {len(seeds)} seeds with both runs (need 2, none diverged)")
else:
    diffs = np.array([A[k] - B[k] for k in seeds])
    m_hand, se_hand = diffs.mean(), diffs.std(ddof=1) / np.sqrt(len(diffs))
    verdict_hand = "supported" if m_hand < -2 * se_hand else "contradicted" if m_hand > 2 * se_hand else "inconclusive"
    ours = lm_report.variant_difference(lm, a_name, b_name)
    error = max(abs(m_hand - ours["mean"]), abs(se_hand - ours["se"]))
    print(f"by hand: m = {m_hand:+.4f}, se = {se_hand:.4f} over seeds {seeds} -> {verdict_hand}; "
          f"max |difference from cem_core| = {error:.1e}")
    assert error < 1e-12, "paired_difference disagrees with the paired difference computed by hand"
    assert verdicts.verdict("improves", ours, lm_rules.TOLERANCE) == verdict_hand

# %% [markdown]
# The pair of claim 2 ("the CEM gated MLP stays competitive with SwiGLU": `mlp T=1` vs `llama`, a
# **comparable** claim with the 2% tolerance):

# %%
exercise_pair = lm_report.variant_difference(lm, "mlp T=1", "llama")
m, se, ref = exercise_pair["mean"], exercise_pair["se"], exercise_pair["reference"]
print(f"m = {m:+.4f}, se = {se:.4f}, ref = ppl(llama) = {ref:.4f} over {exercise_pair['seeds']} seeds")

# %% [markdown]
# ## Exercise
#
# Apply the rule by hand: with `m`, `se` and `ref` of the cell above and the tolerance of 2% of `ref`,
# **which verdict does claim 2 get?** Set `answer` to `"supported"`, `"contradicted"` or
# `"inconclusive"` (best as an expression of `m`, `se` and `ref`, so that it states the rule). Then
# think: what would the mean alone, without its $2\,\text{se}$ margin, have said?

# %% tags=["exercise-verdict-by-hand"]
answer = None                                               # your answer here


# %% tags=["check-verdict-by-hand"]
def check(answer):
    assert answer in ("supported", "contradicted", "inconclusive"), \
        "answer 'supported', 'contradicted' or 'inconclusive'"
    assert answer == verdicts.verdict("comparable", exercise_pair, lm_rules.TOLERANCE), \
        "not the verdict of the rule: compare m + 2 se and m - 2 se with 0.02 ref"


tolerance = lm_rules.TOLERANCE * ref
check_answer(answer, check, "verdict-by-hand",
             f"m ± 2 se = [{m - 2 * se:+.3f}, {m + 2 * se:+.3f}] against the tolerance t = 2% × {ref:.3f} = "
             f"{tolerance:.3f}: **{verdicts.verdict('comparable', exercise_pair, lm_rules.TOLERANCE)}**. "
             f"The mean alone ({m / ref:+.1%} of Llama's perplexity) is "
             f"{'within' if m <= tolerance else 'beyond'} the tolerance.")

# %% [markdown]
# ## 3. Gaussian-process regression: does deeper recursion lower the error?
#
# The paper's claim: on GP data, RMSE(T = 8) ≤ RMSE(T = 4) ≤ RMSE(T = 2) < RMSE(T = 1); the study below
# tests a weaker form, T = 4 and T = 8 each below T = 1. Every RMSE here is divided by the exact GP
# posterior mean's, the Bayes-optimal predictor in expected squared error
# (docs/design.md#invariant-7-the-gp-optimum-is-the-yardstick; on a finite test set a ratio can fall
# slightly below 1); notebook `04_gp_recursion` derives it and plots the sweep. First the committed sweep
# at depth 1, mean ± sample standard deviation over seeds:

# %%
if gp:
    by_T = gp_sweep.ratio_vs_T(gp)
    cem = by_T["CEM, diagonal none"]
    if cem["T"]:
        display(pd.DataFrame({"T": cem["T"], "RMSE / optimum, mean": np.round(cem["mean"], 3),
                              "std over seeds": np.round(cem["std"], 3)}).set_index("T"))
        best = cem["T"][int(np.argmin(cem["mean"]))]
        falls = all(x > y for x, y in zip(cem["mean"], cem["mean"][1:]))
        report(f"At depth 1 CEM attention's ratio is {listing(f'{x:.3f}' for x in cem['mean'])} at T = "
               f"{listing(str(T) for T in cem['T'])}; the lowest mean is at **T = {best}**, and it "
               f"{'falls' if falls else 'does not fall'} with every doubling of T. Llama attention: "
               f"{by_T['Llama']['mean']:.3f}. Whether these differences exceed the seeds' spread is the study's "
               "question below (its `base` condition is this sweep's runs, hash for hash).")
else:
    report(f"The GP sweep's results are not there (`{gp_sweep_path}`): run `make gp-sweep`.")

# %% [markdown]
# **The factor study** changes one thing at a time from that setup with the paper's layer (training
# length, token layout, attention-only blocks, 64 points, d_x = 2, learned step sizes, preconditioners,
# and depth or a looped block at equal compute), adds the forms of the energy (ours, design notes §2.14:
# the shared diagonal, bilinear or distance form, the CEM MLP, the joint block, some trained long), and
# puts each condition's claim to the rule above, on the RMSE ratio. A pair with no runs yet is
# inconclusive by construction.

# %%
conditions = gp_study.conditions_table(study)
display(pd.DataFrame(gp_study.table_rows(study)).set_index("condition"))

MEANING = {("improves", "supported"): "A is lower than B by more than 2 se",
           ("improves", "contradicted"): "A is higher than B by more than 2 se: recursion made it worse",
           ("comparable", "supported"): "A is at most 2% worse than B, with the 2 se margin",
           ("comparable", "contradicted"): "A is more than 2% worse than B, even after the 2 se margin"}


def pair_text(p: dict) -> str:
    (ga, Ta), (gb, Tb) = p["a"], p["b"]
    name = f"T={Ta} vs T={Tb}" if ga == gb else f"{ga} T={Ta} vs {gb} T={Tb}"
    if p["seeds"] == 0:
        return f"{name}: no runs yet"
    partial = f", only {p['seeds']} seeds" if 1 < p["seeds"] < len(gp_study.SEEDS) else ""
    what = MEANING.get((p["kind"], p["verdict"]), "within 2 se of the boundary, or too few seeds: undecided")
    return f"{name}: {pm(p['mean'], p['se'], 4)}{partial} ({what})"


measured = [c for c in conditions if any(p["seeds"] for p in c["pairs"])]
report("\n".join(f"- **{c['condition']}** → **{c['verdict']}**. {'; '.join(pair_text(p) for p in c['pairs'])}."
                 for c in conditions))

# %%
recursion = [c for c in measured if c["condition"] not in gp_study.EQUAL_COMPUTE + gp_study.FORM_COMPARISONS]
by_verdict = {(paper, v): [c["condition"] for c in recursion if (c["condition"] in PAPER_SETUPS) == paper
                           and c["verdict"] == v]
              for paper in (True, False) for v in ("supported", "contradicted", "inconclusive")}
contradicted_better = [c["condition"] for c in recursion if c["verdict"] == "contradicted" and direction(c) != "worse"]
unmeasured = [c["condition"] for c in conditions if c not in measured]


def recursion_text(paper: bool) -> str:
    n_measured = sum(len(by_verdict[paper, v]) for v in ("supported", "contradicted", "inconclusive"))
    return (f"of the {n_measured} with runs, **supported** in {listing(by_verdict[paper, 'supported'], 'none')}, "
            f"**contradicted** in {listing(by_verdict[paper, 'contradicted'], 'none')} and **inconclusive** in "
            f"{listing(by_verdict[paper, 'inconclusive'], 'none')}")


report(f"**Where the paper's recursion claim holds here.** In the setups with the paper's layer, "
       f"{recursion_text(True)}. In the forms of the energy (ours), {recursion_text(False)}. "
       + (f"Contradicted because recursion did better than claimed: {listing(contradicted_better)}. "
          if contradicted_better else "Every contradiction here is recursion doing worse than T = 1. ")
       + (f"Not measured yet: {listing(unmeasured)}." if unmeasured else "Every condition has runs."))
equal_compute = [c for c in measured if c["condition"] in gp_study.EQUAL_COMPUTE]
if equal_compute:
    report("**Recursion against depth at equal compute** (T = 4 at depth 1 against four layers' worth of "
           "compute): " + "; ".join(f"{c['condition']}: **{c['verdict']}** ({pair_text(c['pairs'][0])})"
                                    for c in equal_compute) + ".")
forms = [c for c in measured if c["condition"] in gp_study.FORM_COMPARISONS]
if forms:
    report("**One form of the energy against another** (ours, design notes §2.14): "
           + "; ".join(f"{c['condition']}: **{c['verdict']}** ({'; '.join(pair_text(p) for p in c['pairs'])})"
                       for c in forms) + ".")

# %% [markdown]
# The same as a map: one panel per condition with a grid of T, CEM's mean ratio with the band from the
# lowest to the highest seed, Llama attention of the same condition as a dashed line, and in the base
# panel depth 4 and the looped block.

# %%
cmap = gp_study.conditions_map(study)
if cmap:
    show_figure(study_plots.mpl_gp_conditions_map(study))
    best_T = {g: d["T"][int(np.argmin(d["mean"]))] for g, d in cmap.items() if len(d["T"]) > 1}
    with_T1 = [g for g in best_T if cmap[g]["T"][0] == 1]
    above = [f"{g} (T = {best_T[g]}, {min(cmap[g]['mean']) - cmap[g]['mean'][0]:+.4f} against T = 1)"
             for g in with_T1 if best_T[g] > 1]
    no_T1 = []                                  # conditions without a T = 1 run: their best T against base T = 1
    for g in (g for g in best_T if g not in with_T1):
        ref = {label: v for label, v in cmap[g]["lines"].items() if label.startswith("CEM T = 1 (")}
        against = "; ".join(f"{min(cmap[g]['mean']) - v:+.4f} against {label.removeprefix('CEM ')}"
                            for label, v in ref.items()) or "no T = 1 to compare with"
        no_T1.append(f"{g} (T = {listing(str(T) for T in cmap[g]['T'])}; best T = {best_T[g]}, {against})")
    llama_below = [g for g, d in cmap.items() if "Llama attention" in d["lines"]
                   and d["lines"]["Llama attention"] < min(d["mean"])]
    with_llama = [g for g, d in cmap.items() if "Llama attention" in d["lines"]]
    report(f"Among the conditions with a T = 1 run of their own, the lowest mean ratio is at T = 1 in "
           f"{listing([g for g in with_T1 if best_T[g] == 1], 'none')}"
           + (f", and at T > 1 in {listing(above)}" if above else "")
           + ". " + (f"Without a T = 1 run of their own: {listing(no_T1)}. " if no_T1 else "")
           + "These are differences of means; whether they exceed the seeds' spread is the verdict above. "
           f"Llama attention is below every CEM T in {len(llama_below)} of the {len(with_llama)} conditions "
           "that have a Llama run.")
else:
    report("No run of the study with a grid of T is there yet: no map.")

# %% [markdown]
# Recompute one pair of the study by hand: `base`, T = 4 against T = 1, from the records' RMSE
# ratios. **Tolerance: $10^{-12}$ absolute** on the mean and the standard error, as above; skipped
# while those runs are missing.

# %% tags=["compare-gp-pair"]
ratio = {T: {r["seed"]: r["rmse_ratio"] for r in study if r["group"] == "base" and r["attention"] == "cem"
             and r["T"] == T and not r["diverged"]} for T in (1, 4)}
seeds = sorted(set(ratio[4]) & set(ratio[1]))
if len(seeds) < 2:
    print(f"skipped: base T=4 vs T=1 has {len(seeds)} seeds with both runs (need 2)")
else:
    diffs = np.array([ratio[4][k] - ratio[1][k] for k in seeds])
    m_hand, se_hand = diffs.mean(), diffs.std(ddof=1) / np.sqrt(len(diffs))
    table_pair = next(c for c in conditions if c["condition"] == "base")["pairs"][0]
    error = max(abs(m_hand - table_pair["mean"]), abs(se_hand - table_pair["se"]))
    print(f"by hand: m = {m_hand:+.5f}, se = {se_hand:.5f} over seeds {seeds}; "
          f"max |difference from the conditions table| = {error:.1e}")
    assert error < 1e-12, "the conditions table disagrees with the paired difference computed by hand"

# %% [markdown]
# ## 4. Why: what the steps of a trained layer do
#
# The study records, for its depth-1 CEM runs, what each of the T steps does on held-out functions
# (`cem_core.experiments.gp.train.step_diagnostics`): the energy $E(x^{(t)})$ relative to the start, the
# update norm $|x^{(t)} - x^{(t-1)}|$, the attention entropy of step $t$ (in nats; $e^{H}$ is the
# effective number of keys attended to), and the RMSE ratio when the prediction is **read out after
# step $t$** (the rest of the model unchanged; $t = 0$ is no attention at all). Numbers are means over
# seeds.

# %%
diagnostics = {g: gp_study.diagnostics_by_T(study, g) for g in gp_study.MAP_CONDITIONS}
diagnostics = {g: d for g, d in diagnostics.items() if d}
rows = []
for g, by_T in diagnostics.items():
    for T, dd in by_T.items():
        drops = -np.diff(dd["energy_change"])
        readout = dd["rmse_ratio_after_step"]
        rows.append({"condition": g, "trained T": T,
                     "energy fall, step 1": round(float(drops[0]), 1),
                     "energy fall, last step": round(float(drops[-1]), 1),
                     "|update|, last / first": round(dd["update_norm"][-1] / dd["update_norm"][0], 3),
                     "entropy step 1 (nats)": round(dd["attention_entropy"][0], 3),
                     "entropy step 2": round(dd["attention_entropy"][1], 3) if T > 1 else None,
                     "ratio read out at t=0": round(readout[0], 3), "after step T": round(readout[-1], 3),
                     "best step": int(np.argmin(readout))})
if rows:
    display(pd.DataFrame(rows).set_index(["condition", "trained T"]))
else:
    report("No study run with step diagnostics is there yet.")

# %%
if diagnostics:
    group = "long" if "long" in diagnostics else next(iter(diagnostics))
    T_max = max(diagnostics[group])
    dd = diagnostics[group][T_max]
    drops = -np.diff(dd["energy_change"])
    entropy = dd["attention_entropy"]
    readout = dd["rmse_ratio_after_step"]
    anchors = sorted({r["anchor"] for r in study if r["group"] in diagnostics and "step_diagnostics" in r})
    one_step = diagnostics[group].get(1, {}).get("rmse_ratio_after_step", [math.nan])[-1]
    text = [f"In condition **{group}**, the layer trained at **T = {T_max}**:"]
    text.append(
        f"- **Energy.** It falls at {int((drops > 0).sum())} of {len(drops)} steps, by {drops[0]:,.0f} at the "
        f"first and {drops[-1]:,.0f} at the last ({drops[-1] / drops[0]:.2f}× the first); the update norm at the "
        f"last step is {dd['update_norm'][-1] / dd['update_norm'][0]:.2f}× the first. "
        + (f"These layers have no anchor (λ = {listing(f'{x:g}' for x in anchors)}), so the energy has no minimum "
           "(notebook `03_design_space`, descent without a minimum): "
           if anchors == [0.0] else f"Anchor values in these runs: {listing(f'{x:g}' for x in anchors)}. ")
        + ("the steps do not shrink" if dd["update_norm"][-1] >= 0.5 * dd["update_norm"][0] else "the steps shrink")
        + (" and the energy falls without settling." if drops[-1] >= 0.5 * drops[0]
           else " and the descent slows down."))
    if len(entropy) > 1:
        text.append(
            f"- **Attention.** The entropy is {entropy[0]:.3f} nats at step 1 (e^H ≈ {math.exp(entropy[0]):.2f} "
            f"keys), {entropy[1]:.3f} at step 2 (≈ {math.exp(entropy[1]):.2f} keys) and {entropy[-1]:.3f} at step "
            f"{len(entropy)}: "
            + ("after the first step each query attends to little more than one key."
               if math.exp(entropy[1]) < 1.5 else "the attention stays spread after the first step."))
    text.append(
        f"- **The prediction, step by step.** Read out after t = 0, …, {T_max} steps the ratio is "
        f"{', '.join(f'{x:.3f}' for x in readout)}: lowest after step {int(np.argmin(readout))}. "
        + (f"The model trained at T = 1 reaches {one_step:.3f} after its single step, so the {T_max} steps end "
           f"{'above' if readout[-1] > one_step else 'below'} it." if math.isfinite(one_step) else ""))
    report("\n".join(text))
    others = [g for g in ("attention only", *diagnostics) if g in diagnostics and g != group] or [group]
    show_figure(study_plots.mpl_gp_step_diagnostics(study, group=group, other=others[0]))
else:
    report("No study run with step diagnostics is there yet: nothing to explain with.")

# %% [markdown]
# **How to read it.** If the T steps refined one prediction the way a converging descent does, the
# update norms would shrink, the energy would settle at a minimum, and the error read out after the
# last step would be below what a single step gives. The cell below checks each of these for every
# trained T > 1 in the study:

# %%
verdict_rows = []
for g, by_T in diagnostics.items():
    single = by_T.get(1, {}).get("rmse_ratio_after_step", [math.nan])[-1]
    for T, dd in by_T.items():
        if T == 1:
            continue
        drops = -np.diff(dd["energy_change"])
        readout = dd["rmse_ratio_after_step"]
        verdict_rows.append({"condition": g, "T": T,
                             "updates shrink": dd["update_norm"][-1] < 0.5 * dd["update_norm"][0],
                             "energy settles": drops[-1] < 0.5 * drops[0],
                             "last step is the best read-out": int(np.argmin(readout)) == T,
                             "T steps beat one step": readout[-1] < single if math.isfinite(single) else None})
if verdict_rows:
    checks = pd.DataFrame(verdict_rows).set_index(["condition", "T"])
    display(checks)
    report(f"Of {len(checks)} trained layers with T > 1: the updates shrink in {int(checks['updates shrink'].sum())}, "
           f"the energy settles in {int(checks['energy settles'].sum())}, the last step is the best read-out in "
           f"{int(checks['last step is the best read-out'].sum())}, and the T steps end below the T = 1 model of "
           f"the same condition in {int(checks['T steps beat one step'].eq(True).sum())}"
           f" (of {int(checks['T steps beat one step'].notna().sum())} with a T = 1 model to compare). "
           "Steps that neither shrink nor settle fit a descent with no minimum to reach (λ = 0), though these "
           "checks do not prove it; the model then has to read a good prediction off a moving trajectory, and "
           "the comparison with T = 1 says what that costs.")
else:
    report("No study run with step diagnostics and T > 1 is there yet.")

# %% [markdown]
# **Learned step sizes.** The `eta per step` condition learns one step size per step; a schedule far
# from constant would show the model working around the fixed step:

# %%
etas = gp_study.learned_step_sizes(study, "eta per step")
if etas:
    report("\n".join(f"- trained at T = {T}: η = {', '.join(f'{x:.2f}' for x in values)}"
                     for T, values in etas.items()))
else:
    report("The `eta per step` condition has no runs yet.")

# %% [markdown]
# ## 5. The language-model claims in miniature
#
# The variants of `lm.variants.SWEPT` (nine for the paper's eight claims, two for our claims 9 and 10),
# the same tokens for every run, one learning rate chosen before the sweep, the budget of 20 tokens per
# Llama parameter (the caveats below check it from the records). The variants (validation perplexity,
# mean ± standard error over seeds; the last column is test-time scaling of the T = 2 models):

# %%
if lm:
    report(f"{len(lm_preset.variants)} variants × {len(lm_preset.seeds)} seeds = {lm_total} runs planned, "
           f"{len(lm)} loaded.")
    display(pd.DataFrame(lm_report.variant_rows(lm)).set_index("variant"))
    display(pd.DataFrame(lm_report.claim_rows(lm)).set_index("#"))
    report("The last column reads the same records with a t-based interval, each verdict labelled with its "
           "direction relative to the paper; the verdict column keeps the recorded rule. "
           + lm_report.reading_summary(lm))
else:
    report(f"The LM sweep's results are not there (`{lm_sweep_path}`): run `make lm-sweep`.")

# %%
claims = lm_report.claims(lm) if lm else []
if claims:
    def lm_pair_text(p: dict) -> str:
        if not p["seeds"]:
            return f"{p['a']} vs {p['b']}: no runs"
        return (f"{p['a']} vs {p['b']} ({p['kind']}): {pm(p['mean'], p['se'])}, "
                f"{p['mean'] / p['reference']:+.1%} of {p['b']}'s perplexity")

    report("\n".join(f"{c['claim']}. *{c['text']}* → **{c['verdict']}**: "
                     + "; ".join(lm_pair_text(p) for p in c["pairs"]) for c in claims))
    def outcome(c: dict) -> str:
        return f"contradicted, {direction(c)}" if c["verdict"] == "contradicted" else c["verdict"]

    OUTCOMES = {"supported": "supported", "contradicted, worse": "contradicted because A does worse than claimed",
                "contradicted, better": "contradicted because A does better than claimed",
                "contradicted, both": "contradicted in both directions", "inconclusive": "inconclusive"}
    count = {(paper, o): [str(c["claim"]) for c in claims if is_paper_claim(c["text"]) == paper and outcome(c) == o]
             for paper in (True, False) for o in OUTCOMES}

    def count_text(paper: bool) -> str:
        n_claims = sum(len(count[paper, o]) for o in OUTCOMES)
        parts = [f"{len(count[paper, o])} {OUTCOMES[o]} ({listing(count[paper, o])})"
                 for o in OUTCOMES if count[paper, o] or o in ("supported", "inconclusive")]
        return f"{n_claims} claims: " + ", ".join(parts)

    report(f"**The paper's {count_text(True)}.** Ours: {count_text(False)}. (A: the CEM variant or switch the "
           "claim is about.) A claim contradicted because A does better is not bad news for CEM: the paper "
           "undersold that switch.")

# %% [markdown]
# The rule, drawn: each pair's $m \pm 2\,\text{se}$ as a percentage of B's perplexity. An "improves" pair
# is decided when its interval stays on one side of 0; a "comparable" one when it stays below (supported)
# or above (contradicted) the +2% line; a "marginal" one is supported when it stays between −2% and +2%
# and contradicted when it lies wholly outside them.

# %%
if claims:
    colours = {"supported": "#54a24b", "contradicted": "#e45756", "inconclusive": "#9d9d9d"}
    drawn = [(f"{c['claim']}: {p['a']} vs {p['b']} ({p['kind']})", p) for c in claims for p in c["pairs"] if p["seeds"]]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(drawn) + 1.2))
    for k, (label, p) in enumerate(drawn):
        x, err = 100 * p["mean"] / p["reference"], 100 * 2 * p["se"] / p["reference"]
        ax.errorbar(x, k, xerr=err if math.isfinite(err) else 0, fmt="o", capsize=4, color=colours[p["verdict"]])
    ax.axvline(0, color="black", lw=1)
    for sign in (1, -1):
        ax.axvline(sign * 100 * lm_rules.TOLERANCE, color="gray", ls="--",
                   label="tolerance 2%: 'comparable' uses +2%, 'marginal' ±2%" if sign > 0 else None)
    ax.set_yticks(range(len(drawn)), [label for label, _ in drawn], fontsize=8)
    ax.invert_yaxis()
    for verdict, colour in colours.items():
        ax.plot([], [], "o", color=colour, label=verdict)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.4, -0.12), ncol=2)
    ax.set(xlabel="ppl(A) − ppl(B), % of ppl(B): m ± 2 se over seeds", title="The LM claims under the verdict rule")
    fig.tight_layout()
    show_figure(fig)
    show_figure(sweep_plots.mpl_lm_perplexity(lm))
    show_figure(sweep_plots.LM_FIGURES["lm_validation_curves"](lm))

# %% [markdown]
# **Caveats, from the records themselves.** The paper trains 86M–162M-parameter models on SlimPajama,
# with configurations it does not fully give (docs/paper-notes.md); what these runs are:

# %%
if lm:
    llama_run = next((r for r in lm if r["name"] == "llama"), lm[0])
    source = llama_run["identity"]["data"]["source"]
    data = ("the **demo corpus** (Python standard library source and docstrings), **not SlimPajama**"
            if source == "demo" else f"data source `{source}`")
    torch_builds = sorted({r["provenance"]["torch"] for r in lm})
    seeds_per = sorted({sum(1 for r in lm if r["name"] == name) for name in {r["name"] for r in lm}})
    report(f"- **Size**: the Llama model has {llama_run['params']:,} parameters, "
           f"{86e6 / llama_run['params']:,.0f}× fewer than the paper's smallest (86M).\n"
           f"- **Data**: {data}.\n"
           f"- **Compute**: {llama_run['steps']:,} steps, {llama_run['tokens']:,} tokens per run = "
           f"{llama_run['tokens'] / llama_run['params']:.1f} tokens per Llama parameter; PyTorch "
           f"{listing(torch_builds)}"
           + (" (a CPU build)" if all(b.endswith("+cpu") for b in torch_builds) else "") + ".\n"
           f"- **Seeds**: {listing(str(k) for k in seeds_per)} per variant; learning rate "
           f"{listing(sorted({format(r['lr'], 'g') for r in lm}))} for every variant.\n\n"
           "So these verdicts are about the *direction* of each claim at this size and on this data; they "
           "neither confirm nor refute the paper's numbers at its scale.")

# %% [markdown]
# ## 6. A referee's objections: each variant at its own rate, and a width ladder
#
# Two objections to section 5. **One rate for all**: a variant trained at another variant's rate may be
# held back by the rate, not by its design. So each variant's rate is the best of a 6-rate grid at a
# quarter of the budget (`results/lm-rates`), and the variants are trained again at it, three seeds each at
# the full budget (`results/lm-own`), with two more: the shared diagonal with a learned step size per step,
# with and without the `dlr` preconditioner (is `dlr`'s gain step-size control?). These runs are read with
# the $t$-based rule ($q = 4.30$ standard errors at 3 seeds), fixed before they trained. **One size**: at
# 0.25M parameters one cannot say whether a gap narrows or grows with scale, so a width ladder trains Llama
# and three CEM variants at d = 32, 64 and 128 (0.03M to 0.43M parameters) on the demo corpus of Python
# source (not SlimPajama). The ladder at the paper's budget (`results/lm-budget-ladder`) trains each width on
# 20 tokens per Llama parameter, three seeds that also vary the data order. The earlier ladder
# (`results/lm-ladder`) trained a quarter of that with two seeds; its smallest rung had 82 steps. Both are read
# with one rule: the gap per width as a mean over seeds with its $t$-interval, a line through the width means
# weighted by their standard errors, and a verdict on the gap's *size* (narrowing, growing, no trend shown).

# %%
lm_own = load(lm_runner.LM_SWEEP.load, lm_own_path)
lm_own_decisions = lm_decisions.read_decisions(Path(lm_own_path).parent)   # the rates it trains at
if lm and lm_own:
    planned = (f" of the own-rate sweep's {len(lm_presets.preset_runs('own', decisions=lm_own_decisions))} runs"
               if lm_own_decisions else " own-rate runs (the decisions table beside them is missing)")
    report(f"{len(lm_own)}{planned} loaded.")
    display(pd.DataFrame(lm_report.own_variant_rows(lm, lm_own)).set_index("variant"))
    side_by_side = lm_report.side_by_side_rows(lm, lm_own)
    if side_by_side:
        display(pd.DataFrame(side_by_side).set_index("#"))
        report(lm_report.own_summary(lm, lm_own) + "\n\n" + lm_report.step_size_summary(lm_own))
    else:
        report("No claim has both its variants in the own-rate sweep yet.")
else:
    report(f"The own-rate sweep's results are not there (`{lm_own_path}`): run `make lm-own`.")

# %%
lm_ladders = {"budget-ladder": load(lm_runner.LM_SWEEP.load, lm_budget_ladder_path),
              "ladder": load(lm_runner.LM_SWEEP.load, lm_ladder_path)}
for preset, records in lm_ladders.items():
    if records:
        report(f"**{lm_ladder.LADDERS[preset].capitalize()}**: {len(records)} runs loaded. "
               + lm_ladder.progress_note(records, preset) + " " + lm_ladder.summary(records, preset))
        display(pd.DataFrame(lm_ladder.trend_rows(records, preset)).set_index("variant"))
        figures = sweep_plots.BUDGET_LADDER_FIGURES if preset == "budget-ladder" else sweep_plots.LADDER_FIGURES
        show_figure(next(iter(figures.values()))(records))
    else:
        report(f"No results of {lm_ladder.LADDERS[preset]} yet: run `make lm-{preset}`.")

# %% [markdown]
# ## 7. Two questions the results raise: which tie, and can recursion scale at test time
#
# **Which tie costs the perplexity?** CEM attention ties $W^V = W^K$ and $W^O = W^{Q\top}$, the CEM MLP
# $\text{down} = U^\top$. The tie ladder trains CEM attention at $T = 1$ with each tie setting and cem-full with
# its MLP tied and untied, beside Llama, at $d = 64$ and $128$ on 20 tokens per Llama parameter of the demo
# corpus (not SlimPajama). With no ties at $T = 1$ CEM attention *is* Llama's attention of the same $\beta$
# (a test, to $10^{-15}$), so what is left of the gap there is the rest of the CEM form. Per width and untied
# variant, $d = \ln \text{ppl(tied)} - \ln \text{ppl(untied)}$ paired by seed, with its 95% $t$-interval,
# and the share of the tied relative's gap to Llama it closes (a ratio of means, no interval).

# %%
lm_ties = load(lm_runner.LM_SWEEP.load, lm_tie_ladder_path)
if lm_ties:
    report(f"**The tie ladder**: {len(lm_ties)} runs loaded. " + lm_ladder.progress_note(lm_ties, "tie-ladder")
           + " " + tie_ladder.tie_summary(lm_ties))
    display(pd.DataFrame(tie_ladder.effect_rows(lm_ties)).set_index(["width", "untied variant"]))
    show_figure(sweep_plots.TIE_LADDER_FIGURES["lm_tie_ladder"](lm_ties))
else:
    report("No results of the tie ladder yet: run `make lm-tie-ladder`.")

# %% [markdown]
# Recompute one effect by hand from the raw records: the first untied variant's $d$ at the first width, each side
# at its chosen rate. **Tolerance: $10^{-12}$ relative** on the mean.

# %%
effects = tie_ladder.effects(lm_ties) if lm_ties else []
if effects:
    e = effects[0]
    chosen = lm_ladder.best_rates(lm_ties, "tie-ladder")
    tied = {r["seed"]: r["val_ppl"] for r in chosen[(e["width"], e["relative"])]["runs"]}
    untied = {r["seed"]: r["val_ppl"] for r in chosen[(e["width"], e["variant"])]["runs"]}
    d = np.array([np.log(tied[s] / untied[s]) for s in sorted(set(tied) & set(untied))])
    assert abs(d.mean() - e["mean"]) <= 1e-12 * abs(e["mean"])
    report(f"{e['variant']} at d = {e['width']}: d = {d.mean():+.4f} over {len(d)} seeds by hand, "
           f"{e['mean']:+.4f} by `tie_ladder.effects`.")

# %% [markdown]
# **Can in-layer recursion scale at test time?** Our trained models get worse past their trained $T$
# (notebook 06). Four training regimes: fixed $T$ (the paper's), $T$ drawn per batch from $1..T$, the anchor
# $\tfrac{\lambda}{2}\lVert x - x^{(0)}\rVert^2$ with $\lambda = 1$, and the loss averaged over the prediction
# after every step. A regime **scales at test time** when its metric at $2T$ and at $4T$ is below its metric at
# the trained $T$, the paired 95% $t$-interval excluding 0 (the rule fixed before the runs).

# %%
test_time_records = {"gp": load(gp_sweep.GP_SWEEP.load, gp_test_time_path),
                     "lm": load(lm_runner.LM_SWEEP.load, lm_test_time_path)}
for task, records in test_time_records.items():
    if records:
        left = test_time.planned(task) - len(records)
        report(f"**Test-time study, {task.upper()}**: {len(records)} runs loaded"
               + (f", {left} still to run (`make {task}-test-time`)" if left else "") + ". "
               + test_time.test_time_summary(task, records))
        display(pd.DataFrame(test_time.test_time_rows(task, records)).set_index(["condition", "regime"]))
        figures = sweep_plots.GP_TEST_TIME_FIGURES if task == "gp" else sweep_plots.LM_TEST_TIME_FIGURES
        for builder in figures.values():
            show_figure(builder(records))
    else:
        report(f"No results of the {task.upper()} test-time study yet: run `make {task}-test-time`.")

# %% [markdown]
# ## 8. What holds, in one place

# %%
summary = []
if recursion:
    def gp_summary(paper: bool) -> str:
        got = {v: by_verdict[paper, v] for v in ("supported", "contradicted", "inconclusive")}
        return (f"supported in {len(got['supported'])} of {sum(map(len, got.values()))} measured conditions "
                f"({listing(got['supported'], 'none')}), contradicted in {len(got['contradicted'])}, "
                f"undecided in {len(got['inconclusive'])}")

    summary.append(f"- **GP, recursion** (depth 1, RMSE / optimum), the claim that deeper recursion lowers the "
                   f"error: with the paper's layer {gp_summary(True)}; in the forms of the energy (ours) "
                   f"{gp_summary(False)}.")
else:
    summary.append("- **GP, recursion**: no study runs yet.")
if claims:
    summary.append(f"- **Language models** at {llama_run['params'] / 1e6:.2f}M parameters: the paper's "
                   f"{count_text(True)}. Ours: {count_text(False)}.")
else:
    summary.append("- **Language models**: no runs yet.")
if lm and lm_own:
    summary.append("- **Language models, each variant at its own rate**: " + lm_report.own_summary(lm, lm_own))
for preset, records in lm_ladders.items():
    if records:
        summary.append(f"- **{lm_ladder.LADDERS[preset].capitalize()}**: " + lm_ladder.summary(records, preset))
own_missing = (len(lm_runner.stale_runs(lm_own, "own", decisions=lm_own_decisions)[0]) if lm_own_decisions
               else "all")
if lm_ties:
    summary.append("- **The tie ladder**: " + tie_ladder.tie_summary(lm_ties))
for task, records in test_time_records.items():
    if records:
        summary.append(f"- **Test-time steps, {task.upper()}**: " + test_time.test_time_summary(task, records))
cells_left = len(lm_ladder.unfinished(lm_ladders["budget-ladder"], "budget-ladder"))
summary.append(f"- Still to come: {study_total - len(study)} study runs, {lm_total - len(lm)} LM runs, "
               f"{own_missing} own-rate runs, {cells_left} of the budget ladder's 12 widths and variants, "
               f"{len(gp_missing)} GP sweep runs.")
report("\n".join(summary))

# %% [markdown]
# **Takeaway.** A verdict is only as good as the rule behind it, and the rule has to be fixed before
# the runs: paired by seed, decided at two standard errors, with the tolerance of "comparable" stated in
# advance. The app's [GP page](http://localhost:8501/gp "needs the app: run make app first") and
# [language-model page](http://localhost:8501/lm "needs the app: run make app first") (with `make app`)
# show the same records interactively; `make gp-study` resumes the study and
# this notebook reads whatever it has finished.
