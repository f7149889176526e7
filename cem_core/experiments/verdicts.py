"""Verdicts on claims from seeded runs, by a rule fixed before the runs (the LM sweep's claims table
and the GP study's conditions map use the same one).

A claim compares two configurations A and B by a metric where lower is better (validation perplexity,
RMSE ratio). The difference d = metric(A) - metric(B) is paired by seed; m is its mean over seeds and
se = sd / sqrt(seeds). ``rule(metric, tolerance)`` states the rule in words.
"""
from __future__ import annotations

import math
import statistics

KINDS = ("improves", "comparable", "marginal")


def rule(metric: str, meaning: str, tolerance: float) -> str:
    """The verdict rule in words, as it is recorded beside the results (``meaning``: what the metric is)."""
    return (
        f"For each pair (A vs B) the difference d = {metric}(A) - {metric}(B) in {meaning} is paired by seed; m is "
        "its mean "
        "over seeds and se = sd / sqrt(seeds). An 'improves' claim (A lower than B) is supported when m < -2 se, "
        "contradicted when m > +2 se, inconclusive otherwise. A 'comparable' claim uses the tolerance "
        f"t = {tolerance:.0%} of {metric}(B): supported when m + 2 se <= t {metric}(B) (A is at most t worse, better "
        f"counts too), contradicted when m - 2 se > t {metric}(B), inconclusive otherwise. A 'marginal' claim is "
        f"supported when |m| + 2 se <= t {metric}(B), contradicted when |m| - 2 se > t {metric}(B). A claim with "
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


def verdict(kind: str, d: dict, tolerance: float) -> str:
    """supported, contradicted or inconclusive for one pair, under ``rule``."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not a claim kind: must be one of {', '.join(KINDS)}")
    m, se, ref = d["mean"], d["se"], d["reference"]
    if not all(math.isfinite(x) for x in (m, se, ref)):
        return "contradicted" if d["diverged"] else "inconclusive"
    t = tolerance * ref
    if kind == "improves":
        return "supported" if m < -2 * se else "contradicted" if m > 2 * se else "inconclusive"
    if kind == "comparable":
        return "supported" if m + 2 * se <= t else "contradicted" if m - 2 * se > t else "inconclusive"
    return "supported" if abs(m) + 2 * se <= t else "contradicted" if abs(m) - 2 * se > t else "inconclusive"


def overall(verdicts: list[str]) -> str:
    """One verdict for a claim of several pairs."""
    if "contradicted" in verdicts:
        return "contradicted"
    return "supported" if set(verdicts) == {"supported"} else "inconclusive"
