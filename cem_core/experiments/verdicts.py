"""Verdicts on claims from seeded runs, by a rule fixed before the runs (the LM sweep's claims table
and the GP study's conditions map use the same one).

A claim compares two configurations A and B by a metric where lower is better (validation perplexity,
RMSE ratio). The difference d = metric(A) - metric(B) is paired by seed; m is its mean over seeds and
se = sd / sqrt(seeds). ``rule(metric, tolerance)`` states the rule in words.
"""
from __future__ import annotations

import math
import statistics

CLAIM_KINDS = ("improves", "comparable", "marginal")


def rule(metric: str, meaning: str, tolerance: float, w: str = "2 se") -> str:
    """The verdict rule in words, as it is recorded beside the results (``meaning``: what the metric is; ``w``:
    the half-width of the interval, 2 standard errors in the recorded rules)."""
    return (
        f"For each pair (A vs B) the difference d = {metric}(A) - {metric}(B) in {meaning} is paired by seed; m is "
        "its mean "
        f"over seeds and se = sd / sqrt(seeds). An 'improves' claim (A lower than B) is supported when m < -{w}, "
        f"contradicted when m > +{w}, inconclusive otherwise. A 'comparable' claim uses the tolerance "
        f"t = {tolerance:.0%} of {metric}(B): supported when m + {w} <= t {metric}(B) (A is at most t worse, better "
        f"counts too), contradicted when m - {w} > t {metric}(B), inconclusive otherwise. A 'marginal' claim is "
        f"supported when |m| + {w} <= t {metric}(B), contradicted when |m| - {w} > t {metric}(B). A claim with "
        "several pairs is supported when all are, contradicted when any is, inconclusive otherwise; a run that "
        "diverged contradicts a claim of stable training.")


def paired_difference(a: dict, b: dict, diverged: bool = False) -> dict:
    """metric(A) - metric(B) over the seeds both have ({seed: value} each): mean, standard error, seeds,
    and B's mean (the reference for tolerances)."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    finite = bool(diffs) and all(math.isfinite(x) for x in diffs)
    return {"seeds": len(seeds), "diverged": diverged,
            "mean": statistics.fmean(diffs) if finite else math.nan,
            "se": statistics.stdev(diffs) / math.sqrt(len(diffs)) if finite and len(diffs) > 1 else math.nan,
            "reference": statistics.fmean(b[s] for s in seeds) if seeds else math.nan}


def verdict(kind: str, d: dict, tolerance: float, multiplier: float = 2.0) -> str:
    """supported, contradicted or inconclusive for one pair, under ``rule`` (m against ``multiplier`` standard
    errors: 2 in the recorded rule; ``t_multiplier`` in its t-based reading)."""
    if kind not in CLAIM_KINDS:
        raise ValueError(f"kind={kind!r} is not a claim kind: must be one of {', '.join(CLAIM_KINDS)}")
    m, se, ref = d["mean"], d["se"], d["reference"]
    if not all(math.isfinite(x) for x in (m, se, ref, multiplier)):
        return "contradicted" if d["diverged"] else "inconclusive"
    t, w = tolerance * ref, multiplier * se                       # tolerance t, half-width w of the interval
    if kind == "improves":
        return "supported" if m < -w else "contradicted" if m > w else "inconclusive"
    if kind == "comparable":
        return "supported" if m + w <= t else "contradicted" if m - w > t else "inconclusive"
    return "supported" if abs(m) + w <= t else "contradicted" if abs(m) - w > t else "inconclusive"


# -- the t-based reading: a 95% interval with n - 1 degrees of freedom ---------------------------------

LEVEL = 0.95                       # two-sided coverage of the t-based interval
DIRECTIONS = ("supported", "against the paper", "in CEM's favour beyond the paper's claim", "inconclusive")


def t_multiplier(seeds: int, level: float = LEVEL) -> float:
    """The half-width of a two-sided `level` interval in standard errors, Student's t with seeds - 1 degrees of
    freedom (4.303 for 3 seeds at 95%, where the recorded rule's 2 covers about 82%); nan below 2 seeds."""
    return t_quantile(0.5 + level / 2, seeds - 1) if seeds >= 2 else math.nan


def t_interval(values: list[float], level: float = LEVEL) -> dict:
    """Mean, standard error and the two-sided ``level`` Student's t interval (n - 1 degrees of freedom) of
    paired differences; an interval of zero width for identical values, nan bounds below 2 values."""
    n = len(values)
    mean = statistics.fmean(values) if n else math.nan
    se = statistics.stdev(values) / math.sqrt(n) if n > 1 else math.nan
    w = t_multiplier(n, level) * se if n > 1 else math.nan
    return {"n": n, "mean": mean, "se": se, "low": mean - w, "high": mean + w}


def paired_p(d: dict) -> float:
    """The two-sided p-value of a paired difference's mean against 0 (``paired_difference``'s mean and se; Student's
    t, seeds - 1 degrees of freedom); nan below 2 seeds or for a difference that is not finite, 0 for identical
    nonzero differences."""
    if d["seeds"] < 2 or not (math.isfinite(d["mean"]) and math.isfinite(d["se"])):
        return math.nan
    if d["se"] == 0:
        return 0.0 if d["mean"] != 0 else 1.0
    return 2 * (1 - t_cdf(abs(d["mean"]) / d["se"], d["seeds"] - 1))


HOLM_LEVEL = 0.05


def holm(pvalues: list[float], level: float = HOLM_LEVEL) -> list[int]:
    """Holm's step-down procedure: the indices of the p-values that stay significant at family-wise `level` (the
    k-th smallest of m against level / (m - k), stopping at the first that fails); nan p-values take no part."""
    order = sorted((i for i, p in enumerate(pvalues) if math.isfinite(p)), key=lambda i: pvalues[i])
    kept = []
    for rank, i in enumerate(order):
        if pvalues[i] > level / (len(order) - rank):
            break
        kept.append(i)
    return kept


def t_reading(kind: str, d: dict, tolerance: float) -> str:
    """The verdict of one pair under the t-based interval, labelled with its direction relative to the paper
    (DIRECTIONS): a contradicted 'marginal' claim whose A is better than B (a larger gain than the paper claims
    for the CEM design A) is in CEM's favour; every other contradiction is against the paper (A, the CEM side of
    every claim, is worse than claimed)."""
    found = verdict(kind, d, tolerance, t_multiplier(d["seeds"]))
    if found != "contradicted":
        return found
    return DIRECTIONS[2] if kind == "marginal" and d["mean"] < 0 else DIRECTIONS[1]


def t_rule(metric: str, meaning: str, tolerance: float) -> str:
    """The t-based rule in words (``t_reading``), as it is recorded beside results that it was fixed for."""
    return (rule(metric, meaning, tolerance, w="q se") + f" Here q is the {0.5 + LEVEL / 2:.1%} quantile of Student's "
            f"t with seeds - 1 degrees of freedom (a two-sided {LEVEL:.0%} interval: q = {t_multiplier(3):.2f} at 3 "
            "seeds). Each verdict is labelled with its direction relative to the paper: a contradicted 'marginal' "
            "claim whose A is better than B is in CEM's favour beyond the paper's claim; every other contradiction "
            "is against the paper.")


def overall_reading(readings: list[str]) -> str:
    """One t-based reading for a claim of several pairs: against the paper when any pair is, then in CEM's
    favour when any is, supported when all are, inconclusive otherwise."""
    for label in (DIRECTIONS[1], DIRECTIONS[2]):
        if label in readings:
            return label
    return DIRECTIONS[0] if set(readings) == {DIRECTIONS[0]} else DIRECTIONS[3]


def coverage(multiplier: float, seeds: int) -> float:
    """The two-sided coverage of m ± multiplier se under Student's t with seeds - 1 degrees of freedom."""
    return 2 * t_cdf(multiplier, seeds - 1) - 1


def t_cdf(x: float, dof: float) -> float:
    """P(T <= x) for Student's t with `dof` degrees of freedom: 1 - I_{dof/(dof+x^2)}(dof/2, 1/2) / 2 for x >= 0,
    with I the regularized incomplete beta function."""
    tail = 0.5 * _betainc(dof / 2, 0.5, dof / (dof + x * x))      # P(T > |x|)
    return 1 - tail if x >= 0 else tail


def f_sf(f: float, d1: float, d2: float) -> float:
    """P(F > f) for Fisher's F with (d1, d2) degrees of freedom: I_{d2/(d2 + d1 f)}(d2/2, d1/2)."""
    return 1.0 if f <= 0 else _betainc(d2 / 2, d1 / 2, d2 / (d2 + d1 * f))


def t_quantile(p: float, dof: float) -> float:
    """x with t_cdf(x, dof) = p, by bisection (to 1e-12): the interval's multiplier without scipy at run time."""
    if not 0 < p < 1 or dof <= 0:
        raise ValueError(f"p={p!r} must be in (0, 1) and dof={dof!r} positive")
    lo, hi = -1.0, 1.0
    while t_cdf(lo, dof) > p:
        lo *= 2
    while t_cdf(hi, dof) < p:
        hi *= 2
    while hi - lo > 1e-12 * max(1.0, abs(hi)):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, dof) < p else (lo, mid)
    return (lo + hi) / 2


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified Lentz), using
    the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) where the fraction converges slowly."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1 - _betainc(b, a, 1 - x)
    log_front = a * math.log(x) + b * math.log1p(-x) - math.log(a) - (math.lgamma(a) + math.lgamma(b)
                                                                      - math.lgamma(a + b))
    tiny, f, c, dd = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):                               # the fraction 1 / (1 + d1 / (1 + d2 / (1 + ...)))
        m = i // 2
        if i == 0:
            step = 1.0
        elif i % 2 == 0:
            step = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            step = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        dd = 1 + step * dd
        dd = 1 / (dd if abs(dd) > tiny else tiny)
        c = 1 + step / c
        c = c if abs(c) > tiny else tiny
        f *= c * dd
        if abs(1 - c * dd) < 1e-15:
            break
    return math.exp(log_front) * (f - 1)


def overall(verdicts: list[str]) -> str:
    """One verdict for a claim of several pairs."""
    if "contradicted" in verdicts:
        return "contradicted"
    return "supported" if set(verdicts) == {"supported"} else "inconclusive"
