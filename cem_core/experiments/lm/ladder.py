"""The width ladders: does a CEM variant's perplexity gap to Llama narrow or grow with scale?

Two ladders train Llama, CEM attention T = 1 and T = 2 and cem-full at d = 32, 64 and 128: ``lm sweep --preset
ladder`` at a quarter of 20 tokens per parameter (two seeds, its rate the best mean over both, ``rules.LADDER_RULE``)
and ``--preset budget-ladder`` at the paper's 20 tokens per parameter (three seeds that also vary the data order,
its rate chosen on seed 0, ``rules.BUDGET_LADDER_RULE``). Both are read one way, the budget ladder's rule: the loss
gap g = ln ppl(variant) - ln ppl(Llama) paired by seed, its mean over seeds per width with a Student's t interval,
a line through the width means weighted by their standard errors with a lack-of-fit test, and a verdict on the
gap's size |g| (narrowing, growing, no trend shown). Where the line would reach at the paper's scale is an
extrapolation and carries no interval.
"""
from __future__ import annotations

import math

from cem_core.experiments import verdicts
from cem_core.experiments.records import markdown_table
from cem_core.nn.model import ModelConfig

from . import rates
from .presets import SWEEP_PRESETS
from .stdlib_corpus import DEMO_LABEL, PROSE_LABEL
from .train_config import TRAIN_PRESETS
from .variants import SWEEP_VARIANTS

REFERENCE = "llama"
TRENDS = ("narrowing", "growing", "no trend shown")
LACK_OF_FIT = 0.05                     # a lack-of-fit p below this: the straight line misdescribes the width means
LADDERS = {"budget-ladder": "the width ladder at the paper's budget", "ladder": "the quarter-budget width ladder",
           "tie-ladder": "the tie ladder"}


def paper_scale(vocab_size: int = 257) -> int:
    """The Llama parameters of the paper's smallest scale as this project builds it (``lm train --preset
    paper-86m``: 85.2M with the byte tokenizer)."""
    paper = TRAIN_PRESETS["paper-86m"]
    return ModelConfig.variant("llama", shape=paper["shape"], vocab_size=vocab_size,
                               max_seq_len=paper["train"]["seq_len"]).param_counts()["total"]


def best_rates(records: list[dict], preset: str = "ladder") -> dict[tuple[int, str], dict]:
    """{(width, variant): {"lr", "ppl" (mean over the seeds at it), "grid", "inside", "params", "runs" (at lr)}}: each
    variant's rate at each width under its ladder's rule: the best mean over every seed (``ladder``), or the best on
    the first seed (a staged preset, ``budget-ladder``). A diverged run counts as infinitely bad."""
    preset_ = SWEEP_PRESETS[preset]
    groups: dict[tuple[int, str], dict[float, list[dict]]] = {}
    for r in records:
        groups.setdefault((r["identity"]["config"]["d_model"], r["name"]), {}).setdefault(r["lr"], []).append(r)
    out = {}
    order = list(SWEEP_VARIANTS)
    for key, by_lr in sorted(groups.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        choice = by_lr
        if preset_.rate_steps:
            choice = {lr: [r for r in runs if r["seed"] == preset_.seeds[0]] for lr, runs in by_lr.items()}
            choice = {lr: runs for lr, runs in choice.items() if runs}
        best = rates.best_rate(choice)
        runs = by_lr[best["lr"]]
        out[key] = best | {"ppl": rates.mean_ppl(runs), "params": runs[0]["params"], "runs": runs}
    return out


def gap_points(records: list[dict], preset: str = "ladder") -> dict[str, list[dict]]:
    """{CEM variant: [{"width", "N" (Llama parameters at that width), "params", "seed", "g", "gap"}, ...]}: the
    loss gap g = ln ppl(variant) - ln ppl(Llama) paired by seed, each side at its rate (``best_rates``), and the
    perplexity gap exp(g) - 1; a pair with a diverged run has g = nan."""
    best = best_rates(records, preset)
    points: dict[str, list[dict]] = {}
    for (width, name), b in best.items():
        ref = best.get((width, REFERENCE))
        if name == REFERENCE or ref is None:
            continue
        ref_by_seed = {r["seed"]: rates.run_ppl(r) for r in ref["runs"]}
        for r in b["runs"]:
            if r["seed"] in ref_by_seed:
                pair = (rates.run_ppl(r), ref_by_seed[r["seed"]])
                g = math.log(pair[0] / pair[1]) if all(map(math.isfinite, pair)) else math.nan
                points.setdefault(name, []).append({"width": width, "N": ref["params"], "params": b["params"],
                                                    "seed": r["seed"], "g": g, "gap": math.expm1(g)})
    return points


def width_gaps(points: list[dict]) -> list[dict]:
    """Per width (ascending): {"width", "N", "gs" (the finite g), "diverged" (pairs left out)} and the t-interval of
    the mean g over seeds (``verdicts.t_interval``: "n", "mean", "se", "low", "high")."""
    rows = []
    for width in sorted({p["width"] for p in points}):
        here = [p for p in points if p["width"] == width]
        gs = [p["g"] for p in here if math.isfinite(p["g"])]
        rows.append({"width": width, "N": here[0]["N"], "gs": gs, "diverged": len(here) - len(gs)}
                    | verdicts.t_interval(gs))
    return rows


def fit_means(widths: list[dict], level: float = verdicts.LEVEL) -> dict:
    """The weighted least-squares line g = a + b log10(N) through the width means (weights 1 / se^2), the
    `level` t-interval of b with the pooled within-width degrees of freedom (pairs - widths), and the lack-of-fit F
    test of the line against the means with the seeds' scatter as pure error (its p is nan with fewer than 3
    widths). All nan when fewer than 2 widths have a mean with a positive standard error."""
    rows = [w for w in widths if w["n"] >= 2 and math.isfinite(w["se"]) and w["se"] > 0]
    dof = sum(w["n"] for w in rows) - len(rows)
    empty = dict.fromkeys(("a", "b", "se_b", "b_low", "b_high", "lof_F", "lof_p"), math.nan)
    if len(rows) < 2:
        return empty | {"widths": len(rows), "dof": dof}
    x = [math.log10(w["N"]) for w in rows]
    y = [w["mean"] for w in rows]
    wt = [1 / w["se"] ** 2 for w in rows]
    mx, my = (sum(wi * v for wi, v in zip(wt, vs)) / sum(wt) for vs in (x, y))
    sxx = sum(wi * (xi - mx) ** 2 for wi, xi in zip(wt, x))
    b = sum(wi * (xi - mx) * (yi - my) for wi, xi, yi in zip(wt, x, y)) / sxx
    a, se_b = my - b * mx, 1 / math.sqrt(sxx)
    q = verdicts.t_quantile(0.5 + level / 2, dof)
    line = empty | {"a": a, "b": b, "se_b": se_b, "b_low": b - q * se_b, "b_high": b + q * se_b,
                    "widths": len(rows), "dof": dof}
    if len(rows) >= 3:
        pure = sum((g - w["mean"]) ** 2 for w in rows for g in w["gs"])
        lack = sum(w["n"] * (w["mean"] - a - b * xi) ** 2 for w, xi in zip(rows, x))
        f = (lack / (len(rows) - 2)) / (pure / dof) if pure > 0 else math.inf
        line |= {"lof_F": f, "lof_p": verdicts.f_sf(f, len(rows) - 2, dof) if math.isfinite(f) else 0.0}
    return line


def value_at(line: dict, N: float) -> float:
    """The fitted line's loss gap g at N parameters."""
    return line["a"] + line["b"] * math.log10(N)


def size_verdict(line: dict, smallest: float, largest: float) -> str:
    """The rule's word on the gap's size: "no trend shown" when b's interval includes 0 (or there is no line);
    else "narrowing" when the line's |g| at the largest width is below its |g| at the smallest, "growing" when
    above."""
    if not (math.isfinite(line["b_low"]) and (line["b_low"] > 0 or line["b_high"] < 0)):
        return TRENDS[2]
    start, end = abs(value_at(line, smallest)), abs(value_at(line, largest))
    return TRENDS[0] if end < start else TRENDS[1] if end > start else TRENDS[2]


def trends(records: list[dict], preset: str = "ladder") -> dict[str, dict]:
    """Per CEM variant: its points, its width gaps (``width_gaps``), the line through their means (``fit_means``),
    the verdict, the pairs left out for a diverged run, and "reach": where the line would reach at the paper's
    smallest scale, as a perplexity gap (an extrapolation: no interval)."""
    out = {}
    for name, points in gap_points(records, preset).items():
        widths = width_gaps(points)
        line = fit_means(widths)
        ns = [w["N"] for w in widths]
        out[name] = {"points": points, "widths": widths, "line": line,
                     "verdict": size_verdict(line, min(ns), max(ns)),
                     "diverged": sum(w["diverged"] for w in widths),
                     "reach": math.expm1(value_at(line, paper_scale())) if math.isfinite(line["b"]) else math.nan}
    return out


def pct(x: float, digits: int = 1) -> str:
    """A signed percentage without a negative zero ("+0%", not "-0%"); "–" when not finite."""
    if not math.isfinite(x):
        return "–"
    text = f"{x:+.{digits}%}"
    return "+" + text[1:] if float(text[1:-1]) == 0 else text


GAP_COLUMN = "ppl gap to Llama, exp(g) − 1: mean over seeds [95% t-interval]"


def _gap_cell(w: dict) -> str:
    if not math.isfinite(w["mean"]):
        return "–"
    interval = (f" [{pct(math.expm1(w['low']))}, {pct(math.expm1(w['high']))}]" if math.isfinite(w["low"])
                else " (one seed: no interval)")
    return (f"{pct(math.expm1(w['mean']))}{interval} (g = {w['mean']:+.4f} ± {w['se']:.4f} se)"
            if math.isfinite(w["se"]) else f"{pct(math.expm1(w['mean']))}{interval}")


def rows(records: list[dict], preset: str = "ladder") -> list[dict]:
    """The ladder table as displayed (docs/results-lm.md, app, notebook): one row per width and variant."""
    by = {name: {w["width"]: w for w in t["widths"]} for name, t in trends(records, preset).items()}
    edge = " (still choosing: its grid grows past this edge)" if SWEEP_PRESETS[preset].rate_steps \
        else " (at the grid's edge)"
    out = []
    for (width, name), b in best_rates(records, preset).items():
        w = by.get(name, {}).get(width)
        gap = "–" if w is None else _gap_cell(w) + (f", {w['diverged']} diverged" if w["diverged"] else "")
        out.append({"width": str(width), "variant": name, "params": f"{b['params']:,}",
                    "tokens": f"{b['runs'][0]['tokens']:,}",
                    "rate": f"{b['lr']:g}" + ("" if b["inside"] else edge),
                    "grid": ", ".join(f"{lr:g}" for lr in b["grid"]), "seeds": str(len(b["runs"])),
                    "val ppl (mean)": f"{b['ppl']:.3f}" if math.isfinite(b["ppl"]) else "diverged",
                    GAP_COLUMN: gap})
    return out


SLOPE_COLUMN = "slope of g per decade, weighted fit on the width means [95% t-interval, dof]"
LOF_COLUMN = "lack of fit (F test) p"


def reach_column() -> str:
    return f"where the line would reach at {paper_scale() / 1e6:.1f}M (an extrapolation, no interval)"


def trend_rows(records: list[dict], preset: str = "ladder") -> list[dict]:
    """The trends as displayed: the slope of the loss gap per decade with its interval, the lack-of-fit p, the
    verdict on the gap's size, and where the line would reach at the paper's scale."""
    out = []
    for name, t in trends(records, preset).items():
        line = t["line"]
        fitted = math.isfinite(line["b"])
        out.append({"variant": name, "widths": str(line["widths"]) + (f" ({t['diverged']} diverged pairs left out)"
                                                                      if t["diverged"] else ""),
                    SLOPE_COLUMN: f"{line['b']:+.4f} [{line['b_low']:+.4f}, {line['b_high']:+.4f}], {line['dof']}"
                    if fitted else "– (a line needs 2 widths of 2 seeds)",
                    LOF_COLUMN: p_value(line["lof_p"]) if math.isfinite(line["lof_p"]) else "– (needs 3 widths)",
                    "trend of the gap's size": t["verdict"],
                    reach_column(): pct(t["reach"], 0) if fitted else "–"})
    return out


def p_value(p: float, equals: str = "") -> str:
    """A p-value as the tables print it: three decimals, or "< 0.001" (never a p of 0.000)."""
    return "< 0.001" if p < 0.001 else f"{equals}{p:.3f}"


def corpus(records: list[dict]) -> str:
    """The corpus the records trained on, as the displays name it."""
    sources = {r["identity"]["data"]["source"] for r in records}
    labels = {"demo": DEMO_LABEL, "prose": PROSE_LABEL}
    return " and ".join(labels.get(s, f"{s} data") for s in sorted(sources))


def scale(records: list[dict], preset: str = "ladder") -> str:
    """The ladder's scale in words: widths, Llama parameters, tokens per parameter, seeds, corpus."""
    best = best_rates(records, preset)
    widths = sorted({w for w, _ in best})
    ref = [best[(w, REFERENCE)] for w in widths if (w, REFERENCE) in best]
    seeds = sorted({len(b["runs"]) for b in best.values()})
    budget = 20 * SWEEP_PRESETS[preset].budget
    params = [b["params"] for b in ref] or [0]
    tokens = [b["runs"][0]["tokens"] for b in ref] or [0]
    return (f"{len(widths)} widths (d = {', '.join(map(str, widths))}: Llama {min(params):,} to {max(params):,} "
            f"parameters, {budget:g} tokens per Llama parameter: {min(tokens):,} to {max(tokens):,} tokens), "
            f"{'/'.join(map(str, seeds))} seeds at each chosen rate, on the {corpus(records)}")


def variant_sentence(name: str, t: dict) -> str:
    """One variant's trend in words: its gap at the smallest and largest width, the verdict, the slope, the
    lack of fit, and where the line would reach."""
    first, last, line = t["widths"][0], t["widths"][-1], t["line"]
    left = f", {t['diverged']} diverged pairs left out" if t["diverged"] else ""
    if not math.isfinite(line["b"]):
        at = ", ".join(f"{pct(math.expm1(w['mean']))} at d = {w['width']}" for w in t["widths"])
        return f"{name} is {at} (no line yet: it needs 2 widths of at least 2 seeds{left})"
    lof = (f"; lack-of-fit p {p_value(line['lof_p'], '= ')}" + (": the straight line misdescribes the width means"
                                                        if line["lof_p"] < LACK_OF_FIT else "")
           if math.isfinite(line["lof_p"]) else "")
    return (f"{name} goes from {pct(math.expm1(first['mean']))} at d = {first['width']} to "
            f"{pct(math.expm1(last['mean']))} at d = {last['width']} ({t['verdict']}; the loss gap's slope "
            f"{line['b']:+.4f} per decade, 95% [{line['b_low']:+.4f}, {line['b_high']:+.4f}]{lof}{left}; the line "
            f"would reach {pct(t['reach'], 0)} at {paper_scale() / 1e6:.1f}M, an extrapolation)")


def multiplicity(found: dict[str, dict]) -> str:
    """The ladder's sentence on multiplicity: how many width gaps it tests against 0 (two-sided t-tests of each
    width's mean, seeds - 1 degrees of freedom) and which survive Holm's correction at 5%."""
    tests = [(name, w) for name, t in found.items() for w in t["widths"] if w["n"] >= 2 and math.isfinite(w["se"])]
    if not tests:
        return "Multiplicity: no width has two seeds yet."
    p = [verdicts.paired_p({"seeds": w["n"], "mean": w["mean"], "se": w["se"]}) for _, w in tests]
    kept = [tests[i] for i in verdicts.holm(p)]
    named = ", ".join(f"{name} at d = {w['width']} ({pct(math.expm1(w['mean']))})" for name, w in kept) or "none"
    return (f"Multiplicity: {len(tests)} width gaps tested against 0 (two-sided t-tests, seeds - 1 degrees of "
            f"freedom); under Holm's correction at 5%, {len(kept)} remain: {named}.")


def summary(records: list[dict], preset: str = "ladder") -> str:
    """The ladder's finding in words, computed from the records (docs/results-lm.md, app, notebook 05)."""
    found = trends(records, preset)
    if not found:
        return f"{LADDERS[preset].capitalize()} has no pair of a CEM variant and Llama at one width yet."
    edges = [f"{name} at d = {w}" for (w, name), b in best_rates(records, preset).items() if not b["inside"]]
    edge = (f"Rates at a grid edge: {', '.join(edges)}." if edges
            else "Every chosen rate lies strictly inside its grid.")
    return (f"Across {LADDERS[preset]} ({scale(records, preset)}), the perplexity gap to Llama of "
            + "; ".join(variant_sentence(name, t) for name, t in found.items()) + ". The verdict reads the size "
            "of the gap |g|: narrowing when it shrinks with width, growing when it grows, whichever its sign. Where "
            "a line would reach at the paper's scale is a straight line carried far past the widths measured and "
            "is not a result. " + multiplicity(found) + " " + edge)


def ladder_markdown(records: list[dict], preset: str = "ladder") -> str:
    """A ladder as docs/results-lm.md shows it: the runs at their chosen rates, the trends and the summary."""
    return (markdown_table(rows(records, preset), ("width", "params", "tokens", "rate", "seeds", "val ppl (mean)",
                                                   GAP_COLUMN))
            + "\n\n" + markdown_table(trend_rows(records, preset), ("widths",)) + "\n\n" + summary(records, preset))


def width_means(t: dict) -> dict:
    """A variant's mean perplexity gap per width for the figures: {"N", "gap", "minus", "plus"} (the t-interval of
    the mean loss gap, as perplexity gaps; 0 where there is none), widths without a finite mean left out."""
    rows_ = [w for w in t["widths"] if math.isfinite(w["mean"])]
    half = [(w["mean"] - w["low"]) if math.isfinite(w["low"]) else 0.0 for w in rows_]
    return {"N": [w["N"] for w in rows_], "gap": [math.expm1(w["mean"]) for w in rows_],
            "minus": [math.expm1(w["mean"]) - math.expm1(w["mean"] - h) for w, h in zip(rows_, half)],
            "plus": [math.expm1(w["mean"] + h) - math.expm1(w["mean"]) for w, h in zip(rows_, half)]}


def line_points(line: dict, low: float, high: float, count: int = 40) -> dict:
    """The fitted line on `count` log-spaced N from low to high, as perplexity gaps exp(g) - 1 (for the figures:
    no band, the line's interval past the data is not known)."""
    ns = [low * (high / low) ** (k / (count - 1)) for k in range(count)]
    return {"N": ns, "gap": [math.expm1(value_at(line, n)) for n in ns]}


def legend(name: str, t: dict) -> str:
    """A figure's legend entry for one variant's trend: the verdict on |g| and the slope."""
    b = t["line"]["b"]
    return f"{name}: |gap| {t['verdict']}" + (f", slope of g {b:+.3f} per decade" if math.isfinite(b) else "")


def growing_gaps(records: list[dict], preset: str = "ladder") -> list[str]:
    """The CEM variants whose mean gap is larger in size at the largest width than at the smallest (what no
    document may call closing or narrowing)."""
    return [name for name, t in trends(records, preset).items()
            if len(t["widths"]) > 1 and abs(t["widths"][-1]["mean"]) > abs(t["widths"][0]["mean"])]


def unfinished(records: list[dict], preset: str = "ladder") -> list[tuple[int, str]]:
    """The (width, variant) cells of the preset without a chosen rate inside its grid and a run of every seed there."""
    p = SWEEP_PRESETS[preset]
    best = best_rates(records, preset)
    return [(w, name) for w in p.widths for name in p.variants
            if (b := best.get((w, name))) is None or not b["inside"]
            or sorted(r["seed"] for r in b["runs"]) != sorted(p.seeds)]


def progress_note(records: list[dict], preset: str = "ladder") -> str:
    """'' for a finished ladder; else which cells are still to run, so that no partial table reads as final."""
    left = unfinished(records, preset)
    if not left:
        return ""
    cells = len(SWEEP_PRESETS[preset].widths) * len(SWEEP_PRESETS[preset].variants)
    widths = sorted({w for w, _ in left})
    return (f"{LADDERS[preset].capitalize()} is not finished: {cells - len(left)} of its {cells} widths and variants "
            f"have their rate and every seed; still to run at d = {', '.join(map(str, widths))} (`make "
            f"lm-{preset}` resumes it). The tables show what has finished.")


def doc_markers(preset: str) -> tuple[str, str]:
    """The markers around a ladder's generated block in docs/results-lm.md (``doc_block``)."""
    return (f"<!-- {preset}: generated by cem_core.experiments.lm.ladder.doc_block; do not edit -->",
            f"<!-- /{preset} -->")


def doc_block(records: list[dict], preset: str) -> str:
    """A ladder's block in docs/results-lm.md: what is not finished yet (if anything), the tables and the summary."""
    note = progress_note(records, preset)
    return (f"**{note}**\n\n" if note else "") + ladder_markdown(records, preset)
