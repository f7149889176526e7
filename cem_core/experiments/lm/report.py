"""The LM sweeps' report: the variants table, the claims table and the sentences that read them, as docs/results-lm.md,
the app, the CLI and notebook 05 show them, computed from a sweep's records.

The claims table (``claims``) compares pairs of variants by the mean over seeds of the paired difference in
validation perplexity and its standard error, under ``rules.VERDICT_RULE``, with a t-based reading beside it;
the own-rate sweep's claims (``own_markdown``) are read with ``rules.T_RULE``.
"""
from __future__ import annotations

import math
import statistics

from cem_core.experiments import verdicts
from cem_core.experiments.records import and_list, markdown_table

from .presets import DEFAULT_LR, EVAL_TS
from .rules import TOLERANCE
from .variants import SWEEP_VARIANTS


def summarize(records: list[dict]) -> list[dict]:
    """Per variant (in sweep order): parameters, seeds, mean and standard error of validation perplexity,
    tokens/s, test-time scaling means."""
    rows = []
    for name in SWEEP_VARIANTS:
        runs = [r for r in records if r["name"] == name]
        if not runs:
            continue
        ok = [r for r in runs if not r["diverged"]]
        ppl = [r["val_ppl"] for r in ok]
        by_T = {}
        for T in EVAL_TS:
            values = [r["val_ppl_by_T"][str(T)] for r in ok if str(T) in r["val_ppl_by_T"]]
            if values:
                by_T[T] = statistics.fmean(values)
        rows.append({"name": name, "params": runs[0]["params"], "seeds": len(runs), "diverged": len(runs) - len(ok),
                     "ppl_mean": statistics.fmean(ppl) if ppl else math.nan,
                     "ppl_se": statistics.stdev(ppl) / math.sqrt(len(ppl)) if len(ppl) > 1 else math.nan,
                     "tokens_per_s": statistics.fmean(r["tokens_per_s"] for r in ok) if ok else math.nan,
                     "ppl_by_T": by_T})
    return rows


def validation_curves(records: list[dict]) -> dict:
    """Validation perplexity against tokens per variant: the mean over seeds and the band between the
    lowest and highest seed, {name: {"tokens", "mean", "low", "high"}} (diverged runs left out)."""
    curves = {}
    for name in SWEEP_VARIANTS:
        runs = [r for r in records if r["name"] == name and not r["diverged"] and r["val_curve"]]
        if not runs:
            continue
        steps = sorted(set.intersection(*({step for step, _ in r["val_curve"]} for r in runs)))
        per_step = [[dict(r["val_curve"])[step] for r in runs] for step in steps]
        tokens_per_step = runs[0]["tokens"] / runs[0]["steps"]
        curves[name] = {"tokens": [step * tokens_per_step for step in steps],
                        "mean": [statistics.fmean(v) for v in per_step],
                        "low": [min(v) for v in per_step], "high": [max(v) for v in per_step]}
    return curves


def variant_difference(records: list[dict], a: str, b: str) -> dict:
    """ppl(a) - ppl(b) paired by seed (``verdicts.paired_difference``), with the two names."""
    by_seed = {name: {r["seed"]: r for r in records if r["name"] == name} for name in (a, b)}
    seeds = set(by_seed[a]) & set(by_seed[b])
    diverged = any(by_seed[n][s]["diverged"] for n in (a, b) for s in seeds)
    values = [{s: r["val_ppl"] for s, r in by_seed[n].items()} for n in (a, b)]
    return {"a": a, "b": b} | verdicts.paired_difference(*values, diverged=diverged)


# The paper's eight claims and two of ours: (text, [(kind, A, B), ...])
CLAIMS = [
    ("CEM attention costs little perplexity against Llama", [("comparable", "attn T=1", "llama")]),
    ("The CEM gated MLP stays competitive with SwiGLU", [("comparable", "mlp T=1", "llama")]),
    ("T = 2 improves CEM attention over T = 1", [("improves", "attn T=2", "attn T=1")]),
    ("T = 2 improves the CEM MLP over T = 1", [("improves", "mlp T=2", "mlp T=1")]),
    ("Recursive CEM attention (T = 2) beats Llama with fewer parameters", [("improves", "attn T=2", "llama")]),
    ("Learned preconditioners add only a marginal gain next to recursion",
     [("marginal", "attn T=2, diag shared, P dlr", "attn T=2, diag shared")]),
    ("The diagonal is essential (D+LR beats low rank) and the shared diagonal is best",
     [("improves", "attn T=2, diag shared", "attn T=2"),
      ("improves", "attn T=2, diag shared", "attn T=2, diag per head")]),
    ("The fully CEM transformer trains stably, with perplexity comparable to Llama's and fewer parameters",
     [("comparable", "cem-full", "llama")]),
    # ours, not the paper's (fixed before their runs trained)
    ("(ours) The distance-form diagonal improves on the bilinear one",
     [("improves", "attn T=2, diag shared, distance", "attn T=2, diag shared")]),
    ("(ours) One energy for the block (joint descent) improves the fully CEM transformer",
     [("improves", "cem-full, joint", "cem-full")]),
]


# the same records read with a t-based 95% interval (n - 1 degrees of freedom) beside the recorded rule, each
# verdict labelled with its direction relative to the paper (verdicts.t_reading); the recorded rule is unmoved
T_READING = "t-based reading (95%, n − 1 dof)"


def claims(records: list[dict]) -> list[dict]:
    """The claims, each with its pairs (difference, standard error, verdict under the recorded rule, t-based
    reading) and one verdict and one reading."""
    rows = []
    for i, (text, pairs) in enumerate(CLAIMS, 1):
        compared = []
        for kind, a, b in pairs:
            d = variant_difference(records, a, b)
            compared.append(d | {"kind": kind, "verdict": verdicts.verdict(kind, d, TOLERANCE),
                                 "reading": verdicts.t_reading(kind, d, TOLERANCE)})
        rows.append({"claim": i, "text": text, "pairs": compared,
                     "verdict": verdicts.overall([p["verdict"] for p in compared]),
                     "reading": verdicts.overall_reading([p["reading"] for p in compared])})
    return rows


def variant_rows(records: list[dict]) -> list[dict]:
    """The variants table as displayed (docs, app, CLI): one row of strings per variant."""
    rows = summarize(records)
    llama = next((r for r in rows if r["name"] == "llama"), None)
    out = []
    for r in rows:
        div = f" ({r['diverged']} diverged)" if r["diverged"] else ""
        out.append({"variant": r["name"], "params": f"{r['params']:,}",
                    "× Llama": f"{r['params'] / llama['params']:.3f}" if llama else "–",
                    "val ppl (mean ± se)": f"{r['ppl_mean']:.3f} ± {r['ppl_se']:.3f}",
                    "seeds": f"{r['seeds']}{div}", "tokens/s": f"{r['tokens_per_s']:,.0f}",
                    "ppl at T=1 / 2 / 4": " / ".join(f"{r['ppl_by_T'][T]:.3f}" for T in EVAL_TS
                                                     if T in r["ppl_by_T"]) or "–"})
    return out


def claim_rows(records: list[dict]) -> list[dict]:
    """The claims table as displayed: one row of strings per claim."""
    return [{"#": str(c["claim"]), "claim": c["text"],
             "compared (A vs B)": "; ".join(f"{p['a']} vs {p['b']} ({p['kind']})" for p in c["pairs"]),
             "ppl(A) − ppl(B), mean ± se": "; ".join(f"{p['mean']:+.3f} ± {p['se']:.3f}" for p in c["pairs"]),
             "verdict": c["verdict"], T_READING: c["reading"]} for c in claims(records)]


def claims_multiplicity(records: list[dict], shown=None) -> str:
    """One sentence on multiplicity: the claims' paired comparisons (of the claims numbered in ``shown``, else all),
    and which differences from 0 survive Holm's correction (``verdicts.holm`` on two-sided paired t-tests)."""
    pairs = [(c["claim"], p) for c in claims(records) if shown is None or str(c["claim"]) in shown
             for p in c["pairs"]]
    kept = [pairs[i] for i in verdicts.holm([verdicts.paired_p(p) for _, p in pairs])]
    tested = sum(math.isfinite(verdicts.paired_p(p)) for _, p in pairs)
    named = and_list([f"claim {claim} ({p['a']} vs {p['b']}, {p['mean']:+.3f})" for claim, p in kept])
    return (f"Multiplicity: {tested} paired comparisons; under Holm's correction at {verdicts.HOLM_LEVEL:.0%} (two-"
            f"sided paired t-tests of a difference from 0), {len(kept)} remain" + (f": {named}." if kept else "."))


def reading_summary(records: list[dict]) -> str:
    """One sentence on what the t-based reading changes, computed from the records (docs, app)."""
    rows = claims(records)
    seeds = min((p["seeds"] for c in rows for p in c["pairs"]), default=0)

    def recorded(reading: str) -> str:                    # the recorded rule's word for a reading
        return "contradicted" if reading in verdicts.DIRECTIONS[1:3] else reading

    def claim_list(chosen: list[dict]) -> str:
        return and_list([str(c["claim"]) for c in chosen]) if chosen else "none"

    moved = [c for c in rows if recorded(c["reading"]) != c["verdict"]]
    by = {label: [c for c in rows if c["reading"] == label] for label in verdicts.DIRECTIONS}
    return (f"Read with a t-based 95% interval ({seeds} seeds: {verdicts.t_multiplier(seeds):.2f} standard errors "
            f"where the recorded rule takes 2, which covers about {verdicts.coverage(2.0, seeds):.0%}), the verdicts "
            f"that change are claims {claim_list(moved)}. Against the paper: {claim_list(by[verdicts.DIRECTIONS[1]])}; "
            f"in CEM's favour beyond the paper's claim: {claim_list(by[verdicts.DIRECTIONS[2]])}; supported: "
            f"{claim_list(by[verdicts.DIRECTIONS[0]])}; inconclusive: {claim_list(by[verdicts.DIRECTIONS[3]])}. "
            + claims_multiplicity(records))


def side_by_side_rows(common: list[dict], own: list[dict]) -> list[dict]:
    """The paper's claims twice, as displayed: at the common rate (the committed sweep, its recorded verdicts
    unmoved, with their t-based reading) and with each variant at its own rate (the own-rate sweep, under the
    t-based rule fixed for it); claims whose variants the own-rate sweep does not train are left out."""
    trained = {r["name"] for r in own}
    at_own = {c["claim"]: c for c in claims(own)}
    out = []
    for c in claims(common):
        if not all({p["a"], p["b"]} <= trained for p in c["pairs"]):
            continue
        o = at_own[c["claim"]]
        out.append({"#": str(c["claim"]), "claim": c["text"],
                    f"common rate {DEFAULT_LR:g}: A − B": "; ".join(f"{p['mean']:+.3f} ± {p['se']:.3f}"
                                                                    for p in c["pairs"]),
                    "recorded verdict (± 2 se)": c["verdict"], "t-based reading": c["reading"],
                    "own rates: A − B": "; ".join(f"{p['mean']:+.3f} ± {p['se']:.3f}" for p in o["pairs"]),
                    "own rates: t-based verdict": o["reading"]})
    return out


def own_variant_rows(common: list[dict], own: list[dict]) -> list[dict]:
    """The own-rate sweep's variants as displayed: each one's rate and validation perplexity there, beside its
    perplexity at the common rate."""
    at_common = {r["name"]: r for r in summarize(common)}
    rate = {r["name"]: r["lr"] for r in own}
    out = []
    for r in summarize(own):
        c = at_common.get(r["name"])
        div = f" ({r['diverged']} diverged)" if r["diverged"] else ""
        out.append({"variant": r["name"], "own rate": f"{rate[r['name']]:g}",
                    f"val ppl at {DEFAULT_LR:g} (mean ± se)": f"{c['ppl_mean']:.3f} ± {c['ppl_se']:.3f}" if c else "–",
                    "val ppl at own rate (mean ± se)": f"{r['ppl_mean']:.3f} ± {r['ppl_se']:.3f}",
                    "seeds": f"{r['seeds']}{div}"})
    return out


def own_summary(common: list[dict], own: list[dict]) -> str:
    """One sentence on the claims with each variant at its own rate, computed from the records."""
    rows = side_by_side_rows(common, own)
    shown = {r["#"] for r in rows}
    seeds = min((p["seeds"] for c in claims(own) if str(c["claim"]) in shown for p in c["pairs"]), default=0)

    def listed(chosen: list[str]) -> str:
        return and_list(chosen) if chosen else "none"

    def claim_list(label: str) -> str:
        return listed([r["#"] for r in rows if r["own rates: t-based verdict"] == label])

    moved = listed([r["#"] for r in rows if r["own rates: t-based verdict"] != r["t-based reading"]])
    return (f"With each variant at its own rate ({seeds} seeds, read with the t-based rule fixed before these runs "
            f"trained), against the paper: claims {claim_list(verdicts.DIRECTIONS[1])}; in CEM's favour beyond the "
            f"paper's claim: {claim_list(verdicts.DIRECTIONS[2])}; supported: {claim_list(verdicts.DIRECTIONS[0])}; "
            f"inconclusive: {claim_list(verdicts.DIRECTIONS[3])}. Against the same reading at the common rate, the "
            f"claims whose reading changes are {moved}.")


def own_markdown(common: list[dict], own: list[dict]) -> str:
    """The own-rate evidence as docs/results-lm.md shows it: the variants, the claims side by side, two sentences."""
    return (markdown_table(own_variant_rows(common, own), ("own rate", f"val ppl at {DEFAULT_LR:g} (mean ± se)",
                                                          "val ppl at own rate (mean ± se)", "seeds"))
            + "\n\n" + markdown_table(side_by_side_rows(common, own), ("#", f"common rate {DEFAULT_LR:g}: A − B",
                                                                       "own rates: A − B"))
            + "\n\n" + own_summary(common, own) + " "
            + claims_multiplicity(own, {r["#"] for r in side_by_side_rows(common, own)})
            + "\n\n" + step_size_summary(own))


STEP_SIZE_PAIRS = (("attn T=2, diag shared, P dlr", "attn T=2, diag shared"),
                   ("attn T=2, diag shared, eta per step", "attn T=2, diag shared"),
                   ("attn T=2, diag shared, P dlr, eta per step", "attn T=2, diag shared, eta per step"))


def step_size_summary(records: list[dict]) -> str:
    """What the learned per-step step sizes say about claim 6 (is dlr's gain step-size control?), in words
    computed from the own-rate sweep's records: each pair better, worse or no measurable difference by the
    t-based interval (95%, seeds - 1 degrees of freedom)."""
    names = {r["name"] for r in records}
    if missing := [n for n in dict.fromkeys(n for pair in STEP_SIZE_PAIRS for n in pair) if n not in names]:
        return f"Claim 6 and learned step sizes: no runs yet of {and_list(missing)}."
    words = {"supported": "better", "contradicted": "worse", "inconclusive": "no measurable difference"}
    found = []
    for a, b in STEP_SIZE_PAIRS:
        d = variant_difference(records, a, b)
        found.append((d, "a run diverged" if d["diverged"] else
                      words[verdicts.verdict("improves", d, TOLERANCE, verdicts.t_multiplier(d["seeds"]))]))
    (p, p_word), (eta, eta_word), (both, both_word) = found

    def said(d: dict, word: str) -> str:
        return f"{d['mean']:+.3f} ± {d['se']:.3f} ({word}, {d['seeds']} seeds)"

    if "a run diverged" in (p_word, eta_word, both_word):
        reading = "a run diverged, and this cannot tell step-size control from curvature"
    elif p_word != "better":
        reading = (f"dlr shows no gain at its own rate ({p_word}): there is no gain here to attribute to "
                   "step-size control or to curvature")
    elif both_word == "better":
        reading = "dlr improves on top of learned step sizes, so its gain is not only step-size control"
    elif both_word == "worse":
        reading = "dlr is worse on top of learned step sizes than without it"
    elif eta_word == "better":
        reading = ("learned step sizes give a gain and dlr adds none measurable on top: consistent with reading "
                   "dlr's gain as step-size control")
    else:
        reading = (f"learned step sizes alone show {'a loss' if eta_word == 'worse' else 'no measurable gain'} and "
                   "dlr adds none measurable on top of them, so this cannot tell step-size control from curvature")
    return (f"Claim 6 and learned step sizes, each variant at its own rate, read with the t-based interval: "
            f"against the shared diagonal, the dlr preconditioner changes validation perplexity by {said(p, p_word)} "
            f"and learned per-step η by {said(eta, eta_word)}; dlr on top of learned η changes it by "
            f"{said(both, both_word)}. So {reading}.")


def markdown_tables(records: list[dict]) -> str:
    """The variants table and the claims table (verdicts in bold), as docs/results-lm.md shows them."""
    claims_ = [r | {"verdict": f"**{r['verdict']}**"} for r in claim_rows(records)]
    return (markdown_table(variant_rows(records), ("params", "× Llama", "val ppl (mean ± se)", "seeds", "tokens/s"))
            + "\n\n" + markdown_table(claims_, ("#", "ppl(A) − ppl(B), mean ± se")))
