"""CEM attention: T gradient steps on the causal log-sum-exp interaction energy.

One step with P = I, eta = 1 is causal multi-head attention with values tied to keys
(W_V = W_K) and the output projection tied to the query projection (W_O = W_Q^T):

    -grad_x E_att(x | c_{1:i}) = sum_k W_Q,k^T sum_{j<=i} a^k_ij W_K,k c_j,
    a^k_ij = softmax_j(beta (W_Q,k x)^T W_K,k c_j),  beta = 1/sqrt(d_h).

With D+LR, A_k = diag(d_k) + W_Q,k^T W_K,k (docs/design.md#24-dlr-interaction; the fast paths:
docs/design.md#213-the-attention-fast-paths). One diagonal per
head is computed by concatenating per head q' = [W_Q,k x ; d_k * x] and k' = v' = [W_K,k c ; c],
each head's core d_h + d wide. One diagonal d shared by all heads costs far less: its score
beta (d * x_i) . c_j is the same for every head, one (n, n_k) bias added to each head's scores, and
its part of the update is d * sum_j (sum_k a^k_ij) c_j, one product of the head-summed weights with
the history (about 2x the plain core instead of (H + 1)x; ``shared_diagonal_attention``). It runs over
blocks of queries, each against only the keys it can see, and recomputes the blocks in backward
where keeping their weights would take more memory than the concatenated path (``query_blocks``).

Without a diagonal, the T steps run in query space (``forward``): with q = W_Q x the step
x <- x + eta P W_Q^T o (o the merged attention outputs) is q <- q + eta o M with M = W_Q P W_Q^T,
a d x d matrix formed once from the weights, and the displacement sum_t eta_t P W_Q^T o_t is one
readout at the end: T + 2 projections for T steps instead of 2T + 1. The anchor stays linear in
query space only with P = I (then W_Q (x - x0) = q - q0); otherwise, and for ``trace``, the steps
run in x space as every CEM layer's do.

In distance form (``diagonal_form="distance"``, docs/design.md#214-the-block-as-one-energy) the diagonal
enters the score as -(1/2)(x - c_j)^T D_k (x - c_j) with D_k = softplus(p_k) > 0: the same paths with a key
bias -(1/2) c_j^T D_k c_j, computed once from the history, and a pull -sum_k D_k x in the update. The
energy's weights, context, gradient and value are one mixin, ``InteractionTerm``, so that the joint block
(``cem_core.nn.block``) descends them beside the MLP's.

The pieces every attention layer uses live here too: the causal core (``causal_attention``), the
generation cache (``AttentionCache``), splitting and merging heads and the RoPE tables at a cache
offset. The Llama baseline (``cem_core.nn.baselines``) is built from them; it is not a CEM layer.

Shapes along the forward path: B batch, n tokens (n_k keys with a cache), H heads, d_h = d/H.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .config import AttentionConfig
from .descent import EnergyDescentLayer, check_input
from .diagonals import DIAGONAL_FORMS, DIAGONALS
from .energy import attention_energy, with_anchor
from .rope import rope_angles, rotate, unrotate
from .ties import ATTENTION_TIES
from .validate import check_config

QUERY_BLOCK = 128   # queries per block of the shared-diagonal core (``query_blocks``)


def causal_attention(q, k, v, scale: float, offset: int = 0, need_weights: bool = False, key_bias=None):
    """sum_{j <= offset+i} softmax_j(scale (q_i^T k_j + b_j)) v_j, shape (B, H, n_q, d_v).

    Queries sit at absolute positions offset..offset+n_q-1 and keys at 0..n_k-1. ``key_bias`` b (B, H, n_k),
    in score units, is the distance-form diagonal's -(1/2) c_j^T D_k c_j (None: no bias). Returns
    (output, weights) with weights (B, H, n_q, n_k) only when ``need_weights``.
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    if need_weights or key_bias is not None or (n_q > 1 and n_q != n_k):
        mask = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(n_k - n_q)  # j <= i
    if need_weights:
        scores = q @ k.transpose(-1, -2)                               # q_i^T k_j
        scores = (scores if key_bias is None else scores + key_bias[..., None, :]) * scale  # beta (q_i^T k_j + b_j)
        a = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # a_ij = softmax_j
        return a @ v, a
    if key_bias is not None:                                           # beta b_j as an additive mask, -inf for j > i
        bias = (scale * key_bias[..., None, :]).expand(*key_bias.shape[:-1], n_q, n_k).masked_fill(~mask, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale), None
    if n_q == n_k or n_q == 1:
        return F.scaled_dot_product_attention(q, k, v, is_causal=n_q > 1, scale=scale), None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale), None


def shared_diagonal_attention(q, keys, dx, c, scale: float, rows: int, recompute: bool = False,
                              need_weights: bool = False, key_bias=None):
    """The core of CEM attention with one diagonal d shared by all heads, for queries at the last n_q of
    the n_k key positions: the score of head k is scale (q_i . k_j + (d * x_i) . c_j), the second term
    one head-independent (n_q, n_k) bias. q (B, H, n_q, d_h), keys (B, H, n_k, d_h), dx = d * x (B, n_q, d),
    c (B, n_k, d); ``key_bias`` (B, n_k), the distance form's -(1/2) c_j^T D c_j, or None. Returns
    sum_j a^k_ij k_j (B, H, n_q, d_h), sum_j (sum_k a^k_ij) c_j (B, n_q, d) and the weights a^k_ij
    (B, H, n_q, n_k) when ``need_weights`` (then in one block).

    Queries run in blocks of ``rows``, each against the keys its last query can see (about half the
    causal work); with ``recompute`` a block keeps only its inputs for backward and recomputes its
    weights there (``query_blocks`` says when)."""
    n_q, n_k = q.shape[-2], keys.shape[-2]
    rows = n_q if need_weights else rows
    recompute = recompute and torch.is_grad_enabled() and not need_weights
    outputs, summed, weights = [], [], None
    for start in range(0, n_q, rows):
        stop = min(start + rows, n_q)
        seen = n_k - n_q + stop                                        # the block's last query sees keys j < seen
        bias = None if key_bias is None else key_bias[:, :seen]
        args = (q[:, :, start:stop], keys[:, :, :seen], dx[:, start:stop], c[:, :seen], bias, scale, need_weights)
        o, s, weights = (checkpoint(_shared_diagonal_block, *args, use_reentrant=False) if recompute
                         else _shared_diagonal_block(*args))
        outputs.append(o)
        summed.append(s)
    return torch.cat(outputs, dim=-2), torch.cat(summed, dim=1), weights


def _shared_diagonal_block(q, keys, dx, c, key_bias, scale: float, need_weights: bool):
    """One block of b queries against the n_k keys they can see (the block's last query sees them all)."""
    n_q, n_k = q.shape[-2], keys.shape[-2]
    future = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(n_k - n_q + 1)  # j > i
    bias = dx @ c.transpose(-1, -2)                                    # (d * x_i) . c_j: (B, b, n_k)
    if key_bias is not None:
        bias = bias + key_bias[:, None]                                # - (1/2) c_j^T D c_j (distance form)
    bias = bias.masked_fill_(future, float("-inf"))                    # j <= i
    scores = (q @ keys.transpose(-1, -2)).add_(bias[:, None]).mul_(scale)  # beta (q_i . k_j + bias): (B, H, b, n_k)
    a = torch.softmax(scores, dim=-1)                                  # a^k_ij = softmax_j
    return a @ keys, a.sum(1) @ c, (a if need_weights else None)       # sum_j a^k_ij k_j, sum_j (sum_k a^k_ij) c_j


def query_blocks(n_q: int, n_k: int, n_heads: int, head_dim: int, d_model: int) -> tuple[int, bool]:
    """Queries per block of ``shared_diagonal_attention``, and whether to recompute each block in backward.

    Blocks have QUERY_BLOCK rows. The weights saved for backward, (H + 1) sum_blocks b n_k floats per
    sequence (a^k_ij and their head sum), are kept while they fit within two of the (H, n, d_h + d)
    tensors that the concatenated path saves three of (q', k' and o'); past that (small d, long n)
    every block is recomputed in backward, so memory stays no larger than that path's."""
    rows = min(n_q, QUERY_BLOCK)
    kept = sum((min(s + rows, n_q) - s) * (n_k - n_q + min(s + rows, n_q)) for s in range(0, n_q, rows))
    return rows, (n_heads + 1) * kept > 2 * n_heads * n_q * (head_dim + d_model)


def split_heads(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, n, H d_h) -> (B, H, n, d_h): the rows of a stacked projection, one block per head."""
    B, n, width = t.shape
    return t.view(B, n, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(o: torch.Tensor) -> torch.Tensor:
    """(B, H, n, d_h) -> (B, n, H d_h), the inverse of ``split_heads``."""
    B, H, n, d_h = o.shape
    return o.transpose(1, 2).reshape(B, n, H * d_h)


def rope_at(offset: int, n: int, head_dim: int, base: float, like: torch.Tensor):
    """cos and sin (n, d_h) of the rotations R_i at positions offset..offset+n-1 (after a cache of
    `offset` tokens), in the dtype and on the device of `like`."""
    positions = torch.arange(offset, offset + n, device=like.device)
    return rope_angles(positions, head_dim, base, like.dtype)


@dataclass
class AttentionCache:
    """Per-layer cache for generation. CEM stores keys only (values are the keys);
    the Llama baseline stores keys and values; a D+LR layer also stores the history c_j
    (the diagonal block's keys), once for all heads."""

    keys: torch.Tensor | None = None     # (B, H, n, d_h), rotated when RoPE is on
    values: torch.Tensor | None = None   # (B, H, n, d_h), the Llama baseline only
    inputs: torch.Tensor | None = None   # (B, n, d), D+LR only

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values, self.inputs) if t is not None)

    def append(self, name: str, new: torch.Tensor, dim: int) -> torch.Tensor:
        old = getattr(self, name)
        full = new if old is None else torch.cat((old, new), dim=dim)
        setattr(self, name, full)
        return full


@dataclass
class AttentionContext:
    keys: torch.Tensor      # k' = v' per head: (B, H, n_k, d_h), or (B, H, n_k, d_h + d) with per-head D+LR
    cos: torch.Tensor | None
    sin: torch.Tensor | None
    offset: int
    inputs: torch.Tensor | None = None    # the history c_j (B, n_k, d), for a shared diagonal
    key_bias: torch.Tensor | None = None  # distance form: -(1/2) c_j^T D_k c_j, (B, H, n_k), or (B, n_k) shared
    values: torch.Tensor | None = None    # a free W_V's values W_V,k c_j (B, H, n_k, d_h), not rotated; None: the keys


class InteractionTerm:
    """The interaction energy E_att as a term of a descent layer (mixed into ``CEMAttention`` and ``CEMBlock``):
    its weights W_Q, W_K = W_V and the diagonal, its fixed context (keys, once for all T steps), -grad E_att
    and E_att itself. The host is an nn.Module whose config is an AttentionConfig."""

    def _init_interaction(self, config: AttentionConfig) -> None:
        d, H = config.d_model, config.n_heads
        self.n_heads, self.head_dim = H, config.head_dim
        self.scale = config.head_dim ** -0.5                           # beta = 1/sqrt(d_h)
        self.q_proj = nn.Linear(d, d, bias=False)                      # W_Q (stacked heads), and W_O = W_Q^T
        self.k_proj = nn.Linear(d, d, bias=False)                      # W_K (= W_V when tied)
        free = ATTENTION_TIES[config.attn_ties].free                   # untied: W_V, W_O (docs/design.md#215-the-ties)
        if "v_proj" in free:
            self.v_proj = nn.Linear(d, d, bias=False)                  # W_V, a free value projection
        if "o_proj" in free:
            self.o_proj = nn.Linear(d, d, bias=False)                  # W_O, a free output projection
        if rows := DIAGONALS[config.diagonal].rows(H):                  # d_k per head, one d for all, or none
            start = DIAGONAL_FORMS[config.diagonal_form].start(config.head_dim, d)   # bilinear: 0, plain attention
            self.diag = nn.Parameter(torch.full((rows, d), start))      # d_k (one row shared by all heads)

    def diagonal_matrix(self) -> torch.Tensor | None:
        """The diagonals d_k as an (H, d) tensor, or None without D+LR."""
        if self.config.diagonal == "none":
            return None
        diag = DIAGONAL_FORMS[self.config.diagonal_form].matrix(self.diag)   # d_k, or D_k = softplus(p_k)
        return diag.expand(self.n_heads, -1)

    def _interaction_context(self, c: torch.Tensor, cache: AttentionCache | None = None) -> AttentionContext:
        """The keys k' = v', computed once from the history c (B, n, d) for all T steps, and the distance
        form's key bias."""
        offset = 0 if cache is None else cache.length
        cos = sin = None
        k = split_heads(self.k_proj(c), self.n_heads)                  # W_K,k c_j: (B, H, n, d_h)
        if self.config.rope:
            cos, sin = rope_at(offset, c.shape[1], self.head_dim, self.config.rope_base, c)  # (n, d_h)
            k = rotate(k, cos, sin)                                    # R_j W_K,k c_j: (B, H, n, d_h)
        values = split_heads(self.v_proj(c), self.n_heads) if hasattr(self, "v_proj") else None  # W_V,k c_j
        if cache is not None:
            k = cache.append("keys", k, dim=-2)                        # (B, H, n_k, d_h), n_k = offset + n
            if values is not None:
                values = cache.append("values", values, dim=-2)
            if self.config.diagonal != "none":
                c = cache.append("inputs", c, dim=1)                   # c_j: (B, n_k, d)
        key_bias = None
        if DIAGONAL_FORMS[self.config.diagonal_form].centred:
            key_bias = -0.5 * ((c * c) @ self.diagonal_matrix().T).transpose(1, 2)  # -(1/2) c_j^T D_k c_j: (B, H, n_k)
        if self.config.diagonal == "shared":
            return AttentionContext(keys=k, cos=cos, sin=sin, offset=offset, inputs=c,
                                    key_bias=None if key_bias is None else key_bias[:, 0])
        if self.config.diagonal == "per_head":
            B, n_k, d = c.shape
            c_heads = c[:, None].expand(B, self.n_heads, n_k, d)       # c_j for every head: (B, H, n_k, d)
            k = torch.cat((k, c_heads), dim=-1)                        # k' = [W_K,k c ; c]: (B, H, n_k, d_h + d)
        return AttentionContext(keys=k, cos=cos, sin=sin, offset=offset, key_bias=key_bias, values=values)

    def readout_matrix(self) -> torch.Tensor:
        """R with the readout u = o R (d, d): W_Q itself for the tied W_O = W_Q^T, else the free W_O^T."""
        return self.o_proj.weight.T if hasattr(self, "o_proj") else self.q_proj.weight

    def _attention_readout(self, o: torch.Tensor) -> torch.Tensor:
        """The merged heads (B, n, d) read out through W_O: sum_k W_Q,k^T o_k with the tie W_O = W_Q^T, (B, n, d)."""
        return o @ self.readout_matrix()                               # W_O = W_Q^T, or a free W_O

    def _core(self, q, ctx: AttentionContext, need_weights: bool):
        """sum_j a^k_ij v_j at the rotated queries q, back at the query position: the values are the rotated keys
        R_j W_K,k c_j, rotated back by R_i^T (W_V = W_K), or a free W_V's W_V,k c_j, not rotated (as Llama's)."""
        values = ctx.keys if ctx.values is None else ctx.values
        o, weights = causal_attention(q, ctx.keys, values, self.scale, ctx.offset, need_weights, ctx.key_bias)
        if self.config.rope and ctx.values is None:
            o = unrotate(o, ctx.cos, ctx.sin)                          # R_i^T sum_j a_ij R_j W_K,k c_j
        return o, weights

    def _interaction_gradient(self, x, ctx: AttentionContext, need_weights: bool):
        """-grad_x E_att at x (B, n, d), shape (B, n, d), and the weights a^k_ij (B, H, n, n_k) when asked."""
        d = x.shape[-1]
        q = split_heads(self.q_proj(x), self.n_heads)                  # W_Q,k x_i: (B, H, n, d_h)
        if self.config.rope:
            q = rotate(q, ctx.cos, ctx.sin)                            # R_i W_Q,k x_i: (B, H, n, d_h)
        if ctx.inputs is not None:
            return self._shared_diagonal_gradient(x, q, ctx, need_weights)
        diag = self.diagonal_matrix()                                  # d_k: (H, d), or None
        if diag is not None:
            dx = diag[None, :, None, :] * x[:, None]                   # d_k * x_i: (B, H, n, d)
            q = torch.cat((q, dx), dim=-1)                             # q' = [W_Q,k x ; d_k * x]: (B, H, n, d_h + d)
        if diag is None:                                               # o = sum_j a^k_ij v_j: (B, H, n, d_h)
            o, weights = self._core(q, ctx, need_weights)
        else:   # o = sum_j a^k_ij v'_j with v' = k' = [R_j W_K,k c_j ; c_j]: (B, H, n, d_h + d)
            o, weights = causal_attention(q, ctx.keys, ctx.keys, self.scale, ctx.offset, need_weights, ctx.key_bias)
            o, o_diag = o.split([self.head_dim, d], dim=-1)            # sum_j a_ij [R_j W_K,k c_j ; c_j]
            if self.config.rope:
                o = unrotate(o, ctx.cos, ctx.sin)                      # R_i^T sum_j a_ij R_j W_K,k c_j: (B, H, n, d_h)
        u = self._attention_readout(merge_heads(o))                    # sum_k W_Q,k^T (...): (B, n, d)
        if diag is not None:
            u = u + (diag[None, :, None, :] * o_diag).sum(1)           # + sum_k diag(d_k) sum_j a_ij c_j: (B, n, d)
        if ctx.key_bias is not None:
            u = u - diag.sum(0) * x                                    # - sum_k D_k x_i (distance form)
        return u, weights

    def _shared_diagonal_gradient(self, x, q, ctx: AttentionContext, need_weights: bool):
        """-grad_x E_att with one diagonal d shared by all heads: the head-independent score bias and the
        head-summed readout (module docstring). q: the (rotated) queries (B, H, n, d_h)."""
        c, d_row = ctx.inputs, self.diagonal_matrix()[0]               # c_j: (B, n_k, d); d: (d,)
        rows, recompute = query_blocks(q.shape[-2], c.shape[1], self.n_heads, self.head_dim, self.config.d_model)
        o, summed, weights = shared_diagonal_attention(q, ctx.keys, x * d_row, c, self.scale, rows, recompute,
                                                       need_weights, ctx.key_bias)  # (B, H, n, d_h), (B, n, d)
        if self.config.rope:
            o = unrotate(o, ctx.cos, ctx.sin)                          # R_i^T sum_j a^k_ij R_j W_K,k c_j
        u = self._attention_readout(merge_heads(o))                    # sum_k W_Q,k^T (...): (B, n, d)
        u = u + d_row * summed                                         # + diag(d) sum_j (sum_k a^k_ij) c_j
        if ctx.key_bias is not None:
            u = u - self.n_heads * d_row * x                           # - sum_k D x_i = - H d * x_i (distance form)
        return u, weights

    def _interaction_energy(self, x, c, positions=None):
        """E_att(x | c) per query, without the anchor (``attention_energy``)."""
        return attention_energy(x, c, self.q_proj.weight, self.k_proj.weight, self.n_heads,
                                diag=self.diagonal_matrix(), diagonal_form=self.config.diagonal_form,
                                rope_base=self.config.rope_base if self.config.rope else None, positions=positions)

    def _interaction_token_energy(self, points, c, token: int):
        """E_att(x | c_{1:token}) of one token at candidate points x (P, d), without the anchor: (P,)."""
        positions = torch.full((points.shape[0],), token, device=points.device)
        return self._interaction_energy(points[None], c[:, : token + 1], positions)[0]

    def cache_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        return self.config.cache_floats_per_token() * torch.finfo(dtype).bits // 8


class CEMAttention(InteractionTerm, EnergyDescentLayer):
    """h -> h + x^(T) - x^(0), T steps on E_att; see the module docstring."""

    def __init__(self, config: AttentionConfig):
        check_config(config, AttentionConfig)
        super().__init__(config)
        self._init_interaction(config)

    def _context(self, c: torch.Tensor, cache: AttentionCache | None = None) -> AttentionContext:
        return self._interaction_context(c, cache)

    def _negative_gradient(self, x, ctx: AttentionContext, need_weights: bool):
        return self._interaction_gradient(x, ctx, need_weights)        # -grad_x E_att

    def forward(self, h: torch.Tensor, cache: AttentionCache | None = None) -> torch.Tensor:
        if not self.config.query_space:
            return super().forward(h, cache)                           # T steps in x space
        if self.check_inputs:
            check_input(h, self.config.d_model)
        W, lam = self.q_proj.weight, self.config.anchor                # W_Q: (d, d); the anchor lambda
        R = self.readout_matrix()                                      # u = o R: W_Q (tied W_O = W_Q^T), or W_O^T
        x0 = self.norm(h)                                              # x^(0) = c = Norm(h): (B, n, d)
        ctx = self._context(x0, cache)                                 # keys, once for all T steps
        M = self.preconditioner(R) @ W.T                               # W_Q P W_Q^T (P symmetric; W_Q P W_O untied)
        q0 = q = self.q_proj(x0)                                       # q^(0) = W_Q x^(0): (B, n, d)
        total = 0.0                                                    # x^(t) - x^(0) = P W_Q^T total, read out once
        for t, eta in enumerate(self.step_sizes()):
            heads = split_heads(q, self.n_heads)                       # (B, H, n, d_h)
            if self.config.rope:
                heads = rotate(heads, ctx.cos, ctx.sin)                # R_i q_i
            o, _ = self._core(heads, ctx, need_weights=False)          # R_i^T sum_j a_ij R_j W_K,k c_j (tied)
            o = merge_heads(o)                                         # o^(t): -grad E = W_Q^T o - lam (x - x0)
            total = (1 - eta * lam) * total + eta * o                  # the step, in query-output space (P = I if lam)
            if t < self.config.T - 1:
                q = q + eta * (o @ M - lam * (q - q0))                 # q^(t+1) = W_Q x^(t+1)
        return h + self.preconditioner(total @ R)                      # h' = h + x^(T) - x^(0)

    def _energy(self, x, c):
        return with_anchor(self._interaction_energy(x, c), x, c, self.config.anchor)

    def _token_energy(self, points, c, token):
        return with_anchor(self._interaction_token_energy(points, c, token), points, c[0, token], self.config.anchor)
