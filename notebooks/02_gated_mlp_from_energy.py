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
# # 02 · The gated MLP from an energy
#
# [Open in Colab](https://colab.research.google.com/github/cem-lab/cem-lab/blob/main/notebooks/02_gated_mlp_from_energy.ipynb)
#
# Notebook 01 found attention as a gradient step on an interaction energy. Here the energy is
# **element-wise**, one term per feature, and one gradient step on it (step size $\eta = 1$,
# preconditioner $P = I$) is a **gated MLP whose down projection is the up projection transposed**
# (arXiv 2605.07588 reports it; the derivation is ours,
# `docs/paper-notes.md#the-gated-mlp-and-its-potential`). We derive the antiderivative $\Phi$ of SiLU
# that the energy needs, prove it by differentiation, and check everything against `cem_core`.
#
# **Learning goals.** After this notebook you can
#
# 1. write the element-wise energy $E(x \mid c) = -\sum_m (Gc)_m\,\Phi\big((Ux)_m\big)$ with $\Phi' = \varphi$;
# 2. derive $\Phi$ for SiLU by integration by parts and a substitution, where SymPy's
#    `integrate` gives up, and prove the result by differentiating it;
# 3. show that $-\nabla_x E = U^\top\big(\varphi(Ux) \odot Gc\big)$, so down $= $ up$^\top$;
# 4. count the parameters: $2\,d\,d_{ff}$ instead of SwiGLU's $3\,d\,d_{ff}$, with the same three matmuls;
# 5. check the derivation against `CEMGatedMLP` and `cem_core.nn.activations.silu_antiderivative`;
# 6. derive the energy's Hessian, show that the energy is **neither convex nor concave** in general,
#    and give a step size $\eta < 2/L$ under which a step is guaranteed to lower it;
# 7. explore the step size, the number of steps and the anchor in an interactive explorer and in the app.

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
d = 3          # residual width
d_ff = 4       # MLP width: rows of U (up_proj) and G (gate_proj)
seed = 0

# %%
import numpy as np
import sympy as sp
import torch
from nbhelpers import check_answer, matrix, numeric, proved, report, show, vector

import cem_core
import cem_core.nn.activations
from cem_core.ui import explore
from cem_core.ui.controls import EnergyControls
from cem_core.ui.widgets import EnergyExplorer

# %% [markdown]
# ## 1. The element-wise energy, for any activation
#
# Token $i$ moves $x$ (from $x^{(0)} = \mathrm{Norm}(h_i)$) while its conditioning
# $c = \mathrm{Norm}(h_i)$ stays fixed. The up projection $U$ ($d_{ff}\times d$) sits inside the
# nonlinearity; the gate $G$ ($d_{ff}\times d$) multiplies from the conditioning:
#
# $$E(x \mid c) = -\sum_{m=1}^{d_{ff}} (Gc)_m\, \Phi\big((Ux)_m\big), \qquad \Phi' = \varphi .$$
#
# To keep the derivation general we let $\Phi$ be *any* function whose derivative SymPy knows to
# be $\varphi$: a `Function` subclass with that `fdiff`.

# %%
phi = sp.Function("phi")


class Phi(sp.Function):
    """An antiderivative of phi: SymPy differentiates Phi(z) to phi(z)."""

    def fdiff(self, argindex=1):
        return phi(self.args[0])                          # Phi' = phi


x, c = vector("x", d), vector("c", d)
U, G = matrix("u", d_ff, d), matrix("g", d_ff, d)


def mlp_energy(x, c, antiderivative):
    """E(x | c) = -sum_m (G c)_m Phi((U x)_m)."""
    z, gate = U * x, G * c
    return -sum(gate[m] * antiderivative(z[m]) for m in range(d_ff))


E = mlp_energy(x, c, Phi)
show(r"E(x \mid c)", E.xreplace({(U * x)[m]: sp.Symbol(f"z_{m}") for m in range(d_ff)}))

# %% [markdown]
# Here $z_m = (Ux)_m$. Differentiating, the chain rule gives
# $\partial E/\partial x = -\sum_m (Gc)_m\,\varphi(z_m)\,U_{m,:}$, that is
#
# $$-\nabla_x E = U^\top\big(\varphi(Ux) \odot Gc\big):$$
#
# a gated MLP, with the activated branch $\varphi(Ux)$, the gate $Gc$, and the readout $U^\top$. A CEM
# layer takes steps $x^{(t+1)} = x^{(t)} - \eta P \nabla_x E(x^{(t)})$; **one step with $\eta = 1$ and
# $P = I$** (`cem_core`'s defaults) adds exactly $x^{(1)} - x^{(0)} = -\nabla_x E(x^{(0)})$, this gated MLP.

# %%
grad = sp.Matrix([sp.diff(E, x_m) for x_m in x])          # grad_x E, entry by entry
gated_mlp = U.T * (U * x).applyfunc(phi).multiply_elementwise(G * c)  # U^T (phi(U x) * G c)
assert any(g != 0 for g in grad)
assert sp.simplify(-grad - gated_mlp) == sp.zeros(d, 1)
proved(r"-\nabla_x E = U^\top\big(\varphi(Ux) \odot Gc\big) \quad \text{for any } \varphi")

# %% [markdown]
# ## 2. Why down = up$^\top$
#
# A general gated MLP reads out with a free down projection $D$ ($d \times d_{ff}$). Its difference
# from the gradient step factors as $(D - U^\top)\big(\varphi(Ux)\odot Gc\big)$, which vanishes for
# every input only when $D = U^\top$: the energy **ties the down projection to the up projection**.

# %%
D = matrix("d", d, d_ff)
untied = D * (U * x).applyfunc(phi).multiply_elementwise(G * c)
assert sp.expand(untied + grad - (D - U.T) * (U * x).applyfunc(phi).multiply_elementwise(G * c)) == sp.zeros(d, 1)
proved(r"D\big(\varphi(Ux) \odot Gc\big) - \big(-\nabla_x E\big) = \big(D - U^\top\big)\big(\varphi(Ux) \odot Gc\big)")

# %% [markdown]
# ## 3. $\Phi$ for SiLU, by substitution
#
# The default activation is SiLU, $\varphi(z) = z\,\sigma(z) = z/(1 + e^{-z})$. The energy needs
# its antiderivative, but **SymPy cannot integrate $z\,\sigma(z)$ directly**: `integrate` returns
# the integral unevaluated.

# %%
z = sp.Symbol("z", real=True)
silu = z / (1 + sp.exp(-z))                               # phi(z) = z sigmoid(z)
show(r"\texttt{integrate}(z\,\sigma(z))", sp.integrate(silu, z))

# %% [markdown]
# So we do it by hand, in two steps SymPy can follow.
#
# **Integration by parts.** $\frac{d}{dz}\log(1 + e^z) = \sigma(z)$, so with $f = z$ and
# $g' = \sigma$:
# $\int z\,\sigma(z)\,dz = z\log(1+e^z) - \int \log(1+e^z)\,dz$.

# %%
softplus = sp.log(1 + sp.exp(z))                          # softplus(z) = log(1 + e^z)
assert sp.simplify(sp.diff(softplus, z) - 1 / (1 + sp.exp(-z))) == 0
proved(r"\frac{d}{dz} \log\left(1 + e^z\right) = \sigma(z)")

# %% [markdown]
# **Substitution** $u = e^z$, $dz = du/u$: $\int \log(1+e^z)\,dz = \int \frac{\log(1+u)}{u}\,du$,
# which SymPy integrates to a dilogarithm, $-\mathrm{Li}_2(-u)$. (It writes $-1$ as the polar
# number $e^{i\pi}$ on the principal branch; we turn that back into $-1$.)

# %%
u = sp.Symbol("u", positive=True)
inner = sp.integrate(sp.log(1 + u) / u, u).replace(sp.exp_polar, sp.exp)
show(r"\int \frac{\log(1+u)}{u}\,du", inner)
Phi_silu = z * softplus - inner.subs(u, sp.exp(z))        # Phi(z) = z softplus(z) + Li2(-e^z)
show(r"\Phi(z)", Phi_silu)

# %% [markdown]
# **Proof by differentiation.** $\frac{d}{dz}\mathrm{Li}_2(-e^z) = \mathrm{Li}_1(-e^z) = -\log(1+e^z)$;
# SymPy applies that with `expand_func`, and the derivative of $\Phi$ is SiLU exactly. The
# constant is fixed by $\Phi(0) = \mathrm{Li}_2(-1) = -\pi^2/12$, which is what `cem_core` uses.

# %%
assert sp.simplify(sp.expand_func(sp.diff(Phi_silu, z)) - silu) == 0
assert sp.simplify(Phi_silu.subs(z, 0) + sp.pi ** 2 / 12) == 0
proved(r"\Phi'(z) = z\,\sigma(z), \qquad \Phi(0) = \mathrm{Li}_2(-1) = -\frac{\pi^2}{12}")

# %% [markdown]
# Torch has no dilogarithm, so `cem_core.nn.activations.silu_antiderivative` evaluates $\Phi$ through a
# stable series and an inversion formula for $z > 0$ (see its docstring). Compare it with the
# SymPy $\Phi$, evaluated in high precision by mpmath, on $z \in [-30, 30]$.
# **Tolerance: $10^{-12}$ relative (absolute below 1), float64.**

# %% tags=["compare-phi"]
grid = np.linspace(-30, 30, 121)
exact = np.array([float(v) for v in map(sp.lambdify(z, Phi_silu, "mpmath"), grid)])
ours = cem_core.nn.activations.silu_antiderivative(torch.from_numpy(grid)).numpy()
error = np.abs(ours - exact).max() / np.maximum(1.0, np.abs(exact)).max()
report(f"`silu_antiderivative` against the SymPy $\\Phi$ on $[-30, 30]$: largest difference relative to "
       f"$\\max(1, |\\Phi|)$ {error:.1e}, tolerance 1e-12.")
assert error < 1e-12, "cem_core.nn.activations.silu_antiderivative disagrees with the SymPy Phi"

# %% [markdown]
# ## 4. The parameter count: two thirds
#
# SwiGLU has three $d \times d_{ff}$ matrices (its `gate_proj`, `up_proj`, `down_proj`); the CEM MLP
# has two ($U$ = `up_proj`, $G$ = `gate_proj`), because the readout is $U^\top$. It still does the
# same three matrix products ($Ux$, $Gc$, $U^\top(\cdot)$): the saving is in parameters, not FLOPs.
# (Hugging Face names the activated branch `gate_proj`; `cem_core.nn.mlp` documents the mapping and
# `cem_core.nn.hf` implements it.)

# %%
d_s, f_s = sp.symbols("d d_ff", positive=True, integer=True)
ratio = (2 * d_s * f_s) / (3 * d_s * f_s)
show(r"\frac{\#\,\text{CEM MLP}}{\#\,\text{SwiGLU}}", ratio)
assert sp.simplify(ratio - sp.Rational(2, 3)) == 0
layers = {"CEM": cem_core.CEMGatedMLP(cem_core.MLPConfig(d_model=d, d_ff=d_ff)),
          "SwiGLU": cem_core.SwiGLU(cem_core.SwiGLUConfig(d_model=d, d_ff=d_ff))}
projections = {name: sum(p.numel() for n, p in module.named_parameters() if n.endswith("proj.weight"))
               for name, module in layers.items()}
report(f"Projection parameters at $d = {d}$, $d_{{ff}} = {d_ff}$: the CEM MLP has {projections['CEM']} "
       f"$= 2\\,d\\,d_{{ff}}$, SwiGLU {projections['SwiGLU']} $= 3\\,d\\,d_{{ff}}$.")
assert projections == {"CEM": 2 * d * d_ff, "SwiGLU": 3 * d * d_ff}

# %% [markdown]
# ## 5. From SymPy to numbers: compare with `CEMGatedMLP`
#
# Substitute SiLU for $\varphi$ (and the SiLU $\Phi$ for $\Phi$), `lambdify`, and compare with a
# `CEMGatedMLP` ($T = 1$, $\eta = 1$, $P = I$) holding random weights. The layer returns $h + (x^{(1)} - x^{(0)})$ with
# $x^{(0)} = c = \mathrm{Norm}(h)$, so `layer(h) - h` must equal $-\nabla E$ at
# $x = c = \mathrm{Norm}(h)$, and `layer.energy(Norm(h), h)` must equal $E$ there.
# **Tolerance: $10^{-10}$ relative, float64.**

# %%
symbols = [*x, *c, *U, *G]
update_fn = sp.lambdify(symbols, (-grad).replace(phi, sp.Lambda(z, silu)))
energy_fn = sp.lambdify(symbols, E.replace(Phi, sp.Lambda(z, Phi_silu)), "mpmath")

rng = np.random.default_rng(seed)
torch.manual_seed(seed)
layer = cem_core.CEMGatedMLP(cem_core.MLPConfig(d_model=d, d_ff=d_ff, T=1)).double()
w_up, w_gate = rng.normal(size=(d_ff, d)), rng.normal(size=(d_ff, d))
with torch.no_grad():
    layer.up_proj.weight.copy_(torch.from_numpy(w_up))      # U
    layer.gate_proj.weight.copy_(torch.from_numpy(w_gate))  # G
    layer.norm.weight.uniform_(0.5, 1.5)
assert (layer.config.T, layer.config.eta, layer.config.preconditioner) == (1, 1.0, "none")  # one step, eta = 1, P = I
h = torch.randn(1, 5, d, dtype=torch.float64)
c_num = layer.norm(h)[0].detach().numpy()                  # c = Norm(h) = x^(0), one row per token
symbolic_update = np.stack([update_fn(*row, *row, *w_up.ravel(), *w_gate.ravel()).ravel() for row in c_num])
symbolic_energy = np.array([float(energy_fn(*row, *row, *w_up.ravel(), *w_gate.ravel())) for row in c_num])

# %% tags=["compare-mlp"]
fast_update = (layer(h) - h)[0].detach().numpy()
fast_energy = layer.energy(layer.norm(h), h)[0].detach().numpy()
errors = {"update": np.abs(fast_update - symbolic_update).max() / np.abs(symbolic_update).max(),
          "energy": np.abs(fast_energy - symbolic_energy).max() / np.abs(symbolic_energy).max()}
report(f"`CEMGatedMLP` against the SymPy derivation: largest relative difference {errors['update']:.1e} for the "
       f"update and {errors['energy']:.1e} for the energy, tolerance 1e-10.")
assert max(errors.values()) < 1e-10, "CEMGatedMLP disagrees with the SymPy derivation"

# %% [markdown]
# ## 6. Curvature: neither convex nor concave, and a safe step size
#
# Differentiate once more. With $z = Ux$, $u_m^\top$ the rows of $U$ and $\varphi'$ the derivative
# of the activation, the Hessian is
#
# $$\nabla_x^2 E = -U^\top \operatorname{diag}\big(Gc \odot \varphi'(Ux)\big)\, U
#   = -\sum_m (Gc)_m\, \varphi'(z_m)\, u_m u_m^\top ,$$
#
# a sum of rank-one terms whose signs are those of $-(Gc)_m \varphi'(z_m)$. SymPy proves it for any $\varphi$:

# %%
hessian = grad.jacobian(x)                                 # grad_x^2 E, entry by entry
dphi = [sp.diff(phi(z), z).subs(z, z_m) for z_m in U * x]  # phi'((U x)_m)
hessian_claim = -U.T * sp.diag(*[g_m * dphi_m for g_m, dphi_m in zip(G * c, dphi)]) * U
assert sp.simplify(hessian - hessian_claim) == sp.zeros(d, d)
proved(r"\nabla_x^2 E = -U^\top \operatorname{diag}\big(Gc \odot \varphi'(Ux)\big)\, U \quad \text{for any } \varphi")

# %% [markdown]
# Neither factor has a fixed sign. The gate $(Gc)_m$ is a linear function of $c$, so it takes both
# signs. And SiLU's derivative $\varphi'(z) = \sigma(z)\big(1 + z(1 - \sigma(z))\big)$ is negative for
# $z$ below about $-1.28$: SiLU is not monotone. So the energy is **neither convex nor concave** in
# general. Even in one dimension with a positive gate, $E(x) = -\Phi(x)$ ($d = d_{ff} = 1$, $U = Gc = 1$)
# has $E''(x) = -\varphi'(x)$, negative at $x = 0$ and positive at $x = -3$:

# %%
sigma = 1 / (1 + sp.exp(-z))
dsilu = sp.diff(silu, z)                                   # phi'(z) for SiLU
assert sp.simplify(dsilu - sigma * (1 + z * (1 - sigma))) == 0
curvature_1d = -dsilu                                      # E''(x) for E(x) = -Phi(x)
show(r"E''(0)", curvature_1d.subs(z, 0))
show(r"E''(-3)", sp.N(curvature_1d.subs(z, -3), 4))
assert curvature_1d.subs(z, 0) < 0 < curvature_1d.subs(z, -3)
report("So $E = -\\Phi$ is concave near $x = 0$ and convex near $x = -3$: **neither convex nor concave**.")

# %% [markdown]
# **A step size that always descends.** $\varphi'$ is bounded: $\varphi'(z) + \varphi'(-z) = 1$ (because
# $\varphi(z) - \varphi(-z) = z$), its largest value $\varphi'_{\max} \approx 1.0998$ sits where
# $\varphi'' = 0$, so its smallest is $1 - \varphi'_{\max} \approx -0.0998$ and $|\varphi'| \le \varphi'_{\max}$.
# Hence for every $x$ and direction $v$,
#
# $$v^\top \nabla^2 E\, v = -\sum_m (Gc)_m \varphi'(z_m) (u_m^\top v)^2
#   \le \varphi'_{\max} \sum_m |(Gc)_m|\,(u_m^\top v)^2, \quad\text{so}\quad
#   \nabla^2 E \preceq L\, I, \quad L = \varphi'_{\max}\, \lambda_{\max}\big(U^\top \operatorname{diag}(|Gc|) U\big),$$
#
# a bound that depends on the token (through $c$) but not on $x$. Along the step, $f(t) = E(x - t g)$ with
# $g = \nabla E(x)$ has $f'(0) = -|g|^2$ and $f''(t) = g^\top \nabla^2 E\, g \le L |g|^2$, so Taylor's theorem gives
#
# $$E(x - \eta g) \le E(x) - \eta\Big(1 - \frac{\eta L}{2}\Big)|g|^2 ,$$
#
# whose right side is below $E(x)$ exactly when $0 < \eta < 2/L$ (and $g \ne 0$): such steps are
# guaranteed to lower the energy. A larger step can overshoot and raise it.

# %%
assert sp.simplify(dsilu + dsilu.subs(z, -z) - 1) == 0    # phi'(z) + phi'(-z) = 1
z_max = sp.nsolve(sp.diff(silu, z, 2), z, 2.4)             # phi''(z) = 0
dphi_max = float(dsilu.subs(z, z_max))
report(f"$\\varphi'$ is largest at $z = {float(z_max):.4f}$: $\\varphi'_{{\\max}} = {dphi_max:.4f}$, and its smallest "
       f"value is $1 - \\varphi'_{{\\max}} = {1 - dphi_max:.4f}$.")
eta_s, L_s, g2 = sp.symbols("eta L |g|^2", positive=True)
bound = -eta_s * g2 + L_s * eta_s ** 2 * g2 / 2            # E(x - eta g) - E(x) <= this
safe = sp.solve(bound < 0, eta_s)                         # the symbol eta is positive
assert safe == (eta_s < 2 / L_s)
proved(r"-\eta\,|g|^2 + \frac{L\,\eta^2}{2}\,|g|^2 < 0 \iff " + sp.latex(safe) + r" \qquad (\eta > 0)")

# %% [markdown]
# Now the numbers, on the `CEMGatedMLP` of section 5: its Hessian from autograd on `layer.energy` (which
# differentiates `cem_core`'s $\Phi$ twice, through its backward $\Phi' = $ SiLU) against the SymPy
# formula, token by token; then one step with $\eta = 1/L$ (the largest $L$ over the tokens) must obey
# the descent bound. **Tolerance: $10^{-10}$ relative for the Hessians, $10^{-12}$ absolute for the bound,
# float64.**

# %%
hessian_fn = sp.lambdify(symbols, hessian_claim.xreplace({dphi_m: dsilu.subs(z, z_m)  # phi' = SiLU'
                                                          for dphi_m, z_m in zip(dphi, U * x)}))
symbolic_hessians = np.stack([hessian_fn(*row, *row, *w_up.ravel(), *w_gate.ravel()) for row in c_num])
gates = c_num @ w_gate.T                                   # G c, one row per token
L = dphi_max * np.array([np.linalg.eigvalsh(w_up.T @ np.diag(np.abs(g)) @ w_up).max() for g in gates])
eta_safe = 1 / L.max()
safe_layer = cem_core.CEMGatedMLP(cem_core.MLPConfig(d_model=d, d_ff=d_ff, T=1, eta=eta_safe)).double()
safe_layer.load_state_dict(layer.state_dict())
x0 = layer.norm(h).detach()                                # x^(0) = c = Norm(h)


def token_energy(t: int):
    """x_t -> E(x_t | c_t) from cem_core, the other tokens held at x^(0)."""
    def energy(x_t):
        x_all = torch.cat((x0[:, :t], x_t[None, None], x0[:, t + 1:]), dim=1)
        return layer.energy(x_all, h)[0, t]
    return energy

# %% tags=["compare-mlp-curvature"]
fast_hessians = np.stack([torch.autograd.functional.hessian(token_energy(t), x0[0, t]).numpy()
                          for t in range(len(c_num))])
error = np.abs(fast_hessians - symbolic_hessians).max() / np.abs(symbolic_hessians).max()
eigenvalues = np.linalg.eigvalsh(symbolic_hessians)        # (tokens, d), ascending
x_grad = x0.clone().requires_grad_(True)
g = torch.autograd.grad(layer.energy(x_grad, h).sum(), x_grad)[0][0].detach().numpy()  # grad E per token
energies = safe_layer.trace(h).energies[:, 0].numpy()      # E(x^(0)), E(x^(1)) with eta = 1/L
descent_bound = energies[0] - eta_safe * (1 - eta_safe * L / 2) * (g ** 2).sum(-1)
both_signs = int(((eigenvalues[:, 0] < 0) & (eigenvalues[:, -1] > 0)).sum())   # tokens at an indefinite Hessian
report(f"Hessians: largest relative difference between autograd on `cem_core`'s energy and the SymPy formula "
       f"{error:.1e}, tolerance 1e-10; {both_signs} of {len(c_num)} tokens have eigenvalues of both signs.\n\n"
       f"One step with $\\eta = 1/L = {eta_safe:.3f}$: $E(x^{{(1)}})$ minus the descent bound, per token: "
       f"{', '.join(f'{v:.4f}' for v in energies[1] - descent_bound)} (each at most 1e-12).")
assert error < 1e-10, "cem_core's MLP energy has a different Hessian from the SymPy derivation"
assert (energies[1] <= descent_bound + 1e-12).all(), "a step with eta < 2/L broke the descent bound"

# %% [markdown]
# With $\eta$ past $2/L$ nothing is guaranteed. Trying $\eta = 0.5, 1, 2, 5, 10$ on the same layer and input,
# the cell below reports the first at which some token's energy rises; the descent bound says it must exceed
# $2/L$ for that token.

# %%
for eta_big in (0.5, 1.0, 2.0, 5.0, 10.0):
    big = cem_core.CEMGatedMLP(cem_core.MLPConfig(d_model=d, d_ff=d_ff, T=1, eta=eta_big)).double()
    big.load_state_dict(layer.state_dict())
    rise = np.diff(big.trace(h).energies[:, 0].numpy(), axis=0)[0]   # E(x^(1)) - E(x^(0)) per token
    if (rise > 0).any():
        t = int(rise.argmax())
        report(f"At $\\eta = {eta_big:g}$ token {t}'s energy rises by {rise[t]:.3f}; its $2/L$ is {2 / L[t]:.3f}, "
               f"below that $\\eta$ as the bound requires.")
        assert eta_big > 2 / L[t]
        break
else:
    report("No token's energy rose for these step sizes.")

# %% [markdown]
# **Bounded below, or not.** SiLU's potential stays within a constant of ReLU's, $\frac12 \max(z, 0)^2$:
# $\Phi(z) + \Phi(-z) = z^2/2 - \pi^2/6$ (the derivative is $\varphi(z) - \varphi(-z) = z$) and $\Phi(z) \to 0$ as
# $z \to -\infty$, so $|\Phi(z) - \frac12 \max(z, 0)^2| < \pi^2/6$ (for GELU's potential the same holds with $1/2$).
# So $E$ stays within $\frac{\pi^2}{6}\sum_m |(Gc)_m|$ of $-\frac12 \sum_m (Gc)_m \max(u_m^\top x, 0)^2$, which at
# $x = t v$, $t \ge 0$, is $-\frac{t^2}{2} S(v)$ with
#
# $$S(v) = \sum_m (Gc)_m \max(u_m^\top v, 0)^2 :$$
#
# **the energy is unbounded below exactly when $S(v) > 0$ for some direction $v$**, and otherwise
# $E \ge -\frac{\pi^2}{6}\sum_m |(Gc)_m|$. A positive gate alone is not enough: with $d = 1$, $U = (1, 2)^\top$ and
# $Gc = (1, -1)$, $E(x) = \Phi(2x) - \Phi(x) = \int_x^{2x} \varphi$ is positive except at its minimum $E(0) = 0$,
# and $S(v) = -3 \max(v, 0)^2 \le 0$. The gates $(-1, 1)$ give $S(1) = 3 > 0$, and $E(x) \to -\infty$ like
# $-\frac32 x^2$. The anchor of section 7 restores a minimum when $\lambda > \max_{|v| = 1} S(v)$, for which
# $\lambda > \lambda_{\max}\big(U^\top \operatorname{diag}(\max(Gc, 0))\, U\big)$ suffices. Checked with `cem_core`'s
# potentials on $x \in [-40, 40]$ (step 0.01). **Tolerance: $10^{-12}$ absolute, float64.**

# %%
assert sp.simplify(silu - silu.subs(z, -z) - z) == 0      # phi(z) - phi(-z) = z
line = torch.arange(-4000, 4001, dtype=torch.float64) / 100   # x on [-40, 40], step 0.01, through 0 exactly
far = torch.linspace(-80, 80, 16001, dtype=torch.float64)  # z = u_m x for u_m up to 2
offsets = {name: float((potential(far) - torch.relu(far) ** 2 / 2).abs().max())
           for name, potential in (("SiLU", cem_core.nn.activations.silu_antiderivative),
                                   ("GELU", cem_core.nn.activations.gelu_antiderivative))}


def energy_1d(gates) -> torch.Tensor:
    """E(x) = -sum_m (G c)_m Phi(u_m x) on `line`, with d = 1, U = (1, 2)^T and SiLU's Phi."""
    potentials = cem_core.nn.activations.silu_antiderivative(line[:, None]
                                                             * torch.tensor([1.0, 2.0], dtype=torch.float64))
    return -(torch.tensor(gates, dtype=torch.float64) * potentials).sum(-1)


def S_1d(gates, v: float) -> float:
    return sum(g_m * max(u_m * v, 0.0) ** 2 for g_m, u_m in zip(gates, (1.0, 2.0)))   # S(v)


bounded, unbounded = energy_1d((1.0, -1.0)), energy_1d((-1.0, 1.0))
x_min, E_min = float(line[bounded.argmin()]), float(bounded.min()) + 0.0   # + 0.0: no -0
far_gap = float(unbounded[-1] + S_1d((-1.0, 1.0), 1.0) / 2 * line[-1] ** 2)   # E(40) + S(1) 40^2 / 2
report(f"$Gc = (1, -1)$: $\\max_v S(v)$ = {max(S_1d((1.0, -1.0), v) for v in (-1.0, 1.0)):g}; the grid's smallest "
       f"$E$ is {E_min:.1e} at $x$ = {x_min:g}. $Gc = (-1, 1)$: $S(1)$ = {S_1d((-1.0, 1.0), 1.0):g}, "
       f"$E(40)$ = {float(unbounded[-1]):.1f}, off $-\\frac32 \\cdot 40^2$ by {far_gap:.2f} (at most $\\pi^2/3$). "
       f"Largest $|\\Phi(z) - \\frac12\\max(z, 0)^2|$: SiLU {offsets['SiLU']:.4f} ($\\pi^2/6$ = {np.pi ** 2 / 6:.4f}), "
       f"GELU {offsets['GELU']:.4f}.")
assert offsets["SiLU"] <= np.pi ** 2 / 6 + 1e-12 and offsets["GELU"] <= 0.5 + 1e-12   # sup, approached as z -> inf
assert max(S_1d((1.0, -1.0), v) for v in (-1.0, 1.0)) <= 0 and S_1d((-1.0, 1.0), 1.0) > 0
assert x_min == 0 and abs(E_min) <= 1e-12 and (bounded >= -1e-12).all()
assert abs(far_gap) <= np.pi ** 2 / 3                       # |E - (-(t^2/2) S)| <= (pi^2/6) sum_m |(G c)_m|

# %% [markdown]
# The explorer's layer of section 7 (seed 0): every token has a direction with $S(v) > 0$ (among the rows $u_m$
# and random directions), so without the anchor its energy is unbounded below; and the bound on
# $\max_{|v|=1} S(v)$ is below 1 for every token, so the anchor $\lambda = 1$ gives each a minimum.

# %%
controls = EnergyControls.from_values(layer="mlp", seed=0)  # the explorer's starting state
explorer_layer = explore.build_layers(controls)[0][1]
h_e = explore.seeded_input(controls)
explorer_c = explorer_layer.norm(h_e)[0].detach().numpy()   # c = Norm(h), one row per token
ups_e = explorer_layer.up_proj.weight.detach().numpy()     # U, (d_ff, d)
gates_e = explorer_c @ explorer_layer.gate_proj.weight.detach().numpy().T   # G c per token
directions = np.vstack([ups_e, np.random.default_rng(seed).normal(size=(2000, ups_e.shape[1]))])
directions /= np.linalg.norm(directions, axis=1, keepdims=True)
S_best = (np.maximum(directions @ ups_e.T, 0) ** 2 @ gates_e.T).max(0)   # the largest S(v) found, per token
S_bound = np.array([np.linalg.eigvalsh(ups_e.T @ np.diag(np.maximum(g_c, 0)) @ ups_e).max() for g_c in gates_e])
report(f"Explorer layer: largest $S(v)$ found per token {', '.join(f'{v:.2f}' for v in S_best)}; bound on "
       f"$\\max_{{|v|=1}} S(v)$ per token {', '.join(f'{v:.2f}' for v in S_bound)}.")
assert (S_best > 0).all() and (S_bound < 1).all()

# %% [markdown]
# ## 7. Explore: the step size, more steps, the anchor
#
# The explorer below runs a random CEM gated MLP with the energy page's sizes (width 8, $d_{ff} = 16$,
# eight tokens), starting at $T = 4$, $\eta = 1$. Left: every token's energy at each step. Middle: the last
# token's energy on the plane of its first two steps, with its path. Right: every token's update norm
# $|x^{(t)} - x^{(t-1)}|$ at each step.
#
# What to try, and what to look for:
#
# - **$T = 1$** is this notebook's layer: one step, $\eta = 1$, $P = I$.
# - **Raise $T$ to 16** and watch every token's energy keep falling while the update norms of most tokens
#   grow instead of shrinking: every token here has a direction with $S(v) > 0$ (section 6), so its energy is
#   unbounded below, and those paths run off.
# - **Set the anchor $\lambda$ to 1** (our extension, $+\frac{\lambda}{2}|x - x^{(0)}|^2$): here $\lambda$ exceeds
#   $\max_{|v|=1} S(v)$, the energy gets a minimum, and the update norms shrink towards zero. **Then to 2**: the
#   steps now overshoot and the energy rises. The anchor adds $\lambda$ to the curvature, so the guarantee of
#   section 6 needs $\eta < 2/(L + \lambda)$, below 1 once $\lambda \ge 2$: $\eta = 1$ is no longer covered.
# - **Change the seed** for other random weights.
#
# The slider stops at $\eta = 2$, where, without the anchor, these layers still descend. Section 6 says
# a large enough step can raise the energy; the app's energy page goes up to $\eta = 20$, where it does, and says why:
# [the MLP at $\eta = 20$](http://localhost:8501/?layer=mlp&p_scale=0.3&heads=2&width=8&seq_len=8&seed=0&rope=false&token=255&heat_head=0&T=1&eta=20.0&anchor=0.0&diagonal=none&preconditioner=none&rank=2
# "needs the app: run make app first").
# This notebook's single step is [the MLP at $T = 1$, $\eta = 1$](http://localhost:8501/?layer=mlp&p_scale=0.3&heads=2&width=8&seq_len=8&seed=0&rope=false&token=255&heat_head=0&T=1&eta=1.0&anchor=0.0&diagonal=none&preconditioner=none&rank=2
# "needs the app: run make app first"),
# and the overshooting anchor is [$\lambda = 2$ at $T = 16$](http://localhost:8501/?layer=mlp&p_scale=0.3&heads=2&width=8&seq_len=8&seed=0&rope=false&token=255&heat_head=0&T=16&eta=1.0&anchor=2.0&diagonal=none&preconditioner=none&rank=2
# "needs the app: run make app first").
# Start the app with `make app`; under the figure, a link opens the explorer's current state there.

# %%
EnergyExplorer(controls=("T", "eta", "anchor", "seed"), layer="mlp", T=4)

# %% [markdown]
# ## Exercises
#
# ### Exercise 1: GELU
#
# `cem_core` also offers GELU, $\varphi(z) = z\,N(z)$ with $N$ the standard normal cdf and $n$ its
# pdf. **Find an antiderivative $\Phi$ of GELU.** (Hint: integrate by parts twice, using
# $n'(z) = -z\,n(z)$.) Write it in terms of `z`, `N` and `n`, then run the check: it proves
# $\Phi' = \varphi$ and compares your $\Phi$ with `cem_core.nn.activations.gelu_antiderivative` up to a constant.

# %%
N = (1 + sp.erf(z / sp.sqrt(2))) / 2                      # standard normal cdf
n = sp.exp(-z ** 2 / 2) / sp.sqrt(2 * sp.pi)              # standard normal pdf

# %% tags=["exercise-gelu-antiderivative"]
answer = None                                             # your answer here


# %% tags=["check-gelu-antiderivative"]
def check(answer):
    assert sp.simplify(sp.diff(answer, z) - z * N) == 0, "the derivative of your Phi is not GELU"
    theirs = cem_core.nn.activations.gelu_antiderivative(torch.from_numpy(grid)).numpy()
    offset = numeric(answer, z)(grid) - theirs
    assert np.ptp(offset) < 1e-9 * np.abs(theirs).max(), "not cem_core's Phi up to a constant"


check_answer(answer, check, "gelu-antiderivative",
             "$\\Phi' = $ GELU, and $\\Phi$ matches `cem_core.nn.activations.gelu_antiderivative` up to a constant.")

# %% [markdown]
# ### Exercise 2: ReLU
#
# The third activation `cem_core` offers is ReLU, $\varphi(z) = \max(z, 0)$. **Find an antiderivative
# $\Phi$ of ReLU**, as a SymPy expression in `z` (`sp.Piecewise` or `sp.Max` will help), then run the check:
# it tests $\Phi' = \varphi$ on both sides of 0, that $\Phi$ is continuous at 0 (else it is no
# antiderivative), and compares your $\Phi$ with `cem_core.nn.activations.relu_antiderivative` up to a constant.

# %% tags=["exercise-relu-antiderivative"]
answer = None                                             # your answer here


# %% tags=["check-relu-antiderivative"]
def check(answer):
    slope = sp.diff(answer, z)
    for point in (-2, -sp.Rational(1, 2), sp.Rational(1, 2), 3):
        assert sp.simplify(slope.subs(z, point) - max(point, 0)) == 0, f"Phi'({point}) is not ReLU({point})"
    assert sp.limit(answer, z, 0, "+") == sp.limit(answer, z, 0, "-"), "Phi jumps at 0: not an antiderivative"
    theirs = cem_core.nn.activations.relu_antiderivative(torch.from_numpy(grid)).numpy()
    offset = np.array([float(answer.subs(z, v)) for v in grid]) - theirs
    assert np.ptp(offset) < 1e-9 * np.abs(theirs).max(), "not cem_core's Phi up to a constant"


check_answer(answer, check, "relu-antiderivative",
             "$\\Phi(z) = \\max(z, 0)^2/2$, as in `cem_core.nn.activations.relu_antiderivative`. "
             "Then $\\Phi'' = \\varphi'$ "
             "is 1 for $z > 0$ and 0 below: never negative, so with ReLU the signs of the Hessian's terms "
             "$-(Gc)_m \\varphi'(z_m)$ are set by the gates alone.")

# %% [markdown]
# **Takeaway.** One gradient step ($\eta = 1$, $P = I$) on $-\sum_m (Gc)_m\Phi((Ux)_m)$ is a gated MLP
# with down $=$ up$^\top$: two thirds of SwiGLU's parameters for the same three matmuls. Unlike the
# attention energy, which is concave, this energy is neither convex nor concave: a step lowers it
# when $\eta < 2/L$, and a larger step can raise it. Notebook 03 explores what can be added to these
# energies: a diagonal, a preconditioner, and more steps.
