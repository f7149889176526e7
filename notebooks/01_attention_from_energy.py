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
# # 01 · Attention from an energy
#
# [Open in Colab](https://colab.research.google.com/github/cem-lab/cem-lab/blob/main/notebooks/01_attention_from_energy.ipynb)
#
# *Causal Energy Minimization* (CEM, arXiv 2605.07588) reads a transformer layer as gradient
# steps on a causal, conditional energy. This notebook derives in SymPy that **one step on the
# log-sum-exp interaction energy is causal multi-head attention**, and then checks the derivation
# against `cem_core.CEMAttention` on random numbers, so that the algebra and the code cannot
# drift apart. (The paper reports the result; the derivation here is ours, see
# `docs/paper-notes.md#attention-as-a-gradient-step`.)
#
# **Learning goals.** After this notebook you can
#
# 1. write the causal interaction energy of a token and differentiate it with explicit-entry symbols;
# 2. show that one gradient step with step size $\eta = 1$ and preconditioner $P = I$ adds the
#    softmax-weighted keys read out by $W_Q^\top$;
# 3. explain why the algebra ties the values to the keys ($W_V = W_K$) and the output to the
#    queries ($W_O = W_Q^\top$);
# 4. say where the temperature, the head dimension and the causal mask enter, and why several
#    heads are a sum of energies;
# 5. explain why rotary position embeddings (RoPE) keep the gradient form, and what they rotate;
# 6. turn a SymPy gradient into a numeric function (`lambdify`) and test a fast layer with it;
# 7. compute one step by hand on a width-2 example, read it off a picture, and explore more steps
#    in an interactive explorer and in the app;
# 8. place CEM in its lineage: Hopfield networks, dense associative memories, modern Hopfield networks
#    (whose update is attention) and the Energy Transformer.

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
n_ctx = 3      # history length i: the token we differentiate sees c_1..c_i
d = 3          # residual width of the symbolic single-head derivation
d_h = 2        # head width (d_h < d, as in a real layer; even, for RoPE)
n_heads = 2    # heads of the multi-head check against CEMAttention (width n_heads * d_h)
rope_base = 10000.0  # RoPE base (cem_core's default), section 8
seed = 0

# %%
import inspect
import math

import nbhelpers
import numpy as np
import sympy as sp
import torch
from nbhelpers import check_answer, matrix, proved, report, show, show_figure, vector

import cem_core
from cem_core.ui import energy_plots, figdata
from cem_core.ui.widgets import EnergyExplorer

# %% [markdown]
# ## 1. The causal interaction energy
#
# Token $i$ holds an optimization variable $x$ (it starts at $x^{(0)} = \mathrm{Norm}(h_i)$) and
# sees the fixed history $c_j = \mathrm{Norm}(h_j)$, $j \le i$. With one head, query projection
# $W_Q$ and key projection $W_K$ (both $d_h \times d$), the score of $x$ against $c_j$ and the
# energy are written below with **explicit-entry matrices**: every entry is its own SymPy symbol
# (`vector` and `matrix` from `nbhelpers.py`; section 2 says why).

# %%
beta = sp.Symbol("beta", positive=True)                    # inverse temperature beta = 1/tau
x = vector("x", d)
c = [vector(f"c{j + 1}", d) for j in range(n_ctx)]         # c_1 .. c_i
W_Q, W_K = matrix("q", d_h, d), matrix("k", d_h, d)


def score(w_q, w_k, x, c_j):
    return ((w_q * x).T * (w_k * c_j))[0, 0]              # s_j = (W_Q x)^T (W_K c_j)


def head_energy(w_q, w_k, x, history):
    """E(x | c_1..c_i) = -(1/beta) log sum_{j<=i} exp(beta s_j), one head."""
    return -sp.log(sum(sp.exp(beta * score(w_q, w_k, x, c_j)) for c_j in history)) / beta


E = head_energy(W_Q, W_K, x, c)
j, i = sp.symbols("j i", integer=True, positive=True)
s = sp.IndexedBase("s")
show(r"E(x \mid c_{1:i})", -sp.log(sp.Sum(sp.exp(beta * s[j]), (j, 1, i))) / beta)
show("s_1", score(W_Q, W_K, x, c[0]))

# %% [markdown]
# ## 2. One gradient step is attention
#
# A CEM layer takes steps $x^{(t+1)} = x^{(t)} - \eta P \nabla_x E(x^{(t)})$ and adds
# $x^{(T)} - x^{(0)}$ to the residual stream. **The attention layer of the paper is one step,
# $T = 1$, with $\eta = 1$ and $P = I$** (`cem_core`'s defaults), so what it adds is
# $x^{(1)} - x^{(0)} = -\nabla_x E(x^{(0)})$. Differentiate entry by entry. The chain rule brings
# down $\beta\,\partial s_j/\partial x$ and divides by the sum of exponentials, which is exactly a
# softmax. So we claim
#
# $$-\nabla_x E = W_Q^\top \sum_{j \le i} a_j\, W_K c_j, \qquad a_j = \operatorname{softmax}_j(\beta s_j),$$
#
# queries $W_Q x$, keys $W_K c_j$, **values equal to the keys**, and an output projection $W_Q^\top$.
# SymPy proves the claim by simplifying the difference to zero:

# %%
grad = sp.Matrix([sp.diff(E, x_m) for x_m in x])          # grad_x E, entry by entry


def softmax_weights(w_q, w_k, x, history):
    logits = [sp.exp(beta * score(w_q, w_k, x, c_j)) for c_j in history]
    return [e / sum(logits) for e in logits]               # a_j = softmax_j(beta s_j)


def attention_update(w_q, w_k, w_v, w_o, x, history):
    """W_O sum_j a_j W_V c_j: one head of (untied) attention with the energy's weights a_j."""
    a = softmax_weights(w_q, w_k, x, history)
    return w_o * sum((a_j * (w_v * c_j) for a_j, c_j in zip(a, history)), sp.zeros(w_v.rows, 1))


tied = attention_update(W_Q, W_K, W_K, W_Q.T, x, c)       # W_V = W_K, W_O = W_Q^T
assert any(g != 0 for g in grad)                           # a real gradient, not a silent 0 (see the aside)
assert sp.simplify(-grad - tied) == sp.zeros(d, 1)
proved(r"-\nabla_x E = W_Q^\top \sum_{j \le i} \operatorname{softmax}_j(\beta s_j)\, W_K c_j"
       r"\quad \text{(every entry)}")

# %% [markdown]
# To read the derived gradient, name the pieces: $e_j = e^{\beta s_j}$ and the key
# $\kappa_j = W_K c_j$. The first entry of $-\nabla_x E$, exactly as SymPy derived it, is a
# softmax-weighted average of the keys, read out by the first column of $W_Q$ (the first row of $W_Q^\top$).
# (Section 9 runs this step on numbers small enough to follow by hand, with a picture.)

# %%
exps = {sp.exp(beta * score(W_Q, W_K, x, c_j)): sp.Symbol(f"e_{j + 1}") for j, c_j in enumerate(c)}
keys = {(W_K * c_j)[r]: sp.Symbol(f"kappa_{j + 1}{r}") for j, c_j in enumerate(c) for r in range(d_h)}
show(r"-\frac{\partial E}{\partial x_0}", sp.together((-grad[0]).xreplace(exps).xreplace(keys)))

# %% [markdown]
# ### Aside: why explicit entries, not `MatrixSymbol`
#
# The natural way to write $x^\top W_Q^\top W_K c_j$ in SymPy is with `MatrixSymbol`. But SymPy
# 1.14 **silently returns 0** when it differentiates a log-sum-exp of `MatrixSymbol` expressions
# (`docs/design.md#71-sympy-returns-0-for-matrixsymbol-gradients`). Here is the pitfall, on the
# energy we just differentiated correctly:

# %%
X = sp.MatrixSymbol("x", d, 1)
C = sp.MatrixSymbol("C", d, n_ctx)                         # columns c_1..c_i
WQ, WK = sp.MatrixSymbol("W_Q", d_h, d), sp.MatrixSymbol("W_K", d_h, d)
S = (WQ * X).T * (WK * C)                                  # the 1 x i row of scores s_j
naive = -sp.log(sum(sp.exp(S[0, j]) for j in range(n_ctx)))
show(r"\nabla_x E \text{ (MatrixSymbol, wrong)}", sp.diff(naive, X))

# %% [markdown]
# The energy plainly depends on $x$, so that 0 is wrong. That is why every derivation here uses
# explicit-entry matrices, which SymPy differentiates entry by entry, correctly; and a bare 0 is
# never trusted: every derivation ends with a numeric check against code we did not derive here.
# The two helpers are short:

# %%
report(f"```python\n{inspect.getsource(nbhelpers.vector)}\n{inspect.getsource(nbhelpers.matrix)}```")

# %% [markdown]
# ## 3. Why values must equal keys and the output must be $W_Q^\top$
#
# Take a general attention head, $W_O \sum_j a_j W_V c_j$, with the same weights $a_j$. Its
# difference from the gradient step factors as
#
# $$W_O \sum_j a_j W_V c_j - \Big(-\nabla_x E\Big) = \big(W_O W_V - W_Q^\top W_K\big) \sum_j a_j c_j .$$

# %%
W_V, W_O = matrix("v", d_h, d), matrix("o", d, d_h)
untied = attention_update(W_Q, W_K, W_V, W_O, x, c)
mixed_history = sum((a_j * c_j for a_j, c_j in zip(softmax_weights(W_Q, W_K, x, c), c)), sp.zeros(d, 1))
assert (untied + grad - (W_O * W_V - W_Q.T * W_K) * mixed_history).applyfunc(sp.cancel) == sp.zeros(d, 1)
proved(r"W_O \sum_j a_j W_V c_j - \big(-\nabla_x E\big) = \big(W_O W_V - W_Q^\top W_K\big) \sum_j a_j c_j")

# %% [markdown]
# As the history varies, $\sum_j a_j c_j$ reaches every direction of $\mathbb{R}^d$, so a head is a
# plain gradient step on this energy ($P = I$) exactly when $W_O W_V = W_Q^\top W_K$. The paper's tying
# $W_V = W_K$, $W_O = W_Q^\top$ satisfies it with no redundant parameters. **If $W_Q$ and $W_K$ have full
# rank $d_h$** (random weights do, almost surely), every other solution is $W_V = M W_K$,
# $W_O = W_Q^\top M^{-1}$ for an invertible $d_h \times d_h$ matrix $M$, a mere change of basis inside the
# head: $W_O W_V$ then has rank $d_h$, so $W_O$ is injective and $W_V$ has the row space of $W_K$, that is
# $W_V = M W_K$; and $W_O M W_K = W_Q^\top W_K$ gives $W_O M = W_Q^\top$, as $W_K$ has full row rank. SymPy
# checks that these are solutions:

# %%
M = matrix("m", d_h, d_h)
assert sp.simplify(W_Q.T * M.inv() * (M * W_K) - W_Q.T * W_K) == sp.zeros(d, d)
proved(r"\big(W_Q^\top M^{-1}\big)\big(M W_K\big) = W_Q^\top W_K \quad \text{for every invertible } M")

# %% [markdown]
# And numerically, the converse and its assumption. At full rank the solutions near the tied pair form a
# set of dimension $d_h^2$, that of the $M$ family: the kernel of the linearized equation
# $\delta W_O\, W_K + W_Q^\top \delta W_V = 0$. With a rank-deficient $W_Q$ (its last row zero) the
# kernel is larger, and $W_V = W_K + e_{d_h} w^\top$ with $W_O = W_Q^\top$ solves the equation for every
# $w$, though $W_V$ is no $M W_K$ (its rows leave the row space of $W_K$). **Tolerance: $10^{-10}$, float64.**

# %%
rank_rng = np.random.default_rng(seed + 1)


def solution_dimension(w_q, w_k) -> int:
    """dim of {(dW_O, dW_V): dW_O W_K + W_Q^T dW_V = 0}, the tangent of W_O W_V = W_Q^T W_K at the tied pair."""
    n_o = d * d_h
    images = [(b[:n_o].reshape(d, d_h) @ w_k + w_q.T @ b[n_o:].reshape(d_h, d)).ravel() for b in np.eye(2 * n_o)]
    return 2 * n_o - np.linalg.matrix_rank(np.array(images), tol=1e-10)


w_q_full, w_k_full = rank_rng.normal(size=(d_h, d)), rank_rng.normal(size=(d_h, d))
w_q_low = w_q_full.copy()
w_q_low[-1] = 0                                            # rank d_h - 1
w_v_other = w_k_full + np.outer(np.eye(d_h)[-1], rank_rng.normal(size=d))   # W_V = W_K + e_{d_h} w^T
residual = np.abs(w_q_low.T @ w_v_other - w_q_low.T @ w_k_full).max()      # W_O W_V - W_Q^T W_K, W_O = W_Q^T
dims = {"full": solution_dimension(w_q_full, w_k_full), "low": solution_dimension(w_q_low, w_k_full)}
stacked_rank = np.linalg.matrix_rank(np.vstack([w_k_full, w_v_other]), tol=1e-10)   # rank [W_K; W_V]
report(f"Solutions near the tied pair: dimension {dims['full']} at full rank ($d_h^2$ = {d_h ** 2}), {dims['low']} "
       f"with a rank-{d_h - 1} $W_Q$. There $W_V = W_K + e_{{d_h}} w^\\top$ solves it (residual {residual:.1e}) with "
       f"$\\mathrm{{rank}}[W_K; W_V]$ = {stacked_rank} > $d_h$: no $M W_K$.")
assert dims == {"full": d_h ** 2, "low": d_h ** 2 + d - d_h}   # low: d (d_h - r) + r d_h with rank r = d_h - 1
assert residual < 1e-10 and stacked_rank > d_h

# %% [markdown]
# A second way to see it: the update $-\nabla E$ of a plain gradient step has a **symmetric Jacobian**
# (minus the Hessian of the energy). Evaluated at random numbers, the tied update's Jacobian is symmetric
# and a generic untied head's is not, so no energy at all has the untied head as its plain ($P = I$)
# gradient step.

# %%
rng = np.random.default_rng(seed)
numbers = {sym: sp.Float(rng.normal()) for sym in sorted((untied.free_symbols | tied.free_symbols) - {beta}, key=str)}
numbers[beta] = 1 / sp.sqrt(d_h)


def jacobian_asymmetry(update) -> float:
    """max |J - J^T| of the update's Jacobian in x, at the random point `numbers`."""
    weights_fixed = update.xreplace({sym: v for sym, v in numbers.items() if sym not in x})
    J = np.array(weights_fixed.jacobian(x).xreplace(numbers), dtype=float)
    return float(np.abs(J - J.T).max())


asymmetry = {"tied": jacobian_asymmetry(tied), "untied": jacobian_asymmetry(untied)}
report(f"Largest $|J - J^\\top|$ of the update's Jacobian: tied {asymmetry['tied']:.1e} (tolerance 1e-12, "
       f"symmetric: a gradient), untied {asymmetry['untied']:.2f} (at least 1e-3: no energy has it as its plain "
       "gradient step).")
assert asymmetry["tied"] < 1e-12 and asymmetry["untied"] > 1e-3

# %% [markdown]
# **With a preconditioner** the step adds $-P\nabla E$, whose Jacobian $-P\nabla^2 E$ need not be
# symmetric, so more heads qualify: by the same factoring, a head is $-P\nabla E$ on this energy exactly
# when $W_O W_V = P\, W_Q^\top W_K$. With $W_V = W_K$ and full-rank $W_Q, W_K$ that is $W_O = P W_Q^\top$, and
# a symmetric positive definite $P$ with $P W_Q^\top = W_O$ exists exactly when $W_Q W_O$ is symmetric
# positive definite: $P = W_O (W_Q W_O)^{-1} W_O^\top + I - \Pi$ is one, with $\Pi$ the orthogonal projector onto
# the range of $W_Q^\top$. Numerically: a random positive definite $P$ gives $W_O = P W_Q^\top$, whose head is
# $-P\nabla E$ and has an asymmetric Jacobian; from that $W_O$ alone the formula recovers a positive definite
# $P$ with $P W_Q^\top = W_O$. **Tolerance: $10^{-12}$ relative, float64.**

# %%
w_q_num = np.array(W_Q.xreplace(numbers), dtype=float)    # the random W_Q of the check above
root = np.random.default_rng(seed + 2).normal(size=(d, d))
P_spd = root @ root.T + np.eye(d)                          # a symmetric positive definite P
W_O_pre = P_spd @ w_q_num.T                                # W_O = P W_Q^T, with W_V = W_K
preconditioned = attention_update(W_Q, W_K, W_K, sp.Matrix(W_O_pre), x, c)
target = np.array((sp.Matrix(P_spd) * tied).xreplace(numbers), dtype=float)   # -P grad E
step_gap = np.abs(np.array(preconditioned.xreplace(numbers), dtype=float) - target).max() / np.abs(target).max()
S_pre = w_q_num @ W_O_pre                                  # W_Q W_O = W_Q P W_Q^T
projector = w_q_num.T @ np.linalg.solve(w_q_num @ w_q_num.T, w_q_num)   # Pi, onto the range of W_Q^T
P_back = W_O_pre @ np.linalg.solve(S_pre, W_O_pre.T) + np.eye(d) - projector
recovered = np.abs(P_back @ w_q_num.T - W_O_pre).max() / np.abs(W_O_pre).max()
report(f"$W_O = P W_Q^\\top$: its head differs from $-P\\nabla E$ by {step_gap:.1e} (tolerance 1e-12), its Jacobian "
       f"asymmetry is {jacobian_asymmetry(preconditioned):.2f}; the recovered $P$ has $P W_Q^\\top = W_O$ up to "
       f"{recovered:.1e} and smallest eigenvalue {np.linalg.eigvalsh(P_back).min():.3f} > 0.")
assert step_gap < 1e-12 and jacobian_asymmetry(preconditioned) > 1e-3
assert np.allclose(S_pre, S_pre.T, rtol=0, atol=1e-12 * np.abs(S_pre).max()) and np.linalg.eigvalsh(S_pre).min() > 0
assert recovered < 1e-12 and np.linalg.eigvalsh(P_back).min() > 0

# %% [markdown]
# ## 4. Temperature and head dimension
#
# The energy carries $1/\beta$ in front and $\beta$ inside the exponentials. Differentiating
# $\frac{1}{\beta}\log\sum_j e^{\beta s_j}$ with respect to one score gives the softmax weight
# with no $\beta$ left outside: **the prefactor cancels, and $\beta$ only sets the softmax
# temperature** $\tau = 1/\beta$.

# %%
s1, s2 = sp.symbols("s_1 s_2", real=True)
lse = sp.log(sp.exp(beta * s1) + sp.exp(beta * s2)) / beta
show(r"\frac{\partial}{\partial s_1} \frac{1}{\beta}\log\left(e^{\beta s_1} + e^{\beta s_2}\right)", sp.diff(lse, s1))
assert sp.simplify(sp.diff(lse, s1) - sp.exp(beta * s1) / (sp.exp(beta * s1) + sp.exp(beta * s2))) == 0

# %% [markdown]
# As $\beta \to \infty$ the weights become one-hot on the best-scoring key (the energy tends to
# $-\max_j s_j$); as $\beta \to 0$ they become uniform. The paper ties the temperature to the head
# dimension, $\beta = 1/\sqrt{d_h}$: then $\beta s_j$ is exactly scaled dot-product attention, and
# `CEMAttention` uses that scale.

# %%
weight_1 = sp.diff(lse, s1).subs({s1: 2, s2: 1})
show(r"\lim_{\beta\to\infty} a_1 \,(s_1 = 2,\ s_2 = 1)", sp.limit(weight_1, beta, sp.oo))
show(r"\lim_{\beta\to 0} a_1", sp.limit(weight_1, beta, 0))
probe = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=n_heads * d_h, n_heads=n_heads, rope=False))
assert math.isclose(probe.scale, 1 / math.sqrt(d_h))       # beta = 1/sqrt(d_h)

# %% [markdown]
# ## 5. The causal mask
#
# Attention code does not build one sum per token. It scores every pair $(i, j)$ of positions
# and adds a mask $M_{ij} = 0$ for $j \le i$ and $M_{ij} = -\infty$ for $j > i$ to the scores, that
# is, it multiplies $e^{\beta s_{ij}}$ by $m_{ij} = e^{M_{ij}} \in \{1, 0\}$. So write the energy of
# token 1 over **all** $n$ positions with the mask entries as symbols, differentiate its update
# with respect to the later input $c_2$, and only then apply the mask:
#
# $$E_1(x \mid c_{1:n}) = -\frac{1}{\beta}\log\sum_{j=1}^{n} m_{1j}\, e^{\beta s_{1j}} .$$

# %%
m = [sp.Symbol(f"m_1{j + 1}", nonnegative=True) for j in range(n_ctx)]  # token 1's mask row m_11 .. m_1n


def masked_head_energy(w_q, w_k, x, history, mask):
    """-(1/beta) log sum_j m_j exp(beta s_j) over every position j of the history."""
    return -sp.log(sum(m_j * sp.exp(beta * score(w_q, w_k, x, c_j)) for m_j, c_j in zip(mask, history))) / beta


update_1 = -sp.Matrix([sp.diff(masked_head_energy(W_Q, W_K, x, c, m), x_m) for x_m in x])  # token 1's update
d_update_1 = update_1.jacobian(c[1])                      # d(update_1)/d(c_2), differentiated before masking
causal = {m[0]: sp.exp(0), **{m_1j: sp.exp(-sp.oo) for m_1j in m[1:]}}  # M_11 = 0, M_1j = -inf for j > 1
no_mask = {m_1j: sp.Integer(1) for m_1j in m}
assert sp.simplify(d_update_1.xreplace(causal)) == sp.zeros(d, d)
unmasked_at_random = np.array(d_update_1.xreplace(no_mask).xreplace(numbers), dtype=float)
proved(r"\frac{\partial\,\mathrm{update}_1}{\partial c_2}\bigg|_{m_{11} = e^0,\ m_{1j} = e^{-\infty}\ (j > 1)} = 0")
report(f"Without the mask, at random numbers, the largest entry of $\\partial\\,\\mathrm{{update}}_1/\\partial c_2$ "
       f"is {np.abs(unmasked_at_random).max():.2f} (at least 1e-3: the mask is what removes it).")
assert np.abs(unmasked_at_random).max() > 1e-3

# %% [markdown]
# Every term of $\partial\,\mathrm{update}_1/\partial c_2$ carries the factor $m_{12}$, and
# $e^{-\infty} = 0$ removes it; without the mask the same derivative is not zero. Section 7 checks
# the same statement on `CEMAttention`: the Jacobian of each token's update with respect to every
# later input vanishes, and with respect to every earlier input it equals the SymPy derivative.
#
# ## 6. Several heads are a sum of energies
#
# With heads $k = 1..H$ the energy is $E = \sum_k E_k$, each head with its own $W_{Q,k}, W_{K,k}$
# of size $d_h \times d$. The gradient is the sum of the heads' updates,
# $\sum_k W_{Q,k}^\top o_k$, and that is one matrix product of the stacked
# $W_Q = [W_{Q,1}; \dots; W_{Q,H}]$ (the layer's `q_proj.weight`) with the concatenated head
# outputs $[o_1; \dots; o_H]$:

# %%
D = n_heads * d_h                                          # the layer's width
W_Qs = [matrix(f"Q{k}", d_h, D) for k in range(n_heads)]
outputs = [vector(f"o{k}", d_h) for k in range(n_heads)]
stacked = sp.Matrix.vstack(*W_Qs).T * sp.Matrix.vstack(*outputs)
assert sp.expand(stacked - sum((W.T * o for W, o in zip(W_Qs, outputs)), sp.zeros(D, 1))) == sp.zeros(D, 1)
proved(r"W_Q^\top \begin{bmatrix} o_1 \\ \vdots \\ o_H \end{bmatrix} = \sum_{k=1}^{H} W_{Q,k}^\top o_k"
       r"\quad \text{(concatenate the heads, then one readout)}")

# %% [markdown]
# ## 7. From SymPy to numbers: `lambdify`, then compare with `CEMAttention`
#
# Build the multi-head energy of a token over all $n$ positions with a mask row (token $i$ gets
# $m_{ij} = 1$ for $j \le i$, else 0), take its gradient symbolically, and `lambdify` it. Then give
# a `CEMAttention` layer ($T = 1$, $\eta = 1$, $P = I$, RoPE off) random weights and compare. The layer
# returns $h + (x^{(1)} - x^{(0)})$ with $x^{(0)} = c = \mathrm{Norm}(h)$, so `layer(h) - h` must
# equal $-\nabla E$ evaluated at $x = \mathrm{Norm}(h_i)$ with history $c = \mathrm{Norm}(h)$.
# **Tolerance: $10^{-10}$ relative, in float64.**

# %%
xs = vector("x", D)
cs = [vector(f"c{j + 1}", D) for j in range(n_ctx)]
W_Ks = [matrix(f"K{k}", d_h, D) for k in range(n_heads)]
mask_row = sp.symbols(f"mu_1:{n_ctx + 1}", nonnegative=True)   # m_i1 .. m_in of the token at hand


def multi_head_energy(query_turn=None, key_turns=None):
    """sum_k of the masked head energies of x against c_1..c_n; RoPE's rotations (section 8) when given."""
    total = 0
    for W_q, W_k in zip(W_Qs, W_Ks):
        q_side = W_q if query_turn is None else query_turn * W_q
        k_sides = [W_k] * n_ctx if key_turns is None else [turn * W_k for turn in key_turns]
        scores = [((q_side * xs).T * (k_side * c_j))[0] for k_side, c_j in zip(k_sides, cs)]
        total += -sp.log(sum(m_j * sp.exp(beta * s_j) for m_j, s_j in zip(mask_row, scores))) / beta
    return total


c_entries = [e for c_j in cs for e in c_j]
symbols = [beta, *xs, *c_entries, *[e for W in W_Qs + W_Ks for e in W], *mask_row]
neg_grad = -sp.Matrix([sp.diff(multi_head_energy(), x_m) for x_m in xs])
update_fn = sp.lambdify(symbols, neg_grad)                 # -grad_x E_i
jacobian_fn = sp.lambdify(symbols, neg_grad.jacobian(sp.Matrix(c_entries)), cse=True)  # d(-grad E_i)/d(c_1..c_n)

torch.manual_seed(seed)
layer = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=D, n_heads=n_heads, T=1, rope=False)).double()
w_q, w_k = rng.normal(size=(D, D)), rng.normal(size=(D, D))
with torch.no_grad():
    layer.q_proj.weight.copy_(torch.from_numpy(w_q))       # rows k*d_h..(k+1)*d_h-1 are W_Q,k
    layer.k_proj.weight.copy_(torch.from_numpy(w_k))
    layer.norm.weight.uniform_(0.5, 1.5)                   # a non-trivial RMSNorm scale
assert (layer.config.T, layer.config.eta, layer.config.preconditioner) == (1, 1.0, "none")  # one step, eta = 1, P = I
h = torch.randn(1, n_ctx, D, dtype=torch.float64)
c_num = layer.norm(h)[0].detach().numpy()                  # c_j = Norm(h_j) = x_j^(0)
weights = [*w_q.ravel(), *w_k.ravel()]                      # row-major: head 0's rows first, as in W_Qs
masks = np.tril(np.ones((n_ctx, n_ctx)))                   # m_ij = 1 for j <= i, 0 (= e^-inf) for j > i


def arguments(t: int) -> list:
    return [1 / math.sqrt(d_h), *c_num[t], *c_num.ravel(), *weights, *masks[t]]


symbolic = np.stack([update_fn(*arguments(t)).ravel() for t in range(n_ctx)])

# %% tags=["compare-attention"]
fast = (layer(h) - h)[0].detach().numpy()
error = np.abs(fast - symbolic).max() / np.abs(symbolic).max()
report(f"`CEMAttention` against the SymPy $-\\nabla E$: largest relative difference {error:.1e}, tolerance 1e-10.")
assert error < 1e-10, "CEMAttention disagrees with the SymPy gradient"

# %% [markdown]
# **The causal mask, on the layer.** For $j \ne i$ the input $h_j$ reaches token $i$'s update only
# through $c_j = \mathrm{Norm}(h_j)$, so by the chain rule
# $\partial(\mathrm{layer}(h) - h)_i / \partial h_j = \partial\,\mathrm{update}_i/\partial c_j \cdot
# \partial\,\mathrm{Norm}(h_j)/\partial h_j$. Autograd gives the left side from `CEMAttention`; the
# masked SymPy derivative gives the right side. They must agree, be exactly zero for every $j > i$,
# and not be zero for $j < i$ (else the check would be empty). **Tolerance: $10^{-10}$ relative, float64.**

# %%
jacobian_layer = torch.autograd.functional.jacobian(lambda h: layer(h) - h, h)[0, :, :, 0].numpy()  # (n, D, n, D)
norm_jacobians = [torch.autograd.functional.jacobian(layer.norm, h[0, t]).numpy() for t in range(n_ctx)]
jacobian_symbolic = np.zeros_like(jacobian_layer)
for t in range(n_ctx):
    d_update = np.asarray(jacobian_fn(*arguments(t)), dtype=float)     # (D, n D): d update_t / d c
    for j in set(range(n_ctx)) - {t}:
        jacobian_symbolic[t, :, j] = d_update[:, j * D:(j + 1) * D] @ norm_jacobians[j]
future = np.triu(np.ones((n_ctx, n_ctx), dtype=bool), 1)  # j > i
past = np.tril(np.ones((n_ctx, n_ctx), dtype=bool), -1)   # j < i

# %% tags=["compare-causal-mask"]
blocks = jacobian_layer.transpose(0, 2, 1, 3)              # (i, j, D, D)
error = np.abs((jacobian_layer - jacobian_symbolic).transpose(0, 2, 1, 3)[past | future]).max()
error /= np.abs(blocks[past]).max()
report(f"Later inputs ($j > i$): largest $|\\partial\\,\\mathrm{{out}}_i / \\partial h_j|$ = "
       f"{np.abs(blocks[future]).max():.1e} (must be exactly 0). Earlier inputs ($j < i$): largest entry "
       f"{np.abs(blocks[past]).max():.2f}; largest relative difference from the masked SymPy derivative "
       f"{error:.1e}, tolerance 1e-10.")
assert np.abs(blocks[future]).max() == 0, "a token's update depends on a later input"
assert np.abs(blocks[past]).max(axis=(1, 2)).min() > 1e-6   # every earlier input does enter
assert error < 1e-10, "CEMAttention's Jacobian disagrees with the masked SymPy derivative"

# %% [markdown]
# ## 8. RoPE keeps the gradient form
#
# Everything above runs with RoPE off (`rope=False`); `cem_core` turns it on by default for
# attention. RoPE rotates each head's query by $R_i$, a rotation by angles proportional to the
# position $i$, and each key by $R_j$: $s_{ij} = (R_i W_Q x)^\top (R_j W_K c_j)$. The rotations
# depend on **positions, not on $x$**, and token $i$ stays at position $i$ while it descends. So the
# score is still bilinear in $x$ and $c_j$, $s_{ij} = x^\top (R_i W_Q)^\top (R_j W_K)\, c_j$, the energy
# is the same log-sum-exp of linear functions of $x$, and section 2 applies with the query projection
# $R_i W_Q$ and the key projection $R_j W_K$:
#
# $$-\nabla_x E = W_Q^\top R_i^\top \sum_{j \le i} a_j\, R_j W_K c_j .$$
#
# The values are the **rotated** keys (unlike Llama, whose values are not rotated), and the sum is
# rotated back by $R_i^\top = R_i^{-1}$ before the tied readout $W_Q^\top$. With $d_h = 2$ a rotation has
# one angle, $\theta_i = i$ (the base does not enter at $d_h = 2$); for larger $d_h$ it turns each pair
# of coordinates $(m, m + d_h/2)$ by $\theta_{i,m} = i\,\mathrm{base}^{-2m/d_h}$ (Llama's rotate-half).

# %%
def rotation(angles) -> sp.Matrix:
    """R: turns each coordinate pair (m, m + d_h/2) by angles[m] (rotate-half convention)."""
    half = len(angles)
    R = sp.zeros(2 * half, 2 * half)
    for k, theta in enumerate(angles):
        R[k, k], R[k, k + half] = sp.cos(theta), -sp.sin(theta)
        R[k + half, k], R[k + half, k + half] = sp.sin(theta), sp.cos(theta)
    return R


theta_i = sp.symbols(f"theta_i0:{d_h // 2}", real=True)    # the query's angles (position i)
theta = [sp.symbols(f"theta_{j + 1}_0:{d_h // 2}", real=True) for j in range(n_ctx)]  # the keys' angles
R_i, R_js = rotation(theta_i), [rotation(angles) for angles in theta]
rope_scores = [((R_i * W_Q * x).T * (R_j * W_K * c_j))[0] for R_j, c_j in zip(R_js, c)]
E_rope = -sp.log(sum(sp.exp(beta * s_j) for s_j in rope_scores)) / beta
grad_rope = sp.Matrix([sp.diff(E_rope, x_m) for x_m in x])
a_rope = [sp.exp(beta * s_j) / sum(sp.exp(beta * s_k) for s_k in rope_scores) for s_j in rope_scores]
claim = W_Q.T * R_i.T * sum((a_j * R_j * W_K * c_j for a_j, R_j, c_j in zip(a_rope, R_js, c)), sp.zeros(d_h, 1))
assert sp.simplify(-grad_rope - claim) == sp.zeros(d, 1)
proved(r"-\nabla_x E = W_Q^\top R_i^\top \sum_{j \le i} a_j\, R_j W_K c_j")
assert sp.simplify(R_i.T * R_js[0] - rotation([b - a for a, b in zip(theta_i, theta[0])])) == sp.zeros(d_h, d_h)
proved(r"R_i^\top R_j = R(\theta_j - \theta_i) \quad \text{(the score depends on the relative position only)}")

# %% [markdown]
# The proof never used that $R_i$ and $R_j$ are rotations, only that they are fixed matrices; that
# they are rotations gives $R_i^\top R_j = R_{j-i}$ (relative positions) and $R_i^\top = R_i^{-1}$ (the
# readout "rotates back"). Now the numbers: the multi-head energy of section 7 with the rotations
# inserted, at the angles $\theta_{i,m} = i\,\mathrm{base}^{-2m/d_h}$ (positions counted from 0, as in
# `cem_core`), against a `CEMAttention` with `rope=True` and the same weights.
# **Tolerance: $10^{-10}$ relative, float64.**

# %%
query_angles = sp.symbols(f"phi_0:{d_h // 2}", real=True)
key_angles = [sp.symbols(f"phi_{j + 1}_0:{d_h // 2}", real=True) for j in range(n_ctx)]
E_rope_heads = multi_head_energy(rotation(query_angles), [rotation(angles) for angles in key_angles])
rope_update_fn = sp.lambdify([*symbols, *query_angles, *[a for angles in key_angles for a in angles]],
                             -sp.Matrix([sp.diff(E_rope_heads, x_m) for x_m in xs]))
frequencies = rope_base ** (-2 * np.arange(d_h // 2) / d_h)
angles = np.arange(n_ctx)[:, None] * frequencies          # theta_{t,m} = t base^(-2m/d_h): (n, d_h/2)
rope_layer = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=D, n_heads=n_heads, T=1, rope=True,
                                                            rope_base=rope_base)).double()
rope_layer.load_state_dict(layer.state_dict())             # the same W_Q, W_K and norm
symbolic_rope = np.stack([rope_update_fn(*arguments(t), *angles[t], *angles.ravel()).ravel() for t in range(n_ctx)])

# %% tags=["compare-rope"]
fast_rope = (rope_layer(h) - h)[0].detach().numpy()
error = np.abs(fast_rope - symbolic_rope).max() / np.abs(symbolic_rope).max()
report(f"`CEMAttention` with RoPE against the SymPy $-\\nabla E$ with rotations: largest relative difference "
       f"{error:.1e}, tolerance 1e-10. RoPE changed the update by up to {np.abs(fast_rope - fast).max():.2f}.")
assert error < 1e-10, "CEMAttention with RoPE disagrees with the SymPy gradient"

# %% [markdown]
# ## 9. A worked example: width 2, one head, three tokens
#
# Everything above holds for any sizes. Here is one step on numbers small enough to check by hand:
# width $d = 2$, one head of width $d_h = 2$ (so $\beta = 1/\sqrt{2}$), a history of three tokens, and
# the last one, $i = 3$, taking its step from $x = x^{(0)} = c_3$, with
#
# $$W_Q = \begin{bmatrix}1 & 0\\ 0 & 2\end{bmatrix}, \quad W_K = \begin{bmatrix}1 & 1\\ 0 & 1\end{bmatrix},
#   \quad c_1 = \begin{bmatrix}1\\ 1\end{bmatrix}, \quad c_2 = \begin{bmatrix}1\\ -1\end{bmatrix},
#   \quad c_3 = \begin{bmatrix}-1\\ 1\end{bmatrix}.$$
#
# Each $c_j$ has root mean square 1, so RMSNorm leaves it as it is: a layer fed $h_j = c_j$ works on
# exactly these numbers. In exact arithmetic, the keys, the query, the scores, the weights and the update:

# %%
Wq = sp.Matrix([[1, 0], [0, 2]])                            # W_Q (d_h x d)
Wk = sp.Matrix([[1, 1], [0, 1]])                            # W_K (d_h x d), which is also W_V
hist = [sp.Matrix([1, 1]), sp.Matrix([1, -1]), sp.Matrix([-1, 1])]   # c_1, c_2, c_3
x_i = hist[-1]                                              # x = x^(0) = c_3
beta_ex = 1 / sp.sqrt(2)                                    # beta = 1/sqrt(d_h)
kappa = [Wk * c_j for c_j in hist]                          # kappa_j = W_K c_j: the keys, also the values
q_i = Wq * x_i                                              # q = W_Q x: the query
s_ex = [(q_i.T * k_j)[0] for k_j in kappa]                  # s_j = q^T kappa_j: the scores
a_ex = [sp.exp(beta_ex * s_j) / sum(sp.exp(beta_ex * s_k) for s_k in s_ex) for s_j in s_ex]  # a_j = softmax_j(beta s_j)
o_ex = sum((a_j * k_j for a_j, k_j in zip(a_ex, kappa)), sp.zeros(2, 1))  # o = sum_j a_j kappa_j: the head output
u_ex = Wq.T * o_ex                                          # u = W_Q^T o: the update, W_O = W_Q^T
show(r"\begin{bmatrix}\kappa_1 & \kappa_2 & \kappa_3\end{bmatrix} = W_K \begin{bmatrix}c_1 & c_2 & c_3\end{bmatrix}",
     sp.Matrix.hstack(*kappa))
show(r"q = W_Q x", q_i)
show(r"\begin{bmatrix}s_1 & s_2 & s_3\end{bmatrix} = q^\top \begin{bmatrix}\kappa_1 & \kappa_2 & \kappa_3\end{bmatrix}",
     sp.Matrix([s_ex]))
show(r"\begin{bmatrix}a_1 & a_2 & a_3\end{bmatrix} = \operatorname{softmax}(\beta s) = "
     r"\frac{\begin{bmatrix}e^{\beta s_1} & e^{\beta s_2} & e^{\beta s_3}\end{bmatrix}}{\sum_j e^{\beta s_j}}",
     sp.Matrix([a_ex]).evalf(3))
show(r"o = \sum_j a_j \kappa_j", o_ex.evalf(3))
show(r"u = W_Q^\top o", u_ex.evalf(3))

# %% [markdown]
# And this $u$ is the gradient step: SymPy differentiates the energy of this example and evaluates
# $-\nabla_x E$ at $x = c_3$:

# %%
x2 = vector("x", 2)
E_ex = -sp.log(sum(sp.exp(beta_ex * ((Wq * x2).T * k_j)[0]) for k_j in kappa)) / beta_ex  # E(x | c_1, c_2, c_3)
grad_ex = sp.Matrix([sp.diff(E_ex, x_m) for x_m in x2]).xreplace(dict(zip(x2, x_i)))     # grad_x E at x = c_3
assert sp.simplify(u_ex + grad_ex) == sp.zeros(2, 1)
proved(r"u = -\nabla_x E(x \mid c_1, c_2, c_3)\big|_{x = c_3}")

# %% [markdown]
# The picture draws the same numbers, computed again in NumPy by `cem_core.ui.figdata.worked_example`
# (and drawn by `cem_core.ui.energy_plots.mpl_worked_example`):

# %%
example = figdata.worked_example(np.array(Wq, dtype=float), np.array(Wk, dtype=float),
                                 np.array(sp.Matrix.hstack(*hist).T, dtype=float))
u_hand = np.array(u_ex.evalf(), dtype=float).ravel()       # u, the hand computation, in float64
a_hand = np.array([float(a_j) for a_j in a_ex])            # a_j, the hand computation, in float64
assert np.allclose(example["update"], u_hand, rtol=1e-12, atol=0) and np.allclose(example["weights"], a_hand)
show_figure(energy_plots.mpl_worked_example(example))

# %% [markdown]
# **Reading the picture.** Left, in the head's space: the query $q = W_Q x = (-1, 2)$ and the three keys.
# $\kappa_3$ points most along $q$, so its score is the largest and it gets most of the weight
# ($a_3 \approx 0.77$); $\kappa_2$ points away and gets almost none. Right, in the residual plane: had
# all the weight gone to key $j$, the step would have landed on $x + W_Q^\top \kappa_j$ (a blue point).
# The weights are positive and sum to 1, so $x + u$ is their weighted average: it lands inside the
# triangle of the blue points, nearest the heaviest. With $\eta = 1$ and $P = I$ this one step is exactly
# what the attention layer adds to token 3's residual stream.
#
# The app's energy page draws the same picture for a random layer of the same sizes, on top of the
# energy's contours (it calls the blue points *key tips*):
# [the energy page at width 2, one head, three tokens, $T = 1$, $\eta = 1$](http://localhost:8501/?layer=attention&p_scale=0.3&heads=1&width=2&seq_len=3&seed=0&rope=false&token=255&heat_head=0&T=1&eta=1.0&anchor=0.0&diagonal=none&preconditioner=none&rank=2
# "needs the app: run make app first").
# Start the app with `make app` (it serves [localhost:8501](http://localhost:8501/
# "needs the app: run make app first")).
#
# **Against `CEMAttention`.** The same weights in a layer ($T = 1$, $\eta = 1$, $P = I$, RoPE off), fed
# $h_j = c_j$: what it adds to token 3 must be $u$, and its attention weights $a_{3j}$ must be the $a_j$
# above. **Tolerance: $10^{-12}$ relative, float64.**

# %%
small = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=2, n_heads=1, T=1, rope=False)).double()
with torch.no_grad():
    small.q_proj.weight.copy_(torch.tensor(np.array(Wq, dtype=float)))   # W_Q
    small.k_proj.weight.copy_(torch.tensor(np.array(Wk, dtype=float)))   # W_K
    small.norm.weight.fill_(math.sqrt(1 + small.config.norm_eps))        # undoes RMSNorm's eps: Norm(c_j) = c_j
assert (small.config.T, small.config.eta, small.config.preconditioner) == (1, 1.0, "none")  # one step, eta = 1, P = I
h_ex = torch.tensor(example["history"])[None]              # h_j = c_j: (1, 3, 2)

# %% tags=["compare-worked-example"]
u_layer = (small(h_ex) - h_ex)[0, -1].detach().numpy()     # what the layer adds to token 3
a_layer = small.trace(h_ex).weights[0, 0, 0, -1].numpy()   # a_3j: step 1, batch 0, head 0, token 3
errors = {"update": np.abs(u_layer - u_hand).max() / np.abs(u_hand).max(), "weights": np.abs(a_layer - a_hand).max()}
report(f"`CEMAttention` against the hand computation: largest relative difference {errors['update']:.1e} for the "
       f"update, largest difference {errors['weights']:.1e} for the weights; tolerance 1e-12.")
assert max(errors.values()) < 1e-12, "CEMAttention disagrees with the worked example"

# %% [markdown]
# ## 10. Explore: more steps
#
# This notebook's layer takes **one** step; a CEM layer can take $T$ of them (notebook 03 derives the
# options). The explorer below runs a random attention layer with the energy page's defaults (width 8,
# two heads, eight tokens), starting at $T = 4$, $\eta = 1$. Left: every token's energy at each step.
# Middle: the last token's energy on the plane of its first two steps, its path, and its key tips
# $x^{(0)} + \eta\, W_{Q,k}^\top W_{K,k} c_j$ (the blue points of section 9, one set per head). Right: the
# attention weights $a_{ij}$ of head 0 at the last step.
#
# What to try, and what to look for:
#
# - **$T = 1$** is this notebook's layer: the path is a single step.
# - **Raise $T$ to 16** and watch the energy keep falling at every step while the attention sharpens
#   (the rows of the heatmap concentrate on fewer keys). The energy is concave, so a step of any size
#   $\eta > 0$ lowers it; and it has no minimum, so the path never stops: it runs off.
# - **Set the anchor $\lambda$ to 1** (our extension, $+\frac{\lambda}{2}|x - x^{(0)}|^2$): now the energy
#   has a minimum, and the path stops on it.
# - **Change the seed** for other random weights, and $\eta$ for longer or shorter steps.
#
# Under the figure, a link opens the explorer's current state on the app's energy page (start the app
# with `make app`), for example [$T = 16$ with the anchor $\lambda = 1$](http://localhost:8501/?layer=attention&p_scale=0.3&heads=2&width=8&seq_len=8&seed=0&rope=false&token=255&heat_head=0&T=16&eta=1.0&anchor=1.0&diagonal=none&preconditioner=none&rank=2
# "needs the app: run make app first");
# the app also turns on RoPE (section 8), as in
# [one step with RoPE](http://localhost:8501/?layer=attention&p_scale=0.3&heads=2&width=8&seq_len=8&seed=0&rope=true&token=255&heat_head=0&T=1&eta=1.0&anchor=0.0&diagonal=none&preconditioner=none&rank=2
# "needs the app: run make app first").

# %%
EnergyExplorer(controls=("T", "eta", "anchor", "seed"), T=4)

# %% [markdown]
# ## 11. Where this comes from: Hopfield networks to attention to CEM
#
# **Classical Hopfield networks** (Hopfield 1982). Binary states $\sigma \in \{-1, +1\}^N$, symmetric
# weights $W$ (Hebbian, $W = \sum_\mu \xi_\mu \xi_\mu^\top$ with zero diagonal) and the energy
# $E = -\frac12 \sigma^\top W \sigma$. Updating one unit at a time, $\sigma_n \leftarrow \mathrm{sign}((W\sigma)_n)$,
# never raises $E$, so the state falls into a local minimum, ideally a stored pattern $\xi_\mu$. About
# $0.14\,N$ random patterns can be stored (Amit, Gutfreund and Sompolinsky computed $0.138\,N$ in 1985).
#
# **Dense associative memories** (Krotov and Hopfield 2016). $E = -\sum_\mu F(\xi_\mu^\top \sigma)$ with a
# fast-growing $F$: $F(z) = z^n$ stores of order $N^{n-1}$ patterns, and $F = \exp$ (Demircigil et al. 2017)
# a number exponential in $N$.
#
# **Modern Hopfield networks** (Ramsauer et al. 2020). Continuous states $\xi \in \mathbb{R}^d$, stored
# patterns $X = [x_1 \dots x_N]$ and
# $E(\xi) = -\frac{1}{\beta}\log\sum_j e^{\beta x_j^\top \xi} + \frac12 \xi^\top \xi + \text{const}$. Its update
# $\xi^{new} = X \operatorname{softmax}(\beta X^\top \xi)$ lowers $E$; since
# $\nabla E = \xi - X\operatorname{softmax}(\beta X^\top \xi)$, it is one gradient step with $\eta = 1$. With
# projections for the state and the patterns it is an attention head, the point of their title.
#
# **The Energy Transformer** (Hoover et al. 2023). One energy for a whole block: a multi-head attention
# energy, a log-sum-exp of query–key scores of each token against all the others (not causal), plus a
# Hopfield-network (dense associative memory) energy on each token. All tokens descend it together, for
# several steps with the same weights, and the attention update uses only query and key weights.
#
# **What CEM adds** (`docs/paper-notes.md#what-the-paper-reports`). Each token has its **own, conditional
# energy** $E(x \mid c_{1:i})$: it moves only $x$, the history $c_1..c_i$ stays fixed, and no token's energy
# involves a later token, so the layer is causal and fits autoregressive language models. The tying
# $W_V = W_K$, $W_O = W_Q^\top$ falls out of one step (sections 2 and 3); an element-wise energy gives the gated
# MLP (notebook 02); and the paper adds D+LR interactions, learned preconditioners and $T$ recursive steps
# inside one layer (notebook 03).
#
# **The check.** With $W_Q = W_K = I$ (one head, $d_h = d$, so $\beta = 1/\sqrt{d}$) the last token's history is
# every pattern, and what one CEM step adds, $x^{(1)} - x^{(0)}$, must be the Hopfield update $\xi^{new}$ with
# $X = [c_1 \dots c_N]$ and $\xi = x^{(0)} = c_N$; each earlier token $i$ retrieves from $c_1..c_i$ only. The
# $\frac12 \xi^\top \xi$ term is the difference: a Hopfield step *replaces* $\xi$ by $\xi^{new}$, a CEM step *adds*
# $\xi^{new}$ to $x^{(0)}$. **Tolerance: $10^{-12}$ relative, float64.**

# %%
d_hop, n_patterns = 4, 5                                   # pattern width d (one head, d_h = d) and N
hop_layer = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=d_hop, n_heads=1, T=1, rope=False)).double()
with torch.no_grad():
    hop_layer.q_proj.weight.copy_(torch.eye(d_hop))         # W_Q = I
    hop_layer.k_proj.weight.copy_(torch.eye(d_hop))         # W_K = W_V = I
h_hop = torch.randn(1, n_patterns, d_hop, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
patterns = hop_layer.norm(h_hop)[0].detach().numpy().T     # X = [c_1 .. c_N], (d, N)
beta_hop = hop_layer.scale                                 # beta = 1/sqrt(d_h)


def hopfield_update(xi: np.ndarray, X: np.ndarray) -> np.ndarray:
    """xi_new = X softmax(beta X^T xi), the modern Hopfield update."""
    scores = beta_hop * X.T @ xi
    weights = np.exp(scores - scores.max())
    return X @ (weights / weights.sum())


retrieved = np.stack([hopfield_update(patterns[:, i], patterns[:, :i + 1]) for i in range(n_patterns)])
cem_update = (hop_layer(h_hop) - h_hop)[0].detach().numpy()   # x^(1) - x^(0), every token
xi = torch.tensor(patterns[:, -1], requires_grad=True)
X_hop = torch.from_numpy(patterns)
E_hopfield = -torch.logsumexp(beta_hop * X_hop.T @ xi, 0) / beta_hop + xi @ xi / 2   # Ramsauer's E, less constants
(grad_hopfield,) = torch.autograd.grad(E_hopfield, xi)
descended = (xi - grad_hopfield).detach().numpy()         # xi - grad E: one gradient step, eta = 1
gaps = {"CEM step": np.abs(cem_update - retrieved).max() / np.abs(retrieved).max(),
        "gradient step": np.abs(descended - retrieved[-1]).max() / np.abs(retrieved[-1]).max()}
report(f"One CEM step ($W_Q = W_K = I$) against the Hopfield update $X\\operatorname{{softmax}}(\\beta X^\\top \\xi)$, "
       f"every token: {gaps['CEM step']:.1e}; $\\xi - \\nabla E$ on Ramsauer's energy against it: "
       f"{gaps['gradient step']:.1e} (tolerance 1e-12 relative).")
assert max(gaps.values()) < 1e-12, "one CEM step is not the modern Hopfield update"

# %% [markdown]
# **References.** J. J. Hopfield, *Neural networks and physical systems with emergent collective
# computational abilities*, PNAS 79 (1982). D. J. Amit, H. Gutfreund, H. Sompolinsky, *Storing infinite
# numbers of patterns in a spin-glass model of neural networks*, Phys. Rev. Lett. 55 (1985). D. Krotov,
# J. J. Hopfield, *Dense associative memory for pattern recognition*, NeurIPS 2016, arXiv 1606.01164.
# M. Demircigil, J. Heusel, M. Löwe, S. Upgang, F. Vermet, *On a model of associative memory with huge
# storage capacity*, J. Stat. Phys. (2017), arXiv 1702.01929. H. Ramsauer et al., *Hopfield Networks is All
# You Need*, ICLR 2021, arXiv 2008.02217 (2020). B. Hoover et al., *Energy Transformer*, NeurIPS 2023,
# arXiv 2302.07253. J. Xu et al., *Revisiting Transformer Layer Parameterization Through Causal Energy
# Minimization*, arXiv 2605.07588 (2026).

# %% [markdown]
# ## Exercises
#
# ### Exercise 1: the first token
#
# **What is the update of the first token ($i = 1$, a single history entry $c_1$)? Does it
# depend on $x$?** Write your answer as a SymPy expression in `W_Q`, `W_K` and `c[0]`, then run
# the check, which applies the causal mask of section 5 to token 1's update.

# %% tags=["exercise-first-token"]
answer = None                                               # your answer here


# %% tags=["check-first-token"]
def check(answer):
    first_update = update_1.xreplace(causal)                # token 1's masked update (section 5)
    assert sp.simplify(first_update - answer) == sp.zeros(d, 1), "not the gradient step of token 1"
    assert all(sp.diff(answer, x_m) == sp.zeros(d, 1) for x_m in x), "the answer still depends on x"


check_answer(answer, check, "first-token",
             "A single key gets weight $a_{11} = 1$, so the update $W_Q^\\top W_K c_1$ does not depend on $x$.")

# %% [markdown]
# ### Exercise 2: zero temperature
#
# Back to the worked example of section 9. **What update $u$ does the step give in the limit
# $\beta \to \infty$** (temperature $\tau = 1/\beta \to 0$)? Write it as a vector, in `Wq`, `Wk` and
# `hist` (a SymPy matrix) or as numbers, then run the check, which recomputes the step at $\beta = 1000$.

# %% tags=["exercise-zero-temperature"]
answer = None                                               # your answer here


# %% tags=["check-zero-temperature"]
def check(answer):
    u = np.asarray(answer, dtype=float).ravel()
    assert u.shape == (2,), "the update is a vector of width 2"
    cold = figdata.worked_example(np.array(Wq, dtype=float), np.array(Wk, dtype=float), example["history"], beta=1e3)
    assert np.allclose(u, cold["update"], rtol=0, atol=1e-9), "not the step as beta -> infinity"


check_answer(answer, check, "zero-temperature",
             "As $\\beta \\to \\infty$ the softmax puts all the weight on the highest score, $s_3 = 2$, so the "
             "step adds $W_Q^\\top W_K c_3 = (0, 2)$, the readout of that one key: hard attention (and the energy "
             "tends to $-\\max_j s_j$). As $\\beta \\to 0$ the weights would be uniform instead.")

# %% [markdown]
# **Takeaway.** One gradient step ($\eta = 1$, $P = I$) on
# $-\sum_k \frac{1}{\beta}\log\sum_{j\le i} e^{\beta (W_{Q,k}x)^\top W_{K,k} c_j}$
# is causal multi-head attention with $W_V = W_K$ and $W_O = W_Q^\top$: $2d^2$ projection
# parameters instead of $4d^2$. RoPE keeps that form, with rotated keys as values and the output
# rotated back. Notebook 02 does the same for the gated MLP.
