"""The LM sweeps' rules, each fixed before its sweep's runs trained and recorded in its folder's manifest: the
verdict rules of the claims, and how each variant's learning rate is chosen (``rates``)."""
from __future__ import annotations

from cem_core.experiments import verdicts
from cem_core.experiments.test_time import TEST_TIME_RULE

# The verdict rule, fixed before the sweep ran and recorded in its manifest; never moved afterwards.
TOLERANCE = 0.02                       # "comparable": within 2% of the reference's validation perplexity
VERDICT_RULE = verdicts.rule("ppl", "validation perplexity", TOLERANCE)
T_RULE = verdicts.t_rule("ppl", "validation perplexity", TOLERANCE)    # the rule fixed for the own-rate sweep
# How a rates sweep chooses each variant's own rate (``rates.own_rates``)
RATE_RULE = ("Each variant's own learning rate is the rate of the grid with the lowest validation perplexity at a "
             "quarter of the budget (seed 0). It must lie strictly inside the grid: a best rate at an edge extends "
             "the grid by a factor of 2 beyond that edge for that variant, until it does not. The own-rate sweep "
             "then trains three seeds of each variant at the full budget at that rate.")
# How the quarter-budget width ladder chooses its rates and reads its gaps (``ladder``)
LADDER_RULE = ("At each width each variant's rate is the rate of its grid (1/2, 1 and 2 x its own rate at d = 96) "
               "with the lowest mean validation perplexity over the two seeds (a diverged run counts as infinitely "
               "bad); a best at an edge extends that variant's grid at that width by a factor of 2, until it does "
               "not. The same two seeds then measure the gap, so the choice of rate favours each side a little, "
               "alike. The gap of a CEM variant to Llama at a width is the difference in validation loss, g = ln "
               "ppl(variant) - ln ppl(Llama), paired by seed, each side at its best rate, and is shown as the "
               "perplexity ratio minus 1, exp(g) - 1; a pair with a diverged run is left out of the fit and "
               "counted. The trend is the least-squares line g = a + b log10(N), N the Llama model's parameters at "
               "that width, through every seed at every width. The 95% t-interval of b (points - 2 degrees of "
               "freedom) decides, with the line's value at the smallest width saying on which side of 0 the gap "
               "starts: 'closing' when the interval of b lies wholly on the side that moves g towards 0 (b < 0 for "
               "a gap that starts above 0, b > 0 for one below), 'widening' when wholly on the other side, 'no "
               "trend shown' otherwise. The line's value at the paper's smallest scale (Llama 85.2M), with the "
               "95% confidence interval of the line there, is a projection, not a result: it holds only if the "
               "line stays straight that far.")
# How the width ladder at the paper's budget chooses its rates (``rates.staged_grid``) and reads its gaps
BUDGET_LADDER_RULE = (
    "Rates: at each width each variant's rate is the rate with the lowest validation perplexity on seed 0 of the grid "
    "1/2, 1 and 2 x its best rate at that width in the quarter-budget ladder (a diverged run counts as infinitely "
    "bad); a best at an edge extends the grid by a factor of 2 beyond that edge until it does not. Seeds 1 and 2 then "
    "train at that rate. Seeds differ in initialisation and in the order of the training documents. Gap: at each "
    "width, g = ln ppl(variant) - ln ppl(Llama), paired by seed, each side at its chosen rate, shown as the "
    "perplexity gap exp(g) - 1; per width the mean of g over the seeds, its standard error and its 95% t-interval "
    "(seeds - 1 degrees of freedom); a pair with a diverged run is left out and counted. Trend: the weighted least-"
    "squares line g = a + b log10(N) through the width means (N: the Llama model's parameters at that width; "
    "weights 1 / se^2), the 95% t-interval of b with the pooled within-width degrees of freedom (pairs - widths), "
    "and a lack-of-fit F test of the straight line against the width means (the seeds' scatter as pure error). "
    "Verdict, on the gap's size |g|, not its sign: 'no trend shown' when the interval of b includes 0; otherwise "
    "'narrowing' when the line's |g| at the largest width is smaller than at the smallest, 'growing' when it is "
    "larger. A lack-of-fit p below 0.05 is reported beside the verdict: the line then misdescribes the means. The "
    "line's value at the paper's smallest scale (Llama 85.2M) is where the line would reach if it stayed straight, "
    "an extrapolation printed without an interval.")
# Which tie costs the perplexity (``ties``), fixed before the tie ladder's first run
TIE_LADDER_RULE = (
    "Rates: the budget ladder's rule (1/2, 1 and 2 x a base rate on seed 0, a best at an edge extending the grid by "
    "a factor of 2 beyond that edge until it does not, seeds 1 and 2 at the rate chosen; seeds differ in "
    "initialisation and in the order of the training documents). Base rates: Llama, CEM attention T = 1 and "
    "cem-full at their budget-ladder base rates, so their runs are the budget ladder's, reused; each untied variant "
    "at the rate its tied relative (CEM attention T = 1, or cem-full) chose in the budget ladder at that width. Gap "
    "to Llama: per width and variant, g = ln ppl(variant) - ln ppl(Llama) paired by seed, each side at its chosen "
    "rate, shown as exp(g) - 1, with the mean over seeds and its 95% Student's t-interval (seeds - 1 degrees of "
    "freedom); 'behind Llama' when the interval lies above 0, 'ahead of Llama' when below, 'no gap shown' when it "
    "includes 0. What dropping a tie does: per width and untied variant, d = ln ppl(tied relative) - ln "
    "ppl(untied) paired by seed, with its 95% t-interval: 'dropping it helps' when the interval lies above 0, "
    "'dropping it hurts' when below, 'no effect shown' when it includes 0; the share of the relative's gap it "
    "closes is mean d / mean g(relative), a ratio of means printed without an interval. A pair with a diverged run "
    "is left out and counted. No line through widths and no extrapolation: two widths.")
RULES = {"own": T_RULE, "ladder": LADDER_RULE, "budget-ladder": BUDGET_LADDER_RULE,
         "tie-ladder": TIE_LADDER_RULE, "test-time": TEST_TIME_RULE}  # where it is not VERDICT_RULE
