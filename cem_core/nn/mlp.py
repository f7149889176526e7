"""CEM gated MLP: T gradient steps on the element-wise energy, and the SwiGLU baseline.

    E_mlp(x | c) = -sum_m (G c)_m Phi((U x)_m),   Phi' = phi (SiLU by default)
    -grad_x E_mlp = U^T (phi(U x) * G c)

a gated MLP whose down projection is the up projection transposed (docs/design.md#25-element-wise-energy-and-the-gated-mlp).

Names follow the paper: ``up_proj`` = U is the projection inside the nonlinearity and is tied
to the readout; ``gate_proj`` = G is the multiplicative branch computed from the conditioning c.
Hugging Face's SwiGLU (``LlamaMLP``) uses the opposite names: its ``gate_proj`` is the activated
branch and its ``up_proj`` the linear one. So, weight for weight,

    CEM up_proj   <->  HF/SwiGLU gate_proj     (inside phi)
    CEM gate_proj <->  HF/SwiGLU up_proj       (linear, multiplicative)
    CEM up_proj^T <->  HF/SwiGLU down_proj     (free only with untied=True)
"""
from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from .config import MLPConfig
from .descent import EnergyDescentLayer, check_input
from .energy import ACTIVATION_FUNCTIONS, mlp_energy


class CEMGatedMLP(EnergyDescentLayer):
    """h -> h + x^(T) - x^(0), T steps on E_mlp; the gate G c is computed once."""

    def __init__(self, config: MLPConfig):
        if not isinstance(config, MLPConfig):
            raise ValueError(f"config must be an MLPConfig; got {type(config).__name__}")
        super().__init__(config)
        d, f = config.d_model, config.d_ff
        self.phi = ACTIVATION_FUNCTIONS[config.activation][0]
        self.up_proj = nn.Linear(d, f, bias=False)                     # U, inside phi and tied to the readout
        self.gate_proj = nn.Linear(d, f, bias=False)                   # G, the gate from the conditioning
        if config.untied:
            self.down_proj = nn.Linear(f, d, bias=False)

    def _context(self, c: torch.Tensor, cache=None) -> torch.Tensor:
        return self.gate_proj(c)                                       # G c, once for all T steps

    def _readout(self, z: torch.Tensor) -> torch.Tensor:
        if self.config.untied:
            return self.down_proj(z)
        return z @ self.up_proj.weight                                 # U^T z (down = up^T)

    def _negative_gradient(self, x, gate, need_weights: bool):
        return self._readout(self.phi(self.up_proj(x)) * gate), None   # U^T (phi(U x) * G c)

    def _energy(self, x, c):
        return mlp_energy(x, c, self.up_proj.weight, self.gate_proj.weight, self.config.activation,
                          anchor=self.config.anchor, x0=c)

    def _token_energy(self, points, c, token):
        ci = c[:, token:token + 1].expand(1, points.shape[0], -1)     # c_i for every candidate x
        return self._energy(points[None], ci)[0]


class SwiGLU(nn.Module):
    """Baseline pre-norm gated MLP with Hugging Face naming (see the module docstring):
    h + down_proj(phi(gate_proj(Norm h)) * up_proj(Norm h)). Takes an MLPConfig with T = 1."""

    def __init__(self, config: MLPConfig):
        if not isinstance(config, MLPConfig):
            raise ValueError(f"config must be an MLPConfig; got {type(config).__name__}")
        super().__init__()
        self.config = config = replace(config, untied=True)            # validates T = 1 etc.
        d, f = config.d_model, config.d_ff
        self.phi = ACTIVATION_FUNCTIONS[config.activation][0]
        self.norm = nn.RMSNorm(d, eps=config.norm_eps)
        self.gate_proj = nn.Linear(d, f, bias=False)                   # activated branch (CEM's U)
        self.up_proj = nn.Linear(d, f, bias=False)                     # linear branch (CEM's G)
        self.down_proj = nn.Linear(f, d, bias=False)
        self.check_inputs = True

    def forward(self, h: torch.Tensor, cache=None) -> torch.Tensor:
        if self.check_inputs:
            check_input(h, self.config.d_model)
        c = self.norm(h)
        return h + self.down_proj(self.phi(self.gate_proj(c)) * self.up_proj(c))   # h + W_down(phi(W_gate c) * W_up c)
