"""Rotary position embedding (Llama's rotate-half convention), as used inside the CEM score.

R_i rotates a head vector at position i; R_i^T = R_{-i} rotates it back. In the interaction
energy the score is (R_i W_Q,k x)^T (R_j W_K,k c_j), so the exact gradient reads the *rotated*
keys as values and rotates the result back at the query position (design.md §2).
"""
from __future__ import annotations

import torch


def rope_angles(positions: torch.Tensor, head_dim: int, base: float, dtype: torch.dtype):
    """cos and sin of shape (n, head_dim) for integer positions (n,)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64,
                                             device=positions.device) / head_dim))
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]   # theta_i = i * base^(-2m/d_h)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _turn(v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    """Rotate the pairs (v_m, v_{m+d/2}) by +-theta: half-width products and one concatenation,
    fewer passes over memory than v cos + rotate_half(v) sin (the same numbers up to rounding)."""
    half = v.shape[-1] // 2
    v1, v2 = v[..., :half], v[..., half:]
    c, s = cos[..., :half], sign * sin[..., :half]                     # cos and sin repeat over the halves
    return torch.cat((v1 * c - v2 * s, v2 * c + v1 * s), dim=-1)


def rotate(v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """R_i v_i over the second-to-last (position) axis."""
    return _turn(v, cos, sin, 1.0)                                    # R_i v = v cos + rotate_half(v) sin


def unrotate(v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """R_i^T v_i, the inverse rotation."""
    return _turn(v, cos, sin, -1.0)                                   # R_i^T v = v cos - rotate_half(v) sin
