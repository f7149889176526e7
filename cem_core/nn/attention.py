"""CEM attention: T gradient steps on the causal log-sum-exp interaction energy.

One step with P = I, eta = 1 is causal multi-head attention with values tied to keys
(W_V = W_K) and the output projection tied to the query projection (W_O = W_Q^T):

    -grad_x E_att(x | c_{1:i}) = sum_k W_Q,k^T sum_{j<=i} a^k_ij W_K,k c_j,
    a^k_ij = softmax_j(beta (W_Q,k x)^T W_K,k c_j),  beta = 1/sqrt(d_h).

With D+LR, A_k = diag(d_k) + W_Q,k^T W_K,k, computed by concatenating per head
q' = [W_Q,k x ; d_k * x] and k' = v' = [W_K,k c ; c] (docs/design.md#24-dlr-interaction). ``LlamaAttention`` is the
same sublayer with free q/k/v/o weights (``untied=True``), i.e. a standard pre-norm Llama
attention block h + o_proj(MHA(Norm(h))).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from .config import AttentionConfig
from .descent import EnergyDescentLayer
from .energy import attention_energy
from .rope import rope_angles, rotate, unrotate


def causal_attention(q, k, v, scale: float, offset: int = 0, need_weights: bool = False):
    """sum_{j <= offset+i} softmax_j(scale q_i^T k_j) v_j, shape (B, H, n_q, d_v).

    Queries sit at absolute positions offset..offset+n_q-1 and keys at 0..n_k-1. Returns
    (output, weights) with weights (B, H, n_q, n_k) only when ``need_weights``.
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    if need_weights or (n_q > 1 and n_q != n_k):
        mask = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(n_k - n_q)  # j <= i
    if need_weights:
        scores = (q @ k.transpose(-1, -2)) * scale                     # beta q_i^T k_j
        a = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # a_ij = softmax_j
        return a @ v, a
    if n_q == n_k or n_q == 1:
        return F.scaled_dot_product_attention(q, k, v, is_causal=n_q > 1, scale=scale), None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale), None


@dataclass
class AttentionCache:
    """Per-layer cache for generation. CEM stores keys only (values are the keys);
    the Llama baseline stores keys and values; a D+LR layer also stores the history c_j
    (the diagonal block's keys), once for all heads."""

    keys: torch.Tensor | None = None     # (B, H, n, d_h), rotated when RoPE is on
    values: torch.Tensor | None = None   # (B, H, n, d_h), untied only
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
class _Context:
    keys: torch.Tensor      # k' per head: (B, H, n_k, d_h [+ d])
    values: torch.Tensor    # v' (the same tensor as keys when tied)
    cos: torch.Tensor | None
    sin: torch.Tensor | None
    offset: int


class CEMAttention(EnergyDescentLayer):
    """h -> h + x^(T) - x^(0), T steps on E_att; see the module docstring."""

    def __init__(self, config: AttentionConfig):
        if not isinstance(config, AttentionConfig):
            raise ValueError(f"config must be an AttentionConfig; got {type(config).__name__}")
        super().__init__(config)
        d, H = config.d_model, config.n_heads
        self.n_heads, self.head_dim = H, config.head_dim
        self.scale = config.head_dim ** -0.5                           # beta = 1/sqrt(d_h)
        self.q_proj = nn.Linear(d, d, bias=False)                      # W_Q (stacked heads)
        self.k_proj = nn.Linear(d, d, bias=False)                      # W_K = W_V
        if config.untied:
            self.v_proj = nn.Linear(d, d, bias=False)
            self.o_proj = nn.Linear(d, d, bias=False)
        if config.diagonal != "none":
            rows = H if config.diagonal == "per_head" else 1
            self.diag = nn.Parameter(torch.zeros(rows, d))              # d_k (one row shared by all heads)

    def diagonal_matrix(self) -> torch.Tensor | None:
        """The diagonals d_k as an (H, d) tensor, or None without D+LR."""
        if self.config.diagonal == "none":
            return None
        return self.diag.expand(self.n_heads, -1)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        B, n, _ = t.shape
        return t.view(B, n, self.n_heads, self.head_dim).transpose(1, 2)

    def _context(self, c: torch.Tensor, cache: AttentionCache | None = None) -> _Context:
        offset = 0 if cache is None else cache.length
        n = c.shape[1]
        cos = sin = None
        k = self._heads(self.k_proj(c))                                # W_K,k c_j
        if self.config.rope:
            positions = torch.arange(offset, offset + n, device=c.device)
            cos, sin = rope_angles(positions, self.head_dim, self.config.rope_base, c.dtype)
            k = rotate(k, cos, sin)                                    # R_j W_K,k c_j
        v = self._heads(self.v_proj(c)) if self.config.untied else None
        if cache is not None:
            k = cache.append("keys", k, dim=-2)
            if v is not None:
                v = cache.append("values", v, dim=-2)
            if self.config.diagonal != "none":
                c = cache.append("inputs", c, dim=1)
        if self.config.diagonal != "none":
            B, n_k, d = c.shape
            k = torch.cat((k, c[:, None].expand(B, self.n_heads, n_k, d)), dim=-1)  # k' = [W_K,k c ; c]
        return _Context(keys=k, values=k if v is None else v, cos=cos, sin=sin, offset=offset)

    def _readout(self, o: torch.Tensor) -> torch.Tensor:
        """Merge heads (B, n, d) and project: tied, sum_k W_Q,k^T o_k; untied, W_O o."""
        if self.config.untied:
            return self.o_proj(o)
        return o @ self.q_proj.weight                                  # W_O = W_Q^T

    def _negative_gradient(self, x, ctx: _Context, need_weights: bool):
        B, n, d = x.shape
        q = self._heads(self.q_proj(x))                                # W_Q,k x_i
        if self.config.rope:
            q = rotate(q, ctx.cos, ctx.sin)                            # R_i W_Q,k x_i
        diag = self.diagonal_matrix()
        if diag is not None:
            q = torch.cat((q, diag[None, :, None, :] * x[:, None]), dim=-1)  # q' = [W_Q,k x ; d_k * x]
        o, weights = causal_attention(q, ctx.keys, ctx.values, self.scale, ctx.offset, need_weights)
        if diag is not None:
            o, o_diag = o.split([self.head_dim, d], dim=-1)            # sum_j a_ij [R_j W_K,k c_j ; c_j]
        if self.config.rope and not self.config.untied:
            o = unrotate(o, ctx.cos, ctx.sin)                          # R_i^T sum_j a_ij R_j W_K,k c_j
        u = self._readout(o.transpose(1, 2).reshape(B, n, d))         # sum_k W_Q,k^T (...)
        if diag is not None:
            u = u + (diag[None, :, None, :] * o_diag).sum(1)           # + sum_k diag(d_k) sum_j a_ij c_j
        return u, weights

    def _energy(self, x, c):
        return attention_energy(x, c, self.q_proj.weight, self.k_proj.weight, self.n_heads,
                                diag=self.diagonal_matrix(),
                                rope_base=self.config.rope_base if self.config.rope else None,
                                anchor=self.config.anchor, x0=c)

    def _token_energy(self, points, c, token):
        P = points.shape[0]
        return attention_energy(points[None], c[:, : token + 1], self.q_proj.weight, self.k_proj.weight,
                                self.n_heads, diag=self.diagonal_matrix(),
                                rope_base=self.config.rope_base if self.config.rope else None,
                                anchor=self.config.anchor, x0=c[:, token:token + 1],
                                positions=torch.full((P,), token, device=points.device))[0]

    def cache_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        return self.config.cache_floats_per_token() * torch.finfo(dtype).bits // 8


class LlamaAttention(CEMAttention):
    """Baseline: pre-norm causal MHA with free q_proj, k_proj, v_proj, o_proj (RoPE as Llama).

    Exactly the ``untied=True`` CEM layer, so both share one tested code path:
    h + o_proj(softmax(beta q k^T) v) with q, k, v from Norm(h).
    """

    def __init__(self, config: AttentionConfig):
        if not isinstance(config, AttentionConfig):
            raise ValueError(f"config must be an AttentionConfig; got {type(config).__name__}")
        super().__init__(replace(config, untied=True))
