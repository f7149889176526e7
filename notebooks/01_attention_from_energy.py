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
# # 01 · Attention from an energy
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
# 2. show that its negative gradient is the softmax-weighted keys read out by $W_Q^\top$;
# 3. explain why the algebra ties the values to the keys ($W_V = W_K$) and the output to the
#    queries ($W_O = W_Q^\top$);
# 4. say where the temperature, the head dimension and the causal mask enter, and why several
#    heads are a sum of energies;
# 5. turn a SymPy gradient into a numeric function (`lambdify`) and test a fast layer with it.

# %% tags=["parameters"]
n_ctx = 3      # history length i: the token we differentiate sees c_1..c_i
d = 3          # residual width of the symbolic single-head derivation
d_h = 2        # head width (d_h < d, as in a real layer)
n_heads = 2    # heads of the multi-head check against CEMAttention (width n_heads * d_h)
seed = 0

# %%
import inspect
import math

import nbhelpers
import numpy as np
import sympy as sp
import torch
from nbhelpers import matrix, show, vector

import cem_core

# %% [markdown]
# ## 1. Why explicit entries, not `MatrixSymbol`
#
# The natural way to write $x^\top W_Q^\top W_K c_j$ in SymPy is with `MatrixSymbol`. But SymPy
# 1.14 **silently returns 0** when it differentiates a log-sum-exp of `MatrixSymbol` expressions
# (`docs/design.md#71-sympy-returns-0-for-matrixsymbol-gradients`). Here is the pitfall, on exactly our energy:

# %%
X = sp.MatrixSymbol("x", d, 1)
C = sp.MatrixSymbol("C", d, n_ctx)                         # columns c_1..c_i
WQ, WK = sp.MatrixSymbol("W_Q", d_h, d), sp.MatrixSymbol("W_K", d_h, d)
S = (WQ * X).T * (WK * C)                                  # the 1 x i row of scores s_j
naive = -sp.log(sum(sp.exp(S[0, j]) for j in range(n_ctx)))
show(r"\nabla_x E \text{ (MatrixSymbol)}", sp.diff(naive, X))

# %% [markdown]
# The energy plainly depends on $x$, so that 0 is wrong. Everything below is therefore built from
# **explicit-entry matrices** (`Matrix(symbols("x_0:3"))`), which SymPy differentiates entry by
# entry, correctly. And a bare 0 is never trusted: every derivation ends with a numeric check
# against code we did not derive here. The two helpers (in `nbhelpers.py`, shared by the
# notebooks) are short:

# %%
print(inspect.getsource(nbhelpers.vector) + "\n" + inspect.getsource(nbhelpers.matrix))

# %% [markdown]
# ## 2. The causal interaction energy
#
# Token $i$ holds an optimization variable $x$ (it starts at $x^{(0)} = \mathrm{Norm}(h_i)$) and
# sees the fixed history $c_j = \mathrm{Norm}(h_j)$, $j \le i$. With one head, query projection
# $W_Q$ and key projection $W_K$ (both $d_h \times d$), the score of $x$ against $c_j$ and the
# energy are

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
# ## 3. The gradient is attention
#
# Differentiate entry by entry. The chain rule brings down $\beta\,\partial s_j/\partial x$ and
# divides by the sum of exponentials, which is exactly a softmax. So we claim
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
assert any(g != 0 for g in grad)                           # a real gradient, not the MatrixSymbol 0
assert sp.simplify(-grad - tied) == sp.zeros(d, 1)
print("-grad E == W_Q^T sum_j softmax_j(beta s_j) W_K c_j: proved for every entry")

# %% [markdown]
# To read the derived gradient, name the pieces: $e_j = e^{\beta s_j}$ and the key
# $\kappa_j = W_K c_j$. The first entry of $-\nabla_x E$, exactly as SymPy derived it, is a
# softmax-weighted average of the keys, read out by the first column of $W_Q$ (the first row of $W_Q^\top$):

# %%
exps = {sp.exp(beta * score(W_Q, W_K, x, c_j)): sp.Symbol(f"e_{j + 1}") for j, c_j in enumerate(c)}
keys = {(W_K * c_j)[r]: sp.Symbol(f"kappa_{j + 1}{r}") for j, c_j in enumerate(c) for r in range(d_h)}
show(r"-\frac{\partial E}{\partial x_0}", sp.together((-grad[0]).xreplace(exps).xreplace(keys)))

# %% [markdown]
# ## 4. Why values must equal keys and the output must be $W_Q^\top$
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
print("untied - (-grad E) == (W_O W_V - W_Q^T W_K) sum_j a_j c_j: proved")

# %% [markdown]
# As the history varies, $\sum_j a_j c_j$ reaches every direction of $\mathbb{R}^d$, so a head is a
# gradient step on this energy exactly when $W_O W_V = W_Q^\top W_K$. The paper's tying
# $W_V = W_K$, $W_O = W_Q^\top$ satisfies it with no redundant parameters; any other solution is
# $W_V = M W_K$, $W_O = W_Q^\top M^{-1}$ for an invertible $d_h \times d_h$ matrix $M$, a mere change
# of basis inside the head:

# %%
M = matrix("m", d_h, d_h)
assert sp.simplify(W_Q.T * M.inv() * (M * W_K) - W_Q.T * W_K) == sp.zeros(d, d)
print("W_Q^T M^-1 M W_K == W_Q^T W_K: the tie holds up to a change of basis")

# %% [markdown]
# A second way to see it: a gradient field has a **symmetric Jacobian** (the Hessian of the energy).
# Evaluated at random numbers, the tied update's Jacobian is symmetric and a generic untied
# head's is not, so no energy at all has the untied head as its gradient step.

# %%
rng = np.random.default_rng(seed)
numbers = {sym: sp.Float(rng.normal()) for sym in (untied.free_symbols | tied.free_symbols) - {beta}}
numbers[beta] = 1 / sp.sqrt(d_h)


def jacobian_asymmetry(update) -> float:
    """max |J - J^T| of the update's Jacobian in x, at the random point `numbers`."""
    weights_fixed = update.xreplace({sym: v for sym, v in numbers.items() if sym not in x})
    J = np.array(weights_fixed.jacobian(x).xreplace(numbers), dtype=float)
    return float(np.abs(J - J.T).max())


asymmetry = {"tied": jacobian_asymmetry(tied), "untied": jacobian_asymmetry(untied)}
print(", ".join(f"{name}: max |J - J^T| = {value:.1e}" for name, value in asymmetry.items()))
assert asymmetry["tied"] < 1e-12 and asymmetry["untied"] > 1e-3

# %% [markdown]
# ## 5. Temperature and head dimension
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
# ## 6. The causal mask is the range of the sum
#
# Token $i$'s energy sums over $j \le i$ only, so it does not depend on later tokens at all.
# Attention code writes the same thing as a mask $m_{ij} = -\infty$ for $j > i$ added to the
# scores, because $e^{-\infty} = 0$ removes those terms from the sum:

# %%
E_first = head_energy(W_Q, W_K, x, c[:1])                   # token 1 sees c_1 only
assert sp.exp(-sp.oo) == 0
assert all(sp.diff(E_first, entry) == 0 for c_j in c[1:] for entry in c_j)
print("dE_1/dc_j == 0 for every j > 1: the future never enters token 1's energy")

# %% [markdown]
# ## 7. Several heads are a sum of energies
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
print("W_Q^T [o_1; ...; o_H] == sum_k W_Q,k^T o_k: concatenate heads, then one readout")

# %% [markdown]
# ## 8. From SymPy to numbers: `lambdify`, then compare with `CEMAttention`
#
# Build the multi-head energy of every token $i = 1..n$ (token $i$ sees $c_1..c_i$), take its
# gradient symbolically, and `lambdify` it. Then give a `CEMAttention` layer (T = 1, RoPE off)
# random weights and compare. The layer returns $h + (x^{(1)} - x^{(0)})$ with
# $x^{(0)} = c = \mathrm{Norm}(h)$, so `layer(h) - h` must equal $-\nabla E$ evaluated at
# $x = \mathrm{Norm}(h)$ with history $c = \mathrm{Norm}(h)$. **Tolerance: $10^{-10}$ relative, in float64.**

# %%
xs = vector("x", D)
cs = [vector(f"c{j + 1}", D) for j in range(n_ctx)]
W_Ks = [matrix(f"K{k}", d_h, D) for k in range(n_heads)]


def multi_head_energy(history):
    return sum(head_energy(W_Qs[k], W_Ks[k], xs, history) for k in range(n_heads))  # E = sum_k E_k


symbols = [beta, *xs, *[e for c_j in cs for e in c_j], *[e for W in W_Qs + W_Ks for e in W]]
neg_grads = [sp.lambdify(symbols, -sp.Matrix([sp.diff(multi_head_energy(cs[:t + 1]), x_m) for x_m in xs]))
             for t in range(n_ctx)]                        # -grad_x E_t, token t sees c_1..c_t

torch.manual_seed(seed)
layer = cem_core.CEMAttention(cem_core.AttentionConfig(d_model=D, n_heads=n_heads, T=1, rope=False)).double()
w_q, w_k = rng.normal(size=(D, D)), rng.normal(size=(D, D))
with torch.no_grad():
    layer.q_proj.weight.copy_(torch.from_numpy(w_q))       # rows k*d_h..(k+1)*d_h-1 are W_Q,k
    layer.k_proj.weight.copy_(torch.from_numpy(w_k))
    layer.norm.weight.uniform_(0.5, 1.5)                   # a non-trivial RMSNorm scale
h = torch.randn(1, n_ctx, D, dtype=torch.float64)
c_num = layer.norm(h)[0].detach().numpy()                  # c_j = Norm(h_j) = x_j^(0)
weights = [*w_q.ravel(), *w_k.ravel()]                      # row-major: head 0's rows first, as in W_Qs


def symbolic_update(t: int) -> np.ndarray:
    return neg_grads[t](1 / math.sqrt(d_h), *c_num[t], *c_num.ravel(), *weights).ravel()


symbolic = np.stack([symbolic_update(t) for t in range(n_ctx)])

# %% tags=["compare-attention"]
fast = (layer(h) - h)[0].detach().numpy()
error = np.abs(fast - symbolic).max() / np.abs(symbolic).max()
print(f"max |layer(h) - h - (-grad E)| / max |grad E| = {error:.1e}")
assert error < 1e-10, "CEMAttention disagrees with the SymPy gradient"

# %% [markdown]
# ## Exercise
#
# **What is the update of the first token ($i = 1$, a single history entry $c_1$)? Does it
# depend on $x$?** Write your answer as a SymPy expression in `W_Q`, `W_K` and `c[0]`, then run
# the check. (The cell holds one answer; change it and watch the check fail.)

# %%
answer = W_Q.T * W_K * c[0]                                 # your answer here

# %%
first_update = -sp.Matrix([sp.diff(E_first, x_m) for x_m in x])
assert sp.simplify(first_update - answer) == sp.zeros(d, 1), "not the gradient step of token 1"
assert all(sp.diff(answer, x_m) == sp.zeros(d, 1) for x_m in x), "the answer still depends on x"
print("Correct: a single key gets weight a_11 = 1, so the update W_Q^T W_K c_1 does not depend on x.")

# %% [markdown]
# **Takeaway.** One gradient step on $-\sum_k \frac{1}{\beta}\log\sum_{j\le i} e^{\beta (W_{Q,k}x)^\top W_{K,k} c_j}$
# is causal multi-head attention with $W_V = W_K$ and $W_O = W_Q^\top$: $2d^2$ projection
# parameters instead of $4d^2$. Notebook 02 does the same for the gated MLP.
