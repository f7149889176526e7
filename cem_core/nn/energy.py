"""The conditional energies as pure functions of (x, history, weights).

Shapes: x and c are (B, n, d); x_i is the optimization variable of token i, c_j = Norm(h_j) the
fixed causal history. Each function returns the energy of every token, shape (B, n), so that
grad of the sum with respect to x is the per-token gradient (E_i depends on x_i only).
These are the *reference* definitions: the layers' fast paths are tested against autograd on
them (docs/design.md#invariant-1-fast-path-equals-autograd-descent).
"""
from __future__ import annotations

import torch

from .activations import ACTIVATIONS
from .diagonals import DIAGONAL_FORMS
from .rope import rope_angles, rotate

# ---------------------------------------------------------------------------------------------
# Energies
# ---------------------------------------------------------------------------------------------


def anchor_energy(x: torch.Tensor, x0: torch.Tensor, anchor: float) -> torch.Tensor:
    """(lambda/2) |x - x0|^2 per token: our extension, not the paper's (docs/design.md#29-the-anchor-our-extension)."""
    return 0.5 * anchor * ((x - x0) ** 2).sum(-1)


def with_anchor(e: torch.Tensor, x: torch.Tensor, x0: torch.Tensor, anchor: float) -> torch.Tensor:
    """e + (lambda/2)|x - x0|^2 when the anchor is on, e itself otherwise."""
    return e + anchor_energy(x, x0, anchor) if anchor else e


def attention_scores(x, c, w_q, w_k, n_heads, diag=None, rope_base=None, positions=None,
                     diagonal_form="bilinear"):
    """s^k_ij per head, shape (B, H, n_q, n_k), unmasked: x_i^T W_Q,k^T R_i^T R_j W_K,k c_j plus the diagonal
    term, x_i^T diag(d_k) c_j ("bilinear", D+LR) or -(1/2)(x_i - c_j)^T diag(d_k) (x_i - c_j) ("distance");
    the diagonal term is not rotated. Query i sits at ``positions[i]`` (default 0..n_q-1), key j at position j.
    """
    B, n, d = x.shape
    dh = d // n_heads
    q = (x @ w_q.T).view(B, n, n_heads, dh).transpose(1, 2)            # W_Q,k x_i
    k = (c @ w_k.T).view(B, c.shape[1], n_heads, dh).transpose(1, 2)   # W_K,k c_j
    if rope_base is not None:
        cos, sin = rope_angles(torch.arange(c.shape[1], device=x.device), dh, rope_base, x.dtype)
        k = rotate(k, cos, sin)                                        # R_j k_j
        if positions is not None:
            cos, sin = rope_angles(positions, dh, rope_base, x.dtype)
        q = rotate(q, cos[:n], sin[:n])                                # R_i q_i
    s = q @ k.transpose(-1, -2)                                        # (W_Q,k x_i)^T (W_K,k c_j)
    if diag is not None:                                               # + x_i^T D_k c_j, or -(1/2)(x_i - c_j)^T D_k (.)
        s = s + DIAGONAL_FORMS[diagonal_form].term(x, c, diag)
    return s


def attention_energy(x, c, w_q, w_k, n_heads, *, diag=None, rope_base=None, anchor=0.0, x0=None, positions=None,
                     diagonal_form="bilinear"):
    """E_att(x_i | c_{1:i}) = -sum_k (1/beta) log sum_{j<=i} exp(beta s^k_ij), per token (s: ``attention_scores``).

    beta = 1/sqrt(d_h). ``diag`` is (H, d) (one row per head; a shared diagonal is one row
    broadcast), used as ``diagonal_form`` says. ``rope_base`` None means no RoPE. With ``anchor`` > 0 adds
    (lambda/2)|x - x0|^2.
    By default x and c are the same tokens (query i at position i); ``positions`` (n_q,) places
    the queries elsewhere, e.g. many candidate x for one token i against its history c_{1:i}.
    """
    beta = (x.shape[-1] // n_heads) ** -0.5                            # beta = 1/sqrt(d_h) = 1/tau
    s = attention_scores(x, c, w_q, w_k, n_heads, diag, rope_base, positions, diagonal_form)
    query_pos = torch.arange(x.shape[1], device=x.device) if positions is None else positions
    future = torch.arange(c.shape[1], device=x.device)[None, :] > query_pos[:, None]
    s = s.masked_fill(future, float("-inf"))                           # the sum runs over j <= i
    e = -(torch.logsumexp(beta * s, dim=-1) / beta).sum(1)             # -sum_k (1/beta) LSE_j(beta s)
    return with_anchor(e, x, x0, anchor)


def mlp_energy(x, c, w_up, w_gate, activation="silu", *, anchor=0.0, x0=None):
    """E_mlp(x | c) = -sum_m (G c)_m Phi((U x)_m), per token; U = up_proj, G = gate_proj."""
    antiderivative = ACTIVATIONS[activation].Phi
    e = -((c @ w_gate.T) * antiderivative(x @ w_up.T)).sum(-1)         # -sum_m (Gc)_m Phi((Ux)_m)
    return with_anchor(e, x, x0, anchor)
