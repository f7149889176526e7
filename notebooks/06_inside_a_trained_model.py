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
# # 06 · Inside a trained model
#
# [Open in Colab](https://colab.research.google.com/github/cem-lab/cem-lab/blob/main/notebooks/06_inside_a_trained_model.ipynb)
#
# Notebooks 01–03 ran CEM layers with random weights; 04 and 05 read the records of trained runs. This one opens
# **trained weights** and watches them work. The repository keeps eight small trained models in `models/`, each
# with a card (its configuration, data, training steps, seed and held-out metric): five one-layer models of the
# GP factor study (seed 0; notebook `04_gp_recursion` derives the task) and three two-layer language models on
# an English prose corpus.
#
# The paper's GP experiment asks whether more in-layer steps bring the in-context prediction closer to the
# Bayes-optimal one, the exact GP posterior mean. Our factor study found one condition where they do: **the
# block descended as one energy** (attention and MLP in one energy, $T$ steps on their sum), trained long
# (12,000 steps), by the rule recorded before it ran; under the project's t-based reading (a 95% interval at 3
# seeds) that condition too is inconclusive (docs/results-gp.md, the factor study). Here you watch that model's
# prediction move, step by step, against the posterior, beside CEM
# attention trained at the same $T = 8$; then ask the question that the ICML 2025 associative-memory tutorial
# asks of its pretrained Energy Transformer: **the energy is still falling: do more steps help?**
#
# The app's [Inside a trained model page](http://localhost:8501/inside "needs the app: run make app first") plays the
# same steps in the browser, one function or one sentence at a time (start it with `make app`).
#
# **Learning goals.** After this notebook you can
#
# 1. load a trained checkpoint with its card, say what it was trained on and at what scale, and check that
#    reading it after its trained $T$ steps is its forward pass;
# 2. read a GP model's prediction after every in-layer step against the exact posterior, and say when the steps
#    carry it towards the optimum;
# 3. prove that a predictor's mean squared error is the optimum's plus its squared distance to the posterior
#    mean, and turn an RMSE ratio into that distance;
# 4. answer "the energy is still falling: do more steps help?" with test-time $T$ on 256 held-out functions, with
#    confidence intervals;
# 5. read a logit lens along the in-layer steps of a trained language model.

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
models_root = "../models"      # the committed trained models (from notebooks/)
seed = 7                       # the function of the GP prior the steps are played on
context = 8                    # how many of its points the models see
points = None                  # or your own context instead of the function: [(x, y), ...], x in [-1, 1], at most 31
sentence = "When the name is bound to an object, evaluation of the atom yields that object."   # held out

# %%
import copy
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import sympy as sp
import torch
from IPython.display import Markdown, display
from nbhelpers import check_answer, proved, report, show, show_figure

from cem_core.experiments.gp import inspect as gp_inspect
from cem_core.experiments.gp import trained as gp_trained
from cem_core.experiments.gp.task import gp_posterior_mean
from cem_core.experiments.gp.train import eval_set
from cem_core.experiments.lm import inspect as lm_inspect
from cem_core.experiments.lm import trained as lm_trained
from cem_core.experiments.models import test_time
from cem_core.nn.model import recursion_depth
from cem_core.nn.readout import read_steps
from cem_core.ui import figdata, trained_plots

root = Path(models_root)

# %% [markdown]
# ## 1. The checkpoints and their cards
#
# Every model was trained by `make models` (`python -m cem_core models train`), from the configuration its card
# names; loading one checks its weights' sha256 and that the configuration is the current code's. The numbers
# below are read from the cards.

# %%
rows = []
for name in gp_trained.GP_MODELS:
    card = gp_trained.gp_card(name, root)
    rows.append(f"| `{name}` | {card['title']} | {card['params']:,} | {card['steps']:,} steps, batch 32, fresh "
                f"functions | {card['metric']['value']:.3f} (held-out RMSE / GP optimum, "
                f"{card['metric']['functions']:,} functions) |")
for name in lm_trained.LM_MODELS:
    card = lm_trained.lm_card(name, root)
    rows.append(f"| `{name}` | {card['title']} | {card['params']:,} | {card['steps']:,} steps, "
                f"{card['tokens'] / 1e6:.1f}M tokens | {card['metric']['value']:.3f} (validation perplexity, "
                f"{card['metric']['sequences']} sequences) |")
display(Markdown("| model | what | parameters | training | held-out metric |\n| --- | --- | --- | --- | --- |\n"
                 + "\n".join(rows)))

# %% [markdown]
# The GP models see sequences of 32 points of a function drawn from the prior (RBF kernel, lengthscale 0.3, noise
# variance 0.01, inputs in $[-1, 1]$) and predict each $y_j$ from the points before it; every training step draws
# fresh functions. The language models read bytes (a vocabulary of 257) of an **English prose corpus**: the Python
# documentation's topics and the standard library's docstrings, about 2 MB built from the Python installation,
# 5% of its documents held out. It is **not SlimPajama**, and at about 0.2M parameters and 5M tokens these models
# are tiny: what they show is how the steps behave, not how a large model would.
#
# **Reading a layer after step $t$.** A CEM layer maps the residual stream $h$ to $h + x^{(T)} - x^{(0)}$.
# `cem_core.nn.readout.read_steps` stops it after step $t$ instead, $h + x^{(t)} - x^{(0)}$, runs the layers after
# it as trained and reads the model's output there. At $t = T$ that must be the model's own forward pass, and
# with $t$ past the trained $T$ it must be the model run with $T' = t$ steps (test-time recursion: the same
# energy and step size, more steps). The check runs the trained weights in float64: in float32 the two orders of
# summation differ by rounding that the block's steps amplify (about $10^{-4}$ after 8 steps). **Tolerance:
# $10^{-9}$ absolute, float64**, on 64 held-out functions.

# %% tags=["compare-readout"]
block, task = gp_trained.load_gp_model("gp-block-T8", root)
spec = gp_trained.GP_MODELS["gp-block-T8"].spec
xs, ys = (t[:64] for t in eval_set(task, spec.train))
block64 = copy.deepcopy(block).double()
(steps,) = read_steps(block64, (xs.double(), ys.double()), T_test=16)
with torch.no_grad(), recursion_depth(block64, 16):
    longer = block64(xs.double(), ys.double())
with torch.no_grad():
    errors = ((steps.outputs[8] - block64(xs.double(), ys.double())).abs().max().item(),
              (steps.outputs[16] - longer).abs().max().item())
report(f"Read after step 8, `gp-block-T8` differs from its forward pass by at most **{errors[0]:.1e}**; read after "
       f"step 16, from the model run with $T' = 16$ by at most **{errors[1]:.1e}** (tolerance $10^{{-9}}$).")
assert max(errors) < 1e-9, "the readout after step t is not the model run with t steps"

# %% [markdown]
# ## 2. The steps on one function
#
# Draw one function, give the models its first points as context, and ask for the value at 101 points of
# $[-1, 1]$ (one query token after the context for each). Every line is the prediction after step $t$ of the
# layer, from $t = 0$ (the layer skipped) to the trained $T = 8$; the dashed line and the grey band are the exact
# posterior mean and $\pm 2$ standard deviations given the same context, the best any predictor can do.

# %%
played = figdata.gp_steps_on_function(figdata.STEP_MODELS, seed=seed, context=context, root=root, points=points)
show_figure(trained_plots.mpl_trained_steps(played))


# %%
def step_story(played: dict) -> str:
    """What the steps do on this function, per model, from the RMSE to the posterior mean after each step."""
    parts = []
    for name, m in played["models"].items():
        r = m["rmse_to_posterior"]
        falls = sum(b < a for a, b in zip(r, r[1:]))
        parts.append(f"**{m['title']}**: the RMSE to the posterior mean on the grid goes from {r[0]:.3f} ($t = 0$) "
                     f"to {r[1]:.3f} after one step and {r[-1]:.3f} after {len(r) - 1} ({falls} of the "
                     f"{len(r) - 1} steps lower it; the lowest, {r.min():.3f}, is after step {int(r.argmin())})")
    on = (f"the function of seed {played['seed']} with {played['context']} context points" if played["truth"]
          is not None else f"your {played['context']} points")
    return f"On {on}: " + "; ".join(parts) + "."


report(step_story(played))

# %% [markdown]
# One function is an anecdote: it was chosen (seed 7) because its steps move the prediction visibly; on seed 0
# (change `seed` above) the block's first step does nearly all the work. The 256 held-out functions of section 3
# say what holds on average.
#
# ## 3. The energy is still falling: do more steps help?
#
# A CEM layer descends an energy, and at the trained $T$ the energy of the query token is usually still falling.
# So run the **same** layers for more steps at test time, $T' = 1 \ldots 4T$, and measure. The numbers were
# measured once after training on 256 held-out functions (`models/<name>/test_time.json`, checked against the
# weights): the RMSE ratio to the GP optimum per function, its mean ± standard error, and for each $T'$ the
# paired difference to the trained $T$ with its 95% t-interval.

# %%
curves = figdata.gp_test_time_curves(root=root)
show_figure(trained_plots.mpl_trained_test_time(curves))

# %%
def energy_line(name: str, measured: dict) -> str:
    """What the layer's energy did along the steps on the held-out functions (test_time.json's energy_falls)."""
    falls, T, last = measured["energy_falls"], measured["trained_T"], max(measured["T"])
    overflow = next((t for t, s in zip(measured["T"], measured["by_T"]) if s["overflowed"]), None)
    steps = "its trained step" if T == 1 else f"every one of its {T} trained steps"
    if not falls["trained"]:
        return (f"`{name}`: its energy does **not** fall: it rose at {falls['share_of_rises']:.1%} of the (token, "
                f"step) pairs up to $T' = {last}$.")
    beyond = (f"and kept falling at every step up to $T' = {last}$" if falls["all"] else
              f"and from $T' = {overflow}$ on the iterates overflow (not finite) on some functions" if overflow else
              f"then rose at {falls['share_of_rises']:.1%} of the (token, step) pairs up to $T' = {last}$")
    return f"`{name}`: the energy fell at {steps}, for every token of every function, {beyond}."


def test_time_answer(curves: dict) -> str:
    """Do more steps help? Per model with steps: its best test-time T and the readings at 2T and 4T."""
    lines = []
    for name, c in curves.items():
        if len(c["T"]) == 1:
            continue
        measured = test_time(name, root)
        finite = [(m, T) for m, T in zip(c["mean"], c["T"]) if math.isfinite(m)]
        best_mean, best_T = min(finite)
        at_trained = c["mean"][list(c["T"]).index(c["trained_T"])]
        readings = " ".join(gp_inspect.scaling_reading(measured, T) for T in (2 * c["trained_T"], 4 * c["trained_T"]))
        lines.append(f"- **{c['title']}** (`{name}`): ratio {at_trained:.3f} at the trained $T = {c['trained_T']}$; "
                     f"the lowest mean, {best_mean:.3f}, at $T' = {best_T}$. {readings} "
                     + (energy_line(name, measured) if "energy_falls" in measured else ""))
    return "\n".join(lines)


report(test_time_answer(curves))


# %%
def verdict(curves: dict) -> str:
    """The answer over all models with steps: does any test-time T beyond the trained T lower the ratio?"""
    helped = [f"`{name}` at $T' = {T}$" for name, c in curves.items() if len(c["T"]) > 1
              for T, iv in zip(c["T"], test_time(name, root)["vs_trained"]) if T > c["trained_T"] and iv["high"] < 0]
    models = sum(len(c["T"]) > 1 for c in curves.values())
    if helped:
        return ("**Yes, in places**: more steps than trained lower the ratio (95% t-interval below 0) for "
                + ", ".join(helped) + ".")
    falling = [f"`{name}`" for name, c in curves.items() if len(c["T"]) > 1
               and test_time(name, root)["energy_falls"]["trained"]]
    return (f"**No.** On none of the {models} GP models with steps does any test-time $T'$ beyond the trained $T$ "
            "lower the RMSE ratio (95% t-interval over 256 functions), although the energy of "
            + (", ".join(falling[:-1]) + " and " if len(falling) > 1 else "") + falling[-1]
            + " goes on falling past the trained $T$.")


report(verdict(curves))

# %% [markdown]
# Why can the energy fall while the prediction gets worse? Training made the $T$-th iterate useful, not the
# minimum of the energy: the layers never saw step $T + 1$, and nothing ties a lower energy to a better prediction.
# The block as one energy has no minimum at all (no anchor, $\lambda = 0$, docs/design.md#2-the-mathematics): its
# iterates can descend for ever, and at a large $T'$ they overflow.
#
# The same function as in section 2, run to $T' = 4T = 32$: how far the energy of the query token at $x = 0$ has
# fallen since step 0 (left, log axis) and the distance of the prediction to the posterior mean (right), with the
# trained $T$ dotted. Where a line stops, the iterates have overflowed.

# %%
fig, (ax_e, ax_r) = plt.subplots(1, 2, figsize=(11, 3.8))
for k, name in enumerate(figdata.STEP_MODELS):
    model, _ = gp_trained.load_gp_model(name, root)
    seen = gp_inspect.inspect_function(model, task, seed, context, T_test=32)
    (layer,) = seen["layers"]
    label = gp_trained.GP_MODELS[name].title.split(" (")[0]
    energy = np.array(layer["energies"])[:, -1]            # the query token at x = 0, after each step
    ax_e.plot(range(1, len(energy)), energy[0] - energy[1:], "o-", ms=2, color=f"C{k}", label=label)
    ax_r.plot(layer["rmse_to_posterior"], "o-", ms=2, color=f"C{k}", label=label)
for ax in (ax_e, ax_r):
    ax.axvline(8, color="0.5", ls=":")
    ax.set_xlabel("in-layer step t (trained T = 8, dotted)")
    ax.legend(fontsize=8)
ax_e.set_yscale("log")
ax_e.set(ylabel="$E(x^{(0)}) - E(x^{(t)})$, log scale", title="How far the query token's energy has fallen")
ax_r.set(ylabel="RMSE to the posterior mean (grid)", title="The prediction does not keep improving")
fig.tight_layout()
show_figure(fig)

# %% [markdown]
# ## 4. From an RMSE ratio to a distance from the optimum
#
# The ratios above compare a model's error with the optimum's. How far is the model's prediction $p$ from the
# posterior mean $m = \mathbb{E}[y \mid \text{context}]$? Given the context, $p$ and $m$ are fixed and
# $y = m + \varepsilon$ with $\mathbb{E}[\varepsilon] = 0$ and $\mathbb{E}[\varepsilon^2] = s^2$, whatever the
# distribution of $\varepsilon$. SymPy expands the squared error and takes the expectation term by term:

# %%
p, m, e = sp.symbols("p m varepsilon", real=True)
s = sp.Symbol("s", positive=True)
moments = {0: 1, 1: 0, 2: s**2}                          # E[eps^k]: mean 0, variance s^2, any distribution
squared_error = sp.Poly(sp.expand((p - (m + e)) ** 2), e)
expected = sum(c * moments[k] for (k,), c in squared_error.terms())
show(r"\mathbb{E}\left[(p - y)^2\right]", expected)
assert sp.simplify(expected - ((p - m) ** 2 + s**2)) == 0
proved(r"\mathbb{E}\left[(p - y)^2\right] = (p - m)^2 + s^2")

# %% [markdown]
# The optimum's mean squared error is $s^2$, and averaging over positions and functions keeps the sum: a model's
# MSE is the optimum's plus its mean squared distance to the posterior mean. So its RMSE ratio $r$ and its
# distance $d$ (the RMSE of $p - m$, in units of the optimum's RMSE) satisfy $r^2 = 1 + d^2$: a ratio of 1.08 is
# not "8% worse than optimal" in distance, it is a prediction off by about 0.4 of the optimum's own error.
#
# ## Exercises
#
# **1. How far from the optimum?** The card of `gp-block-T8` gives its RMSE ratio on the 1,024 held-out functions
# (`ratio` below). From $r$ alone, **how far is its prediction from the posterior mean**, as the RMSE of $p - m$
# over the optimum's RMSE? Write your answer as an expression in `ratio`; the check measures $d$ on the same 1,024
# functions (the cross term averages to 0 only over many functions: **tolerance 0.03 absolute**).

# %%
ratio = gp_trained.gp_card("gp-block-T8", root)["metric"]["value"]

# %% tags=["exercise-distance-from-ratio"]
answer = None                                               # your answer here


# %% tags=["check-distance-from-ratio"]
def check(answer):
    xs, ys = eval_set(task, spec.train)                     # the card's 1,024 held-out functions
    with torch.no_grad():
        prediction = block(xs, ys).double()
    optimum = gp_posterior_mean(task, xs, ys)
    distance = float(((prediction - optimum) ** 2).mean().sqrt() / ((optimum - ys.double()) ** 2).mean().sqrt())
    assert abs(float(answer) - distance) < 0.03, f"the measured distance is {distance:.3f}"


check_answer(answer, check, "distance-from-ratio",
             f"$d = \\sqrt{{r^2 - 1}}$ = {math.sqrt(ratio ** 2 - 1):.3f} for $r$ = {ratio:.4f}: the prediction misses "
             f"the posterior mean by {math.sqrt(ratio ** 2 - 1):.0%} of the optimum's RMSE, while the ratio is "
             f"{ratio - 1:.0%} above 1.")

# %% [markdown]
# ## 5. A language model, step by step: a logit lens
#
# The same reading on a language model: stop one layer after step $t$, run the rest as trained, and read the
# next-byte distribution. `lm-cem-attn-T2` (CEM attention at $T = 2$ in both of its blocks, SwiGLU MLPs) reads a
# sentence from the corpus's held-out documents:

# %%
lm, tokenizer = lm_trained.load_lm_model("lm-cem-attn-T2", root)
lens = lm_inspect.inspect_text(lm, tokenizer, sentence)
report(f"*{sentence}* ({len(lens['tokens'])} bytes). Mean loss of the true next byte, with one layer stopped after "
       "step $t$ = 0, 1, 2 and the other as trained: "
       + "; ".join(f"{layer['name']}: " + ", ".join(f"{v:.3f}" for v in layer["mean_loss"])
                   for layer in lens["layers"])
       + f" nats (the forward pass: {lens['final']['mean_loss']:.3f}).")


# %%
def lens_table(lens: dict, layer: int = -1, rows: int = 8) -> str:
    """The positions where the layer's steps lower the true next byte's loss the most: what the model predicts
    there after each step (its most likely byte and that byte's probability)."""
    steps = lens["layers"][layer]
    loss = np.array(steps["loss"])                          # (T+1, positions)
    shown = sorted(np.argsort(loss[-1] - loss[0])[:rows])
    head = "| text so far | true next | " + " | ".join(f"after step {t}" for t in range(len(loss))) + " | loss |"
    lines = [head, "|" + " --- |" * (len(loss) + 3)]
    for i in shown:
        seen = ("…" if i > 14 else "") + "".join(lens["tokens"][max(0, i - 14):i + 1]).replace("␣", " ")
        seen = seen.replace("|", "\\|")                    # a | would end the table's cell
        tops = " | ".join(f"`{steps['top'][t][i][0][0]}` {steps['top'][t][i][0][1]:.2f}" for t in range(len(loss)))
        lines.append(f"| {seen} | `{lens['targets'][i]}` | {tops} | {loss[0, i]:.2f} → {loss[-1, i]:.2f} |")
    better = int((loss[-1] < loss[0]).sum())
    return (f"**{steps['name']}**: the steps lower the true next byte's loss at {better} of {loss.shape[1]} positions. "
            f"The {rows} largest drops:\n\n" + "\n".join(lines))


display(Markdown(lens_table(lens)))

# %% [markdown]
# Over the validation sequences (measured once after training, `test_time.json`): the loss along each CEM layer's
# steps (left), and validation perplexity with every CEM layer run at test-time $T$ (right).

# %%
lm_curves = figdata.lm_test_time_curves(root=root)
show_figure(trained_plots.mpl_trained_lm_steps(lm_curves))


def lm_reading(curves: dict) -> str:
    """What the language models' steps and test-time T did on the validation sequences, in words."""
    layers = [(name, layer, losses) for name, ls in curves["steps"].items() for layer, losses in ls.items()]
    falling = sum(bool((np.diff(losses) < 0).all()) for _, _, losses in layers)
    parts = [f"Along the steps, the true next byte's mean loss falls at every step in {falling} of the {len(layers)} "
             f"CEM layers ({curves['sequences']} validation sequences)."]
    for name, c in curves["ppl"].items():
        by_T = ", ".join(f"{v:.2f} at $T = {T}$" for T, v in zip(c["T"], c["ppl"]))
        best = int(c["T"][int(np.argmin(c["ppl"]))])
        parts.append(f"`{name}`: perplexity {by_T}" + (f" (lowest at $T = {best}$, trained at {c['trained_T']})"
                                                        if len(c["T"]) > 1 else " (no in-layer steps)") + ".")
    return " ".join(parts)


report(lm_reading(lm_curves))

# %% [markdown]
# **Takeaway.** Trained CEM layers use their steps: on the GP task the block descended as one energy moved its
# prediction towards the exact posterior up to its trained $T$, and the language models' next-byte loss fell along
# their layers' steps. But the energy is a means, not the goal: in the measurements above it went on falling past
# the trained $T$ while the prediction did not get better, and perplexity rose with more steps than trained. These
# are small models (tens of thousands of parameters for the GP, about 0.2M for the language models, trained on 4.9M
# tokens of English prose, not SlimPajama) trained at one $T$; whether a model trained to use more steps at test
# time would behave otherwise is a question these checkpoints cannot answer. Notebook
# [`05_what_the_evidence_says`](05_what_the_evidence_says.ipynb) weighs the sweeps this project did run.
