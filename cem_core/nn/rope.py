"""Rotary position embedding (Llama's rotate-half convention), as used inside the CEM score.

R_i rotates a head vector at position i; R_i^T = R_{-i} rotates it back. In the interaction
energy the score is (R_i W_Q,k x)^T (R_j W_K,k c_j), so the exact gradient reads the *rotated*
keys as values and rotates the result back at the query position (docs/design.md#210-rope).

The rotation is one autograd Function: its backward is the inverse rotation (R^T, R
orthogonal), so autograd stores no copies of v and builds no zero-filled slice gradients, and
each direction writes the output once in half-width products.
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
    """Rotate the pairs (v_m, v_{m+d/2}) by sign * theta into a fresh tensor laid out like v."""
    half = v.shape[-1] // 2
    shape = torch.broadcast_shapes(v.shape, cos.shape)
    dtype = torch.promote_types(v.dtype, cos.dtype)
    out = torch.empty_like(v, dtype=dtype) if shape == v.shape else v.new_empty(shape, dtype=dtype)
    v1, v2, o1, o2 = v[..., :half], v[..., half:], out[..., :half], out[..., half:]
    c, s = cos[..., :half], sin[..., :half]                            # cos and sin repeat over the halves
    torch.mul(v1, c, out=o1).addcmul_(v2, s, value=-sign)              # v_m cos - sign v_{m+d/2} sin
    torch.mul(v2, c, out=o2).addcmul_(v1, s, value=sign)               # v_{m+d/2} cos + sign v_m sin
    return out


class _Rotation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v, cos, sin, sign: float):
        if cos.requires_grad or sin.requires_grad:
            raise ValueError("RoPE angles are constants; cos and sin must not require grad")
        ctx.save_for_backward(cos, sin)
        ctx.sign = sign
        return _turn(v, cos, sin, sign)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return _Rotation.apply(grad, cos, sin, -ctx.sign), None, None, None  # d(R v)/dv = R^T


def rotate(v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """R_i v_i over the second-to-last (position) axis."""
    return _Rotation.apply(v, cos, sin, 1.0)                           # R_i v = v cos + rotate_half(v) sin


def unrotate(v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """R_i^T v_i, the inverse rotation."""
    return _Rotation.apply(v, cos, sin, -1.0)                          # R_i^T v = v cos - rotate_half(v) sin
