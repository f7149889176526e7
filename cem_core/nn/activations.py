"""The gated MLP's activation phi, one registered object each, with its energy: Phi, its antiderivative
(Phi' = phi), which the element-wise energy E_mlp(x | c) = -sum_m (G c)_m Phi((U x)_m) uses, and the LaTeX of
both (the app's equations). Everything else (config validation, the command line's choices, the app's controls
and equations, the exactness grids) iterates ACTIVATIONS, so a new activation is one `register_activation` call
and its test.

    ACTIVATIONS["silu"].phi(z), .Phi(z), .label, .phi_latex, .Phi_latex
    register_activation(Activation(name, label, phi, Phi, phi_latex, Phi_latex))
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import torch
import torch.nn.functional as F

from .registry import Registry


@dataclass(frozen=True)
class Activation:
    """One activation phi and its energy Phi (Phi' = phi, no constant dropped where one is stated)."""
    name: str                                         # the configuration's value: ModelShape.activation
    label: str                                        # how people write it: "SiLU"
    phi: Callable[[torch.Tensor], torch.Tensor]       # phi, the gated MLP's nonlinearity
    Phi: Callable[[torch.Tensor], torch.Tensor]       # Phi, its antiderivative: the element-wise energy's potential
    phi_latex: str                                    # the right-hand side of phi(z) = ...
    Phi_latex: str                                    # the right-hand side of Phi(z) = ...

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or not self.name.islower():
            raise ValueError(f"name={self.name!r} is invalid: an activation's name is a lower-case identifier")


ACTIVATIONS: Registry = Registry("activation")
register_activation = ACTIVATIONS.register            # add an Activation (a ValueError for a name taken)


# -- SiLU: Phi through the dilogarithm ---------------------------------------------------------------------------

def _bernoulli(n_max: int) -> list[Fraction]:
    """Bernoulli numbers B_0..B_n_max (B_1 = -1/2), by the standard recurrence."""
    b = [Fraction(1)]
    for m in range(1, n_max + 1):
        b.append(-sum(math.comb(m + 1, k) * b[k] for k in range(m)) / (m + 1))
    return b


# Li2(w) = sum_n B_n y^(n+1) / (n+1)!, y = -log(1 - w); |y| <= log 2 here, terms fall like (y/2pi)^n.
_LI2_COEFFS = [float(b / math.factorial(n + 1)) for n, b in enumerate(_bernoulli(24))]


def dilog_neg_exp(a: torch.Tensor) -> torch.Tensor:
    """Li2(-e^a) for a <= 0, stable in float32 and float64.

    Landen's identity Li2(u) = -Li2(u/(u-1)) - log(1-u)^2/2 maps u = -e^a in [-1, 0) to
    w = sigmoid(a) in (0, 1/2], where -log(1-w) = softplus(a) = y <= log 2 and the Bernoulli
    series converges fast.
    """
    y = F.softplus(a)                                                  # y = log(1 - u) = -log(1 - w)
    series = torch.zeros_like(y)
    for coeff in reversed(_LI2_COEFFS):                                # Horner in y: sum B_n y^(n+1)/(n+1)!
        series = (series + coeff) * y
    return -series - 0.5 * y * y                                       # Li2(u) = -Li2(w) - y^2/2


def silu_antiderivative_value(z: torch.Tensor) -> torch.Tensor:
    """Phi(z) = z softplus(z) + Li2(-e^z), with Phi(0) = -pi^2/12 (no constant dropped).

    For z > 0 the inversion Li2(-e^z) = -pi^2/6 - z^2/2 - Li2(-e^-z) keeps every term finite:
    Phi(z) = z^2/2 + z softplus(-z) - pi^2/6 - Li2(-e^-z).
    """
    a = -z.abs()
    y = F.softplus(a)
    li = dilog_neg_exp(a)
    neg = z * y + li                                                   # z <= 0: z softplus(z) + Li2(-e^z)
    pos = 0.5 * z * z + z * y - math.pi ** 2 / 6 - li                  # z > 0, after the inversion
    return torch.where(z > 0, pos, neg)


class _SiLUAntiderivative(torch.autograd.Function):
    """Phi for SiLU with the exact backward Phi'(z) = silu(z) (differentiable again)."""

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return silu_antiderivative_value(z)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * F.silu(z)                                        # Phi'(z) = z sigmoid(z)


def silu_antiderivative(z: torch.Tensor) -> torch.Tensor:
    return _SiLUAntiderivative.apply(z)


# -- GELU and ReLU -----------------------------------------------------------------------------------------------

def gelu_antiderivative(z: torch.Tensor) -> torch.Tensor:
    """Phi(z) = ((z^2 - 1) N(z) + z n(z)) / 2 for GELU(z) = z N(z) (N, n: normal cdf, pdf)."""
    cdf = 0.5 * (1 + torch.erf(z / math.sqrt(2)))
    pdf = torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return 0.5 * ((z * z - 1) * cdf + z * pdf)


def relu_antiderivative(z: torch.Tensor) -> torch.Tensor:
    """Phi(z) = relu(z)^2 / 2."""
    return 0.5 * F.relu(z) ** 2


def _gelu(z: torch.Tensor) -> torch.Tensor:
    return F.gelu(z)                                                   # exact (erf) GELU


register_activation(Activation("silu", "SiLU", F.silu, silu_antiderivative, r"z\, \sigma(z)",
                    r"z \operatorname{softplus}(z) + \operatorname{Li}_2(-e^{z})"))
register_activation(Activation("gelu", "GELU", _gelu, gelu_antiderivative, r"z\, N(z)",
                    r"\tfrac12\big((z^2 - 1)\, N(z) + z\, n(z)\big)"))
register_activation(Activation("relu", "ReLU", F.relu, relu_antiderivative, r"\max(0, z)", r"\tfrac12 \max(0, z)^2"))
