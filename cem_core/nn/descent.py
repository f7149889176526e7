"""The descent itself: the shared recursion of every CEM layer, traces, and the autograd reference.

A CEM layer maps h to h + (x^(T) - x^(0)) where x^(0) = Norm(h) and
x^(t+1) = x^(t) - eta_t P grad_x E(x^(t) | c_{1:i}), with the history c = Norm(h) fixed
(docs/design.md#22-conditional-causal-energy-and-the-update). ``EnergyDescentLayer`` holds that
loop once; attention and the gated MLP only say how to build the fixed context (keys, the gate)
and how to compute -grad E fast. Only CEM layers are descent layers: the baselines
(``baselines``) are not gradient steps on an energy and have no energy, trace or reference.
``reference_forward`` recomputes the same T steps by autograd on the energy functions,
``assert_exact`` compares the two forward passes and ``gradient_exactness_error`` their backward
passes: the checkers behind docs/design.md#invariant-1-fast-path-equals-autograd-descent.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .precondition import Preconditioner
from .ties import not_an_energy


@dataclass
class Trace:
    """Everything a plot of the descent needs, for one input h.

    iterates: (T+1, B, n, d), x^(0) = Norm(h) first; energies: (T+1, B, n), E(x^(t) | c_{1:i});
    weights: (T, B, H, n, n) attention weights a^k_ij at each step (attention only);
    step_sizes: (T,) the eta_t used.
    """

    iterates: torch.Tensor
    energies: torch.Tensor
    step_sizes: torch.Tensor
    weights: torch.Tensor | None = None

    @property
    def update_norms(self) -> torch.Tensor:
        """|x^(t+1) - x^(t)| per step and token, shape (T, B, n)."""
        return (self.iterates[1:] - self.iterates[:-1]).norm(dim=-1)


def check_input(h, d_model: int, name: str = "h") -> None:
    """A clear ValueError for a wrong type, shape, dtype or a non-finite value."""
    if not isinstance(h, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape (batch, seq, {d_model}); got {type(h).__name__}")
    if h.dim() != 3 or h.shape[-1] != d_model or h.shape[1] == 0:
        raise ValueError(f"{name} has shape {tuple(h.shape)}; expected (batch, seq >= 1, d_model={d_model})")
    if not h.is_floating_point():
        raise ValueError(f"{name} has dtype {h.dtype}; expected a floating dtype (float32, float64, bfloat16)")
    if not torch.isfinite(h).all():
        raise ValueError(f"{name} contains NaN or infinite values")


class EnergyDescentLayer(nn.Module):
    """Shared recursion; subclasses implement ``_context``, ``_negative_gradient``, ``_energy``."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)    # c_j = Norm(h_j), x^(0) = Norm(h_i)
        self.preconditioner = Preconditioner(config.d_model, config.preconditioner, config.rank)
        if config.learn_eta:
            n_eta = config.T if config.eta_per_step else 1
            self.log_eta = nn.Parameter(torch.full((n_eta,), math.log(config.eta)))  # eta = exp(log_eta) > 0
        self.check_inputs = True   # a model that validates its own input turns this off

    # -- subclass hooks ----------------------------------------------------------------------
    def _context(self, c: torch.Tensor, cache=None):
        raise NotImplementedError

    def _negative_gradient(self, x: torch.Tensor, context, need_weights: bool):
        raise NotImplementedError

    def _energy(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _token_energy(self, points: torch.Tensor, c: torch.Tensor, token: int) -> torch.Tensor:
        raise NotImplementedError

    # -- the recursion -----------------------------------------------------------------------
    def step_sizes(self) -> list:
        """eta_t for t = 0..T-1 (floats when fixed, tensors when learned)."""
        T = self.config.T
        if not self.config.learn_eta:
            return [self.config.eta] * T
        eta = self.log_eta.exp()                                       # eta = exp(log_eta) > 0
        return [eta[t] if self.config.eta_per_step else eta[0] for t in range(T)]

    def step_size_values(self) -> list[float]:
        """eta_t as plain floats (for traces, plots and the reference path)."""
        return [float(e.detach()) if isinstance(e, torch.Tensor) else e for e in self.step_sizes()]

    def _displacement(self, x, x0, context, eta, need_weights=False):
        """x^(t+1) - x^(t) = -eta P grad E(x^(t)), and the attention weights when asked."""
        u, weights = self._negative_gradient(x, context, need_weights)  # u = -grad E_interaction(x)
        if self.config.anchor:
            u = u - self.config.anchor * (x - x0)                      # - grad (lambda/2)|x - x0|^2
        step = self.preconditioner(u)                                  # P (-grad E)
        return (step if isinstance(eta, float) and eta == 1.0 else eta * step), weights

    def _step(self, x, x0, context, eta, need_weights=False):
        step, weights = self._displacement(x, x0, context, eta, need_weights)
        return x + step, weights                                       # x^(t+1) = x^(t) - eta P grad E

    def forward(self, h: torch.Tensor, cache=None) -> torch.Tensor:
        if self.check_inputs:
            check_input(h, self.config.d_model)
        x0 = self.norm(h)                                              # x^(0) = c = Norm(h)
        context = self._context(x0, cache)                             # computed once for all T steps
        *first, last = self.step_sizes()
        x = x0
        for eta in first:
            x, _ = self._step(x, x0, context, eta)
        step, _ = self._displacement(x, x0, context, last)
        return h + step if not first else h + ((x - x0) + step)       # h' = h + x^(T) - x^(0)

    # -- the energy view ---------------------------------------------------------------------
    def check_energy_view(self) -> None:
        """A clear ValueError for a layer whose ties leave the energy view (docs/design.md#215-the-ties): its
        update is no longer a gradient step on an energy, so it has none to show or to differentiate."""
        if why := not_an_energy(self.config):
            raise ValueError(f"{type(self).__name__} has no energy: {why}")

    def energy(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """E(x_i | c_{1:i}) per token, shape (B, n); x in normalized space, h the raw input."""
        self.check_energy_view()
        check_input(h, self.config.d_model)
        check_input(x, self.config.d_model, name="x")
        if x.shape != h.shape:
            raise ValueError(f"x has shape {tuple(x.shape)} but h has shape {tuple(h.shape)}; they must match")
        return self._energy(x, self.norm(h))

    def energy_at(self, points: torch.Tensor, h: torch.Tensor, token: int) -> torch.Tensor:
        """E(x | c_{1:token}) of one token at many candidate points x (P, d), shape (P,), for
        landscapes; h is (1, n, d). Equals ``energy`` with x_token replaced by each point."""
        self.check_energy_view()
        check_input(h, self.config.d_model)
        if h.shape[0] != 1 or not 0 <= token < h.shape[1]:
            raise ValueError(f"token={token} is invalid for h of shape {tuple(h.shape)}: need batch 1 and "
                             f"0 <= token < {h.shape[1]}")
        return self._token_energy(points, self.norm(h), token)

    @torch.no_grad()
    def trace(self, h: torch.Tensor) -> Trace:
        """Iterates, energies (and attention weights) of the T steps for input h."""
        self.check_energy_view()
        check_input(h, self.config.d_model)
        x0 = self.norm(h)
        context = self._context(x0)
        xs, ws = [x0], []
        for eta in self.step_sizes():
            x, w = self._step(xs[-1], x0, context, eta, need_weights=True)
            xs.append(x)
            ws.append(w)
        iterates = torch.stack(xs)
        energies = torch.stack([self._energy(x, x0) for x in xs])
        etas = torch.tensor(self.step_size_values())
        weights = torch.stack(ws) if ws[0] is not None else None
        return Trace(iterates=iterates, energies=energies, step_sizes=etas, weights=weights)


def reference_forward(layer: EnergyDescentLayer, h: torch.Tensor, differentiable: bool = False) -> torch.Tensor:
    """The same T steps computed by autograd on ``layer.energy``: x <- x - eta P grad E(x).

    Detached by default (a forward check). With ``differentiable`` every step stays in the graph
    (grad E by create_graph, learned eta as tensors), so the reference's own gradients with respect
    to h and every parameter check the fast path's backward."""
    layer.check_energy_view()
    keep = (lambda t: t) if differentiable else torch.Tensor.detach
    with torch.enable_grad():
        x0 = keep(layer.norm(h))
        x = x0
        for eta in (layer.step_sizes() if differentiable else layer.step_size_values()):
            if not differentiable:
                x = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(layer.energy(x, h).sum(), x, create_graph=differentiable)  # grad_x E
            x = x - eta * keep(layer.preconditioner(grad))           # x^(t+1) = x^(t) - eta P grad E
    return keep(h + (x - x0))


def exactness_error(layer: EnergyDescentLayer, h: torch.Tensor) -> float:
    """max |fast - reference| / max |reference update|: 0 for an exact fast path."""
    with torch.no_grad():
        fast = layer(h)
    ref = reference_forward(layer, h)
    scale = (ref - h).abs().max().clamp_min(torch.finfo(h.dtype).tiny)
    return float((fast - ref).abs().max() / scale)


def assert_exact(layer: EnergyDescentLayer, h: torch.Tensor, rtol: float) -> float:
    """Raise AssertionError unless the fast forward equals T autograd steps within rtol."""
    err = exactness_error(layer, h)
    if not err <= rtol:
        raise AssertionError(f"fast path differs from autograd descent on the energy: "
                             f"relative error {err:.3e} > {rtol:.1e} ({layer.config})")
    return err


def gradient_exactness_error(layer: EnergyDescentLayer, h: torch.Tensor) -> float:
    """The backward's check: for one fixed random upstream gradient, the largest over h and every
    parameter of max |fast grad - reference grad| / max |reference grad|, the reference being
    ``reference_forward(differentiable=True)``: 0 for an exact fast backward."""
    h = h.detach().requires_grad_(True)
    inputs = [h, *(p for p in layer.parameters() if p.requires_grad)]
    upstream = torch.randn(h.shape, generator=torch.Generator().manual_seed(0), dtype=h.dtype)
    fast, ref = (torch.autograd.grad((out * upstream).sum(), inputs, allow_unused=True, materialize_grads=True)
                 for out in (layer(h), reference_forward(layer, h, differentiable=True)))
    return max(float((f - r).abs().max() / r.abs().max().clamp_min(torch.finfo(h.dtype).tiny))
               for f, r in zip(fast, ref))

