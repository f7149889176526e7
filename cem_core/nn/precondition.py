"""Learned lightweight preconditioners P for the step x <- x - eta P grad E (docs/design.md#27-preconditioners).

- "none": P = I.
- "dlr":  the paper's form, P = diag(softplus(p)) + U V^T + V U^T, rank r. Symmetric but not
          positive definite in general, so a step can *raise* the energy.
- "psd":  our form, P = diag(softplus(p)) + U U^T, positive definite by construction.

P is applied in O(d r) without forming the d x d matrix; ``matrix()`` forms it for plots and
eigenvalues. At initialization softplus(p) = 1 and |U U^T| is about 0.1, so P is close to I.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

_SOFTPLUS_INV_ONE = math.log(math.e - 1.0)   # softplus(p) = 1


class Preconditioner(nn.Module):
    def __init__(self, d_model: int, kind: str = "none", rank: int = 4, init_scale: float = 0.1):
        super().__init__()
        if kind not in ("none", "dlr", "psd"):
            raise ValueError(f"preconditioner={kind!r} is invalid: must be one of 'none', 'dlr', 'psd'")
        self.kind, self.d_model, self.rank = kind, d_model, rank
        if kind == "none":
            return
        std = math.sqrt(init_scale / d_model)
        self.p = nn.Parameter(torch.full((d_model,), _SOFTPLUS_INV_ONE))
        self.U = nn.Parameter(torch.randn(d_model, rank) * std)
        if kind == "dlr":
            self.V = nn.Parameter(torch.randn(d_model, rank) * std)

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        """P g over the last axis."""
        if self.kind == "none":
            return g                                                   # P = I
        out = F.softplus(self.p) * g                                   # diag(softplus(p)) g
        if self.kind == "psd":
            return out + (g @ self.U) @ self.U.T                       # + U U^T g
        return out + (g @ self.V) @ self.U.T + (g @ self.U) @ self.V.T  # + (U V^T + V U^T) g

    def matrix(self) -> torch.Tensor:
        """The dense d x d matrix P (for eigenvalues and tests)."""
        eye = torch.eye(self.d_model, dtype=self._dtype(), device=self._device())
        return self(eye)                                               # rows of P I = P (P symmetric)

    def _dtype(self):
        return self.p.dtype if self.kind != "none" else torch.get_default_dtype()

    def _device(self):
        return self.p.device if self.kind != "none" else None

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, d_model={self.d_model}, rank={self.rank}"
