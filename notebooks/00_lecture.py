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
# # A transformer layer is gradient descent on an energy
#
# [Open in Colab](https://colab.research.google.com/github/cem-lab/cem-lab/blob/main/notebooks/00_lecture.ipynb)
#
# *Causal Energy Minimization (CEM, arXiv 2605.07588), in one lecture.*
#
# **Learning goals.** By the end you can
# 1. write the causal interaction energy and show that one gradient step on it is attention;
# 2. say which weight tying that step implies, and what it saves;
# 3. do the same for the gated MLP;
# 4. run $T$ steps inside one layer and read what the energy does;
# 5. say what the measurements do and do not support, at which scale.

# %% [markdown] tags=["notes"]
# **Speaker notes (1 min).** A 50-minute lecture: goals 1–2 take 15 minutes, 3 and 4 ten each, 5 ten, and five are
# left for the lineage and questions. It is the path through notebooks 01–06; each section names the
# notebook that goes deeper. `make slides` builds this deck (`S` opens this speaker view), `make handout` the
# students' four pages. *Question:* "Do I need the paper?" Its full text was not available to us either: our
# notes come from its abstract and a summary (`docs/paper-notes.md`).

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

# %% tags=["parameters", "slides-skip"]
d = 2          # width of the symbolic derivations (small: every entry is a symbol)
n_ctx = 3      # the token we differentiate is the third; it sees c_1, c_2, c_3
d_ff = 3       # hidden units of the symbolic MLP
seed = 0

# %% tags=["hide-input", "slides-skip"] jupyter={"source_hidden": true}
import numpy as np
import sympy as sp
import torch
from nbhelpers import antiderivative, check_answer, evidence, matrix, proved, report, show_figure, step_error, vector

import cem_core
from cem_core.ui import energy_plots, explore, figdata
from cem_core.ui.controls import EnergyControls
from cem_core.ui.widgets import EnergyExplorer

torch.manual_seed(seed)
beta = sp.Symbol("beta", positive=True)

# %% [markdown]
# ## Where this comes from
#
# - **Hopfield (1982)**: a network recalls a stored pattern by descending an energy.
# - **Dense associative memories**: polynomial energies (Krotov & Hopfield 2016), exponential ones
#   (Demircigil et al. 2017), the continuous log-sum-exp energy whose one step is attention (Ramsauer et al. 2020).
# - **The Energy Transformer** (Hoover et al. 2023) and hierarchical associative memory (Krotov & Hopfield
#   2021): one energy for a whole block, descended for several steps.
# - **The transformer CEM starts from**: attention (Vaswani et al. 2017), SwiGLU (Shazeer 2020), RoPE (Su et al.
#   2021), RMSNorm (Zhang & Sennrich 2019), Llama (Touvron et al. 2023).

# %% [markdown] tags=["notes"]
# **Speaker notes (3 min).** The lineage is energies that recall by descent; CEM's new ingredient is
# *causal conditioning*: token $i$'s energy sees only $c_1, \dots, c_i$, so it can model language. Then tied
# weights, an energy for the MLP, diagonal-plus-low-rank interactions, learned preconditioners and $T$ steps
# in one layer. Notebook 01 §11 has the references. *Question:* "Isn't this just the Energy Transformer?" See
# the next slide: there every token is also a key.

# %% [markdown]
# ### What the causal history changes
#
# In the Energy Transformer every token is a query **and a key** of the one energy, so the gradient at
# token $i$ has two terms: its own query, and its appearance as a key in every other token's energy. CEM
# conditions token $i$ on a **fixed** history $c_{1..i}$ that the descent does not move, so the second term is
# gone:
#
# $$\text{CEM:}\quad -\nabla_{x_i} E_i = W_Q^\top \sum_{j \le i} a_{ij}\, W_K c_j \quad \text{(attention)}$$
# $$\text{Energy Transformer:}\quad \text{the same} \; + \sum_{k} a_{ki}\, W_K^\top W_Q x_k$$
#
# That is why one CEM step is exactly standard causal attention.

# %% [markdown] tags=["notes"]
# **Speaker notes (2 min).** Point at the second term: in the Energy Transformer, moving $x_i$ changes every
# score $(W_Q x_k)^\top W_K x_i$ it takes part in as a key. With the history fixed, $x_i$ appears only as a
# query. *Question:* "Is the causal mask then an approximation?" No: it is the conditioning itself; each token
# has its own energy over its own past.

# %% [markdown]
# ## 1. The causal interaction energy (notebook 01)
#
# Token $i$ starts from its normalised input, $x^{(0)} = c_i = \mathrm{RMSNorm}(h_i)$, and sees $c_1, \dots, c_i$.
# Its energy is low when its query ${\color{#1f77b4}W_Q} x$ (blue) aligns with the keys ${\color{#d62728}W_K c_j}$
# (red):
#
# $$E_i(x \mid c_{1..i}) = -\frac{1}{\beta}\log\sum_{j \le i}
#   \exp\big(\beta\,({\color{#1f77b4}W_Q} x)^\top ({\color{#d62728}W_K c_j})\big).$$
#
# The layer adds the displacement of the descent to the residual stream: $h_i + (x^{(T)} - x^{(0)})$.

# %% [markdown] tags=["notes"]
# **Speaker notes (4 min).** Read the energy aloud: a soft maximum of the scores of $x$'s query against the
# keys of the past, negated. Low energy means the query matches some key well. Stress the two spaces: the descent
# runs on the normalised $x$, and the layer adds its *displacement* to the residual stream, so "a layer is
# gradient descent" holds in that normalised space. *Question:* "Why only the past?" Token $i$'s energy is
# conditioned on $c_{1..i}$, which is what lets the model predict the next token.

# %% [markdown] tags=["new-slide"]
# ### One step is an attention head
#
# SymPy differentiates one step ($T = 1$, step size 1) entry by entry, at width $d = 2$ and three tokens:

# %% tags=["handout", "slides"]
W_Q, W_K = matrix("Q", d, d), matrix("K", d, d)
x, c = vector("x", d), [vector(f"c{j + 1}", d) for j in range(n_ctx)]
scores = [(W_Q * x).dot(W_K * c_j) for c_j in c]                        # s_ij = (W_Q x)^T (W_K c_j)
E = -sp.log(sum(sp.exp(beta * s) for s in scores)) / beta               # E_i(x | c_1..i), log-sum-exp
weights = [sp.exp(beta * s) / sum(sp.exp(beta * t) for t in scores) for s in scores]   # a_ij = softmax_j
attention = W_Q.T * sum((a * W_K * c_j for a, c_j in zip(weights, c)), sp.zeros(d, 1))  # W_O sum_j a_ij W_V c_j
update = -sp.Matrix([sp.diff(E, x_k) for x_k in x])                      # -grad_x E_i
assert sp.simplify(update - attention) == sp.zeros(d, 1)
proved(r"-\nabla_x E_i = {\color{#1f77b4}W_Q^\top} \sum_{j \le i} a_{ij}\, {\color{#d62728}W_K c_j}, \qquad "
       r"a_{ij} = \mathrm{softmax}_j\big(\beta\, ({\color{#1f77b4}W_Q} x)^\top {\color{#d62728}W_K c_j}\big)")

# %% [markdown]
# The values are the keys, $W_V = {\color{#d62728}W_K}$; the output is the query matrix transposed,
# $W_O = {\color{#1f77b4}W_Q^\top}$. `cem_core.CEMAttention` ($\beta = 1/\sqrt{d_h}$) agrees at random
# weights. **Tolerance: $10^{-10}$, float64.**

# %% tags=["compare-lecture-attention", "slides"]
layer = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=d, n_heads=1, rope=False))
error = step_error(layer, attention, {"q_proj.weight": W_Q, "k_proj.weight": W_K}, x, c, {beta: layer.scale})
report(f"`CEMAttention` vs the derived update, largest difference: {error:.1e}")
assert error < 1e-10

# %% [markdown] tags=["notes"]
# **Speaker notes (6 min).** Differentiate one score on the board: $\partial s_{ij} / \partial x =
# W_Q^\top W_K c_j$; the log-sum-exp turns the sum into softmax weights. The check below it runs the real layer.
# *Question:* "Why $\beta = 1/\sqrt{d_h}$?" It is attention's own temperature; here it is the inverse
# temperature of the energy.

# %% [markdown]
# ## 2. The tied weights, and what they save (notebook 01 §3)
#
# One step of this energy is an attention head with value and output weights $W_V$, $W_O$ exactly when
# $W_O W_V = W_Q^\top W_K$. For full-rank $W_Q, W_K$ every solution is $W_V = M W_K$, $W_O = W_Q^\top M^{-1}$
# with $M$ invertible: the tying $W_V = W_K$, $W_O = W_Q^\top$ up to a change of basis, which a preconditioner
# $P$ relaxes to $W_O W_V = P\,W_Q^\top W_K$. So CEM attention has two $d \times d$ matrices where Llama's has four:

# %% tags=["handout", "slides"]
width, heads, hidden = 768, 12, 2048
ours = cem_core.AttentionConfig(d_model=width, n_heads=heads).param_counts()["projections"]
llama = cem_core.LlamaAttentionConfig(d_model=width, n_heads=heads).param_counts()["projections"]
report(f"At width {width}: CEM attention {ours:,} projection weights, Llama attention {llama:,} "
       f"(ratio {ours / llama:.2f}).")

# %% [markdown] tags=["notes"]
# **Speaker notes (5 min).** The precise statement is "up to an invertible $M$", proved in notebook 01 §3; the
# paper's tying is the choice $M = I$, which carries no redundant parameters. *Question:* "Does tying cost
# accuracy?" At our scale it does for attention (section 5), not for the MLP.

# %% [markdown]
# ### Exercise 1: the first token
#
# The first token sees only itself. **What is its update $-\nabla_x E_1(x \mid c_1)$?** In the notebook, write it
# with `W_Q`, `W_K` and `c[0]` (SymPy matrices); the cell after it checks your answer.
#
# <div class="answer-space"></div>

# %% tags=["exercise-lecture-first-token", "slides-skip"]
answer = None                                             # your answer here


# %% tags=["check-lecture-first-token", "hide-input", "slides-skip"] jupyter={"source_hidden": true}
def check(answer):
    first = -sp.Matrix([sp.diff(-sp.log(sp.exp(beta * scores[0])) / beta, x_k) for x_k in x])
    assert sp.simplify(answer - first) == sp.zeros(d, 1), "that is not -grad E_1: differentiate one score"


check_answer(answer, check, "lecture-first-token",
             "With one key the softmax weight is 1: the update is $W_Q^\\top W_K c_1$, whatever $x$ is.")

# %% [markdown] tags=["notes"]
# **Speaker notes (3 min, in pairs).** Answer: $W_Q^\top W_K c_1$; with one key the softmax weight is 1, so the
# update does not depend on $x$. *Question:* "So the first token's layer is linear?" Yes, in $c_1$.

# %% [markdown]
# ## 3. The gated MLP from an element-wise energy (notebook 02)
#
# With $U$ the projection inside the activation $\varphi$ (Llama's `gate_proj`), $G$ the gate computed from the
# context (Llama's `up_proj`) and $\Phi$ an antiderivative of $\varphi$ (SiLU: $\Phi' = \mathrm{SiLU}$):
#
# $$E(x \mid c) = -\sum_m (Gc)_m\, \Phi\big((Ux)_m\big), \qquad \text{one step:}$$

# %% tags=["handout", "slides"]
U, G = matrix("U", d_ff, d), matrix("G", d_ff, d)
x_c, c_mlp = vector("x", d), vector("c", d)
phi = sp.Function("phi")                                              # the activation
Phi = antiderivative("Phi", phi)                                      # Phi' = phi
gate, up = G * c_mlp, U * x_c                                          # (Gc)_m and (Ux)_m
E_mlp = -sum(gate[m] * Phi(up[m]) for m in range(d_ff))               # E(x | c) = -sum_m (Gc)_m Phi((Ux)_m)
mlp = U.T * sp.Matrix([phi(up[m]) * gate[m] for m in range(d_ff)])    # down = U^T of phi(Ux) * Gc
assert sp.simplify(-sp.Matrix([sp.diff(E_mlp, x_k) for x_k in x_c]) - mlp) == sp.zeros(d, 1)
proved(r"-\nabla_x E = {\color{#2ca02c}U^\top}\big(\varphi({\color{#2ca02c}U}x) \odot Gc\big)")

# %% [markdown]
# From $x^{(0)} = c$ that is SwiGLU whose down projection is $U^\top$, the transpose of the activated branch
# (green): two matrices instead of three. `cem_core.CEMGatedMLP` agrees. **Tolerance: $10^{-10}$, float64.**

# %% tags=["compare-lecture-mlp", "slides"]
z = sp.Symbol("z")
silu_mlp = mlp.replace(phi, sp.Lambda(z, z / (1 + sp.exp(-z))))        # phi = SiLU
layer = cem_core.CEMGatedMLP(cem_core.MLPConfig(d_model=d, d_ff=d_ff))
error = step_error(layer, silu_mlp, {"up_proj.weight": U, "gate_proj.weight": G}, x_c, [c_mlp])
report(f"`CEMGatedMLP` vs $U^\\top(\\mathrm{{SiLU}}(Uc) \\odot Gc)$, largest difference: {error:.1e}")
assert error < 1e-10

# %% [markdown] tags=["notes"]
# **Speaker notes (10 min).** Names matter here: the paper's "up" projection $U$ is the one *inside* the
# activation, which Llama calls `gate_proj`; the multiplicative branch $G$ is Llama's `up_proj`. The readout is
# $U^\top$, so "down = up$^\top$" in the paper's names. *Question:* "Any activation?" Any $\varphi$ with an
# antiderivative $\Phi$; the equation shown is SiLU's.

# %% [markdown]
# ### Exercise 2: the parameter count
#
# **How many projection weights has the CEM gated MLP at width 768 with 2,048 hidden units?** (SwiGLU has
# $3 \cdot 768 \cdot 2048$.) In the notebook, write a number; the cell after it checks it.
#
# <div class="answer-space"></div>

# %% tags=["exercise-lecture-mlp-count", "slides-skip"]
answer = None                                             # your answer here


# %% tags=["check-lecture-mlp-count", "hide-input", "slides-skip"] jupyter={"source_hidden": true}
def check(answer):
    counted = cem_core.MLPConfig(d_model=width, d_ff=hidden).param_counts()["projections"]
    assert answer == counted, "count the matrices: the down projection is U transposed, no new weights"


check_answer(answer, check, "lecture-mlp-count",
             "Two matrices, $U$ and $G$: $2 \\cdot 768 \\cdot 2048$ = 3,145,728, two thirds of SwiGLU.")

# %% [markdown] tags=["notes"]
# **Speaker notes (2 min).** Answer: $2 \cdot 768 \cdot 2048 = 3{,}145{,}728$, two thirds of SwiGLU's
# 4,718,592.

# %% [markdown]
# ## 4. More steps in one layer (notebooks 02 and 03)
#
# $x^{(t+1)} = x^{(t)} - \eta\, P\, \nabla E(x^{(t)} \mid c)$, plus an anchor $\tfrac{\lambda}{2}|x - x^{(0)}|^2$
# (the attention energy is concave in $x$: no minimum). At $\eta = 0.5$, $T = 8$ (turn them in the notebook, or on
# the app's [energy page](http://localhost:8501/?T=8&eta=0.5&anchor=0.5 "needs the app: run make app first")):

# %% tags=["handout", "slides", "hide-input"] jupyter={"source_hidden": true}
descent = figdata.energy_descent(T=8, eta=0.5, anchors=(0.5, 0.0))
assert all((np.diff(run["energy"], axis=0) < 0).all() for run in descent["runs"].values())   # E falls every step
show_figure(energy_plots.mpl_energy_fall(descent))

# %% tags=["slides-skip"]
EnergyExplorer(controls=("T", "eta", "anchor", "seed"), T=8, eta=0.5, anchor=0.5)

# %% tags=["hide-input", "slides-skip"] jupyter={"source_hidden": true}
steps = {lam: explore.explore(EnergyControls.from_values(T=8, eta=0.5, anchor=lam))["phases"][0]
         for lam in (0.5, 0.0)}
assert all((np.diff(phase["energies"], axis=0) < 0).all() for phase in steps.values())    # E falls at every step
assert (steps[0.5]["update_norms"][-1] < steps[0.5]["update_norms"][0]).all()             # anchored: steps shrink
assert (steps[0.0]["update_norms"][-1] >= (1 - 1e-12) * steps[0.0]["update_norms"][0]).all()   # no anchor: none shrink

# %% [markdown] tags=["notes"]
# **Speaker notes (10 min).** Left: each token's energy relative to its own start, so the fall is visible
# whatever the spread between tokens. Right: the step lengths on a log scale; without the anchor the iterate runs
# off along the query direction, the energy still falling. Open the app's energy page and turn $\lambda$ to 0
# live. *Question:* "Then why train with $T > 1$?" That is the empirical question of section 5.

# %% [markdown]
# ## 5. What the evidence says (notebooks 04 and 05)
#
# Each claim gets its verdict from a rule fixed before the runs: pair the runs by seed, take the mean
# difference and its standard error; *supported* only when the interval clears the threshold. Every number is
# from small models on small data, named with its scale and corpus.

# %% tags=["handout", "slides", "hide-input"] jupyter={"source_hidden": true}
summary = evidence("../results/gp-study/results.json", "../results/lm-default/results.json")
report(summary["gp"])

# %% [markdown] tags=["notes"]
# **Speaker notes (3 min).** The GP task asks whether more in-layer steps bring the in-context prediction closer
# to the Bayes-optimal one. By the recorded rule one condition supports it (the block as one energy, trained
# long); in the $t$ reading none does.

# %% [markdown] tags=["new-slide"]
# ### The language models

# %% tags=["handout", "slides", "hide-input"] jupyter={"source_hidden": true}
report(summary["lm"] + "\n\n" + summary["note"])

# %% [markdown] tags=["notes"]
# **Speaker notes (2 min).** The recorded rule takes $\pm 2$ standard errors, about an 82% interval at three
# seeds; the project's one reading is a 95% Student's $t$ interval ($4.30$ standard errors at 3 seeds), shown
# beside it. Say the scale every time: 0.25M parameters on Python source, not the paper's 86M–162M on SlimPajama.
# *Question:* "So the paper is wrong?" These runs say nothing at its scale; they say the claims do not show at ours.

# %% [markdown]
# ### The paper's language-model claims, 1–4

# %% tags=["handout", "slides", "hide-input"] jupyter={"source_hidden": true}
report(summary["claims"][0])

# %% [markdown] tags=["notes"]
# **Speaker notes (2 min).** Read the verdict column first. Claim 1 is the headline: CEM attention costs 28% of
# perplexity against Llama at this size. Claim 3 moves from contradicted to inconclusive in the $t$ reading.
# Claim 4's support is thin: inconclusive in the $t$ reading and not replicated at each variant's own rate.

# %% [markdown]
# ### The paper's language-model claims, 5–8

# %% tags=["handout", "slides", "hide-input"] jupyter={"source_hidden": true}
report(summary["claims"][1])

# %% [markdown] tags=["notes"]
# **Speaker notes (2 min).** Recursion (T = 2) makes CEM attention worse, not better (claim 5). Claim 6 is
# "contradicted" in CEM's *favour*: the preconditioner gained more than the paper's "marginal". *Question:* "Five
# contradicted, then?" By the recorded rule five of eight, one of them in CEM's favour; in the $t$ reading three
# against the paper, one in its favour, four inconclusive.

# %% [markdown]
# ### Our two claims, fixed before their runs

# %% tags=["handout", "slides", "hide-input"] jupyter={"source_hidden": true}
report(summary["claims"][2])

# %% [markdown] tags=["notes"]
# **Speaker notes (1 min).** Two switches of ours, the distance-form diagonal and the block as one energy:
# neither helps at this size; both are stated before their runs so that a reader can check we did not tune them.

# %% [markdown]
# ## Takeaways
#
# One gradient step on a log-sum-exp energy is attention with tied weights, and one step on an element-wise
# energy is a gated MLP with tied projections: half and two thirds of the weights. The energy view makes more
# steps, preconditioners and diagonals natural, and tells you when a step lowers the energy. Whether they pay off
# is an empirical question. At our scale (0.25M-parameter language models on Python source, GP models of about
# 30K parameters) none of the paper's eight language-model claims is supported under the $t$ reading, and more
# steps lowered the GP error in none of the paper's own setups.

# %% [markdown] tags=["notes"]
# **Speaker notes (5 min).** Leave time for questions. Point to notebooks 01–06 and the app (`make app`); the
# "Inside a trained model" page shows trained checkpoints taking their steps.
