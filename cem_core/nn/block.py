"""The block as one energy: T gradient steps on E_block = E_att + E_mlp (docs/design.md#214-the-block-as-one-energy).

A sequential CEM block runs attention's T steps and then the MLP's, each on its own energy from its own
norm. ``CEMBlock`` descends the sum of the two energies instead, from one x^(0) = Norm(h) and with one
step size, anchor and preconditioner, so every step sees both terms:

    x^(t+1) = x^(t) + eta_t P (-grad E_att(x^(t) | c) - grad E_mlp(x^(t) | c)),   h' = h + x^(T) - x^(0)

(the design of the Energy Transformer). At T = 1 this is a *parallel* block, h + Attn(Norm h) + MLP(Norm h)
with tied weights and one norm, as in GPT-J and PaLM; from T = 2 on the terms interact inside the layer.
Both terms come from the layers' own code (``InteractionTerm``, ``ElementwiseTerm``), so the block's fast
path is theirs, and ``reference_forward`` checks it by autograd on the summed energy. The query-space path
of attention does not apply: the MLP term needs x at every step.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .attention import AttentionCache, AttentionContext, InteractionTerm
from .config import BlockConfig
from .descent import EnergyDescentLayer
from .energy import with_anchor
from .mlp import ElementwiseTerm
from .validate import check_config


@dataclass
class _BlockContext:
    attention: AttentionContext   # the keys (and the distance form's key bias), once for all T steps
    gate: torch.Tensor            # G c: (B, n, d_ff)


class CEMBlock(InteractionTerm, ElementwiseTerm, EnergyDescentLayer):
    """h -> h + x^(T) - x^(0), T steps on E_att + E_mlp; see the module docstring."""

    def __init__(self, config: BlockConfig):
        check_config(config, BlockConfig)
        super().__init__(config)
        self._init_interaction(config)
        self._init_elementwise(config)

    def _context(self, c: torch.Tensor, cache: AttentionCache | None = None) -> _BlockContext:
        return _BlockContext(attention=self._interaction_context(c, cache), gate=self._elementwise_context(c))

    def _negative_gradient(self, x, ctx: _BlockContext, need_weights: bool):
        u, weights = self._interaction_gradient(x, ctx.attention, need_weights)   # -grad E_att
        return u + self._elementwise_gradient(x, ctx.gate), weights               # - grad E_att - grad E_mlp

    def _energy(self, x, c):
        e = self._interaction_energy(x, c) + self._elementwise_energy(x, c)      # E_block = E_att + E_mlp
        return with_anchor(e, x, c, self.config.anchor)

    def _token_energy(self, points, c, token):
        e = self._interaction_token_energy(points, c, token) + self._elementwise_token_energy(points, c, token)
        return with_anchor(e, points, c[0, token], self.config.anchor)   # E_att + E_mlp at each point
