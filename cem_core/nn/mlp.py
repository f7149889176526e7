"""CEM gated MLP: T gradient steps on the element-wise energy.

    E_mlp(x | c) = -sum_m (G c)_m Phi((U x)_m),   Phi' = phi (SiLU by default)
    -grad_x E_mlp = U^T (phi(U x) * G c)

a gated MLP whose down projection is the up projection transposed
(docs/design.md#25-element-wise-energy-and-the-gated-mlp).

Names follow the paper: ``up_proj`` = U is the projection inside the nonlinearity and is tied
to the readout; ``gate_proj`` = G is the multiplicative branch computed from the conditioning c.
Hugging Face's ``LlamaMLP`` (and our ``SwiGLU`` baseline, ``cem_core.nn.baselines``) uses the
opposite names: its ``gate_proj`` is the activated branch and its ``up_proj`` the linear one.
So, weight for weight,

    CEM up_proj   <->  HF gate_proj     (inside phi)
    CEM gate_proj <->  HF up_proj       (linear, multiplicative)
    CEM up_proj^T <->  HF down_proj     (a CEM MLP has no free down projection)

``cem_core.nn.hf`` holds this mapping as code. The energy's weights, context, gradient and value are one
mixin, ``ElementwiseTerm``, shared with the joint block (``cem_core.nn.block``). Shapes: B batch, n tokens,
d_ff the hidden width.
"""
from __future__ import annotations

import torch
from torch import nn

from .activations import ACTIVATIONS
from .config import MLPConfig
from .descent import EnergyDescentLayer
from .energy import mlp_energy, with_anchor
from .ties import MLP_TIES
from .validate import check_config


class ElementwiseTerm:
    """The element-wise energy E_mlp as a term of a descent layer (mixed into ``CEMGatedMLP`` and ``CEMBlock``):
    its weights U and G, its fixed context (the gate G c, once for all T steps), -grad E_mlp and E_mlp itself.
    The host is an nn.Module whose config is a GatedConfig."""

    def _init_elementwise(self, config) -> None:
        d, f = config.d_model, config.d_ff
        self.phi = ACTIVATIONS[config.activation].phi
        self.up_proj = nn.Linear(d, f, bias=False)                     # U, inside phi and tied to the readout
        self.gate_proj = nn.Linear(d, f, bias=False)                   # G, the gate from the conditioning
        if "down_proj" in MLP_TIES[config.mlp_ties].free:              # untied (docs/design.md#215-the-ties)
            self.down_proj = nn.Linear(f, d, bias=False)               # W_D, a free down projection

    def _elementwise_context(self, c: torch.Tensor) -> torch.Tensor:
        return self.gate_proj(c)                                       # G c: (B, n, d_ff), once for all T steps

    def _mlp_readout(self, z: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "down_proj"):
            return self.down_proj(z)                                   # W_D z, a free down projection: (B, n, d)
        return z @ self.up_proj.weight                                 # U^T z (down = up^T): (B, n, d)

    def _elementwise_gradient(self, x, gate) -> torch.Tensor:
        z = self.phi(self.up_proj(x)) * gate                           # phi(U x) * G c: (B, n, d_ff)
        return self._mlp_readout(z)                                    # -grad E_mlp = U^T (phi(U x) * G c): (B, n, d)

    def _elementwise_energy(self, x, c):
        """E_mlp(x | c) per token, without the anchor (``mlp_energy``); c is each x's own conditioning."""
        return mlp_energy(x, c, self.up_proj.weight, self.gate_proj.weight, self.config.activation)

    def _elementwise_token_energy(self, points, c, token: int):
        """E_mlp(x | c_token) of one token at candidate points x (P, d), without the anchor: (P,)."""
        ci = c[0, token].expand(points.shape[0], -1)                   # c_i for every candidate x: (P, d)
        return self._elementwise_energy(points[None], ci[None])[0]


class CEMGatedMLP(ElementwiseTerm, EnergyDescentLayer):
    """h -> h + x^(T) - x^(0), T steps on E_mlp; the gate G c is computed once."""

    def __init__(self, config: MLPConfig):
        check_config(config, MLPConfig)
        super().__init__(config)
        self._init_elementwise(config)

    def _context(self, c: torch.Tensor, cache=None) -> torch.Tensor:
        return self._elementwise_context(c)

    def _negative_gradient(self, x, gate, need_weights: bool):
        return self._elementwise_gradient(x, gate), None               # -grad_x E_mlp

    def _energy(self, x, c):
        return with_anchor(self._elementwise_energy(x, c), x, c, self.config.anchor)

    def _token_energy(self, points, c, token):
        return with_anchor(self._elementwise_token_energy(points, c, token), points, c[0, token], self.config.anchor)
