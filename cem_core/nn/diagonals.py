"""The D+LR interaction's diagonal D (docs/design.md#24-dlr-interaction): which diagonal, and in which form it
enters the score. Each is one registered object carrying what the configs, the counts and the app's equations
need. A ``Diagonal``: its parameter count, the width of the attention core it makes (its FLOPs), the equation of
the interaction A_k, the symbol of D in the distance form, and its label. A ``DiagonalForm``: the diagonal's term
in the score s^k_ij (the reference energy's), whether it needs a diagonal, the parameter's starting value, its
equations, and its label. The attention layer implements each choice on its own fast path (nn/attention.py), so a
new diagonal or form is a new path there as well as an entry here.

- "none":     A_k = W_Q,k^T W_K,k.
- "per_head": A_k = diag(d_k) + W_Q,k^T W_K,k, one d_k per head (H d parameters).
- "shared":   A_k = diag(d) + W_Q,k^T W_K,k, one d for all heads (d parameters).

Forms:
- "bilinear": s^k_ij = x^T A_k c_j, the diagonal's term x^T D_k c_j (D_k = d_k itself, from 0: plain attention).
- "distance": s^k_ij = x^T W_Q,k^T W_K,k c_j - (1/2)(x - c_j)^T D_k (x - c_j), D_k = softplus(p_k) > 0: an
  RBF-like score and an energy bounded below.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .registry import Registry


@dataclass(frozen=True)
class Diagonal:
    name: str                                   # the configuration's value: CEMOptions.diagonal
    label: str                                  # "one per head"
    rows: Callable[[int], int]                  # its rows of d numbers with H heads: H, 1, or none
    core_width: Callable[[int, int], int]       # the attention core's width per query at (d, H): its FLOPs
    interaction_latex: str                      # A_k = ... (the bilinear form)
    D: str | None                               # D's symbol in the distance form (None: the form needs a diagonal)

    def params(self, d: int, H: int) -> int:
        """Its parameters at width d with H heads: a row of d per row."""
        return self.rows(H) * d

    def distance_latex(self) -> str:
        """The distance form's score with this diagonal: x^T W_Q,k^T W_K,k c_j - (1/2)(x - c_j)^T D (x - c_j)."""
        p = "p_k" if self.D == "D_k" else "p"
        return (rf"s^k_{{ij}} = x^\top W_{{Q,k}}^\top W_{{K,k}} c_j - \tfrac12 (x - c_j)^\top {self.D} (x - c_j), "
                rf"\ {self.D} = \operatorname{{diag}}(\operatorname{{softplus}}({p}))")


DIAGONALS: Registry = Registry("diagonal")
register_diagonal = DIAGONALS.register                # add a Diagonal (a ValueError for a name taken)


register_diagonal(Diagonal("none", "none", lambda H: 0, lambda d, H: d, r"A_k = W_{Q,k}^\top W_{K,k}", None))
register_diagonal(Diagonal("per_head", "one per head", lambda H: H, lambda d, H: d + H * d,   # per head: d + H d
                           r"A_k = \operatorname{diag}(d_k) + W_{Q,k}^\top W_{K,k}", "D_k"))
register_diagonal(Diagonal("shared", "one shared by all heads", lambda H: 1, lambda d, H: 2 * d,   # bias and readout
                           r"A_k = \operatorname{diag}(d) + W_{Q,k}^\top W_{K,k}\ \ \text{(one d, all heads)}", "D"))


def softplus_inverse(y: float) -> float:
    """p with softplus(p) = y > 0."""
    return y + math.log(-math.expm1(-y))


def _bilinear_term(x: torch.Tensor, c: torch.Tensor, diag: torch.Tensor) -> torch.Tensor:
    """x_i^T diag(d_k) c_j for x (B, n_q, d), c (B, n_k, d), diag (H, d): (B, H, n_q, n_k)."""
    return torch.einsum("bid,hd,bjd->bhij", x, diag, c)


def _distance_term(x: torch.Tensor, c: torch.Tensor, diag: torch.Tensor) -> torch.Tensor:
    """-(1/2)(x_i - c_j)^T D_k (x_i - c_j), expanded: x_i^T D_k c_j - (1/2) x_i^T D_k x_i - (1/2) c_j^T D_k c_j."""
    return (_bilinear_term(x, c, diag) - 0.5 * ((x * x) @ diag.T).transpose(1, 2)[..., None]
            - 0.5 * ((c * c) @ diag.T).transpose(1, 2)[..., None, :])


def _bilinear_lines(diagonal: Diagonal, name: str) -> list[str]:
    """E_att, A_k, -grad E_att and the weights with the diagonal inside A_k."""
    return [rf"{name}(x \mid c_{{1:i}}) = -\sum_{{k=1}}^{{H}} \frac{{1}}{{\beta}} \log \sum_{{j \le i}} "
            r"e^{\beta\, x^\top A_k c_j}",
            diagonal.interaction_latex + r", \qquad \beta = 1/\sqrt{d_h}",
            rf"-\nabla_x {name} = \sum_k A_k \sum_{{j \le i}} a^k_{{ij}} c_j",
            r"a^k_{ij} = \operatorname{softmax}_j\big(\beta\, x^\top A_k c_j\big)"]


def _distance_lines(diagonal: Diagonal, name: str) -> list[str]:
    """E_att, the distance score, -grad E_att (with its pull towards the weighted inputs) and the weights."""
    return [rf"{name}(x \mid c_{{1:i}}) = -\sum_{{k=1}}^{{H}} \frac{{1}}{{\beta}} \log \sum_{{j \le i}} "
            r"e^{\beta\, s^k_{ij}}",
            diagonal.distance_latex(),
            rf"-\nabla_x {name} = \sum_k \Big(W_{{Q,k}}^\top W_{{K,k}} \sum_{{j \le i}} a^k_{{ij}} c_j + "
            rf"{diagonal.D} \big(\textstyle\sum_{{j \le i}} a^k_{{ij}} c_j - x\big)\Big)",
            r"a^k_{ij} = \operatorname{softmax}_j\big(\beta\, s^k_{ij}\big), \qquad \beta = 1/\sqrt{d_h}"]


@dataclass(frozen=True)
class DiagonalForm:
    name: str                                   # the configuration's value: CEMOptions.diagonal_form
    label: str                                  # "bilinear: x^T D c in the score"
    needs_diagonal: bool                        # means nothing with diagonal="none"
    centred: bool                               # D = softplus(p) > 0 and the score holds -(1/2)(x - c)^T D (x - c)
    start: Callable[[int, int], float]          # the parameter's starting value at (d_h, d)
    term: Callable[..., torch.Tensor]           # the diagonal's term in s^k_ij (x, c, diag) -> (B, H, n_q, n_k)
    lines: Callable[[Diagonal, str], list[str]]  # E_att, the score, -grad E_att and the weights, in LaTeX

    def matrix(self, p: torch.Tensor) -> torch.Tensor:
        """D_k from the parameter: p itself (bilinear) or softplus(p) > 0 (centred)."""
        return torch.nn.functional.softplus(p) if self.centred else p


DIAGONAL_FORMS: Registry = Registry("diagonal form")
register_diagonal_form = DIAGONAL_FORMS.register      # add a DiagonalForm (a ValueError for a name taken)

register_diagonal_form(DiagonalForm("bilinear", "bilinear: x^T D c in the score", False, False,
                                    lambda dh, d: 0.0, _bilinear_term, _bilinear_lines))
# distance: D_k from sqrt(d_h)/d, where beta d_k |x - c|^2 / 2 is about one score unit for normalized x and c
register_diagonal_form(DiagonalForm("distance", "distance: -(1/2)(x - c)^T D (x - c) with D > 0, an RBF-like score "
                                    "and an energy bounded below (needs a diagonal)", True, True,
                                    lambda dh, d: softplus_inverse(dh ** 0.5 / d), _distance_term, _distance_lines))
