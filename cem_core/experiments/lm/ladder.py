"""The width ladder (``lm sweep --preset ladder``, issue 26): is a CEM variant's perplexity gap to Llama closing
with scale? Under ``sweep.LADDER_RULE`` (fixed in the ladder's manifest before it ran): each variant at each width
at the best rate of its grid, the loss gap g = ln ppl(variant) - ln ppl(Llama) paired by seed (shown as the
perplexity gap exp(g) - 1), and a least-squares line of g against log10 of the Llama model's parameters, read with
a 95% t-interval; its value at the paper's smallest scale is a projection, not a result.
"""
from __future__ import annotations

import math
import statistics

from cem_core.experiments import verdicts
from cem_core.experiments.records import markdown_table
from cem_core.nn.model import ModelConfig

from . import sweep
from .train import TRAIN_PRESETS

REFERENCE = "llama"
TRENDS = ("closing", "widening", "no trend shown")


def paper_scale(vocab_size: int = 257) -> int:
    """The Llama parameters of the paper's smallest scale as this project builds it (``lm train --preset
    paper-86m``: 85.2M with the byte tokenizer)."""
    paper = TRAIN_PRESETS["paper-86m"]
    return ModelConfig.variant("llama", shape=paper["shape"], vocab_size=vocab_size,
                               max_seq_len=paper["train"]["seq_len"]).param_counts()["total"]


def best_rates(records: list[dict]) -> dict[tuple[int, str], dict]:
    """{(width, variant): {"lr", "ppl" (mean over seeds at it), "grid", "inside", "params", "runs" (at lr)}}: the
    rate of each variant's grid at each width with the lowest mean perplexity over seeds (a diverged run counts
    as infinitely bad)."""
    groups: dict[tuple[int, str], dict[float, list[dict]]] = {}
    for r in records:
        groups.setdefault((r["identity"]["config"]["d_model"], r["name"]), {}).setdefault(r["lr"], []).append(r)
    out = {}
    order = list(sweep.SWEEP_VARIANTS)
    for key, by_lr in sorted(groups.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        best = sweep.best_rate(by_lr)
        out[key] = best | {"params": by_lr[best["lr"]][0]["params"], "runs": by_lr[best["lr"]]}
    return out


def gap_points(records: list[dict]) -> dict[str, list[dict]]:
    """{CEM variant: [{"width", "N" (Llama parameters at that width), "params", "seed", "g", "gap"}, ...]}: the
    loss gap g = ln ppl(variant) - ln ppl(Llama) paired by seed, each side at its best rate (``best_rates``), and
    the perplexity gap exp(g) - 1; a pair with a diverged run has g = nan."""
    best = best_rates(records)
    points: dict[str, list[dict]] = {}
    for (width, name), b in best.items():
        ref = best.get((width, REFERENCE))
        if name == REFERENCE or ref is None:
            continue
        ref_by_seed = {r["seed"]: sweep.run_ppl(r) for r in ref["runs"]}
        for r in b["runs"]:
            if r["seed"] in ref_by_seed:
                pair = (sweep.run_ppl(r), ref_by_seed[r["seed"]])
                g = math.log(pair[0] / pair[1]) if all(map(math.isfinite, pair)) else math.nan
                points.setdefault(name, []).append({"width": width, "N": ref["params"], "params": b["params"],
                                                    "seed": r["seed"], "g": g, "gap": math.expm1(g)})
    return points


def fit(points: list[dict], at: float, level: float = verdicts.LEVEL) -> dict:
    """The least-squares line g = a + b log10(N) through the points with a finite loss gap g, with the two-sided
    `level` t-interval (points - 2 degrees of freedom) of the slope b and the confidence interval of the line's
    value at N = `at` (the projection, in g)."""
    points = [p for p in points if math.isfinite(p["g"])]               # a diverged pair is left out
    x = [math.log10(p["N"]) for p in points]
    y = [p["g"] for p in points]
    n = len(points)
    if n < 3 or len(set(x)) < 2:
        return {"n": n, "at": at} | dict.fromkeys(("a", "b", "b_low", "b_high", "projection", "low", "high", "q",
                                                    "s", "mx", "sxx"), math.nan)
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sxx = sum((xi - mx) ** 2 for xi in x)
    b = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y)) / sxx       # slope: gap per decade of parameters
    a = my - b * mx
    s = math.sqrt(sum((yi - a - b * xi) ** 2 for xi, yi in zip(x, y)) / (n - 2))   # residual standard deviation
    q = verdicts.t_quantile(0.5 + level / 2, n - 2)
    line = {"n": n, "a": a, "b": b, "b_low": b - q * s / math.sqrt(sxx), "b_high": b + q * s / math.sqrt(sxx),
            "q": q, "s": s, "mx": mx, "sxx": sxx, "at": at}
    y0, low, high = value_at(line, at)
    return line | {"projection": y0, "low": low, "high": high}


def value_at(line: dict, N: float) -> tuple[float, float, float]:
    """The fitted line's value at N parameters and its t-interval (the line's standard error there)."""
    x0 = math.log10(N)
    y0 = line["a"] + line["b"] * x0
    half = line["q"] * line["s"] * math.sqrt(1 / line["n"] + (x0 - line["mx"]) ** 2 / line["sxx"])
    return y0, y0 - half, y0 + half


def band(line: dict, low: float, high: float, count: int = 40) -> dict:
    """The fitted line and its interval on `count` log-spaced N from low to high, as perplexity gaps exp(g) - 1
    (for the figures)."""
    ns = [low * (high / low) ** (k / (count - 1)) for k in range(count)]
    values = [value_at(line, n) for n in ns]
    return {"N": ns} | {key: [math.expm1(v[k]) for v in values] for k, key in enumerate(("gap", "low", "high"))}


def projected(line: dict) -> tuple[float, float, float]:
    """The projection at the paper's scale and its interval, as perplexity gaps exp(g) - 1."""
    return math.expm1(line["projection"]), math.expm1(line["low"]), math.expm1(line["high"])


def width_means(t: dict) -> dict:
    """A variant's mean perplexity gap per width for the figures: {"N", "gap", "minus", "plus"} (the mean loss gap
    ± its se, as perplexity gaps), widths without a finite mean left out."""
    rows = [(n, m, se if math.isfinite(se) else 0.0) for n, m, se in t["means"].values() if math.isfinite(m)]
    return {"N": [n for n, _, _ in rows], "gap": [math.expm1(m) for _, m, _ in rows],
            "minus": [math.expm1(m) - math.expm1(m - se) for _, m, se in rows],
            "plus": [math.expm1(m + se) - math.expm1(m) for _, m, se in rows]}


def trend_verdict(line: dict, smallest: float) -> str:
    """LADDER_RULE's word for a fitted line: closing, widening or no trend shown, the side of 0 the gap starts on
    read from the line's value at the smallest width's N (`smallest`)."""
    if not math.isfinite(line["b"]):
        return TRENDS[2]
    start = value_at(line, smallest)[0]
    if start == 0:
        return TRENDS[2]
    towards_zero = line["b_high"] < 0 if start > 0 else line["b_low"] > 0
    away = line["b_low"] > 0 if start > 0 else line["b_high"] < 0
    return TRENDS[0] if towards_zero else TRENDS[1] if away else TRENDS[2]


def trends(records: list[dict]) -> dict[str, dict]:
    """Per CEM variant: its points, the fitted line (``fit``) projected to the paper's smallest scale, the mean
    loss gap at each width {width: (N, mean g, se of g)} over its finite pairs, the pairs left out for a diverged
    run, and the verdict under LADDER_RULE."""
    at = paper_scale()
    out = {}
    for name, points in gap_points(records).items():
        by_width: dict[int, list[float]] = {}
        for p in points:
            by_width.setdefault(p["width"], [])
            if math.isfinite(p["g"]):
                by_width[p["width"]].append(p["g"])
        n_of = {p["width"]: p["N"] for p in points}
        means = {w: (n_of[w], statistics.fmean(gs) if gs else math.nan,
                     statistics.stdev(gs) / math.sqrt(len(gs)) if len(gs) > 1 else math.nan)
                 for w, gs in sorted(by_width.items())}
        line = fit(points, at)
        out[name] = {"points": points, "line": line, "means": means,
                     "diverged": sum(not math.isfinite(p["g"]) for p in points),
                     "verdict": trend_verdict(line, min(n_of.values()))}
    return out


def pct(x: float, digits: int = 1) -> str:
    """A signed percentage without a negative zero ("+0%", not "-0%"); "–" when not finite."""
    if not math.isfinite(x):
        return "–"
    text = f"{x:+.{digits}%}"
    return "+" + text[1:] if float(text[1:-1]) == 0 else text


GAP_COLUMN = "ppl gap to Llama, exp(g) − 1 (g: loss gap, mean ± se over seeds)"


def rows(records: list[dict]) -> list[dict]:
    """The ladder table as displayed (README, app, notebook): one row per width and variant."""
    best = best_rates(records)
    by = trends(records)
    out = []
    for (width, name), b in best.items():
        t = by.get(name)
        gap = "–"
        if t and width in t["means"]:
            _, m, se = t["means"][width]
            left = sum(1 for p in t["points"] if p["width"] == width and not math.isfinite(p["g"]))
            gap = (f"{pct(math.expm1(m))} (g = {m:+.4f} ± {se:.4f})" if math.isfinite(m) else "–") + \
                (f", {left} diverged" if left else "")
        edge = "" if b["inside"] else " (at the grid's edge)"
        out.append({"width": str(width), "variant": name, "params": f"{b['params']:,}",
                    "rate": f"{b['lr']:g}{edge}", "grid": ", ".join(f"{lr:g}" for lr in b["grid"]),
                    "val ppl (mean)": f"{b['ppl']:.3f}" if math.isfinite(b["ppl"]) else "diverged",
                    GAP_COLUMN: gap})
    return out


SLOPE_COLUMN = "slope of g per decade of parameters (95% t-interval)"


def projection_column(at: float) -> str:
    return f"ppl gap projected to {at / 1e6:.1f}M (95% interval of the line; not a result)"


def trend_rows(records: list[dict]) -> list[dict]:
    """The fitted trends as displayed: the slope of the loss gap per decade with its interval, the verdict, and
    the projection as a perplexity gap."""
    out = []
    for name, t in trends(records).items():
        line = t["line"]
        fitted = math.isfinite(line["b"])
        out.append({"variant": name, "points": str(line["n"]) + (f" ({t['diverged']} diverged left out)"
                                                                  if t["diverged"] else ""),
                    SLOPE_COLUMN: f"{line['b']:+.4f} [{line['b_low']:+.4f}, {line['b_high']:+.4f}]" if fitted
                    else "– (a line needs 3 points at 2 widths)",
                    "trend": t["verdict"],
                    projection_column(line["at"]): "{} [{}, {}]".format(*map(pct, projected(line))) if fitted
                    else "–"})
    return out


def zero_crossing(t: dict) -> float | None:
    """For a closing gap whose line reaches 0 between the smallest width and the paper's scale, the parameters
    N where it does (LADDER_RULE's word "closing" says only that the slope moves the gap towards 0); else None."""
    line = t["line"]
    if t["verdict"] != TRENDS[0] or line["b"] == 0:
        return None
    n0 = 10 ** (-line["a"] / line["b"])
    return n0 if min(p["N"] for p in t["points"]) < n0 < line["at"] else None


def crossing(t: dict) -> str:
    """Where a closing gap's line crosses 0, and that the gap grows again past it; "" when it does not."""
    n0 = zero_crossing(t)
    if n0 is None:
        return ""
    ahead, behind = ("below", "above") if t["line"]["b"] > 0 else ("above", "below")
    return (f", but its line crosses 0 at about {float(f'{n0:.2g}'):,.0f} parameters: CEM ahead of Llama {ahead} "
            f"that, behind {behind} it, and the gap growing again past it")


def legend(name: str, t: dict) -> str:
    """A figure's legend entry for one variant's trend: the rule's word, where its line crosses 0, its slope."""
    n0, b = zero_crossing(t), t["line"]["b"]
    return (f"{name}: {t['verdict']}" + (f" (crosses 0 at ~{float(f'{n0:.2g}'):,.0f})" if n0 else "")
            + (f", slope of g {b:+.3f} per decade" if math.isfinite(b) else ""))


def summary(records: list[dict]) -> str:
    """The ladder's finding in words, computed from the records (README, app, notebook 05)."""
    best = best_rates(records)
    found = trends(records)
    if not found:
        return "The width ladder has no pair of a CEM variant and Llama at one width yet."
    widths = sorted({w for w, _ in best})
    ref = [best[(w, REFERENCE)]["params"] for w in widths if (w, REFERENCE) in best]
    edges = [f"{name} at d = {w}" for (w, name), b in best.items() if not b["inside"]]
    parts = []
    for name, t in found.items():
        means = [m for _, m, _ in t["means"].values()]
        line = t["line"]
        left = f", {t['diverged']} diverged pairs left out" if t["diverged"] else ""
        if not math.isfinite(line["b"]):
            parts.append(f"{name} is {pct(math.expm1(means[-1]))} at d = {max(t['means'])} (no line yet: "
                         f"{line['n']} points{left})")
            continue
        parts.append(f"{name} goes from {pct(math.expm1(means[0]))} to {pct(math.expm1(means[-1]))} ({t['verdict']}"
                     f"{crossing(t)}; the "
                     f"loss gap's slope {line['b']:+.4f} per decade, 95% [{line['b_low']:+.4f}, "
                     f"{line['b_high']:+.4f}]{left}; carried to {line['at'] / 1e6:.1f}M: "
                     + "{}, 95% [{}, {}])".format(*(pct(v, 0) for v in projected(line))))
    seeds = sorted({len(b["runs"]) for b in best.values()})
    edge = (f"Best rates at a grid edge: {', '.join(edges)}." if edges
            else "Every best rate lies strictly inside its grid.")
    return (f"Across the ladder's {len(widths)} widths (d = {', '.join(map(str, widths))}: Llama "
            f"{min(ref, default=0):,} to {max(ref, default=0):,} parameters, {'/'.join(map(str, seeds))} seeds at "
            f"each best rate), the perplexity gap to Llama of " + "; ".join(parts) + ". The numbers at the paper's "
            f"scale are projections of a straight line in log parameters fitted to models "
            f"{_ratio(max(ref, default=0))} to {_ratio(min(ref, default=0))} times smaller, with the confidence "
            "interval of the line itself: they hold only if the line stays straight that far, and are not "
            "results. " + edge)


def _ratio(n: int) -> str:
    """How many times smaller than the paper's scale a model of n parameters is, to two significant figures."""
    if n <= 0:
        return "–"
    r = paper_scale() / n
    return f"{float(f'{r:.2g}'):,.0f}"


def ladder_markdown(records: list[dict]) -> str:
    """The ladder as the README shows it: the runs at their best rates, the fitted trends and the summary."""
    return (markdown_table(rows(records), ("width", "params", "rate", "val ppl (mean)", GAP_COLUMN))
            + "\n\n" + markdown_table(trend_rows(records), ("points",)) + "\n\n" + summary(records))
