"""The baselines the CEM layers are measured against: Llama's attention and SwiGLU MLP.

Both are pre-norm sublayers with their own residual, written as Hugging Face's modeling_llama
writes them and with its parameter names, so a ``LlamaDecoderLayer``'s weights load by name
(``cem_core.nn.hf`` maps the keys):

    LlamaAttention:  h + W_O MHA(W_Q c, W_K c, W_V c),  c = Norm(h), causal, RoPE on q and k
    SwiGLU:          h + W_down (phi(W_gate c) * W_up c)

Every weight is free, so neither is a gradient step on an energy: they have no T, eta,
preconditioner, ``energy`` or ``trace`` (their configs cannot even express one). They share the
causal core, the cache, the head layout and the RoPE tables with CEM attention
(``cem_core.nn.attention``). Shapes: B batch, n tokens (n_k keys with a cache), H heads,
d_h = d/H, d_ff the MLP's hidden width.
"""
from __future__ import annotations

import torch
from torch import nn

from .activations import ACTIVATIONS
from .attention import AttentionCache, causal_attention, merge_heads, rope_at, split_heads
from .config import LlamaAttentionConfig, SwiGLUConfig
from .descent import check_input
from .rope import rotate
from .validate import check_config


class LlamaAttention(nn.Module):
    """Pre-norm causal multi-head attention with free q_proj, k_proj, v_proj, o_proj (Llama).

    With a cache (generation), the new tokens' rotated keys and their values are appended to it
    and the queries attend to everything cached so far.
    """

    def __init__(self, config: LlamaAttentionConfig):
        check_config(config, LlamaAttentionConfig)
        super().__init__()
        self.config = config
        d = config.d_model
        self.n_heads, self.head_dim = config.n_heads, config.head_dim
        self.scale = config.head_dim ** -0.5                           # beta = 1/sqrt(d_h)
        self.norm = nn.RMSNorm(d, eps=config.norm_eps)                 # HF: input_layernorm
        self.q_proj = nn.Linear(d, d, bias=False)                      # W_Q
        self.k_proj = nn.Linear(d, d, bias=False)                      # W_K
        self.v_proj = nn.Linear(d, d, bias=False)                      # W_V
        self.o_proj = nn.Linear(d, d, bias=False)                      # W_O
        self.check_inputs = True   # a model that validates its own input turns this off

    def forward(self, h: torch.Tensor, cache: AttentionCache | None = None) -> torch.Tensor:
        if self.check_inputs:
            check_input(h, self.config.d_model)
        offset = 0 if cache is None else cache.length
        c = self.norm(h)                                               # c = Norm(h): (B, n, d)
        q = split_heads(self.q_proj(c), self.n_heads)                  # W_Q,k c_i: (B, H, n, d_h)
        k = split_heads(self.k_proj(c), self.n_heads)                  # W_K,k c_j: (B, H, n, d_h)
        v = split_heads(self.v_proj(c), self.n_heads)                  # W_V,k c_j: (B, H, n, d_h)
        if self.config.rope:
            cos, sin = rope_at(offset, h.shape[1], self.head_dim, self.config.rope_base, c)  # (n, d_h)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)            # R_i W_Q,k c_i, R_j W_K,k c_j
        if cache is not None:
            k = cache.append("keys", k, dim=-2)                        # (B, H, n_k, d_h), n_k = offset + n
            v = cache.append("values", v, dim=-2)                      # (B, H, n_k, d_h)
        o, _ = causal_attention(q, k, v, self.scale, offset)           # sum_j a^k_ij W_V,k c_j: (B, H, n, d_h)
        return h + self.o_proj(merge_heads(o))                         # h + W_O [o_1; ...; o_H]: (B, n, d)


class SwiGLU(nn.Module):
    """Pre-norm gated MLP with free gate, up and down projections (Hugging Face's LlamaMLP names:
    ``gate_proj`` inside phi, ``up_proj`` linear; the CEM MLP's names are the other way round)."""

    def __init__(self, config: SwiGLUConfig):
        check_config(config, SwiGLUConfig)
        super().__init__()
        self.config = config
        d, f = config.d_model, config.d_ff
        self.phi = ACTIVATIONS[config.activation].phi
        self.norm = nn.RMSNorm(d, eps=config.norm_eps)                 # HF: post_attention_layernorm
        self.gate_proj = nn.Linear(d, f, bias=False)                   # W_gate, inside phi (CEM's U)
        self.up_proj = nn.Linear(d, f, bias=False)                     # W_up, linear (CEM's G)
        self.down_proj = nn.Linear(f, d, bias=False)                   # W_down (CEM: U^T, not free)
        self.check_inputs = True   # a model that validates its own input turns this off

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.check_inputs:
            check_input(h, self.config.d_model)
        c = self.norm(h)                                               # c = Norm(h): (B, n, d)
        z = self.phi(self.gate_proj(c)) * self.up_proj(c)              # phi(W_gate c) * W_up c: (B, n, d_ff)
        return h + self.down_proj(z)                                   # h + W_down z: (B, n, d)
