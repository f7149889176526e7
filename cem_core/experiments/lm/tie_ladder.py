"""The tie ladder: which of CEM's weight ties costs the perplexity (``lm sweep --preset tie-ladder``,
``rules.TIE_LADDER_RULE``).

At d = 64 and 128 on the paper's budget, Llama, CEM attention T = 1 with each tie setting and cem-full with its MLP
tied and untied train at their own rates (the budget ladder's staged rule). Read two ways: every variant's paired
gap g = ln ppl(variant) - ln ppl(Llama) (``ladder.gap_points``, the budget ladder's reading), and what dropping a
tie does: d = ln ppl(tied relative) - ln ppl(untied) paired by seed, with its share of the relative's gap to Llama
(a ratio of means, no interval; the rule's word for it is the share the removal "closes").
"""
from __future__ import annotations

import math

from cem_core.experiments import verdicts
from cem_core.experiments.records import markdown_table
from cem_core.nn.ties import ATTENTION_TIES, MLP_TIES

from . import ladder, rates
from .variants import SWEEP_VARIANTS, TIE_RELATIVES

TIE_OF = {"v_proj": "W_V = W_K", "o_proj": "W_O = W_Q^T", "down_proj": "down = U^T"}   # a free projection's tie

PRESET = "tie-ladder"
EFFECTS = ("dropping it helps", "dropping it hurts", "no effect shown")


def effects(records: list[dict]) -> list[dict]:
    """Per width and untied variant (in the preset's order): {"width", "variant", "relative", "n", "mean", "se",
    "low", "high" (the t-interval of d), "diverged", "verdict", "share" (mean d / mean g of the relative, nan
    without the relative's gap)}."""
    best = ladder.best_rates(records, PRESET)
    gaps = {(w["width"], name): w for name, t in ladder.trends(records, PRESET).items() for w in t["widths"]}
    out = []
    for (width, name), b in best.items():
        relative = TIE_RELATIVES.get(name)
        if relative is None or (width, relative) not in best:
            continue
        tied = {r["seed"]: rates.run_ppl(r) for r in best[(width, relative)]["runs"]}
        pairs = [(tied[r["seed"]], rates.run_ppl(r)) for r in b["runs"] if r["seed"] in tied]
        ds = [math.log(a / u) for a, u in pairs if math.isfinite(a) and math.isfinite(u)]
        d = verdicts.t_interval(ds)
        verdict = (EFFECTS[0] if d["low"] > 0 else EFFECTS[1] if d["high"] < 0 else EFFECTS[2]) \
            if math.isfinite(d["low"]) else "not read yet (one seed)"
        g = gaps.get((width, relative), {}).get("mean", math.nan)
        out.append({"width": width, "variant": name, "relative": relative, "dropped": dropped(name), **d,
                    "diverged": len(pairs) - len(ds),
                    "verdict": verdict, "share": d["mean"] / g if math.isfinite(g) and g != 0 else math.nan})
    return out


def dropped(name: str) -> str:
    """The ties an untied variant drops, in words ("W_V = W_K", "W_O = W_Q^T and W_V = W_K", "down = U^T")."""
    options = SWEEP_VARIANTS[name][1]
    free = ATTENTION_TIES[options.attn_ties].free + MLP_TIES[options.mlp_ties].free
    return " and ".join(TIE_OF[projection] for projection in free)


def _d_cell(e: dict) -> str:
    if not math.isfinite(e["mean"]):
        return "–"
    interval = (f" [{e['low']:+.4f}, {e['high']:+.4f}]" if math.isfinite(e["low"]) else " (one seed: no interval)")
    return f"{e['mean']:+.4f}{interval}" + (f", {e['diverged']} diverged" if e["diverged"] else "")


D_COLUMN = "d = ln ppl(tied) − ln ppl(untied): mean over seeds [95% t-interval]"
SHARE_COLUMN = "its share of the tied relative's gap to Llama (mean d / mean g, no interval)"


def effect_rows(records: list[dict]) -> list[dict]:
    """The second table: what dropping each tie does at each width."""
    return [{"width": str(e["width"]), "untied variant": e["variant"], "tie dropped": e["dropped"],
             "tied relative": e["relative"],
             "seeds": str(e["n"]), D_COLUMN: _d_cell(e), "verdict": e["verdict"],
             SHARE_COLUMN: ladder.pct(e["share"], 0) if math.isfinite(e["share"]) else "–"}
            for e in effects(records)]


def tie_summary(records: list[dict]) -> str:
    """The tie ladder's finding in words, from the records."""
    found = effects(records)
    trends = ladder.trends(records, PRESET)
    if not trends:
        return "The tie ladder has no pair of a CEM variant and Llama at one width yet."
    gap_words = []
    for name, t in trends.items():
        for w in t["widths"]:
            if not math.isfinite(w["mean"]):
                continue
            word = ("no interval" if not math.isfinite(w["low"]) else "behind Llama" if w["low"] > 0
                    else "ahead of Llama" if w["high"] < 0 else "no gap shown")
            gap_words.append(f"{name} at d = {w['width']} {ladder.pct(math.expm1(w['mean']))} ({word})")
    effect_words = [f"dropping {e['dropped']} from {e['relative']} at d = {e['width']}: "
                    f"{e['verdict']} (d = {_d_cell(e)}"
                    + (f", {ladder.pct(e['share'], 0)} of its gap" if math.isfinite(e["share"]) else "") + ")"
                    for e in found]
    return (f"On the tie ladder ({ladder.scale(records, PRESET)}), the perplexity gap to Llama, exp(g) - 1: "
            + "; ".join(gap_words) + ". " + ("What dropping a tie does: " + "; ".join(effect_words) + ". "
                                             if effect_words else "")
            + "A share is a ratio of two means and carries no interval.")


def tie_markdown(records: list[dict]) -> str:
    """The tie ladder as docs/results-lm.md shows it: the runs at their rates, the effects and the summary."""
    return (markdown_table(ladder.rows(records, PRESET), ("width", "params", "tokens", "rate", "seeds",
                                                          "val ppl (mean)", ladder.GAP_COLUMN))
            + "\n\n" + markdown_table(effect_rows(records), ("width", "seeds")) + "\n\n" + tie_summary(records))


def tie_markers() -> tuple[str, str]:
    """The markers around the tie ladder's generated block in docs/results-lm.md."""
    return (f"<!-- {PRESET}: generated by cem_core.experiments.lm.tie_ladder.tie_block; do not edit -->",
            f"<!-- /{PRESET} -->")


def tie_block(records: list[dict]) -> str:
    """The tie ladder's block in docs/results-lm.md: what is not finished yet (if anything), the tables, the
    summary."""
    note = ladder.progress_note(records, PRESET)
    return (f"**{note}**\n\n" if note else "") + tie_markdown(records)
