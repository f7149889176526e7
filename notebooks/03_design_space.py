# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
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
# Notebooks 01 and 02 derived attention and the gated MLP as **one** plain gradient step. The
# paper (arXiv 2605.07588) extends the recipe in three directions, each a small change to the
# energy or to the step: a **diagonal** added to the low-rank interaction (D+LR), a learned
# **preconditioner** $P$ in $x \leftarrow x - \eta P \nabla E$, and **recursion**, $T$ steps inside
# one layer. This notebook works out what each buys and what each costs, and checks the claims
# against `cem_core`.
#
# **Learning goals.** After this notebook you can
#
# 1. prove that a rank-$d_h$ interaction $W_Q^\top W_K$ cannot express a full-rank diagonal, and
#    count what a per-head or a shared diagonal costs in parameters and compute;
# 2. explain why the paper's preconditioner $\mathrm{diag}(\mathrm{softplus}\,p) + UV^\top + VU^\top$
#    can make a step *raise* the energy, construct such a $P$, and contrast it with the positive
#    definite $\mathrm{diag}(\mathrm{softplus}\,p) + UU^\top$;
# 3. show that the attention energy is concave (negative semidefinite Hessian), hence every
#    plain step lowers it, and that it has no minimum unless an anchor term is added.

# %% tags=["parameters"]
d = 3          # width of the symbolic rank argument
d_h = 2        # head width: W_Q^T W_K has rank <= d_h < d
d_model = 8    # width of the numeric layers
n_heads = 2
n_tokens = 6
T = 12         # in-layer steps for the recursion experiments
seed = 0

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import sympy as sp
import torch
from nbhelpers import matrix, show, show_figure, vector

import cem_core
from cem_core.nn.config import CEMOptions
from cem_core.ui import figdata, plots

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
print(f"|I - best rank-{d_h} product|_F = {gap:.4f} = sqrt(d - d_h) = {math.sqrt(d - d_h):.4f}")
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
for diagonal, extra in closed_form.items():
    counts = cem_core.AttentionConfig(d_model=d_model, n_heads=n_heads, diagonal=diagonal).param_counts()
    assert counts["diagonal"] == extra.subs({H: n_heads, dh_s: d_model // n_heads})
    print(f"diagonal={diagonal!r:11}: {counts['projections']} projection + {counts['diagonal']} diagonal parameters")

# %% [markdown]
# **The D+LR update by hand.** With $A_k = \mathrm{diag}(\delta_k) + W_{Q,k}^\top W_{K,k}$ the energy is
# $-\sum_k \frac{1}{\beta}\log\sum_{j\le i} e^{\beta\, x^\top A_k c_j}$ and its negative gradient is
# $\sum_k A_k \sum_{j \le i} a^k_{ij} c_j$. Ten lines of numpy, compared with `CEMAttention`
# (per-head diagonal, random weights, T = 1). **Tolerance: $10^{-10}$ relative, float64.**

# %%
rng = np.random.default_rng(seed)
dlr_layer = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=d_model, n_heads=n_heads, diagonal="per_head",
                                                           rope=False)).double()
with torch.no_grad():
    for p in (dlr_layer.q_proj.weight, dlr_layer.k_proj.weight, dlr_layer.diag):
        p.copy_(torch.from_numpy(rng.normal(size=p.shape) / math.sqrt(d_model)))
h = figdata.descent_input(n_tokens, d_model, seed)         # h, (1, n_tokens, d_model), float64
c = dlr_layer.norm(h)[0].detach().numpy()                  # c_j = Norm(h_j) = x_j^(0)
head = d_model // n_heads
w_q = dlr_layer.q_proj.weight.detach().numpy().reshape(n_heads, head, d_model)
w_k = dlr_layer.k_proj.weight.detach().numpy().reshape(n_heads, head, d_model)
A = w_q.transpose(0, 2, 1) @ w_k + np.stack([np.diag(row) for row in dlr_layer.diag.detach().numpy()])  # A_k


def dlr_update(x_i: np.ndarray, history: np.ndarray) -> np.ndarray:
    """sum_k A_k sum_j a^k_ij c_j with a^k_ij = softmax_j(beta x_i^T A_k c_j), beta = 1/sqrt(d_h)."""
    total = np.zeros_like(x_i)
    for A_k in A:
        logits = x_i @ A_k @ history.T / math.sqrt(head)   # beta x_i^T A_k c_j
        a = np.exp(logits - logits.max())
        total += A_k @ (a / a.sum() @ history)             # A_k sum_j a_ij c_j
    return total


by_hand = np.stack([dlr_update(c[i], c[: i + 1]) for i in range(n_tokens)])

# %% tags=["compare-dlr-attention"]
fast = (dlr_layer(h) - h)[0].detach().numpy()
error = np.abs(fast - by_hand).max() / np.abs(by_hand).max()
print(f"max |layer(h) - h - numpy D+LR update| / max |update| = {error:.1e}")
assert error < 1e-10, "CEMAttention (per-head diagonal) disagrees with the D+LR update by hand"

# %% [markdown]
# ## 2. Preconditioners: when a step raises the energy
#
# A step $x \leftarrow x - \eta P g$ with $g = \nabla E(x)$ changes the energy by
# $-\eta\, g^\top P g + O(\eta^2)$. It lowers the energy for small $\eta$ exactly when
# $g^\top P g > 0$. The two forms differ in that quadratic form:

# %%
xv = vector("x", d)
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
# Ours, $\mathrm{diag}(s) + UU^\top$, is a sum of squares with positive weights: positive definite,
# every step descends for small $\eta$. The paper's low-rank part is $2(U^\top x)(V^\top x)$, negative
# whenever $V^\top x$ and $U^\top x$ have opposite signs. **An explicit indefinite P:** take one
# token's gradient $g$, $u = g/|g|$, $D = I$ (softplus $p = 1$), $U = u$ and $V = -u$. Then
# $P = I - 2uu^\top$, a reflection with eigenvalue $-1$ along $g$, and $g^\top P g = -|g|^2$.

# %%
token = n_tokens - 1


def single_token_layer(kind: str) -> tuple[cem_core.CEMAttention, np.ndarray]:
    """A rank-1 preconditioned layer (eta = 0.01) whose P is built from the token's gradient g; and u."""
    layer = figdata.attention_layer(d_model, n_heads, CEMOptions(eta=0.01, preconditioner=kind, rank=1), seed=seed)
    x0 = layer.norm(h).detach().requires_grad_(True)
    (g,) = torch.autograd.grad(layer.energy(x0, h)[0, token], x0)
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
print(f"max |P (cem_core) - (I - 2uu^T)| = {error:.1e}; eigenvalues {np.round(np.linalg.eigvalsh(P_layer), 6)}")
assert error < 1e-12, "cem_core's dlr preconditioner is not diag(softplus p) + U V^T + V U^T"

# %%
psd_layer, _ = single_token_layer("psd")                   # P = I + u u^T: positive definite


def energy_change(layer: cem_core.CEMAttention) -> float:
    energies = layer.trace(h).energies[:, 0, token]
    return float(energies[1] - energies[0])                # E(x^(1)) - E(x^(0))


change = {"paper (dlr)": energy_change(paper_layer), "ours (psd)": energy_change(psd_layer)}
print({name: f"{value:+.3e}" for name, value in change.items()})
assert change["paper (dlr)"] > 0 > change["ours (psd)"]    # the indefinite P raised the energy

# %% [markdown]
# The spectra tell the same story for random factors (`cem_core.ui.figdata.preconditioner_spectra`,
# the data behind `figures/preconditioner_spectra.png`): the paper's form has negative
# eigenvalues, ours has none below 1.

# %%
spectra = figdata.preconditioner_spectra(d_model=16, rank=4, seed=seed)
assert spectra["dlr"].min() < 0 < spectra["psd"].min()
show_figure(plots.mpl_preconditioner_spectra(spectra))

# %% [markdown]
# ## 3. Recursion: concave, monotone, and no minimum
#
# **Concavity.** Write $k_j = A c_j$ for one head. The Hessian of $-\frac{1}{\beta}\log\sum_j e^{\beta x^\top k_j}$
# is $-\beta\,\mathrm{Cov}_a(k)$, minus $\beta$ times the covariance of the keys under the softmax
# weights: negative semidefinite. With two keys in the plane SymPy proves the closed form
# $-\beta\, a_1 a_2 (k_1 - k_2)(k_1 - k_2)^\top$, whose only nonzero eigenvalue is $-\beta a_1 a_2 |k_1 - k_2|^2 \le 0$.

# %%
beta = sp.Symbol("beta", positive=True)
x2, k1, k2 = vector("x", 2), vector("k1", 2), vector("k2", 2)
w1, w2 = sp.exp(beta * x2.dot(k1)), sp.exp(beta * x2.dot(k2))
E2 = -sp.log(w1 + w2) / beta                               # E = -(1/beta) log sum_j exp(beta x^T k_j)
a1, a2 = w1 / (w1 + w2), w2 / (w1 + w2)                    # softmax weights
hessian_claim = -beta * a1 * a2 * (k1 - k2) * (k1 - k2).T
assert sp.simplify(sp.hessian(E2, x2) - hessian_claim) == sp.zeros(2, 2)
print("Hessian == -beta a_1 a_2 (k_1 - k_2)(k_1 - k_2)^T: proved")

# %% [markdown]
# Numerically, on a `cem_core` layer (two heads, per-head diagonal, random weights): every
# eigenvalue of one token's Hessian is $\le 0$ up to rounding.

# %%
x0 = dlr_layer.norm(h).detach()


def token_energy(x_i: torch.Tensor) -> torch.Tensor:
    x = x0.clone()
    x[0, token] = x_i
    return dlr_layer.energy(x, h)[0, token]


eigenvalues = torch.linalg.eigvalsh(torch.autograd.functional.hessian(token_energy, x0[0, token]))
print("Hessian eigenvalues:", np.round(eigenvalues.numpy(), 6))
assert eigenvalues.max() <= 1e-10 * eigenvalues.abs().max()

# %% [markdown]
# **Monotone descent.** A concave function lies below its tangent, so
# $E(x - \eta g) \le E(x) - \eta |g|^2$: with $P = I$ (or any positive definite $P$) every step lowers
# the energy, **for every $\eta > 0$**. `layer.trace(h)` records the energies:

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
for eta in (0.1, 1.0, 10.0):
    energies = figdata.attention_layer(d_model, n_heads, CEMOptions(T=T, eta=eta), seed=seed).trace(h).energies[:, 0]
    assert (energies[1:] - energies[:-1]).max() < 0        # every token, every step
    ax.plot(range(T + 1), (energies - energies[0]).mean(-1), marker="o", ms=3, label=f"η = {eta:g}")
ax.set(xlabel="in-layer step t", ylabel="mean E(x^(t)) - E(x^(0))", title="The attention energy falls at every step")
ax.legend()
show_figure(fig)

# %% [markdown]
# **No minimum.** Concave and not constant, the energy is unbounded below: the iterates do not
# converge, they run off, $|x^{(t)}|$ growing roughly linearly in $t$. Our extension (not the
# paper's) adds an anchor $\frac{\lambda}{2}|x - x^{(0)}|^2$; for $\lambda > 0$ the energy gains a
# minimum and the steps shrink to zero. `figdata.energy_descent` runs both with the same weights:

# %%
descent = figdata.energy_descent(T=T, d_model=d_model, n_heads=n_heads, n_tokens=n_tokens, seed=seed)
plain, anchored = descent["runs"][0.0], descent["runs"][1.0]
print(f"plain: |x| from {plain['radius'][0].mean():.2f} to {plain['radius'][-1].mean():.2f}, last step "
      f"{plain['update_norm'][-1].mean():.2f}; anchored: last step {anchored['update_norm'][-1].max():.1e}")
assert (plain["radius"][-1] > plain["radius"][0]).all()    # running off ...
assert (plain["update_norm"][-1] > 0.5 * plain["update_norm"][0]).all()     # ... with steps that do not shrink
assert (anchored["update_norm"][-1] < 1e-2 * anchored["update_norm"][0]).all()  # anchored: converging
show_figure(plots.mpl_energy_descent(descent))

# %% [markdown]
# The same two runs as landscapes (width 2, one head, `figdata.energy_landscape`): without the
# anchor the trajectory slides off down a slope with no bottom; with it the contours close
# around a minimum and the trajectory stops there.

# %%
for anchor in (0.0, 1.0):
    show_figure(plots.mpl_energy_landscape(figdata.energy_landscape(anchor=anchor, seed=seed)))

# %% [markdown]
# ## Exercise
#
# The anchor must not change the paper's layer at $T = 1$. **What is the gradient of
# $\frac{\lambda}{2}|x - x^{(0)}|^2$ at the start $x = x^{(0)}$?** Write it as a SymPy column vector,
# then run the check, which also compares anchored and plain `cem_core` layers at $T = 1$.

# %%
answer = sp.zeros(d, 1)                                     # your answer here

# %%
lam, x_start = sp.Symbol("lambda", positive=True), vector("x0", d)
anchor_energy = lam / 2 * (xv - x_start).dot(xv - x_start)  # (lambda/2)|x - x^(0)|^2
at_start = sp.Matrix([sp.diff(anchor_energy, x_m) for x_m in xv]).subs(dict(zip(xv, x_start)))
assert sp.simplify(at_start - answer) == sp.zeros(d, 1), "not the anchor's gradient at x^(0)"
one_step = [figdata.attention_layer(d_model, n_heads, CEMOptions(anchor=lam), seed=seed)(h) for lam in (0.0, 1.0)]
assert torch.allclose(one_step[0], one_step[1], rtol=1e-12, atol=1e-12)
print("Correct: the anchor's gradient vanishes at x^(0), so one anchored step is the paper's step.")

# %% [markdown]
# **Takeaway.** A diagonal buys full-rank interactions for $d$ (shared) or $Hd$ (per head)
# parameters, at $(H+1)$ times the attention core's compute. A preconditioner must be positive
# definite to guarantee descent; the paper's form is not. Recursion always lowers the attention
# energy, but only an anchor gives it somewhere to converge to.
