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
# *A 50-minute lecture on Causal Energy Minimization (CEM, arXiv 2605.07588).* It is the path through
# notebooks 01–05: each section names the notebook that goes deeper. `make slides` turns it into a
# reveal.js deck, `make handout` into a printable PDF.
#
# **Learning goals.** By the end you can
# 1. write the causal interaction energy and show that one gradient step on it is attention (10 min);
# 2. say why that forces tied weights, $W_V = W_K$ and $W_O = W_Q^\top$, and what they save (5 min);
# 3. do the same for the gated MLP, whose down projection is the transpose of its up projection (10 min);
# 4. run $T$ steps inside one layer and watch the energy fall (10 min);
# 5. say what the measurements do and do not support, against the paper (10 min).
#
# Five minutes are left for the lineage and questions.

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
from nbhelpers import antiderivative, check_answer, evidence, matrix, proved, report, step_error, vector

import cem_core
from cem_core.ui import explore
from cem_core.ui.controls import EnergyControls
from cem_core.ui.widgets import EnergyExplorer

torch.manual_seed(seed)
beta = sp.Symbol("beta", positive=True)

# %% [markdown]
# ## Where this comes from
#
# - **Hopfield (1982):** a network that stores patterns and recalls one by descending an energy.
# - **Modern Hopfield networks** (Krotov & Hopfield 2016; Ramsauer et al. 2020): a log-sum-exp energy
#   whose one-step update is $\xi \leftarrow X\,\mathrm{softmax}(\beta X^\top \xi)$, which is attention.
# - **The Energy Transformer** (Hoover et al. 2023): one energy for a whole block, descended for several steps.
# - **CEM** adds *causal conditioning* (token $i$'s energy sees only $c_1, \dots, c_i$, so it can model
#   language), tied weights, an energy for the MLP, diagonal-plus-low-rank interactions, learned
#   preconditioners, and $T$ steps inside one layer. Notebook 01 §11 tells the story with references.

# %% [markdown]
# ## 1. The causal interaction energy (notebook 01)
#
# Token $i$ has a state $x$ and sees the context $c_1, \dots, c_i$ (the normalised inputs). Its energy
# is low when its query ${\color{#1f77b4}W_Q} x$ (blue) aligns with the keys ${\color{#d62728}W_K c_j}$ (red):
#
# $$E_i(x \mid c_{1..i}) = -\frac{1}{\beta}\log\sum_{j \le i}
#   \exp\big(\beta\,({\color{#1f77b4}W_Q} x)^\top ({\color{#d62728}W_K c_j})\big).$$
#
# One gradient step from $x^{(0)} = c_i$ with step size 1 gives the layer's update $-\nabla_x E_i$.
# SymPy differentiates it entry by entry, at width $d = 2$ and three tokens.

# %% tags=["handout"]
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
# That is one attention head whose values are the keys, $W_V = {\color{#d62728}W_K}$, and whose output is the query
# matrix transposed, $W_O = {\color{#1f77b4}W_Q^\top}$: the colours show the tying. The real layer
# (`cem_core.CEMAttention`, $\beta = 1/\sqrt{d_h}$, RMSNorm in front) must agree with the formula at
# random weights. **Tolerance: $10^{-10}$, float64.**

# %% tags=["compare-lecture-attention"]
layer = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=d, n_heads=1, rope=False))
error = step_error(layer, attention, {"q_proj.weight": W_Q, "k_proj.weight": W_K}, x, c, {beta: layer.scale})
report(f"`CEMAttention` vs the derived update, largest difference: {error:.1e}")
assert error < 1e-10

# %% [markdown]
# ## 2. The tied weights, and what they save (notebook 01 §3)
#
# The gradient of a scalar energy can only read out through $W_Q^\top$ and weigh the keys it scores:
# an untied head ($W_V \ne W_K$, $W_O \ne W_Q^\top$) is not the plain gradient step of this energy.
# So a CEM attention layer has two $d \times d$ matrices where Llama's has four.

# %% tags=["handout"]
width, heads, hidden = 768, 12, 2048
ours = cem_core.AttentionConfig(d_model=width, n_heads=heads).param_counts()["projections"]
llama = cem_core.LlamaAttentionConfig(d_model=width, n_heads=heads).param_counts()["projections"]
report(f"At width {width}: CEM attention {ours:,} projection weights, Llama attention {llama:,} "
       f"(ratio {ours / llama:.2f}).")

# %% [markdown]
# ### Exercise 1: the first token
#
# The first token sees only itself. **What is its update $-\nabla_x E_1(x \mid c_1)$?** Write it with
# `W_Q`, `W_K` and `c[0]` (SymPy matrices), then run the check.

# %% tags=["exercise-lecture-first-token", "handout"]
answer = None                                             # your answer here


# %% tags=["check-lecture-first-token", "hide-input"] jupyter={"source_hidden": true}
def check(answer):
    first = -sp.Matrix([sp.diff(-sp.log(sp.exp(beta * scores[0])) / beta, x_k) for x_k in x])
    assert sp.simplify(answer - first) == sp.zeros(d, 1), "that is not -grad E_1: differentiate one score"


check_answer(answer, check, "lecture-first-token",
             "With one key the softmax weight is 1: the update is $W_Q^\\top W_K c_1$, whatever $x$ is.")

# %% [markdown]
# ## 3. The gated MLP from an element-wise energy (notebook 02)
#
# With up projection $U$, gate $G$ and $\Phi$ an antiderivative of the activation $\varphi$ (SiLU:
# $\Phi' = \mathrm{SiLU}$), the element-wise energy is
#
# $$E(x \mid c) = -\sum_m (Gc)_m\, \Phi\big((Ux)_m\big).$$
#
# Its negative gradient, for any $\varphi$:

# %% tags=["handout"]
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
# One step from $x^{(0)} = c$ is SwiGLU with the down projection tied to the up projection (green): two
# matrices instead of three. `cem_core.CEMGatedMLP` agrees with the formula. **Tolerance: $10^{-10}$, float64.**

# %% tags=["compare-lecture-mlp"]
z = sp.Symbol("z")
silu_mlp = mlp.replace(phi, sp.Lambda(z, z / (1 + sp.exp(-z))))        # phi = SiLU
layer = cem_core.CEMGatedMLP(cem_core.MLPConfig(d_model=d, d_ff=d_ff))
error = step_error(layer, silu_mlp, {"up_proj.weight": U, "gate_proj.weight": G}, x_c, [c_mlp])
report(f"`CEMGatedMLP` vs $U^\\top(\\mathrm{{SiLU}}(Uc) \\odot Gc)$, largest difference: {error:.1e}")
assert error < 1e-10

# %% [markdown]
# ### Exercise 2: the parameter count
#
# **How many projection weights has the CEM gated MLP at width 768 with 2,048 hidden units?**
# (SwiGLU has $3 \cdot 768 \cdot 2048$.) Write a number, then run the check.

# %% tags=["exercise-lecture-mlp-count", "handout"]
answer = None                                             # your answer here


# %% tags=["check-lecture-mlp-count", "hide-input"] jupyter={"source_hidden": true}
def check(answer):
    counted = cem_core.MLPConfig(d_model=width, d_ff=hidden).param_counts()["projections"]
    assert answer == counted, "count the matrices: the down projection is U transposed, no new weights"


check_answer(answer, check, "lecture-mlp-count",
             "Two matrices, $U$ and $G$: $2 \\cdot 768 \\cdot 2048$ = 3,145,728, two thirds of SwiGLU.")

# %% [markdown]
# ## 4. More steps in one layer (notebooks 02 and 03)
#
# A layer may take $T$ steps, $x^{(t+1)} = x^{(t)} - \eta\, P\, \nabla E(x^{(t)} \mid c)$, with a step
# size $\eta$, a preconditioner $P$ and an anchor $\tfrac{\lambda}{2}|x - x^{(0)}|^2$ that keeps the
# iterates near the start (without it the attention energy, which is concave, has no minimum). Move
# the sliders: at $\eta = 0.5$ every token's energy falls at every step; with the anchor
# ($\lambda = 0.5$) the steps shrink, without it ($\lambda = 0$) they grow.

# %% tags=["handout"]
EnergyExplorer(controls=("T", "eta", "anchor", "seed"), T=8, eta=0.5, anchor=0.5)

# %% tags=["hide-input", "slides-skip"] jupyter={"source_hidden": true}
steps = {lam: explore.explore(EnergyControls.from_values(T=8, eta=0.5, anchor=lam))["phases"][0]
         for lam in (0.5, 0.0)}
assert all((np.diff(phase["energies"], axis=0) < 0).all() for phase in steps.values())    # E falls at every step
assert (steps[0.5]["update_norms"][-1] < steps[0.5]["update_norms"][0]).all()             # anchored: steps shrink
assert (steps[0.0]["update_norms"][-1] > steps[0.0]["update_norms"][0]).all()             # no anchor: they grow

# %% [markdown]
# The app's energy page shows the same figures with step playback and a guided lesson
# ([localhost:8501](http://localhost:8501/?T=8&eta=0.5&anchor=0.5 "needs the app: run make app first"),
# while `make app` runs).

# %% [markdown]
# ## 5. What the evidence says (notebooks 04 and 05)
#
# Each claim gets its verdict from a rule fixed before the runs: pair the runs by seed, take the mean
# difference $m$ and its standard error, and call the claim *supported* only when $m \pm 2\,\mathrm{se}$
# clears the threshold. Three seeds make $\pm 2$ se about an 82% interval, not 95%, so each count is also
# read with the project's one reading, a 95% Student's $t$ interval ($4.30$ se at 3 seeds). Every number
# below is from small models on small data, named with its scale and corpus: evidence at that scale, not
# a verdict on the paper's.

# %% tags=["handout"]
summary = evidence("../results/gp-study/results.json", "../results/lm-default/results.json")
report(summary["text"])

# %% tags=["handout", "hide-input"] jupyter={"source_hidden": true}
summary["lm"]

# %% [markdown]
# ## Takeaways
#
# One gradient step on a log-sum-exp energy is attention with tied weights, and one step
# on an element-wise energy is a gated MLP with tied projections: half and two thirds of the weights.
# The energy view makes more steps, preconditioners and diagonals natural, and tells you when a step
# lowers the energy. Whether they pay off is an empirical question. At our scale (0.25M-parameter language
# models on Python source, GP models of about 30K parameters) none of the paper's eight language-model
# claims is supported under the $t$ reading, and more steps lowered the GP error in none of the paper's own
# setups. Go deeper in notebooks 01–06, and in the app (`make app`).
