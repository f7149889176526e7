"""The D+LR interaction's diagonal D (docs/design.md#24-dlr-interaction), one registered object per choice, carrying
what the configs, the counts and the app's equations need: its parameter count, the width of the attention core
it makes (its FLOPs), the equation of the interaction A_k, the symbol of D in the distance form, and its label.
The attention layer implements each choice on its own fast path (nn/attention.py), so a new diagonal is a new
path there as well as an entry here.

- "none":     A_k = W_Q,k^T W_K,k.
- "per_head": A_k = diag(d_k) + W_Q,k^T W_K,k, one d_k per head (H d parameters).
- "shared":   A_k = diag(d) + W_Q,k^T W_K,k, one d for all heads (d parameters).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .registry import Registry


@dataclass(frozen=True)
class Diagonal:
    name: str                                   # the configuration's value: CEMOptions.diagonal
    label: str                                  # "one per head"
    params: Callable[[int, int], int]           # its parameters at (d, H)
    core_width: Callable[[int, int], int]       # the attention core's width per query at (d, H): its FLOPs
    interaction_latex: str                      # A_k = ... (the bilinear form)
    D: str | None                               # D's symbol in the distance form (None: the form needs a diagonal)

    def distance_latex(self) -> str:
        """The distance form's score with this diagonal: x^T W_Q,k^T W_K,k c_j - (1/2)(x - c_j)^T D (x - c_j)."""
        p = "p_k" if self.D == "D_k" else "p"
        return (rf"s^k_{{ij}} = x^\top W_{{Q,k}}^\top W_{{K,k}} c_j - \tfrac12 (x - c_j)^\top {self.D} (x - c_j), "
                rf"\ {self.D} = \operatorname{{diag}}(\operatorname{{softplus}}({p}))")


DIAGONALS: Registry = Registry("diagonal")
register_diagonal = DIAGONALS.register                # add a Diagonal (a ValueError for a name taken)


register_diagonal(Diagonal("none", "none", lambda d, H: 0, lambda d, H: d, r"A_k = W_{Q,k}^\top W_{K,k}", None))
register_diagonal(Diagonal("per_head", "one per head", lambda d, H: H * d, lambda d, H: d + H * d,   # per head: d + H d
                           r"A_k = \operatorname{diag}(d_k) + W_{Q,k}^\top W_{K,k}", "D_k"))
register_diagonal(Diagonal("shared", "one shared by all heads", lambda d, H: d, lambda d, H: 2 * d,   # bias and readout
                           r"A_k = \operatorname{diag}(d) + W_{Q,k}^\top W_{K,k}\ \ \text{(one d, all heads)}", "D"))
