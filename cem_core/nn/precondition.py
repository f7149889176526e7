"""Learned lightweight preconditioners P for the step x <- x - eta P grad E (docs/design.md#27-preconditioners),
one registered object per form (`PRECONDITIONERS`), each carrying its factors, how it applies P, its parameter
count, its FLOPs, its equation and its label. Everything else (the configs' validation, the command line's
choices, the app's controls and equations, the parameter and FLOP counts, the spectra) iterates the registry:

- "none": P = I.
- "dlr":  the paper's form, P = diag(softplus(p)) + U V^T + V U^T, rank r. Symmetric but not
          positive definite in general, so a step can *raise* the energy.
- "psd":  our form, P = diag(softplus(p)) + U U^T, positive definite by construction.

P is applied in O(d r) without forming the d x d matrix; ``matrix()`` forms it for plots and
eigenvalues. At initialization softplus(p) = 1 and |U U^T| is about 0.1, so P is close to I.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .registry import Registry

_SOFTPLUS_INV_ONE = math.log(math.e - 1.0)   # softplus(p) = 1


@dataclass(frozen=True)
class PreconditionerKind:
    """One form of P. ``factors`` names its low-rank factors (d x r each, besides the diagonal p unless the form is
    the identity); ``low_rank(module, g)`` is its low-rank part applied to g; ``factor_products`` is how many
    (d x r) products one application takes (its FLOPs: 2 d r each)."""
    name: str                                   # the configuration's value: CEMOptions.preconditioner
    label: str                                  # the spectra's legend: "paper: diag(softplus p) + U Vᵀ + V Uᵀ"
    latex: str                                  # the app's equation line, P = ...
    factors: tuple[str, ...]                    # its d x r factors: ("U", "V")
    factor_products: int                        # (d x r) products in one application of the low-rank part
    low_rank: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None   # None: P = I

    @property
    def identity(self) -> bool:
        return self.low_rank is None

    def param_count(self, d: int, r: int) -> int:
        """The diagonal p and the factors: d + len(factors) d r (none for the identity)."""
        return 0 if self.identity else d + len(self.factors) * d * r

    def flops_per_row(self, d: int, r: int) -> int:
        """FLOPs of applying P to one vector: 2 d r per factor product (the diagonal's d are not counted)."""
        return 0 if self.identity else self.factor_products * 2 * d * r


PRECONDITIONERS: Registry = Registry("preconditioner")
register_preconditioner = PRECONDITIONERS.register    # add a PreconditionerKind (a ValueError for a name taken)


register_preconditioner(PreconditionerKind("none", "identity: P = I", r"P = I", (), 0, None))
register_preconditioner(PreconditionerKind(
    "dlr", "paper: diag(softplus p) + U Vᵀ + V Uᵀ",
    r"P = \operatorname{diag}(\operatorname{softplus}(p)) + U V^\top + V U^\top\ \ \text{(paper)}", ("U", "V"), 4,
    lambda m, g: (g @ m.V) @ m.U.T + (g @ m.U) @ m.V.T))                 # (U V^T + V U^T) g
register_preconditioner(PreconditionerKind(
    "psd", "ours: diag(softplus p) + U Uᵀ",
    r"P = \operatorname{diag}(\operatorname{softplus}(p)) + U U^\top \succ 0\ \ \text{(ours)}", ("U",), 2,
    lambda m, g: (g @ m.U) @ m.U.T))                                    # U U^T g


class Preconditioner(nn.Module):
    def __init__(self, d_model: int, kind: str = "none", rank: int = 4, init_scale: float = 0.1):
        super().__init__()
        if kind not in PRECONDITIONERS:
            raise ValueError(f"preconditioner={kind!r} is invalid: must be one of "
                             f"{', '.join(map(repr, PRECONDITIONERS))}")
        self.kind, self.form, self.d_model, self.rank = kind, PRECONDITIONERS[kind], d_model, rank
        if self.form.identity:
            return
        std = math.sqrt(init_scale / d_model)
        self.p = nn.Parameter(torch.full((d_model,), _SOFTPLUS_INV_ONE))
        for name in self.form.factors:
            setattr(self, name, nn.Parameter(torch.randn(d_model, rank) * std))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        """P g over the last axis."""
        if self.form.identity:
            return g                                                   # P = I
        return F.softplus(self.p) * g + self.form.low_rank(self, g)    # diag(softplus(p)) g + (low rank) g

    def matrix(self) -> torch.Tensor:
        """The dense d x d matrix P (for eigenvalues and tests)."""
        eye = torch.eye(self.d_model, dtype=self._dtype(), device=self._device())
        return self(eye)                                               # rows of P I = P (P symmetric)

    def _dtype(self):
        return torch.get_default_dtype() if self.form.identity else self.p.dtype

    def _device(self):
        return None if self.form.identity else self.p.device

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, d_model={self.d_model}, rank={self.rank}"
