"""The GP factor study: under which conditions in-layer recursion helps, and the verdict for each.

Every condition crosses CEM attention at T in {1, 2, 4, 8} (depth 1) with one factor changed from the
committed sweep's setup (width 64, 2,000 steps, RBF kernel, 32 points, d_x = 1, pair tokens), with a
Llama-attention run of the same condition as a line to compare with:

- ``base``: the setup itself;
- ``long``: trained for ``LONG_STEPS``, the length at which CEM T = 1 stopped improving in the
  ``plateau`` preset (``plateau_steps``: the first evaluation within 1% of the curve's best), at
  T in {1, 4, 8} (T = 2 left out to fit the time budget);
- ``interleaved``: query and pair tokens (Garg et al.'s layout) instead of pair tokens;
- ``attention only``: blocks without an MLP;
- ``64 points`` and ``d_x = 2``: harder tasks;
- ``eta per step``, ``P psd``, ``P dlr``: learned step sizes per step, learned preconditioners, at
  T = 4 and 8 (against ``base`` at T = 1);
- ``depth 4`` and ``looped x4``: CEM T = 1 at depth 4, and one block looped 4 times (shared weights),
  against CEM T = 4 at depth 1: recursion vs depth at equal compute;
- the block as one energy and the distance-form diagonal (docs/design.md#214-the-block-as-one-energy):
  ``diagonal shared`` (the bilinear D+LR diagonal, shared by the heads) and ``distance`` (the same diagonal in
  distance form) at T in {1, 4, 8}; ``CEM MLP`` (the CEM gated MLP after CEM attention, each its own T steps)
  and ``joint`` (one descent on E_att + E_mlp, T in {1, 2, 4, 8}); ``joint + distance``; and ``distance long``,
  ``joint long``, ``joint + distance long`` at ``LONG_STEPS`` and ``LONG_TS``. These have no Llama run of
  their own (Llama attention cannot be part of a joint block); their panels show base's and long's.

The verdicts use ``verdicts`` (the LM claims table's rule) on the RMSE ratio to the GP optimum.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from cem_core.experiments import verdicts
from cem_core.experiments.records import markdown_table
from cem_core.nn.config import ModelShape

from .model import GPModelConfig
from .task import GPTaskConfig
from .train import GPTrainConfig, RunSpec

STUDY_TS = (1, 2, 4, 8)
SEEDS = (0, 1, 2)
BASE_STEPS = 2000
PLATEAU_STEPS, PLATEAU_EVERY = 16000, 1000
LONG_STEPS = 12000       # plateau_steps() of the committed plateau probe (results/gp-plateau); a test checks it
LONG_TS = (1, 4, 8)      # the long condition leaves T = 2 out to fit the study's time budget
NEW_TS = (1, 4, 8)       # the T grid of the block-energy and distance-form conditions (joint: STUDY_TS)
COMMITTED_PLATEAU = Path("results") / "gp-plateau"   # where the repository keeps them, from its root
COMMITTED_STUDY = Path("results") / "gp-study"
STUDY_TOLERANCE = 0.02
STUDY_RULE = verdicts.rule("ratio", "held-out RMSE / GP optimum", STUDY_TOLERANCE)

_BASE_MODEL = GPModelConfig(shape=ModelShape(d_model=64, n_layers=1, n_heads=4, d_ff=128))
_BASE_TRAIN = GPTrainConfig(steps=BASE_STEPS, batch_size=32)


def _runs(group: str, task: GPTaskConfig, model: GPModelConfig, train: GPTrainConfig,
          Ts=STUDY_TS, llama: bool = True, seeds=SEEDS) -> list[RunSpec]:
    models = ([replace(model, attention="llama")] if llama else []) + [model.with_cem(T=T) for T in Ts]
    return [RunSpec(task=task, model=m, train=replace(train, seed=seed), group=group) for m in models for seed in seeds]


def plateau_runs() -> list[RunSpec]:
    """CEM T = 1 and Llama attention trained long, the held-out RMSE recorded along the way (one seed)."""
    train = replace(_BASE_TRAIN, steps=PLATEAU_STEPS, eval_every=PLATEAU_EVERY)
    return _runs("plateau", GPTaskConfig(), _BASE_MODEL, train, Ts=(1,), seeds=(0,))


# The learning-rate check per T: is the study's one rate (GP_OPTIM's 3e-3) as good for CEM attention
# at T = 8 as at T = 1? Fixed before its runs trained, and recorded in its sweep.json.
RATE_CHECK_LRS = (1e-3, 3e-3, 1e-2)
RATE_CHECK_TS = (1, 8)
COMMITTED_RATE_CHECK = Path("results") / "gp-rates"
RATE_CHECK_RULE = (
    "CEM attention (the base condition: width 64, depth 1, 2,000 steps) at T = 1 and T = 8, each at learning rates "
    "1e-3, 3e-3 (the study's rate) and 1e-2, seeds 0, 1 and 2. At each T, for each other rate r the difference "
    "d = ratio(3e-3) - ratio(r) in held-out RMSE / GP optimum is paired by seed, with its 95% Student's t interval "
    "(seeds - 1 degrees of freedom). The study's rate suits T when no other rate's interval lies wholly above 0 "
    "(no rate is shown to be better); otherwise the rate with the interval wholly above 0 and the larger mean "
    "difference is named as better for T. A diverged run counts as infinitely bad.")


def rate_check_runs() -> list[RunSpec]:
    """CEM attention at RATE_CHECK_TS x RATE_CHECK_LRS x SEEDS (the base condition otherwise); the 3e-3 runs are the
    study's base runs, hash for hash."""
    return [RunSpec(task=GPTaskConfig(), model=_BASE_MODEL.with_cem(T=T),
                    train=replace(_BASE_TRAIN, seed=seed, optim=replace(_BASE_TRAIN.optim, lr=lr)), group="rates")
            for T in RATE_CHECK_TS for lr in RATE_CHECK_LRS for seed in SEEDS]


def rate_check_table(records: list[dict]) -> list[dict]:
    """One row per T and other rate: the paired difference to the study's rate with its t-interval, and the
    reading under RATE_CHECK_RULE (per T: 'suits' or the better rate)."""
    study_lr = _BASE_TRAIN.optim.lr

    def ratios(T, lr):
        return {r["seed"]: (math.inf if r["diverged"] else r["rmse_ratio"]) for r in records
                if r["attention"] == "cem" and r["T"] == T and r["config"]["train"]["lr"] == lr}

    rows = []
    for T in RATE_CHECK_TS:
        mine = ratios(T, study_lr)
        compared = []
        for lr in (lr for lr in RATE_CHECK_LRS if lr != study_lr):
            theirs = ratios(T, lr)
            seeds = sorted(set(mine) & set(theirs))
            diffs = [mine[s] - theirs[s] for s in seeds]
            if all(math.isfinite(d) for d in diffs):
                interval = verdicts.t_interval(diffs)
            else:                       # a diverged run, infinitely bad: the interval is all on its side (or none)
                mean = sum(diffs) / len(diffs)
                interval = {"n": len(diffs), "mean": mean, "se": math.nan, "low": mean, "high": mean}
            compared.append({"T": T, "lr": lr, "seeds": len(seeds),
                             "ratio at 3e-3": statistics.fmean(mine[s] for s in seeds),
                             "ratio at lr": statistics.fmean(theirs[s] for s in seeds), **interval})
        better = [c for c in compared if c["low"] > 0]
        reading = "suits" if not better else f"{max(better, key=lambda c: c['mean'])['lr']:g} is better"
        rows += [c | {"reading": reading} for c in compared]
    return rows


RATES_START = "<!-- gp rates: generated by cem_core.experiments.gp.study.rate_check_markdown; do not edit -->"
RATES_END = "<!-- /gp rates -->"


def rate_check_markdown(records: list[dict]) -> str:
    """The rate check's table as docs/results-gp.md shows it (between RATES_START and RATES_END)."""
    rows = [{"T": str(r["T"]), "other rate": f"{r['lr']:g}", "seeds": str(r["seeds"]),
             "ratio at 3e-3": f"{r['ratio at 3e-3']:.3f}", "ratio at the other rate": f"{r['ratio at lr']:.3f}",
             "3e-3 minus other, 95% t-interval": f"{r['mean']:+.4f} [{r['low']:+.4f}, {r['high']:+.4f}]",
             "the study's rate": f"**{r['reading']}**"} for r in rate_check_table(records)]
    return markdown_table(rows, ("seeds", "ratio at 3e-3", "ratio at the other rate")) + "\n"


def plateau_steps(records: list[dict]) -> int:
    """The first evaluated length at which CEM T = 1's held-out RMSE is within 1% of its best on the curve."""
    (run,) = [r for r in records if r["group"] == "plateau" and r["attention"] == "cem"]
    best = min(value for _, value in run["rmse_curve"])
    return min(step for step, value in run["rmse_curve"] if value <= 1.01 * best)


@dataclass(frozen=True)
class Condition:
    """One condition of the study: its runs (none for a claim that compares other conditions' runs), its claim
    (text, [(kind, (group, T), (group, T)), ...]: the paper's claim is that deeper recursion lowers the RMSE),
    what the claim compares ("recursion": deeper T against T = 1; "equal compute"; "form": one form of the
    energy against another), and whether the conditions map draws a panel for it, showing the Llama run of
    ``llama_of`` when it has none of its own. A new condition is one entry of ``study``."""
    name: str
    runs: tuple
    claim: tuple
    compares: str = "recursion"
    mapped: bool = True
    llama_of: str | None = None


def _deeper(group: str, against: str | None = None, Ts=(4, 8)) -> tuple:
    """The claim that T = 4 and T = 8 each lower the RMSE below T = 1 (of ``against``, else of the group)."""
    text = (f"with {group}, T = 4 and T = 8 each below T = 1 ({against})" if against else
            "deeper recursion lowers the RMSE (T = 4 and T = 8 each below T = 1)")
    return text, [("improves", (group, T), (against or group, 1)) for T in Ts]


def study() -> tuple[Condition, ...]:
    """The study's conditions, in the order of its table (module docstring)."""
    task, model, train = GPTaskConfig(), _BASE_MODEL, _BASE_TRAIN
    long = replace(train, steps=LONG_STEPS)
    out = [Condition("base", _runs("base", task, model, train), _deeper("base")),
           Condition("long", _runs("long", task, model, long, Ts=LONG_TS), _deeper("long"))]
    for name, t, m in (("interleaved", task, replace(model, tokens="interleaved")),
                       ("attention only", task, replace(model, mlp="none")),
                       ("64 points", GPTaskConfig(n_points=64), model), ("d_x = 2", GPTaskConfig(d_x=2), model)):
        out.append(Condition(name, _runs(name, t, m, train), _deeper(name)))
    for name, switches in (("eta per step", dict(eta_mode="per_step")), ("P psd", dict(preconditioner="psd")),
                           ("P dlr", dict(preconditioner="dlr"))):
        runs = _runs(name, task, model.with_cem(**switches), train, Ts=(4, 8), llama=False)
        out.append(Condition(name, runs, _deeper(name, against="base")))
    out += [Condition("depth 4", _runs("depth 4", task, model.with_shape(n_layers=4), train, Ts=(1,), llama=False),
                      ("recursion matches depth at equal compute: T = 4 at depth 1 within 2% of T = 1 at depth 4",
                       [("comparable", ("base", 4), ("depth 4", 1))]), compares="equal compute", mapped=False),
            Condition("looped x4", _runs("looped x4", task, replace(model, loops=4), train, Ts=(1,), llama=False),
                      ("recursion matches a looped block: T = 4 within 2% of one block looped 4 times",
                       [("comparable", ("base", 4), ("looped x4", 1))]), compares="equal compute", mapped=False)]
    # the block as one energy and the distance-form diagonal (fixed before their runs trained)
    shared, distance = dict(diagonal="shared"), dict(diagonal="shared", diagonal_form="distance")
    cem_mlp = replace(model, mlp="cem")
    joint = cem_mlp.with_cem(block="joint")
    for name, m, steps, Ts in (("diagonal shared", model.with_cem(**shared), train, NEW_TS),
                               ("distance", model.with_cem(**distance), train, NEW_TS),
                               ("CEM MLP", cem_mlp, train, NEW_TS),
                               ("joint", joint, train, STUDY_TS),
                               ("joint + distance", joint.with_cem(**distance), train, NEW_TS),
                               ("distance long", model.with_cem(**distance), long, LONG_TS),
                               ("joint long", joint, long, LONG_TS),
                               ("joint + distance long", joint.with_cem(**distance), long, LONG_TS)):
        out.append(Condition(name, _runs(name, task, m, steps, Ts=Ts, llama=False), _deeper(name),
                             llama_of="long" if steps is long else "base"))
    out += [Condition("distance vs bilinear", (), (
                "the distance form lowers the RMSE against the bilinear shared diagonal at T = 1, 4 and 8",
                [("improves", ("distance", T), ("diagonal shared", T)) for T in NEW_TS]),
                compares="form", mapped=False),
            Condition("joint vs sequential", (), (
                "one energy for the block lowers the RMSE against the sequential CEM block (CEM MLP) at T = 1, 4 "
                "and 8", [("improves", ("joint", T), ("CEM MLP", T)) for T in NEW_TS]),
                compares="form", mapped=False),
            Condition("joint vs looped", (), (
                "the joint block matches a looped block: joint T = 4 within 2% of one block looped 4 times",
                [("comparable", ("joint", 4), ("looped x4", 1))]), compares="equal compute", mapped=False)]
    return tuple(out)


STUDY = study()
STUDY_CLAIMS = {c.name: c.claim for c in STUDY}
EQUAL_COMPUTE = tuple(c.name for c in STUDY if c.compares == "equal compute")
FORM_COMPARISONS = tuple(c.name for c in STUDY if c.compares == "form")
MAP_CONDITIONS = tuple(c.name for c in STUDY if c.mapped)
LLAMA_OF = {c.name: c.llama_of for c in STUDY if c.llama_of}       # a panel without a Llama run of its own


def conditions() -> dict[str, list[RunSpec]]:
    """The study's runs by condition."""
    return {c.name: list(c.runs) for c in STUDY if c.runs}


def study_runs() -> list[RunSpec]:
    return [spec for specs in conditions().values() for spec in specs]


# -- the conditions table and map -----------------------------------------------------------------


def _ratios(records: list[dict], group: str, T: int | None, attention: str = "cem") -> dict:
    """{seed: RMSE ratio} of a condition's runs at T (Llama: T None)."""
    return {r["seed"]: (math.inf if r["diverged"] else r["rmse_ratio"]) for r in records
            if r["group"] == group and r["attention"] == attention and (T is None or r["T"] == T)}


def conditions_table(records: list[dict]) -> list[dict]:
    """One row per condition: its claim, the pairs with mean ± se of the ratio difference, the verdict under the
    recorded rule (m against 2 se), and its reading under the project's one statistical reading (m against the 95%
    Student's t interval, seeds - 1 degrees of freedom: ``verdicts.t_multiplier``), with each pair's two-sided
    p-value of a difference from 0 (``verdicts.paired_p``)."""
    rows = []
    for group, (text, pairs) in STUDY_CLAIMS.items():
        compared = []
        for kind, a, b in pairs:
            d = verdicts.paired_difference(_ratios(records, *a), _ratios(records, *b))
            compared.append(d | {"kind": kind, "a": a, "b": b, "verdict": verdicts.verdict(kind, d, STUDY_TOLERANCE),
                                 "t_verdict": verdicts.verdict(kind, d, STUDY_TOLERANCE,
                                                               verdicts.t_multiplier(d["seeds"])),
                                 "p": verdicts.paired_p(d)})
        rows.append({"condition": group, "claim": text, "pairs": compared,
                     "verdict": verdicts.overall([p["verdict"] for p in compared]),
                     "t_verdict": verdicts.overall([p["t_verdict"] for p in compared])})
    return rows


def study_multiplicity(records: list[dict]) -> dict:
    """Multiplicity over the study's paired comparisons: Holm's step-down procedure (``verdicts.holm``) on the
    pairs' p-values of a difference from 0, and the pairs whose difference survives it."""
    pairs = [(row["condition"], p) for row in conditions_table(records) for p in row["pairs"]]
    kept = verdicts.holm([p["p"] for _, p in pairs])
    return {"comparisons": sum(math.isfinite(p["p"]) for _, p in pairs), "survivors": [pairs[i] for i in kept]}


def holm_sentence(records: list[dict]) -> str:
    """One sentence on multiplicity, as docs/results-gp.md and the app's GP page say it."""
    found = study_multiplicity(records)
    named = "; ".join(f"{condition}: {pair['a'][0]} T={pair['a'][1]} vs {pair['b'][0]} T={pair['b'][1]} "
                      f"({pair['mean']:+.4f})" for condition, pair in found["survivors"])
    return (f"Multiplicity: the study makes {found['comparisons']} paired comparisons; under Holm's correction at "
            f"{verdicts.HOLM_LEVEL:.0%} (two-sided paired t-tests of a difference from 0, 2 degrees of freedom at 3 "
            "seeds), "
            f"{len(found['survivors'])} of them remain" + (f": {named}." if named else "."))


def conditions_map(records: list[dict]) -> dict:
    """Per condition with a T grid: the RMSE ratio vs T (mean, lowest and highest seed), lines to compare
    with ({label: mean ratio}) and curves to compare with ({label: {"T", "mean"}}): Llama attention of the
    same condition (or of LLAMA_OF's), and the runs of other conditions that the claims compare this
    condition's runs with, a line for one run (in the base panel CEM T = 1 at depth 4 and one block looped
    4 times, equal compute to T = 4; in the step-size and preconditioner panels base T = 1) and a curve for
    a condition compared at each T (distance against the bilinear diagonal, joint against the sequential
    block)."""
    out = {}
    for group in MAP_CONDITIONS:
        Ts = sorted({r["T"] for r in records if r["group"] == group and r["attention"] == "cem"})
        if not Ts:
            continue
        values = [list(_ratios(records, group, T).values()) for T in Ts]
        llama = LLAMA_OF.get(group, group)
        label = "Llama attention" + (f" ({llama})" if llama != group else "")
        lines = {label: _ratios(records, llama, None, "llama")}
        # the other conditions that claims on this panel's runs compare with (STUDY_CLAIMS)
        others = {b for _, pairs in STUDY_CLAIMS.values() for _, a, b in pairs if a[0] == group and b[0] != group}
        curves = {}
        for other in sorted({o for o, _ in others}):
            other_Ts = sorted(T for o, T in others if o == other)
            if len(other_Ts) == 1:
                lines[f"CEM T = {other_Ts[0]} ({other})"] = _ratios(records, other, other_Ts[0])
                continue
            means = [(T, statistics.fmean(v.values())) for T in other_Ts if (v := _ratios(records, other, T))]
            if means:
                curves[f"CEM ({other})"] = {"T": [T for T, _ in means], "mean": [m for _, m in means]}
        out[group] = {"T": Ts, "mean": [statistics.fmean(v) for v in values], "low": [min(v) for v in values],
                      "high": [max(v) for v in values], "curves": curves,
                      "lines": {label: statistics.fmean(v.values()) for label, v in lines.items() if v}}
    return out


def diagnostics_by_T(records: list[dict], group: str) -> dict:
    """The step diagnostics of a condition's CEM runs, by trained T: each quantity's mean over seeds, per step."""
    out = {}
    for T in sorted({r["T"] for r in records if r["group"] == group and "step_diagnostics" in r}):
        runs = [r["step_diagnostics"] for r in records if r["group"] == group and r["T"] == T
                and "step_diagnostics" in r]
        out[T] = {key: [statistics.fmean(values) for values in zip(*(d[key] for d in runs))]
                  for key in ("rmse_ratio_after_step", "energy_change", "update_norm", "step_size",
                              "attention_entropy")}
    return out


def learned_step_sizes(records: list[dict], group: str) -> dict:
    """{T: the learned step size of each step (mean over seeds)} of a condition's depth-1 CEM runs."""
    out = {}
    for T in sorted({r["T"] for r in records if r["group"] == group and r["attention"] == "cem"}):
        runs = [r["learned_eta"][0] for r in records if r["group"] == group and r["T"] == T and r["attention"] == "cem"]
        out[T] = [statistics.fmean(values) for values in zip(*runs)]
    return out


def _difference(pair: dict) -> str:
    if pair["seeds"] == 0:
        return "no runs"
    if pair["seeds"] == 1:
        return f"{pair['mean']:+.4f} (1 seed)"
    return f"{pair['mean']:+.4f} ± {pair['se']:.4f}"


def table_rows(records: list[dict]) -> list[dict]:
    """The conditions table as displayed (docs/results-gp.md, app): one row of strings per condition."""
    def compared(pair):
        (group_a, T_a), (group_b, T_b) = pair["a"], pair["b"]
        return f"T={T_a} vs T={T_b}" if group_a == group_b else f"{group_a} T={T_a} vs {group_b} T={T_b}"

    return [{"condition": r["condition"], "claim": r["claim"],
             "compared (A vs B)": "; ".join(compared(p) for p in r["pairs"]),
             "ratio(A) − ratio(B), mean ± se": "; ".join(_difference(p) for p in r["pairs"]),
             "seeds": "; ".join(str(p["seeds"]) for p in r["pairs"]), "verdict": r["verdict"],
             "t-based reading (95%)": r["t_verdict"]}
            for r in conditions_table(records)]


def study_markdown(records: list[dict]) -> str:
    """The conditions table (verdicts in bold), as docs/results-gp.md shows it."""
    rows = [r | {"verdict": f"**{r['verdict']}**", "t-based reading (95%)": f"**{r['t-based reading (95%)']}**"}
            for r in table_rows(records)]
    return markdown_table(rows, ("ratio(A) − ratio(B), mean ± se", "seeds"))
