"""Can in-layer recursion be a test-time compute axis? The test-time study: models trained in four regimes, each
read at test-time T' from 1 to 4 x its trained T, under a rule fixed before the runs (``TEST_TIME_RULE``).

The regimes (``REGIMES``): the paper's fixed T; T drawn per batch and the loss averaged over every step's
prediction (``train_depths.TRAIN_DEPTHS``); and the anchor (lambda/2)|x - x^(0)|^2 with lambda = 1, which bounds
the energy below along x (docs/design.md#216-training-for-test-time-steps). Two tasks:

- GP (``gp sweep --preset test-time``): CEM attention at T = 4, the factor study's base condition (width 64, depth 1,
  2,000 steps) and the joint block's long budget (12,000 steps); metric the held-out RMSE over the GP optimum's;
- LM (``lm sweep --preset test-time``): CEM attention T = 2 at d = 64 on 20 tokens per Llama parameter, at the rate
  the budget ladder chose for it there; metric the log validation perplexity.

Every regime's fixed-T run of the GP study is the factor study's run, hash for hash (and the GP anchor runs at the
base budget are the claims sweep's ``eta:anchor`` runs), reused with ``--reuse``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from cem_core.experiments import verdicts
from cem_core.experiments.records import markdown_table
from cem_core.nn.readout import TEST_T_FACTOR
from cem_core.nn.registry import Registry

from .gp import study as gp_study
from .gp.train import RunSpec

TRAINED_T = {"gp": 4, "lm": 2}
ANCHOR = 1.0                    # the anchor regime's lambda (the claims sweep's eta:anchor runs use it too)
GP_CONDITIONS = ("base", "joint long")
COMMITTED_GP_TEST_TIME = Path("results") / "gp-test-time"
COMMITTED_LM_TEST_TIME = Path("results") / "lm-test-time"
TEST_TIME_RULE = (
    "Regimes: fixed T (the paper's), T drawn per batch uniformly from 1..T, the anchor (lambda/2)|x - x0|^2 with "
    "lambda = 1, and the loss averaged over the prediction after every step t = 1..T (every CEM layer stopped after "
    "t steps); all else as the fixed-T run. GP: CEM attention at T = 4 in the factor study's base condition (width "
    "64, depth 1, 2,000 steps) and the joint block's long budget (12,000 steps), seeds 0, 1 and 2, metric m = held-"
    "out RMSE / GP optimum. LM: CEM attention T = 2 at d = 64 (head width 16, two layers), 20 tokens per Llama "
    "parameter, the rate the budget ladder chose for it at d = 64 (0.004) for every regime, seeds 0, 1 and 2 (each "
    "its own initialisation and order of the training documents), metric m = ln validation perplexity. Each "
    "trained model is read at test-time T' from 1 to 4 x its trained T. Per task, condition and regime, "
    "d(T') = m(T') - m(T) paired by seed, with its 95% Student's t-interval (seeds - 1 degrees of freedom). "
    "Verdict: 'scales at test time' when the intervals of d(2T) and d(4T) both lie below 0; 'worse past T' when "
    "both lie above 0; 'neither shown' otherwise. Beside it, what the regime costs at its trained T: m(T) of the "
    "regime minus m(T) of fixed T, paired by seed, with its t-interval. A diverged run leaves its seed out, counted.")


@dataclass(frozen=True)
class Regime:
    name: str
    label: str
    train_depth: str             # train_depths.TRAIN_DEPTHS
    anchor: float = 0.0          # CEMOptions.anchor


REGIMES = Registry("training regime")
for _regime in (Regime("fixed T", "T steps at every training step (the paper's)", "fixed"),
                Regime("T drawn per batch", "t ~ U{1..T} steps per batch", "random"),
                Regime("anchor", f"the anchor (λ/2)|x − x⁽⁰⁾|², λ = {ANCHOR:g}", "fixed", ANCHOR),
                Regime("loss every step", "the loss averaged over the prediction after every step", "every step")):
    REGIMES.register(_regime)


def gp_runs() -> list[RunSpec]:
    """The GP study's runs: for each condition, its factor-study run at T = 4 per seed, in each regime."""
    T = TRAINED_T["gp"]
    out = []
    for condition in GP_CONDITIONS:
        for spec in (s for s in gp_study.conditions()[condition] if s.model.attention == "cem" and s.model.cem.T == T):
            for regime in REGIMES.values():
                out.append(RunSpec(task=spec.task, model=spec.model.with_cem(anchor=regime.anchor),
                                   train=replace(spec.train, train_depth=regime.train_depth),
                                   group=f"{condition} · {regime.name}"))
    return out


def read_Ts(task: str) -> tuple[int, ...]:
    """The test-time T' a trained model is read at: 1 to 4 x its trained T."""
    return tuple(range(1, TEST_T_FACTOR * TRAINED_T[task] + 1))


# -- reading the records --------------------------------------------------------------------------------


def _metric(task: str, record: dict) -> dict[int, float]:
    """{T': m} of one run (nan for a diverged run)."""
    if record["diverged"]:
        return {}
    if task == "gp":
        return {int(t): v / record["rmse_gp"] if math.isfinite(v) else math.inf
                for t, v in record["rmse_by_eval_T"].items()}
    return {int(t): math.log(v) if math.isfinite(v) else math.inf for t, v in record["val_ppl_by_T"].items()}


def _cell(task: str, record: dict) -> tuple[str, str]:
    """(condition, regime) of a record."""
    if task == "gp":
        condition, regime = record["group"].split(" · ")
        return condition, regime
    return "d = 64", lm_regime(record["name"])


def lm_regime(name: str) -> str:
    """The regime of an LM test-time variant (``variants.TEST_TIME_VARIANTS``)."""
    from .lm.variants import TEST_TIME_VARIANTS
    return TEST_TIME_VARIANTS[name]


def cells(task: str, records: list[dict]) -> dict[tuple[str, str], dict[int, dict[int, float]]]:
    """{(condition, regime): {seed: {T': m}}} in the order of the conditions and REGIMES; a diverged run has {}."""
    out: dict = {}
    for r in records:
        out.setdefault(_cell(task, r), {})[r["seed"]] = _metric(task, r)
    names = list(REGIMES)
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], names.index(kv[0][1]))))


def _paired(a: dict[int, float], b: dict[int, float]) -> dict:
    """The t-interval of a - b over the seeds both have; a seed whose prediction is not finite at a (infinitely
    bad) puts the whole interval at +inf, as the rates rules count a diverged run."""
    diffs = [a[s] - b[s] for s in sorted(set(a) & set(b))]
    if any(math.isinf(a[s]) for s in set(a) & set(b)):
        return {"n": len(diffs), "mean": math.inf, "se": math.nan, "low": math.inf, "high": math.inf}
    return verdicts.t_interval(diffs)


def read_cell(task: str, by_seed: dict[int, dict[int, float]], fixed: dict[int, dict[int, float]] | None) -> dict:
    """One condition and regime: the mean m per T', d(T') = m(T') - m(T) per T' with its t-interval, the verdict,
    the cost at the trained T against fixed T, the seeds and the diverged ones."""
    T = TRAINED_T[task]
    ok = {s: m for s, m in by_seed.items() if m}
    Ts = sorted(set.intersection(*(set(m) for m in ok.values()))) if ok else []
    d = {t: _paired({s: m[t] for s, m in ok.items()}, {s: m[T] for s, m in ok.items()}) for t in Ts}
    mean = {t: sum(m[t] for m in ok.values()) / len(ok) for t in Ts}
    verdict = "neither shown"
    if all(t in d and not math.isnan(d[t]["low"]) for t in (2 * T, 4 * T)):       # +inf: infinitely bad
        if d[2 * T]["high"] < 0 and d[4 * T]["high"] < 0:
            verdict = "scales at test time"
        elif d[2 * T]["low"] > 0 and d[4 * T]["low"] > 0:
            verdict = "worse past T"
    cost = None
    if fixed is not None:
        fixed_ok = {s: m[T] for s, m in fixed.items() if m and T in m}
        cost = _paired({s: m[T] for s, m in ok.items() if T in m}, fixed_ok)
    return {"seeds": len(ok), "diverged": len(by_seed) - len(ok), "Ts": Ts, "mean": mean, "d": d,
            "verdict": verdict, "cost": cost}


def read_study(task: str, records: list[dict]) -> dict[tuple[str, str], dict]:
    """Every cell of a task's records read under TEST_TIME_RULE."""
    found = cells(task, records)
    return {(c, regime): read_cell(task, by_seed, found.get((c, "fixed T")) if regime != "fixed T" else None)
            for (c, regime), by_seed in found.items()}


def _interval(d: dict, digits: int = 3) -> str:
    if d.get("mean") == math.inf:
        return "+∞ (a seed's prediction is not finite)"
    if not math.isfinite(d.get("mean", math.nan)):
        return "–"
    if not math.isfinite(d["low"]):
        return f"{d['mean']:+.{digits}f} (one seed: no interval)"
    return f"{d['mean']:+.{digits}f} [{d['low']:+.{digits}f}, {d['high']:+.{digits}f}]"


METRIC = {"gp": "RMSE / GP optimum", "lm": "validation perplexity"}


def test_time_rows(task: str, records: list[dict]) -> list[dict]:
    """The study's table for one task: per condition and regime, m at T, 2T and 4T (perplexities for the LM),
    d(2T) and d(4T) with their intervals, the verdict, and the cost at T against fixed T."""
    T = TRAINED_T[task]
    def show(v: float) -> str:
        return "∞" if math.isinf(v) else f"{v:.3f}" if task == "gp" else f"{math.exp(v):.3f}"
    out = []
    for (condition, regime), c in read_study(task, records).items():
        row = {"condition": condition, "regime": regime, "seeds": str(c["seeds"])
               + (f" ({c['diverged']} diverged)" if c["diverged"] else "")}
        for k in (1, 2, 4):
            row[f"{METRIC[task]} at T' = {k * T}"] = show(c["mean"][k * T]) if k * T in c["mean"] else "–"
        for k in (2, 4):
            row[f"d({k}T) [95% t-interval]"] = _interval(c["d"].get(k * T, {}))
        row["verdict"] = c["verdict"]
        row["at T against fixed T"] = "–" if c["cost"] is None else _interval(c["cost"])
        out.append(row)
    return out


def test_time_scale(task: str, records: list[dict]) -> str:
    """The scale and data of a task's records in words."""
    if task == "gp":
        return ("the GP task (RBF kernel, 32 points of one input; width 64, depth 1, trained T = 4: CEM attention with "
                "Llama's MLP in base, the block as one energy in joint long; "
                f"{min(r['params'] for r in records):,} to {max(r['params'] for r in records):,} parameters)")
    from .lm.ladder import corpus
    r = records[0]
    return (f"CEM attention T = 2 at d = 64 ({r['params']:,} parameters, {r['tokens']:,} tokens: 20 per Llama "
            f"parameter) on the {corpus(records)}")


def test_time_summary(task: str, records: list[dict]) -> str:
    """The study's finding for one task in words, from the records."""
    found = read_study(task, records)
    if not found:
        return "No runs yet."
    T = TRAINED_T[task]
    parts = []
    for (condition, regime), c in found.items():
        where = f"{regime} ({condition})" if task == "gp" else regime
        parts.append(f"{where}: {c['verdict']} (d(2T) {_interval(c['d'].get(2 * T, {}))}, d(4T) "
                     f"{_interval(c['d'].get(4 * T, {}))})")
    scaled = [k for k, c in found.items() if c["verdict"] == "scales at test time"]
    what = "conditions and regimes" if task == "gp" else "regimes"
    return (f"On {test_time_scale(task, records)}, read at T' = 1 to {4 * T} ({METRIC[task]}"
            f"{'' if task == 'gp' else ', d in ln perplexity'}): " + "; ".join(parts) + ". "
            + (f"{len(scaled)} of the {len(found)} {what} read scale at test time under the rule."
               if scaled else f"None of the {len(found)} {what} read scales at test time under the rule."))


def test_time_markdown(task: str, records: list[dict]) -> str:
    return markdown_table(test_time_rows(task, records), ("seeds",)) + "\n\n" + test_time_summary(task, records)


def test_time_markers(task: str) -> tuple[str, str]:
    """The markers around a task's generated block in docs/results-lm.md."""
    return (f"<!-- test-time {task}: generated by cem_core.experiments.test_time.test_time_block; do not edit -->",
            f"<!-- /test-time {task} -->")


def planned(task: str) -> int:
    """How many runs the task's study has."""
    if task == "gp":
        return len(gp_runs())
    from .lm.presets import preset_runs
    return len(preset_runs("test-time"))


def test_time_block(task: str, records: list[dict]) -> str:
    """A task's block in docs/results-lm.md: what is not finished yet (if anything), the table and the summary."""
    left = planned(task) - len(records)
    note = (f"**The {task.upper()} test-time study is not finished: {len(records)} of its {planned(task)} runs "
            f"(`make {task}-test-time` resumes it). The table shows what has finished.**\n\n" if left else "")
    return note + test_time_markdown(task, records)


def curves(task: str, records: list[dict]) -> dict[tuple[str, str], dict]:
    """For the figures: per condition and regime, the T' grid, the mean metric (the perplexity exp(mean ln ppl) for
    the LM) and how far the t-interval of d(T') reaches above and below it, in the metric's units; the T' where a
    seed's prediction is not finite ("not_finite") are left out of the line."""
    out = {}
    for key, c in read_study(task, records).items():
        Ts = [t for t in c["Ts"] if math.isfinite(c["mean"][t])]      # a mean that is not finite is not drawn
        half = [(c["d"][t]["high"] - c["d"][t]["mean"]) if math.isfinite(c["d"][t]["high"]) else 0.0 for t in Ts]
        if task == "gp":
            value = [c["mean"][t] for t in Ts]
            plus = minus = half
        else:                                                    # d is in ln ppl: the interval is a ratio
            value = [math.exp(c["mean"][t]) for t in Ts]
            plus = [v * math.expm1(h) for v, h in zip(value, half)]
            minus = [-v * math.expm1(-h) for v, h in zip(value, half)]
        out[key] = {"T": Ts, "value": value, "plus": plus, "minus": minus, "verdict": c["verdict"],
                    "not_finite": [t for t in c["Ts"] if t not in Ts]}
    return out


SUMMARY_MARKERS = ("<!-- test-time summary: generated by cem_core.experiments.test_time.summaries; do not edit -->",
                   "<!-- /test-time summary -->")


def summaries(gp_records: list[dict], lm_records: list[dict]) -> str:
    """Both tasks' findings in words (docs/trained-models.md), each with what is not finished yet."""
    parts = []
    for task, records in (("gp", gp_records), ("lm", lm_records)):
        left = planned(task) - len(records)
        parts.append(f"- **{task.upper()}**" + (f" ({len(records)} of {planned(task)} runs so far)" if left else "")
                     + ": " + test_time_summary(task, records))
    scaled = [key for task, records in (("gp", gp_records), ("lm", lm_records))
              for key, c in read_study(task, records).items() if c["verdict"] == "scales at test time"]
    parts.append("" if scaled else "\nNo regime scales at test time in the records so far, so no regime's run is "
                 "kept in `models/` (a checkpoint of one that scales would stand on the *Inside a trained model* "
                 "page beside one that does not).")
    return "\n".join(parts).rstrip()
