"""The weight ties of the CEM layers (docs/design.md#215-the-ties), one registered ``Tie`` per setting, carrying what
the configs, the counts, the equations and the pages need: the projections it frees, their parameters and FLOPs,
the update's equation and its label.

One step on the interaction energy is attention with two ties, W_V = W_K and W_O = W_Q^T; one step on the element-
wise energy is a gated MLP with one, down = U^T (docs/design.md#23-interaction-energy-and-attention,
docs/design.md#25-element-wise-energy-and-the-gated-mlp). Untying one replaces it with a free d x d (or d_ff x d)
projection. Only the fully tied settings are gradient steps on an energy: an untied layer's update is no longer
-eta P grad E, so it has no energy, trace or autograd reference, and no page that shows energies offers it.

Attention (``CEMOptions.attn_ties``):
- "both": W_V = W_K and W_O = W_Q^T, the energy's own (the paper's layer).
- "kv":   W_V = W_K only; a free output projection W_O.
- "qo":   W_O = W_Q^T only; a free value projection W_V.
- "none": free W_V and W_O: at T = 1 a pre-norm Llama attention of the same beta.

MLP (``CEMOptions.mlp_ties``):
- "tied":   down = U^T, the energy's own.
- "untied": a free down projection W_D: at T = 1 a SwiGLU (HF's down_proj).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .registry import Registry

# each free projection: its parameters at (d, d_ff), and the projections it adds to a forward pass, once (from the
# history, for all T steps) or per step
FREE_PROJECTIONS = {"v_proj": "W_V", "o_proj": "W_O", "down_proj": "W_D"}


@dataclass(frozen=True)
class Tie:
    name: str                                   # the configuration's value: CEMOptions.attn_ties / mlp_ties
    label: str                                  # "W_V = W_K only (a free W_O)"
    free: tuple[str, ...]                       # the free projections it adds (names in FREE_PROJECTIONS)
    params: Callable[[int, int], int]           # their parameters at (d, d_ff)
    once: int                                   # projections it adds that are computed once from the history (W_V c)
    update_latex: str                           # the update's -grad-like term, in the layer's symbols

    @property
    def energy(self) -> bool:
        """Whether the update is a (preconditioned) gradient step on the energy: only with every tie."""
        return not self.free


ATTENTION_TIES: Registry = Registry("attention tie")
MLP_TIES: Registry = Registry("MLP tie")
register_attention_tie = ATTENTION_TIES.register      # add a Tie (a ValueError for a name taken)
register_mlp_tie = MLP_TIES.register

_ATTENTION = r"\sum_k {out} \sum_{{j \le i}} a^k_{{ij}}\, {value} c_j"
register_attention_tie(Tie("both", "both: W_V = W_K and W_O = W_Q^T (the energy's; the paper)", (),
                           lambda d, f: 0, 0, _ATTENTION.format(out=r"W_{Q,k}^\top", value=r"W_{K,k}")))
register_attention_tie(Tie("kv", "W_V = W_K only: a free W_O (leaves the energy view)", ("o_proj",),
                           lambda d, f: d * d, 0, _ATTENTION.format(out=r"W_{O,k}", value=r"W_{K,k}")))
register_attention_tie(Tie("qo", "W_O = W_Q^T only: a free W_V (leaves the energy view)", ("v_proj",),
                           lambda d, f: d * d, 1, _ATTENTION.format(out=r"W_{Q,k}^\top", value=r"W_{V,k}")))
register_attention_tie(Tie("none", "none: free W_V and W_O, Llama's attention at T = 1 (leaves the energy view)",
                           ("v_proj", "o_proj"), lambda d, f: 2 * d * d, 1,
                           _ATTENTION.format(out=r"W_{O,k}", value=r"W_{V,k}")))
register_mlp_tie(Tie("tied", "tied: down = U^T (the energy's; the paper)", (), lambda d, f: 0, 0,
                     r"U^\top\big(\phi(U x) \odot G c\big)"))
register_mlp_tie(Tie("untied", "untied: a free down projection W_D, SwiGLU at T = 1 (leaves the energy view)",
                     ("down_proj",), lambda d, f: d * f, 0, r"W_D\big(\phi(U x) \odot G c\big)"))


def energy_view(attn_ties: str, mlp_ties: str) -> bool:
    """Whether layers with these ties are gradient steps on an energy (every tie kept)."""
    return ATTENTION_TIES[attn_ties].energy and MLP_TIES[mlp_ties].energy


def not_an_energy(config) -> str:
    """Why a layer with this config has no energy ('' when it has one): the ties it drops."""
    dropped = [tie.label for tie in (ATTENTION_TIES.get(getattr(config, "attn_ties", "both")),
                                     MLP_TIES.get(getattr(config, "mlp_ties", "tied"))) if not tie.energy]
    if not dropped:
        return ""
    return (f"its ties ({'; '.join(dropped)}) leave the energy view: the update is no longer -eta P grad E of an "
            "energy, so it has no energy, trace or autograd reference (docs/design.md#215-the-ties)")
