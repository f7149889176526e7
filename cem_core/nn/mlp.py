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

``cem_core.nn.hf`` holds this mapping as code. Shapes: B batch, n tokens, d_ff the hidden width.
"""
from __future__ import annotations

import torch
from torch import nn

from .config import MLPConfig
from .descent import EnergyDescentLayer
from .energy import ACTIVATION_FUNCTIONS, mlp_energy
from .validate import check_config


class CEMGatedMLP(EnergyDescentLayer):
    """h -> h + x^(T) - x^(0), T steps on E_mlp; the gate G c is computed once."""

    def __init__(self, config: MLPConfig):
        check_config(config, MLPConfig)
        super().__init__(config)
        d, f = config.d_model, config.d_ff
        self.phi = ACTIVATION_FUNCTIONS[config.activation][0]
        self.up_proj = nn.Linear(d, f, bias=False)                     # U, inside phi and tied to the readout
        self.gate_proj = nn.Linear(d, f, bias=False)                   # G, the gate from the conditioning

    def _context(self, c: torch.Tensor, cache=None) -> torch.Tensor:
        return self.gate_proj(c)                                       # G c: (B, n, d_ff), once for all T steps

    def _readout(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.up_proj.weight                                 # U^T z (down = up^T): (B, n, d)

    def _negative_gradient(self, x, gate, need_weights: bool):
        z = self.phi(self.up_proj(x)) * gate                           # phi(U x) * G c: (B, n, d_ff)
        return self._readout(z), None                                  # -grad E_mlp = U^T (phi(U x) * G c): (B, n, d)

    def _energy(self, x, c):
        return mlp_energy(x, c, self.up_proj.weight, self.gate_proj.weight, self.config.activation,
                          anchor=self.config.anchor, x0=c)

    def _token_energy(self, points, c, token):
        ci = c[:, token:token + 1].expand(1, points.shape[0], -1)     # c_i for every candidate x: (1, P, d)
        return self._energy(points[None], ci)[0]
