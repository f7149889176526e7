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
# # 03 · The design space: a diagonal, a preconditioner, more steps
#
# [Open in Colab](https://colab.research.google.com/github/cem-lab/cem-lab/blob/main/notebooks/03_design_space.ipynb)
#
# Notebooks 01 and 02 derived attention and the gated MLP as **one** plain gradient step. The
# paper (arXiv 2605.07588) extends the recipe in three directions, each a small change to the
# energy or to the step: a **diagonal** added to the low-rank interaction (D+LR), a learned
# **preconditioner** $P$ in $x \leftarrow x - \eta P \nabla E$, and **recursion**, $T$ steps inside
# one layer. We add a fourth, not in the paper: an **anchor** term that gives the energy a minimum.
# This notebook works out what each buys and what each costs, and checks every derivation
# against `cem_core`. The app shows the same layers interactively (start it with `make app`): links
# along the way open its [energy page](http://localhost:8501/ "needs the app: run make app first") and its
# [design page](http://localhost:8501/design
# "needs the app: run make app first") in the states this notebook looks at, and an
# explorer at the end (section 6) puts the energy page's controls inside the notebook.
#
# **Learning goals.** After this notebook you can
#
# 1. prove that a rank-$d_h$ interaction $W_Q^\top W_K$ cannot express a full-rank diagonal, derive
#    the D+LR update from the head energy, and count what a per-head or a shared diagonal costs;
# 2. show that the attention energy is concave, derive $E(x - \eta P g) \le E(x) - \eta\, g^\top P g$,
#    and explain why a positive definite $P$ always descends while the paper's
#    $\mathrm{diag}(\mathrm{softplus}\,p) + UV^\top + VU^\top$ can have a negative eigenvalue and ascend;
# 3. write two steps out as attention of an updated query over the same keys and values;
# 4. find the fixed point of the anchored energy and the step sizes for which the steps reach it;
# 5. derive the distance-form diagonal's update and the joint block's, and say why one is bounded below
#    and the other is a parallel block at $T = 1$.

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
d = 3          # width of the symbolic rank argument
d_h = 2        # head width: W_Q^T W_K has rank <= d_h < d
d_model = 8    # width of the numeric layers
n_heads = 2
n_tokens = 6
T = 12         # in-layer steps for the recursion experiments
anchor_lambda = 1.0           # lambda of the anchor (section 4)
anchor_etas = (0.5, 2.5)      # step sizes below and above 2 / lambda (section 4)
seed = 0

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import sympy as sp
import torch
from nbhelpers import check_answer, matrix, proved, report, show, show_figure, vector

import cem_core
from cem_core.nn.config import CEMOptions
from cem_core.ui import energy_plots, explore, figdata
from cem_core.ui.controls import EnergyControls
from cem_core.ui.widgets import EnergyExplorer

# %% [markdown]
# ## 1. What the diagonal adds to a low-rank interaction
#
# One head scores $x^\top A\, c_j$ with $A = W_Q^\top W_K$, a $d \times d$ matrix of rank at most
# $d_h < d$. So $\det A = 0$ **for every choice of weights**:

# %%
W_Q, W_K = matrix("q", d_h, d), matrix("k", d_h, d)
low_rank = W_Q.T * W_K                                     # A = W_Q^T W_K
determinant = sp.simplify(low_rank.det())
show(r"\det\left(W_Q^\top W_K\right)", determinant)
assert determinant == 0

# %% [markdown]
# **A worked case it cannot express.** The score $x^\top c_j$ (that is, $A = I$: "attend to the
# tokens most like me") has $\det I = 1 \ne 0$, so no $W_Q, W_K$ produce it; more generally any
# diagonal $\mathrm{diag}(\delta)$ with every $\delta_m \ne 0$ has full rank $d$. The best a rank-$d_h$
# product can do is the truncated SVD (Eckart–Young), which misses $I$ by $\sqrt{d - d_h}$ in the
# Frobenius norm. The D+LR interaction $A = \mathrm{diag}(\delta) + W_Q^\top W_K$ expresses it exactly
# ($\delta = 1$, $W_Q = W_K = 0$).

# %%
delta = vector("delta", d)
show(r"\det \operatorname{diag}(\delta)", sp.diag(*delta).det())
u_svd, sigma, vt_svd = np.linalg.svd(np.eye(d))
best_rank = (u_svd[:, :d_h] * sigma[:d_h]) @ vt_svd[:d_h]  # best rank-d_h approximation of I
gap = np.linalg.norm(np.eye(d) - best_rank)
report(f"The best rank-{d_h} product misses $I$ by {gap:.4f} in the Frobenius norm, which is "
       f"$\\sqrt{{d - d_h}} = \\sqrt{{{d - d_h}}}$ = {math.sqrt(d - d_h):.4f}.")
assert math.isclose(np.linalg.norm(np.eye(d) - best_rank), math.sqrt(d - d_h))

# %% [markdown]
# **Cost.** A diagonal per head costs $H d$ parameters, one shared by all heads costs $d$ (next to
# the $2d^2$ of the tied projections). Compute costs more. With one diagonal per head the fast path
# concatenates per head $q' = [W_{Q,k}x;\ \delta_k \odot x]$ and $k' = v' = [W_{K,k}c;\ c]$, so each head's
# attention core is $d_h + d$ wide instead of $d_h$, which with $d = H d_h$ is $(H + 1)$ times the plain
# core. With one diagonal $\delta$ shared by all heads the extra score $\beta (\delta \odot x_i)^\top c_j$ is the
# same for every head: one $n \times n$ bias, a product $d$ wide, and the update's diagonal part
# $\delta \odot \sum_j (\sum_k a^k_{ij}) c_j$ is one more product $d$ wide. The plain core's two products
# ($q k^\top$ and $a v$ over $H$ heads of $d_h$) are $d$ wide each, so the shared diagonal costs twice the
# plain core, whatever $H$.

# %%
H, dh_s = sp.symbols("H d_h", positive=True, integer=True)
d_s = H * dh_s                                             # d = H d_h
core_ratio = (dh_s + d_s) / dh_s                           # (d_h + d) / d_h, per head
show(r"\text{per head: } \frac{d_h + d}{d_h}", sp.simplify(core_ratio))
assert sp.simplify(core_ratio - (1 + H)) == 0
shared_ratio = (2 * d_s + 2 * d_s) / (2 * d_s)             # (q k^T, a v: 2d) + (bias, (sum_k a) c: 2d) over 2d
show(r"\text{shared: } \frac{2d + 2d}{2d}", sp.simplify(shared_ratio))
assert shared_ratio == 2
closed_form = {"none": sp.Integer(0), "per_head": H * d_s, "shared": d_s}   # diagonal parameters
in_words = {"none": "0", "per_head": "H d", "shared": "d"}
rows = ["| `diagonal` | projection parameters | diagonal parameters | closed form |", "| --- | ---: | ---: | :---: |"]
for diagonal, extra in closed_form.items():
    counts = cem_core.AttentionConfig(d_model=d_model, n_heads=n_heads, diagonal=diagonal).param_counts()
    assert counts["diagonal"] == extra.subs({H: n_heads, dh_s: d_model // n_heads})
    rows.append(f"| `{diagonal}` | {counts['projections']} | {counts['diagonal']} | ${in_words[diagonal]}$ |")
report(f"`cem_core.AttentionConfig` at $d = {d_model}$, $H = {n_heads}$ counts the closed form:\n\n" + "\n".join(rows))

# %% [markdown]
# The app's design page tabulates the same counts, and the FLOPs, at model sizes you choose: with
# [one diagonal per head](http://localhost:8501/design?ds_d_model=768&ds_n_layers=12&ds_n_heads=12&ds_d_ff=2048&ds_vocab_size=32000&ds_seq_len=1024&ds_p_scale=1.0&ds_seed=0&ds_T=1&ds_eta_mode=fixed&ds_diagonal=per_head&ds_preconditioner=psd&ds_rank=4
# "needs the app: run make app first")
# or [one shared by all heads](http://localhost:8501/design?ds_d_model=768&ds_n_layers=12&ds_n_heads=12&ds_d_ff=2048&ds_vocab_size=32000&ds_seq_len=1024&ds_p_scale=1.0&ds_seed=0&ds_T=1&ds_eta_mode=fixed&ds_diagonal=shared&ds_preconditioner=psd&ds_rank=4
# "needs the app: run make app first")
# (start the app with `make app`).
#
# **The D+LR update, derived.** With $A = \mathrm{diag}(\delta) + W_Q^\top W_K$ one head's energy is
# $E = -\frac{1}{\beta}\log\sum_{j\le i} e^{\beta\, x^\top A c_j}$. Its score is linear in $x$ with
# gradient $A c_j$ (not $A^\top c_j$: $A$ is not symmetric), so
#
# $$-\nabla_x E = A \sum_{j \le i} a_j c_j = W_Q^\top \sum_{j\le i} a_j W_K c_j + \delta \odot \sum_{j \le i} a_j c_j,
#   \qquad a_j = \operatorname{softmax}_j(\beta\, x^\top A c_j):$$
#
# the plain attention update plus the diagonal times the softmax-weighted history. SymPy proves it with
# two history entries:

# %%
beta = sp.Symbol("beta", positive=True)
xv = vector("x", d)
history = [vector(f"c{j + 1}", d) for j in range(2)]       # c_1, c_2
A_dlr = sp.diag(*delta) + W_Q.T * W_K                      # A = diag(delta) + W_Q^T W_K
exps = [sp.exp(beta * (xv.T * A_dlr * c_j)[0]) for c_j in history]
E_dlr = -sp.log(sum(exps)) / beta
grad_dlr = sp.Matrix([sp.diff(E_dlr, x_m) for x_m in xv])
a = [e / sum(exps) for e in exps]                          # a_j = softmax_j(beta x^T A c_j)
low_rank_part = W_Q.T * sum((a_j * W_K * c_j for a_j, c_j in zip(a, history)), sp.zeros(d_h, 1))
diagonal_part = delta.multiply_elementwise(sum((a_j * c_j for a_j, c_j in zip(a, history)), sp.zeros(d, 1)))
assert sp.simplify(-grad_dlr - (low_rank_part + diagonal_part)) == sp.zeros(d, 1)
proved(r"-\nabla_x E = W_Q^\top \sum_{j} a_j W_K c_j + \delta \odot \sum_{j} a_j c_j")

# %% [markdown]
# Now against `CEMAttention` with one diagonal per head and random weights ($T = 1$, $\eta = 1$, $P = I$).
# The SymPy side is the gradient of $-\sum_k \frac{1}{\beta}\log\sum_j m_{ij} e^{\beta x^\top A_k c_j}$ over
# all positions with the causal mask $m_{ij}$ (notebook 01, section 5), differentiated for a general
# $d \times d$ matrix $A_k$ and evaluated at $A_k = \mathrm{diag}(\delta_k) + W_{Q,k}^\top W_{K,k}$ built from the
# layer's parameters. **Tolerance: $10^{-10}$ relative, float64.**

# %%
x_n = vector("x", d_model)
A_n = matrix("A", d_model, d_model)
c_n = [vector(f"c{j + 1}", d_model) for j in range(n_tokens)]
mask = sp.symbols(f"m_1:{n_tokens + 1}", nonnegative=True)
E_head = -sp.log(sum(m_j * sp.exp(beta * (x_n.T * A_n * c_j)[0]) for m_j, c_j in zip(mask, c_n))) / beta
head_update = sp.lambdify([beta, *x_n, *A_n, *[e for c_j in c_n for e in c_j], *mask],
                          -sp.Matrix([sp.diff(E_head, x_m) for x_m in x_n]), cse=True)   # -grad_x E_head
head = d_model // n_heads
causal_mask = np.tril(np.ones((n_tokens, n_tokens)))       # m_ij = 1 for j <= i, else 0


def symbolic_update(x_i: np.ndarray, i: int, interactions: np.ndarray, c: np.ndarray) -> np.ndarray:
    """sum_k of the lambdified -grad_x E_head for token i with A = A_k, beta = 1/sqrt(d_h)."""
    return sum(head_update(1 / math.sqrt(head), *x_i, *A_k.ravel(), *c.ravel(), *causal_mask[i]).ravel()
               for A_k in interactions)


def interactions_of(layer: cem_core.CEMAttention, diag=None) -> np.ndarray:
    """A_k = W_Q,k^T W_K,k (+ diag(d_k)) from the layer's weights: (H, d, d)."""
    w_q = layer.q_proj.weight.detach().numpy().reshape(n_heads, head, d_model)
    w_k = layer.k_proj.weight.detach().numpy().reshape(n_heads, head, d_model)
    A = w_q.transpose(0, 2, 1) @ w_k
    return A if diag is None else A + np.stack([np.diag(row) for row in diag])


rng = np.random.default_rng(seed)
dlr_layer = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=d_model, n_heads=n_heads, diagonal="per_head",
                                                           rope=False)).double()
with torch.no_grad():
    for p in (dlr_layer.q_proj.weight, dlr_layer.k_proj.weight, dlr_layer.diag):
        p.copy_(torch.from_numpy(rng.normal(size=p.shape) / math.sqrt(d_model)))
h = figdata.descent_input(n_tokens, d_model, seed)         # h, (1, n_tokens, d_model), float64
c = dlr_layer.norm(h)[0].detach().numpy()                  # c_j = Norm(h_j) = x_j^(0)
A = interactions_of(dlr_layer, dlr_layer.diag.detach().numpy())   # A_k = diag(d_k) + W_Q,k^T W_K,k
by_sympy = np.stack([symbolic_update(c[i], i, A, c) for i in range(n_tokens)])

# %% tags=["compare-dlr-attention"]
fast = (dlr_layer(h) - h)[0].detach().numpy()
error = np.abs(fast - by_sympy).max() / np.abs(by_sympy).max()
report(f"`CEMAttention` with one diagonal per head and the SymPy D+LR gradient differ by **{error:.1e}** "
       "relative to the largest update (tolerance $10^{-10}$).")
assert error < 1e-10, "CEMAttention (per-head diagonal) disagrees with the SymPy D+LR gradient"

# %% [markdown]
# ## 2. Concavity and the preconditioned step
#
# **Concavity.** Write $k_j = A c_j$ for one head. The Hessian of $-\frac{1}{\beta}\log\sum_j e^{\beta x^\top k_j}$
# is $-\beta\,\mathrm{Cov}_a(k)$, minus $\beta$ times the covariance of the keys under the softmax
# weights: negative semidefinite. With two keys in the plane SymPy proves the closed form
# $-\beta\, a_1 a_2 (k_1 - k_2)(k_1 - k_2)^\top$, whose only nonzero eigenvalue is $-\beta a_1 a_2 |k_1 - k_2|^2 \le 0$.

# %%
x2, k1, k2 = vector("x", 2), vector("k1", 2), vector("k2", 2)
w1, w2 = sp.exp(beta * x2.dot(k1)), sp.exp(beta * x2.dot(k2))
E2 = -sp.log(w1 + w2) / beta                               # E = -(1/beta) log sum_j exp(beta x^T k_j)
a1, a2 = w1 / (w1 + w2), w2 / (w1 + w2)                    # softmax weights
hessian_claim = -beta * a1 * a2 * (k1 - k2) * (k1 - k2).T
assert sp.simplify(sp.hessian(E2, x2) - hessian_claim) == sp.zeros(2, 2)
proved(r"\nabla_x^2 E = -\beta\, a_1 a_2\, (k_1 - k_2)(k_1 - k_2)^\top \preceq 0")

# %% [markdown]
# Numerically, on the D+LR layer of section 1: every eigenvalue of one token's Hessian is $\le 0$ up
# to rounding.

# %%
x0 = dlr_layer.norm(h).detach()
token = n_tokens - 1


def token_energy(x_i: torch.Tensor) -> torch.Tensor:
    x = x0.clone()
    x[0, token] = x_i
    return dlr_layer.energy(x, h)[0, token]


eigenvalues = torch.linalg.eigvalsh(torch.autograd.functional.hessian(token_energy, x0[0, token]))
report(f"The {d_model} eigenvalues of token {token}'s Hessian: "
       + ", ".join(f"{np.round(value, 4) + 0.0:.4f}" for value in eigenvalues.numpy())
       + ". None is positive beyond rounding (allowed: $10^{-10}$ times the largest magnitude).")
assert eigenvalues.max() <= 1e-10 * eigenvalues.abs().max()

# %% [markdown]
# **The descent condition.** Take a step $x \leftarrow x - \eta P g$ with $g = \nabla E(x)$ and any
# symmetric $P$. Along it, $f(t) = E(x - t\,\eta P g)$ is concave in $t$ (a concave function restricted
# to a line; with two keys $f''(t) = -\beta a_1 a_2 \big((k_1 - k_2)^\top \eta P g\big)^2 \le 0$), and a concave
# function lies below its tangent: $f(1) \le f(0) + f'(0)$. The chain rule gives $f'(0) = -\eta\, g^\top P g$,
# so for every $\eta > 0$
#
# $$E(x - \eta P g) \le E(x) - \eta\, g^\top P g .$$
#
# This is a guarantee of descent exactly when $g^\top P g > 0$, which holds for every $g \ne 0$ exactly
# when $P$ is positive definite. SymPy checks $f'(0)$ with a general symmetric $P$:

# %%
t, eta = sp.symbols("t eta", positive=True)
p00, p01, p11 = sp.symbols("p_00 p_01 p_11", real=True)
P2 = sp.Matrix([[p00, p01], [p01, p11]])                   # any symmetric P
g2 = sp.Matrix([sp.diff(E2, x_m) for x_m in x2])           # g = grad E(x)
f = E2.xreplace(dict(zip(x2, x2 - t * eta * P2 * g2)))     # f(t) = E(x - t eta P g)
assert sp.simplify(sp.diff(f, t).subs(t, 0) + eta * (g2.T * P2 * g2)[0]) == 0
proved(r"f'(0) = \frac{d}{dt} E(x - t\,\eta P g)\Big|_{t=0} = -\eta\, g^\top P g")

# %% [markdown]
# The two forms differ in that quadratic form. Ours, $\mathrm{diag}(s) + UU^\top$ with $s = \mathrm{softplus}(p) > 0$,
# is a sum of squares with positive weights, positive definite. The paper's low-rank part is
# $2(U^\top x)(V^\top x)$, negative whenever $U^\top x$ and $V^\top x$ have opposite signs:

# %%
s = sp.Matrix(sp.symbols(f"s_0:{d}", positive=True))      # softplus(p) > 0
U, V = vector("u", d), vector("v", d)                      # rank-1 factors
psd_form = (xv.T * (sp.diag(*s) + U * U.T) * xv)[0]
paper_form = (xv.T * (U * V.T + V * U.T) * xv)[0]
assert sp.expand(psd_form - (sum(s_m * x_m ** 2 for s_m, x_m in zip(s, xv)) + U.dot(xv) ** 2)) == 0
assert sp.expand(paper_form - 2 * U.dot(xv) * V.dot(xv)) == 0
show(r"x^\top\left(\operatorname{diag}(s) + UU^\top\right)x",
     sum(s_m * x_m ** 2 for s_m, x_m in zip(s, xv)) + U.dot(xv) ** 2)
show(r"x^\top\left(UV^\top + VU^\top\right)x", 2 * U.dot(xv) * V.dot(xv))

# %% [markdown]
# In the plane, $\det(uv^\top + vu^\top) = -(u_0 v_1 - u_1 v_0)^2 \le 0$: unless $u \parallel v$ the paper's
# low-rank term has one positive and one **negative** eigenvalue (in general $u^\top v \pm |u||v|$).
# $P = \mathrm{diag}(s) + UV^\top + VU^\top$ is still positive definite when the diagonal is large enough,
# but nothing in the parameterization enforces that: it is **not guaranteed** to be positive definite.
# Then $g^\top P g < 0$ is possible and, for small $\eta$,
# $E(x - \eta P g) = E(x) - \eta\, g^\top P g + O(\eta^2)$ *rises*. (The bound above still holds; it just
# no longer promises descent.)

# %%
u2, v2 = vector("u", 2), vector("v", 2)
low_rank_2 = u2 * v2.T + v2 * u2.T
assert sp.expand(low_rank_2.det() + (u2[0] * v2[1] - u2[1] * v2[0]) ** 2) == 0
show(r"\det\left(uv^\top + vu^\top\right)", sp.factor(low_rank_2.det()))
lam_1, lam_2 = u2.dot(v2) + sp.sqrt(u2.dot(u2) * v2.dot(v2)), u2.dot(v2) - sp.sqrt(u2.dot(u2) * v2.dot(v2))
assert sp.expand(lam_1 * lam_2 - low_rank_2.det()) == 0 and sp.expand(lam_1 + lam_2 - low_rank_2.trace()) == 0
proved(r"\lambda_\pm = u^\top v \pm |u|\,|v|: \quad \lambda_+ \lambda_- = \det\left(uv^\top + vu^\top\right) \le 0, "
       r"\quad \lambda_+ + \lambda_- = \operatorname{tr}\left(uv^\top + vu^\top\right)")

# %% [markdown]
# **On `cem_core`: ours descends, with the bound.** A layer with our $P$, random $p$ and a large random
# rank-2 factor $U$: for every token, the step the layer takes must
# be $-\eta P g$ with $P = \mathrm{diag}(\mathrm{softplus}\,p) + UU^\top$ formed here from its parameters, and
# must obey $E(x^{(1)}) \le E(x^{(0)}) - \eta\, g^\top P g < E(x^{(0)})$, at a small and a large $\eta$.
# **Tolerance: $10^{-10}$ relative for the step, $10^{-12}$ absolute for the bound, float64.**

# %%
def psd_layer_at(eta_value: float) -> cem_core.CEMAttention:
    layer = figdata.attention_layer(d_model, n_heads, CEMOptions(eta=eta_value, preconditioner="psd", rank=2),
                                    seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        layer.preconditioner.p.copy_(torch.randn(d_model, generator=g, dtype=torch.float64) * 0.8)
        layer.preconditioner.U.copy_(torch.randn(d_model, 2, generator=g, dtype=torch.float64) * 0.5)
    return layer


x_start = x0.clone().requires_grad_(True)
descent_runs = {}
for eta_value in (0.1, 10.0):
    layer = psd_layer_at(eta_value)
    (grad_E,) = torch.autograd.grad(layer.energy(x_start, h).sum(), x_start)      # g per token
    p_num, U_num = layer.preconditioner.p.detach(), layer.preconditioner.U.detach()
    P_formula = (torch.diag(torch.nn.functional.softplus(p_num)) + U_num @ U_num.T).numpy()  # diag(softplus p) + UU^T
    trace = layer.trace(h)
    descent_runs[eta_value] = dict(g=grad_E[0].numpy(), P=P_formula, step=(trace.iterates[1] - trace.iterates[0])[0],
                                   energies=trace.energies[:, 0].numpy())

# %% tags=["compare-descent"]
rows, checks = ["| $\\eta$ | step error | smallest eigenvalue of $P$ | $E(x^{(1)}) - E(x^{(0)})$ over the tokens |",
                "| ---: | ---: | ---: | :---: |"], []
for eta_value, run in descent_runs.items():
    expected_step = -eta_value * run["g"] @ run["P"]       # -eta P g per token (P symmetric)
    step_error = np.abs(run["step"].numpy() - expected_step).max() / np.abs(expected_step).max()
    gPg = np.einsum("td,de,te->t", run["g"], run["P"], run["g"])
    bound = run["energies"][0] - eta_value * gPg
    change_1 = run["energies"][1] - run["energies"][0]
    rows.append(f"| {eta_value:g} | {step_error:.1e} | {np.linalg.eigvalsh(run['P']).min():.3f} | "
                f"{change_1.min():.3f} to {change_1.max():.3f} |")
    checks.append((step_error, gPg, run["energies"][1], bound))
report("Our $P$ on `cem_core`: the step matches $-\\eta P g$ (tolerance $10^{-10}$ relative) and every token's "
       "energy falls, at least as far as the bound $\\eta\\, g^\\top P g$ says (tolerance $10^{-12}$):\n\n"
       + "\n".join(rows))
for step_error, gPg, energy_1, bound in checks:
    assert step_error < 1e-10, "cem_core's psd step is not x - eta (diag(softplus p) + U U^T) grad E"
    assert (gPg > 0).all() and (energy_1 <= bound + 1e-12).all(), "the descent bound failed"

# %% [markdown]
# **On `cem_core`: the paper's form ascends.** An explicit indefinite $P$: take one token's gradient $g$,
# $u = g/|g|$, $D = I$ (softplus $p = 1$), $U = u$ and $V = -u$. Then $P = I - 2uu^\top$, a reflection with
# eigenvalue $-1$ along $g$, and $g^\top P g = -|g|^2$.

# %%
def single_token_layer(kind: str) -> tuple[cem_core.CEMAttention, np.ndarray]:
    """A rank-1 preconditioned layer (eta = 0.01) whose P is built from the token's gradient g; and u."""
    layer = figdata.attention_layer(d_model, n_heads, CEMOptions(eta=0.01, preconditioner=kind, rank=1), seed=seed)
    x_0 = layer.norm(h).detach().requires_grad_(True)
    (g,) = torch.autograd.grad(layer.energy(x_0, h)[0, token], x_0)
    u = g[0, token] / g[0, token].norm()                   # u = g/|g|
    with torch.no_grad():
        layer.preconditioner.p.fill_(math.log(math.e - 1))  # softplus(p) = 1: D = I
        layer.preconditioner.U.copy_(u[:, None])
        if kind == "dlr":
            layer.preconditioner.V.copy_(-u[:, None])       # P = I + u(-u)^T + (-u)u^T = I - 2uu^T
    return layer, u.numpy()


paper_layer, u_num = single_token_layer("dlr")
P_explicit = np.eye(d_model) - 2 * np.outer(u_num, u_num)  # P = I - 2 u u^T

# %% tags=["compare-preconditioner"]
P_layer = paper_layer.preconditioner.matrix().detach().numpy()
error = np.abs(P_layer - P_explicit).max()
report(f"`cem_core`'s $P$ differs from $I - 2uu^\\top$ by at most {error:.1e} (tolerance $10^{{-12}}$). "
       "Its eigenvalues: "
       + ", ".join(f"{np.round(value, 6) + 0.0:g}" for value in np.linalg.eigvalsh(P_layer)) + ".")
assert error < 1e-12, "cem_core's dlr preconditioner is not diag(softplus p) + U V^T + V U^T"

# %%
psd_layer, _ = single_token_layer("psd")                   # P = I + u u^T: positive definite


def energy_change(layer: cem_core.CEMAttention) -> float:
    energies = layer.trace(h).energies[:, 0, token]
    return float(energies[1] - energies[0])                # E(x^(1)) - E(x^(0))


change = {"paper (dlr)": energy_change(paper_layer), "ours (psd)": energy_change(psd_layer)}
report(f"One step at $\\eta = 0.01$ changes token {token}'s energy by **{change['paper (dlr)']:+.3e}** with the "
       f"paper's $P = I - 2uu^\\top$ (it rises) and by **{change['ours (psd)']:+.3e}** with our "
       "$P = I + uu^\\top$ (it falls).")
assert change["paper (dlr)"] > 0 > change["ours (psd)"]    # the indefinite P raised the energy

# %% [markdown]
# The spectra tell the same story for random factors (`cem_core.ui.figdata.preconditioner_spectra`,
# the data behind `figures/preconditioner_spectra.png`): the paper's form has negative eigenvalues.
# Ours has none below 1 **here only because the figure fixes $\mathrm{softplus}(p) = 1$** ($D = I$); in
# general its eigenvalues are at least $\min_m \mathrm{softplus}(p_m)$, which is positive but can be small.

# %%
spectra = figdata.preconditioner_spectra(d_model=16, rank=4, seed=seed)
assert spectra["dlr"].min() < 0 < spectra["psd"].min()
show_figure(energy_plots.mpl_preconditioner_spectra(spectra))

# %% [markdown]
# **In the app** (`make app`): the design page draws these spectra at the size and scale you choose, e.g.
# [the paper's form at low-rank scale 2](http://localhost:8501/design?ds_d_model=768&ds_n_layers=12&ds_n_heads=12&ds_d_ff=2048&ds_vocab_size=32000&ds_seq_len=1024&ds_p_scale=2.0&ds_seed=0&ds_T=1&ds_eta_mode=fixed&ds_diagonal=none&ds_preconditioner=dlr&ds_rank=4
# "needs the app: run make app first")
# (negative eigenvalues) against [ours at the same scale](http://localhost:8501/design?ds_d_model=768&ds_n_layers=12&ds_n_heads=12&ds_d_ff=2048&ds_vocab_size=32000&ds_seq_len=1024&ds_p_scale=2.0&ds_seed=0&ds_T=1&ds_eta_mode=fixed&ds_diagonal=none&ds_preconditioner=psd&ds_rank=4
# "needs the app: run make app first").
# The energy page runs the steps: a layer of this notebook's size ($d = 8$, two heads, six tokens) with
# [the paper's preconditioner at factor scale 3, seed 2](http://localhost:8501/?layer=attention&p_scale=3.0&heads=2&width=8&seq_len=6&seed=2&rope=false&token=255&heat_head=0&T=4&eta=1.0&anchor=0.0&diagonal=none&preconditioner=dlr&rank=2
# "needs the app: run make app first")
# raises the first token's energy at every step, and [ours with the same factors' scale](http://localhost:8501/?layer=attention&p_scale=3.0&heads=2&width=8&seq_len=6&seed=2&rope=false&token=255&heat_head=0&T=4&eta=1.0&anchor=0.0&diagonal=none&preconditioner=psd&rank=2
# "needs the app: run make app first")
# lowers it. With [seed 3](http://localhost:8501/?layer=attention&p_scale=3.0&heads=2&width=8&seq_len=6&seed=3&rope=false&token=255&heat_head=0&T=4&eta=1.0&anchor=0.0&diagonal=none&preconditioner=dlr&rank=2
# "needs the app: run make app first")
# the paper's $P$ is indefinite too, yet the energy falls: an indefinite $P$ *can* make a step ascend, it
# need not.
#
# ## 3. Recursion: attention with an updated query
#
# For a plain head ($A = W_Q^\top W_K$, no diagonal) the gradient depends on $x$ only through the
# query $q = W_Q x$: $-\nabla E(x) = W_Q^\top o(q)$ with
# $o(q) = \sum_j \operatorname{softmax}_j(\beta\, q^\top \kappa_j)\, \kappa_j$ and $\kappa_j = W_K c_j$ (notebook 01).
# So two steps $x^{(t+1)} = x^{(t)} + \eta P W_Q^\top o(q^{(t)})$ read
#
# $$q^{(1)} = W_Q x^{(1)} = q^{(0)} + \eta\, M\, o(q^{(0)}), \quad M = W_Q P W_Q^\top, \qquad
#   x^{(2)} = x^{(0)} + \eta P W_Q^\top \big(o(q^{(0)}) + o(q^{(1)})\big):$$
#
# the second step is **attention of the updated query $q^{(1)}$ over the same keys and values $\kappa_j$**,
# which are computed once from the fixed history; only the query moves. (This is `cem_core`'s query-space
# fast path: $T + 2$ projections for $T$ steps, `docs/design.md#213-the-attention-fast-paths`.) SymPy proves
# the first identity for a symbolic $x$, which makes it hold at $x^{(1)}$ too, and the linear algebra with
# $o^{(0)}, o^{(1)}$ kept as symbols:

# %%
kappa = [W_K * c_j for c_j in history]                     # keys = values, fixed


def attend(q: sp.Matrix) -> sp.Matrix:
    """o(q) = sum_j softmax_j(beta q^T kappa_j) kappa_j."""
    e = [sp.exp(beta * (q.T * k)[0]) for k in kappa]
    return sum((e_j / sum(e) * k for e_j, k in zip(e, kappa)), sp.zeros(d_h, 1))


E_plain = -sp.log(sum(sp.exp(beta * ((W_Q * xv).T * k)[0]) for k in kappa)) / beta
neg_grad_plain = -sp.Matrix([sp.diff(E_plain, x_m) for x_m in xv])
assert sp.simplify(neg_grad_plain - W_Q.T * attend(W_Q * xv)) == sp.zeros(d, 1)
proved(r"-\nabla E(x) = W_Q^\top o(W_Q x) \text{ for every } x")
P3 = sp.Matrix(d, d, lambda r, s_: sp.Symbol(f"P_{{{min(r, s_)}{max(r, s_)}}}", real=True))  # symmetric P
o_0, o_1 = vector("o0", d_h), vector("o1", d_h)            # o(q^(0)), o(q^(1))
x_1 = xv + eta * P3 * W_Q.T * o_0                          # x^(1)
assert sp.expand(W_Q * x_1 - (W_Q * xv + eta * (W_Q * P3 * W_Q.T) * o_0)) == sp.zeros(d_h, 1)
assert sp.expand(x_1 + eta * P3 * W_Q.T * o_1 - (xv + eta * P3 * W_Q.T * (o_0 + o_1))) == sp.zeros(d, 1)
proved(r"q^{(1)} = q^{(0)} + \eta\, W_Q P W_Q^\top o^{(0)}, \qquad "
       r"x^{(2)} = x^{(0)} + \eta P W_Q^\top \big(o^{(0)} + o^{(1)}\big)")

# %% [markdown]
# On `cem_core`: a layer with $T = 2$, $\eta = 0.5$, $P = I$ and no diagonal takes the query-space path in
# its forward pass, while `trace` steps in $x$ space. Both must equal two steps of the lambdified SymPy
# gradient of section 1 (with $A_k = W_{Q,k}^\top W_{K,k}$). **Tolerance: $10^{-10}$ relative, float64.**

# %%
two_steps = figdata.attention_layer(d_model, n_heads, CEMOptions(T=2, eta=0.5), weight_scale=2.0, seed=seed)
assert two_steps.config.query_space                        # the forward pass runs in query space
A_plain = interactions_of(two_steps)
c_two = two_steps.norm(h)[0].detach().numpy()
x_one = np.stack([c_two[i] + 0.5 * symbolic_update(c_two[i], i, A_plain, c_two) for i in range(n_tokens)])
x_two = np.stack([x_one[i] + 0.5 * symbolic_update(x_one[i], i, A_plain, c_two) for i in range(n_tokens)])

# %% tags=["compare-recursion"]
paths = {"query space (forward)": (two_steps(h) - h)[0].detach().numpy(),
         "x space (trace)": (lambda it: (it[2] - it[0])[0].numpy())(two_steps.trace(h).iterates)}
errors = {name: np.abs(value - (x_two - c_two)).max() / np.abs(x_two - c_two).max() for name, value in paths.items()}
report("Two steps of `cem_core` against two SymPy gradient steps, relative error (tolerance $10^{-10}$): "
       + "; ".join(f"{name} **{value:.1e}**" for name, value in errors.items()) + ".")
assert max(errors.values()) < 1e-10, "the two-step layer disagrees with two SymPy gradient steps"

# %% [markdown]
# **Monotone descent.** By the descent condition of section 2, with $P = I$ (or any positive definite
# $P$) every step with $g \ne 0$ lowers the attention energy, **for every $\eta > 0$**: that needs only
# concavity.
# `layer.trace(h)` records the energies:

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
for eta_value in (0.1, 1.0, 10.0):
    energies = figdata.attention_layer(d_model, n_heads, CEMOptions(T=T, eta=eta_value),
                                       seed=seed).trace(h).energies[:, 0]
    assert (energies[1:] - energies[:-1]).max() < 0        # every token, every step
    ax.plot(range(T + 1), (energies - energies[0]).mean(-1), marker="o", ms=3, label=f"η = {eta_value:g}")
ax.set(xlabel="in-layer step t", ylabel="mean E(x^(t)) - E(x^(0))", title="The attention energy falls at every step")
ax.legend()
show_figure(fig)

# %% [markdown]
# **No minimum.** Concave and not constant, the energy is unbounded below: the iterates do not
# converge, they run off. With $P = I$ each step has length at most $\eta \sum_k \max_j |A_k c_j|$, so
# $|x^{(t)}|$ grows **at most linearly** in $t$ (in the runs below, about linearly, once the softmax
# weights settle on the keys that the run heads towards).
#
# ## 4. The anchor: a fixed point, and a step-size condition
#
# Our extension (not the paper's) adds an anchor: $E_\lambda(x) = E(x) + \frac{\lambda}{2}|x - x^{(0)}|^2$.
# For $\lambda > 0$ it grows quadratically while $E$ falls at most linearly, so $E_\lambda$ has a minimum,
# and at a minimum $x^\star$ the gradient vanishes: the **fixed point** of the step,
#
# $$\lambda\,(x^\star - x^{(0)}) = -\nabla E(x^\star) = \sum_k A_k \sum_{j\le i} a^k_j(x^\star)\, c_j .$$
#
# Whether the steps reach it depends on $\eta$. The first token sees only $c_1$, so its weights are 1
# and $E = -x^\top \kappa$ is linear ($\kappa = \sum_k A_k c_1$). Then $x^\star = x^{(0)} + \kappa/\lambda$ and
# each step multiplies the distance to it by exactly $1 - \eta\lambda$:

# %%
lam = sp.Symbol("lambda", positive=True)
x_init, key = vector("x0", d), vector("kappa", d)
E_first = -xv.dot(key) + lam / 2 * (xv - x_init).dot(xv - x_init)   # one key: a linear E plus the anchor
grad_first = sp.Matrix([sp.diff(E_first, x_m) for x_m in xv])
x_star = x_init + key / lam
assert sp.simplify(grad_first.xreplace(dict(zip(xv, x_star)))) == sp.zeros(d, 1)
step_map = xv - eta * grad_first                           # x -> x - eta grad E_lambda
assert sp.expand(step_map - x_star - (1 - eta * lam) * (xv - x_star)) == sp.zeros(d, 1)
converges = sp.solve(sp.Abs(1 - eta * lam) < 1, eta)
proved(r"x^\star = x^{(0)} + \kappa/\lambda, \quad x^{(t+1)} - x^\star = (1 - \eta\lambda)(x^{(t)} - x^\star), "
       r"\quad |1 - \eta\lambda| < 1 \iff " + sp.latex(converges))
assert converges == (eta < 2 / lam)

# %% [markdown]
# So the first token converges for $0 < \eta < 2/\lambda$, oscillates at $\eta = 2/\lambda$ and diverges
# geometrically beyond. Near a strict minimum $x^\star$ every token behaves alike: the step map
# $F(x) = x - \eta\nabla E_\lambda(x)$ has Jacobian $I - \eta(\lambda I + \nabla^2 E)$ there. Since
# $\nabla^2 E \preceq 0$, the curvatures $\mu$ of $E_\lambda$ at $x^\star$ lie in $(0, \lambda]$, and the errors shrink
# iff $|1 - \eta\mu| < 1$ for all of them, i.e. $\eta < 2/\mu_{\max}$. So **$0 < \eta < 2/\lambda$ suffices**.
# It is also necessary when some direction is orthogonal to every key difference $A_k(c_j - c_l)$, where
# $\mu = \lambda$ exactly; such directions exist when $d > H(i - 1)$, e.g. for the first tokens.
# With two keys SymPy finds the two eigenvalues of the Jacobian, $1 - \eta\lambda$ across $k_1 - k_2$ and
# $1 - \eta(\lambda - \beta a_1 a_2 |k_1 - k_2|^2)$ along it:

# %%
jacobian_F = sp.eye(2) - eta * (lam * sp.eye(2) + hessian_claim)   # I - eta (lambda I + Hessian of E)
k_diff = k1 - k2
across = sp.Matrix([-k_diff[1], k_diff[0]])                # orthogonal to k_1 - k_2
assert sp.simplify(jacobian_F * across - (1 - eta * lam) * across) == sp.zeros(2, 1)
along = 1 - eta * (lam - beta * a1 * a2 * k_diff.dot(k_diff))
assert sp.simplify(jacobian_F * k_diff - along * k_diff) == sp.zeros(2, 1)
proved(r"\text{eigenvalues of } F' = I - \eta\left(\lambda I + \nabla^2 E\right)\colon\ 1 - \eta\lambda "
       r"\text{ across } k_1 - k_2, \quad 1 - \eta\left(\lambda - \beta a_1 a_2 |k_1 - k_2|^2\right) \text{ along it}")

# %% [markdown]
# On `cem_core`, with $\lambda$ = `anchor_lambda` and one step size below and one above $2/\lambda$:
# the first token must follow $x^{(t)} - x^\star = (1 - \eta\lambda)^t (x^{(0)} - x^\star)$ exactly, with
# $x^\star = x^{(0)} + \sum_k A_k c_1/\lambda$ from the layer's weights; below $2/\lambda$ every token's last
# iterate must be a stationary point of the anchored energy (`layer.energy`, differentiated by autograd:
# $|\nabla E_\lambda|$ down by $10^{-2}$), above it the steps must grow.
# **Tolerance: $10^{-10}$ relative for the first token, float64.**

# %%
anchored = {eta_value: figdata.attention_layer(d_model, n_heads, CEMOptions(T=T, eta=eta_value, anchor=anchor_lambda),
                                               seed=seed) for eta_value in anchor_etas}
anchor_traces = {eta_value: layer.trace(h) for eta_value, layer in anchored.items()}


def anchored_gradient_norm(layer: cem_core.CEMAttention, x: torch.Tensor) -> np.ndarray:
    """|grad E_lambda(x)| per token, by autograd on cem_core's anchored energy."""
    x = x.clone().requires_grad_(True)
    return torch.autograd.grad(layer.energy(x, h).sum(), x)[0][0].norm(dim=-1).numpy()


# %% tags=["compare-anchor"]
rows, checks = ["| $\\eta$ | first token off by | longest step: first, last | "
                "largest ratio $\\vert\\nabla E_\\lambda\\vert$ last / first |",
                "| ---: | ---: | ---: | ---: |"], []
for eta_value, trace in anchor_traces.items():
    layer = anchored[eta_value]
    start = trace.iterates[0, 0, 0].numpy()
    first_star = start + interactions_of(layer).sum(0) @ start / anchor_lambda   # x* = x0 + sum_k A_k c_1 / lambda
    expected = first_star + (1 - eta_value * anchor_lambda) ** np.arange(T + 1)[:, None] * (start - first_star)
    first_error = np.abs(trace.iterates[:, 0, 0].numpy() - expected).max() / np.abs(expected - first_star).max()
    steps = trace.update_norms[:, 0].numpy()               # |x^(t+1) - x^(t)| per token
    shrink = anchored_gradient_norm(layer, trace.iterates[-1]) / anchored_gradient_norm(layer, trace.iterates[0])
    rows.append(f"| {eta_value:g} ({'below' if eta_value < 2 / anchor_lambda else 'above'} $2/\\lambda$ = "
                f"{2 / anchor_lambda:g}) | {first_error:.1e} | {steps[0].max():.2f}, {steps[-1].max():.3g} | "
                f"{shrink.max():.1e} |")
    checks.append((eta_value, first_error, steps, shrink))
report(f"The anchored layer ($\\lambda$ = {anchor_lambda:g}, $T$ = {T}); tolerance for the first token $10^{{-10}}$ "
       "relative:\n\n" + "\n".join(rows))
for eta_value, first_error, steps, shrink in checks:
    assert first_error < 1e-10, "the first token does not follow x* + (1 - eta lambda)^t (x0 - x*)"
    if eta_value < 2 / anchor_lambda:
        assert (shrink < 1e-2).all(), "below 2/lambda the steps did not reach a stationary point of E_lambda"
    else:
        assert (steps[-1] > steps[0]).all(), "above 2/lambda the steps should grow"

# %% [markdown]
# The plain and the anchored energy side by side, with the same weights (`figdata.energy_descent`,
# $\eta = 0.5 < 2/\lambda$ for $\lambda = 1$): without the anchor the radius $|x^{(t)}|$ grows and the steps
# do not shrink; with it the steps shrink by more than a factor 100 in $T$ steps (asserted below), because this
# $\eta$ is below $2/\lambda$.

# %%
descent = figdata.energy_descent(T=T, d_model=d_model, n_heads=n_heads, n_tokens=n_tokens, seed=seed)
plain, anchored_run = descent["runs"][0.0], descent["runs"][1.0]
report(f"Without the anchor the mean radius $|x|$ grows from {plain['radius'][0].mean():.2f} to "
       f"{plain['radius'][-1].mean():.2f} in {T} steps and the last step is still "
       f"{plain['update_norm'][-1].mean():.2f} long (mean over tokens); with the anchor ($\\lambda = 1$) the "
       "longest last step is "
       f"{anchored_run['update_norm'][-1].max():.1e}.")
assert (plain["radius"][-1] > plain["radius"][0]).all()    # running off ...
assert (plain["update_norm"][-1] > 0.5 * plain["update_norm"][0]).all()     # ... with steps that do not shrink
assert (anchored_run["update_norm"][-1] < 1e-2 * anchored_run["update_norm"][0]).all()  # anchored: converging
show_figure(energy_plots.mpl_energy_descent(descent))

# %% [markdown]
# The same two runs as landscapes (width 2, one head, `figdata.energy_landscape`, $\eta = 0.5$): without the
# anchor the trajectory slides off down a slope with no bottom; with it the contours close around a
# minimum and the trajectory stops there.

# %%
for anchor in (0.0, 1.0):
    show_figure(energy_plots.mpl_energy_landscape(figdata.energy_landscape(anchor=anchor, seed=seed)))

# %% [markdown]
# **In the app** (`make app`): the energy page at the sizes and settings of the descent figure above ($d = 8$, two
# heads, six tokens, seed 0, $T = 12$; the page draws its weights from its own seeded generator),
# [anchored with $\lambda = 1$ at $\eta = 0.5$](http://localhost:8501/?layer=attention&p_scale=0.3&heads=2&width=8&seq_len=6&seed=0&rope=false&token=255&heat_head=0&T=12&eta=0.5&anchor=1.0&diagonal=none&preconditioner=none&rank=2
# "needs the app: run make app first")
# (converges), [at $\eta = 2.5 > 2/\lambda$](http://localhost:8501/?layer=attention&p_scale=0.3&heads=2&width=8&seq_len=6&seed=0&rope=false&token=255&heat_head=0&T=12&eta=2.5&anchor=1.0&diagonal=none&preconditioner=none&rank=2
# "needs the app: run make app first")
# (diverges), and [without the anchor](http://localhost:8501/?layer=attention&p_scale=0.3&heads=2&width=8&seq_len=6&seed=0&rope=false&token=255&heat_head=0&T=12&eta=0.5&anchor=0.0&diagonal=none&preconditioner=none&rank=2
# "needs the app: run make app first")
# (runs off).
#
# ## 5. The block as one energy, and a diagonal for distances
#
# Two more switches, ours rather than the paper's (design notes §2.14). The D+LR diagonal above scores
# $x^\top \mathrm{diag}(\delta)\, c_j$. The paper's earlier abstract speaks of diagonals "for inter-token
# distances", which reads as a **distance form** inside the log-sum-exp,
#
# $$s_j = x^\top W_Q^\top W_K c_j - \tfrac12 (x - c_j)^\top D\, (x - c_j), \quad D = \mathrm{diag}(\delta) \succ 0 .$$
#
# Expanding the square, $-\frac12 x^\top D x$ is the same for every key and leaves the weights unchanged, and
# $-\frac12 c_j^\top D c_j$ is a bias of key $j$ fixed by the history (computed once for all $T$ steps), so
#
# $$-\nabla_x E = W_Q^\top \sum_{j} a_j W_K c_j + \delta \odot \Big(\sum_{j} a_j c_j - x\Big):$$
#
# the bilinear update, and a pull of $x$ towards the weighted history. SymPy proves it with two history
# entries:

# %%
s_dist = [(xv.T * W_Q.T * W_K * c_j)[0] - sum(dm * (xm - cm) ** 2 for dm, xm, cm in zip(delta, xv, c_j)) / 2
          for c_j in history]                              # s_j = x^T W_Q^T W_K c_j - (1/2)(x - c_j)^T D (x - c_j)
E_dist = -sp.log(sum(sp.exp(beta * s_j) for s_j in s_dist)) / beta
a_dist = [sp.exp(beta * s_j) / sum(sp.exp(beta * s_k) for s_k in s_dist) for s_j in s_dist]
weighted = sum((a_j * c_j for a_j, c_j in zip(a_dist, history)), sp.zeros(d, 1))
expected = (W_Q.T * sum((a_j * W_K * c_j for a_j, c_j in zip(a_dist, history)), sp.zeros(d_h, 1))
            + delta.multiply_elementwise(weighted - xv))
grad_dist = sp.Matrix([sp.diff(E_dist, x_m) for x_m in xv])
assert sp.simplify(-grad_dist - expected) == sp.zeros(d, 1)
proved(r"-\nabla_x E = W_Q^\top \sum_{j} a_j W_K c_j + \delta \odot \Big(\sum_{j} a_j c_j - x\Big)")

# %% [markdown]
# **Bounded below.** With $\delta > 0$ the quadratic $\frac12 x^\top D x$ outgrows the log-sum-exp's linear
# growth along every ray, so the energy has a minimum and the steps can settle; the bilinear form and plain
# attention have none (section 3). `cem_core` keeps $\delta = \mathrm{softplus}(p) > 0$.
#
# Against `CEMAttention(diagonal="per_head", diagonal_form="distance")`: the SymPy side differentiates the
# distance-form energy of a general $A_k$ and $\delta_k$ over all positions with the causal mask
# ($T = 1$, $\eta = 1$, $P = I$). **Tolerance: $10^{-10}$ relative, float64.**

# %%
delta_n = vector("delta", d_model)
E_dist_head = -sp.log(sum(m_j * sp.exp(beta * ((x_n.T * A_n * c_j)[0] - sum(
    dm * (xm - cm) ** 2 for dm, xm, cm in zip(delta_n, x_n, c_j)) / 2)) for m_j, c_j in zip(mask, c_n))) / beta
dist_update = sp.lambdify([beta, *x_n, *A_n, *delta_n, *[e for c_j in c_n for e in c_j], *mask],
                          -sp.Matrix([sp.diff(E_dist_head, x_m) for x_m in x_n]), cse=True)
dist_layer = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=d_model, n_heads=n_heads, diagonal="per_head",
                                                            diagonal_form="distance", rope=False)).double()
with torch.no_grad():
    for p in (dist_layer.q_proj.weight, dist_layer.k_proj.weight, dist_layer.diag):
        p.copy_(torch.from_numpy(rng.normal(size=p.shape) / math.sqrt(d_model)))
deltas = dist_layer.diagonal_matrix().detach().numpy()     # delta_k = softplus(p_k) > 0
A_low = interactions_of(dist_layer)                        # W_Q,k^T W_K,k
by_sympy_dist = np.stack([sum(dist_update(1 / math.sqrt(head), *c[i], *A_k.ravel(), *delta_k, *c.ravel(),
                                          *causal_mask[i]).ravel() for A_k, delta_k in zip(A_low, deltas))
                          for i in range(n_tokens)])

# %% tags=["compare-distance"]
fast = (dist_layer(h) - h)[0].detach().numpy()
error = np.abs(fast - by_sympy_dist).max() / np.abs(by_sympy_dist).max()
report(f"`CEMAttention` in distance form and the SymPy gradient of the distance energy differ by **{error:.1e}** "
       "relative to the largest update (tolerance $10^{-10}$).")
assert error < 1e-10, "CEMAttention (distance form) disagrees with the SymPy distance-form gradient"

# %% [markdown]
# **The block as one energy.** A CEM block runs two descents in turn: attention's $T$ steps on $E_{att}$,
# then the MLP's $T$ steps on $E_{mlp}$ from a new norm. The Energy Transformer instead descends one
# energy, their sum, $E_{block}(x \mid c) = E_{att}(x \mid c_{1:i}) + E_{mlp}(x \mid c_i)$, from one
# $x^{(0)} = \mathrm{Norm}(h)$ with one step size and preconditioner (`block="joint"`). The gradient of a
# sum is the sum of the gradients, so one step adds both updates of notebooks 01 and 02 at the same $x$:
#
# $$-\nabla_x E_{block} = \sum_k W_{Q,k}^\top \sum_j a^k_{j} W_{K,k} c_j + U^\top\big(\phi(U x) \odot G c\big),$$
#
# and at $T = 1$ the block is a **parallel block**,
# $h + \mathrm{Attn}(\mathrm{Norm}\,h) + \mathrm{MLP}(\mathrm{Norm}\,h)$ (GPT-J, PaLM), not
# $\mathrm{MLP}(\mathrm{Attn}(h))$. SymPy derives the MLP term with $\Phi' = \phi$ left symbolic:

# %%
U_s, G_s, c_own = matrix("u", 2, d), matrix("g", 2, d), vector("c", d)   # two hidden units; c = c_i, fixed
phi = sp.Function("phi")


class Phi(sp.Function):
    """The potential of the MLP energy: Phi' = phi."""

    def fdiff(self, argindex=1):
        return phi(self.args[0])


E_mlp_s = -sum((G_s * c_own)[m] * Phi((U_s * xv)[m]) for m in range(2))   # -sum_m (G c)_m Phi((U x)_m)
grad_mlp = sp.Matrix([sp.diff(E_mlp_s, x_m) for x_m in xv])
mlp_term = U_s.T * sp.Matrix([phi((U_s * xv)[m]) for m in range(2)]).multiply_elementwise(G_s * c_own)
assert sp.expand(-grad_mlp - mlp_term) == sp.zeros(d, 1)
E_block = E_dlr + E_mlp_s                                  # E_att (section 1's D+LR head) + E_mlp
grad_block = sp.Matrix([sp.diff(E_block, x_m) for x_m in xv])
assert sp.expand(grad_block - grad_dlr - grad_mlp) == sp.zeros(d, 1)   # the gradient of the sum
proved(r"-\nabla_x (E_{att} + E_{mlp}) = -\nabla_x E_{att} + U^\top\big(\phi(U x) \odot G c\big), \quad \Phi' = \phi")

# %% [markdown]
# Against `CEMBlock` at $T = 1$, with the attention update of section 1's SymPy gradient and the MLP update of
# notebook 02 with SiLU for $\phi$, each from the block's own weights. **Tolerance: $10^{-10}$ relative,
# float64.**

# %%
block_layer = cem_core.CEMBlock(cem_core.BlockConfig(d_model=d_model, n_heads=n_heads, d_ff=2 * d_model,
                                                     rope=False)).double()
A_block = interactions_of(block_layer)                     # W_Q,k^T W_K,k of the block's attention term
c_block = block_layer.norm(h)[0].detach().numpy()
up, gate = (w.detach().numpy() for w in (block_layer.up_proj.weight, block_layer.gate_proj.weight))
silu = lambda z: z / (1 + np.exp(-z))                      # phi = SiLU  # noqa: E731
attention_part = np.stack([symbolic_update(c_block[i], i, A_block, c_block) for i in range(n_tokens)])
mlp_part = (silu(c_block @ up.T) * (c_block @ gate.T)) @ up  # U^T (phi(U x) * G c) at x = c
by_sympy_block = attention_part + mlp_part

# %% tags=["compare-joint"]
fast = (block_layer(h) - h)[0].detach().numpy()
error = np.abs(fast - by_sympy_block).max() / np.abs(by_sympy_block).max()
report(f"`CEMBlock` at $T = 1$ and the sum of the two updates differ by **{error:.1e}** relative to the largest "
       "update (tolerance $10^{-10}$): one joint step is a parallel block.")
assert error < 1e-10, "CEMBlock (T = 1) is not the parallel block of its two terms"

# %% [markdown]
# From $T = 2$ on the terms interact inside the layer. The energy page shows the joint block as the layer
# "Block as one energy" ([at $T = 4$](http://localhost:8501/?layer=joint&p_scale=0.3&heads=2&width=8&seq_len=8&seed=0&rope=false&token=255&heat_head=0&T=4&eta=1.0&anchor=0.0&diagonal=none&diagonal_form=bilinear&preconditioner=none&rank=2
# "needs the app: run make app first"));
# the distance form [settles where the bilinear one runs off](http://localhost:8501/?layer=attention&p_scale=0.3&heads=2&width=8&seq_len=8&seed=0&rope=false&token=255&heat_head=0&T=16&eta=1.0&anchor=0.0&diagonal=shared&diagonal_form=distance&preconditioner=none&rank=2
# "needs the app: run make app first").
# The GP factor study (docs/results-gp.md) measures both.
#
# ## 6. Explore
#
# The explorer below puts the energy page's controls in the notebook: one attention layer of this
# notebook's size ($d = 8$, two heads, six tokens), with the preconditioner's low-rank factors drawn
# at the large scale `p_scale = 3` (fixed here; the app has a control for it). Each change redraws the
# figure, with the energy of every token per step and one token's landscape, and the link under the
# figure opens the same state in the app; the cell after it computes the runs named here. Things to try:
#
# - **The paper's preconditioner can make the energy rise.** It starts at `dlr`, the paper's
#   $\mathrm{diag}(\mathrm{softplus}\,p) + UV^\top + VU^\top$, with seed 2: the first token's energy rises at
#   every step.
#   Switch to `psd` (ours, positive definite) or `none`: every token's energy falls at every step, whatever
#   $\eta$ is.
#   At seed 3 `dlr` is indefinite as well, yet the energy falls: not guaranteed to descend is not bound
#   to ascend.
# - **The anchor converges only for small steps.** Choose `none`, anchor $\lambda = 1.5$ and $T = 16$: at
#   $\eta = 1.2$, below $2/\lambda \approx 1.33$, the steps shrink geometrically (the first token's by
#   $|1 - \eta\lambda| = 0.8$ per step), and at $\eta = 1.5$ they grow. With the anchor at 0 no $\eta$ makes
#   them converge: the energy falls without end and the radius keeps growing.
# - **Recursion.** Raise $T$ with the anchor at 0 and watch the path: its steps do not shrink.
#
# Where widgets do not run (GitHub, nbviewer) the cell shows the figure of its starting state.

# %%
EnergyExplorer(controls=("T", "eta", "anchor", "preconditioner", "seed"),
               T=4, preconditioner="dlr", p_scale=3.0, seed=2, seq_len=6)

# %% [markdown]
# The runs these bullets name, from the explorer's own data (`cem_core.ui.explore`, the cell above's fixed
# values): which energies rise, and the step lengths $|x^{(t+1)} - x^{(t)}|$, the first and the last step,
# largest over the tokens. The first token's steps must shrink by exactly $|1 - \eta\lambda|$ per step
# (section 4). **Tolerance: $10^{-9}$ relative, float64.**

# %%
def explorer_run(**values) -> dict:
    """The explorer's first phase for its fixed values (p_scale 3, six tokens) and these."""
    return explore.explore(EnergyControls.from_values(p_scale=3.0, seq_len=6, **values))["phases"][0]


P_runs = {(kind, s_): explorer_run(T=4, preconditioner=kind, seed=s_)   # the explorer at T = 4, eta = 1
          for kind in ("dlr", "psd", "none") for s_ in (2, 3)}
assert P_runs["dlr", 2]["rose"][:, 0].all()               # dlr, seed 2: the first token's energy rises at every step
assert not any(P_runs[kind, s_]["rose"].any() for kind in ("psd", "none") for s_ in (2, 3))   # ours and P = I: never
assert not P_runs["dlr", 3]["rose"].any() and (P_runs["dlr", 3]["eigenvalues"] < 0).any()     # indefinite, yet falls
step_rows = ["| anchor $\\lambda$ | $\\eta$ | first step | last step | first token: last / first | "
             "$\\vert 1 - \\eta\\lambda \\vert^{T-1}$ |", "| ---: | ---: | ---: | ---: | ---: | ---: |"]
for anchor_v, eta_v in ((1.5, 1.2), (1.5, 1.5), (0.0, 1.2), (0.0, 1.5)):
    lengths = explorer_run(T=16, eta=eta_v, anchor=anchor_v, preconditioner="none", seed=2)["update_norms"]  # (T, n)
    factor = abs(1 - eta_v * anchor_v) ** (len(lengths) - 1)   # the first token's x* + (1 - eta lambda)^t (x0 - x*)
    first_ratio = lengths[-1, 0] / lengths[0, 0]
    step_rows.append(f"| {anchor_v:g} | {eta_v:g} | {lengths[0].max():.3g} | {lengths[-1].max():.3g} | "
                     f"{first_ratio:.4g} | {factor:.4g} |")
    assert abs(first_ratio - factor) <= 1e-9 * factor, "the first token's steps do not shrink by |1 - eta lambda|"
    if anchor_v == 0:
        assert (lengths[-1] >= (1 - 1e-9) * lengths[0]).all()   # no anchor: the steps do not shrink
    elif eta_v < 2 / anchor_v:
        assert (lengths[-1] < 0.1 * lengths[0]).all()            # below 2/lambda: shrinking, every token
    else:
        assert (lengths[-1] > lengths[0]).all()                  # above 2/lambda: growing, every token
report("`dlr` at seed 2 raises the first token's energy at every step; `psd` and `none` raise no energy at seeds 2 and "
       "3; `dlr` at seed 3 has a negative eigenvalue and raises none. Step lengths ($T = 16$, $P = I$, seed 2):\n\n"
       + "\n".join(step_rows))

# %% [markdown]
# ## Exercises
#
# **1. The anchor at the start.** The anchor must not change the paper's layer at $T = 1$. **What is the gradient of
# $\frac{\lambda}{2}|x - x^{(0)}|^2$ at the start $x = x^{(0)}$?** Write it as a SymPy column vector,
# then run the check, which also compares anchored and plain `cem_core` layers at $T = 1$.

# %% tags=["exercise-anchor-at-start"]
answer = None                                               # your answer here


# %% tags=["check-anchor-at-start"]
def check(answer):
    anchor_energy = lam / 2 * (xv - x_init).dot(xv - x_init)   # (lambda/2)|x - x^(0)|^2
    at_start = sp.Matrix([sp.diff(anchor_energy, x_m) for x_m in xv]).subs(dict(zip(xv, x_init)))
    assert sp.simplify(at_start - answer) == sp.zeros(d, 1), "not the anchor's gradient at x^(0)"
    steps = [figdata.attention_layer(d_model, n_heads, CEMOptions(anchor=value), seed=seed)(h) for value in (0.0, 1.0)]
    assert torch.allclose(steps[0], steps[1], rtol=1e-12, atol=1e-12), "an anchored step differs at T = 1"


check_answer(answer, check, "anchor-at-start",
             "The anchor's gradient vanishes at $x^{(0)}$, so one anchored step is the paper's step.")

# %% [markdown]
# **2. The step-size limit with a preconditioner.** Section 4 showed that with $P = I$ the first token's
# anchored steps converge exactly when $0 < \eta < 2/\lambda$. Now precondition them with $P = sI$, $s > 0$
# (our psd form with $U = 0$ and $\mathrm{softplus}(p) = s$): $x \leftarrow x - \eta P \nabla E_\lambda(x)$.
# **Below which step size $\eta$ do they converge?** Write the bound as a SymPy expression in `lam`
# ($\lambda$) and `s_P` ($s$, defined in the cell below). The check solves the condition on the contraction
# factor, then runs `cem_core` layers with $P = \tfrac{1}{2} I$ at 0.9 and 1.1 times your bound: the first
# token's steps must shrink below it and grow above it.

# %%
s_P = sp.Symbol("s", positive=True)                         # P = s I

# %% tags=["exercise-anchor-step-limit"]
answer = None                                               # your answer here


# %% tags=["check-anchor-step-limit"]
def check(answer):
    limit = sp.solve(sp.Abs(1 - eta * s_P * lam) < 1, eta)  # x^(t+1) - x* = (1 - eta s lambda)(x^(t) - x*)
    assert sp.simplify(answer - limit.rhs) == 0, "not the step size where |1 - eta s lambda| reaches 1"
    s_value = 0.5
    bound = float(answer.subs({s_P: s_value, lam: anchor_lambda}))
    for fraction in (0.9, 1.1):
        layer = figdata.attention_layer(d_model, n_heads, CEMOptions(T=T, eta=fraction * bound, anchor=anchor_lambda,
                                                                     preconditioner="psd", rank=1), seed=seed)
        with torch.no_grad():
            layer.preconditioner.p.fill_(math.log(math.expm1(s_value)))   # softplus(p) = s
            layer.preconditioner.U.zero_()                                 # P = s I
        first = layer.trace(h).update_norms[:, 0, 0]                       # the first token's step lengths
        assert (first[-1] < first[0]) == (fraction < 1), f"at {fraction:g} x the bound the steps should " \
            + ("shrink" if fraction < 1 else "grow")


check_answer(answer, check, "anchor-step-limit",
             "$\\eta < 2/(s\\lambda)$: the preconditioner scales the curvature $\\lambda$ of the anchored energy "
             "by $s$, so the step-size limit shrinks by $s$. `cem_core` agrees at $s = 1/2$.")

# %% [markdown]
# **Takeaway.** A diagonal buys full-rank interactions for $d$ (shared) or $Hd$ (per head)
# parameters, at twice (shared) or $(H+1)$ times (per head) the attention core's compute. Because the
# attention energy is concave, a step descends whenever $P$ is positive definite, for every $\eta > 0$;
# the paper's preconditioner is not guaranteed to be positive definite, and where it is not, a step can
# ascend. Recursion is attention of an updated query over fixed keys and values; with a positive
# definite $P$ it always lowers the attention energy but has nowhere to converge to, unless an anchor
# adds a minimum; near it steps with $\eta < 2/\lambda$ (for $P = I$) converge, and for the first tokens only those.
