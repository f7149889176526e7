"""Matmul FLOP counts of one forward pass of a layer over a sequence of n tokens (batch 1).

Convention (docs/design.md#41-flop-convention, printed by the benchmark): a matmul of (m x k) by (k x p) costs
2 m k p FLOPs; the causal attention core is counted as half of the full n x n products;
forward+backward is 3x forward (so ratios are the same for both); norms, softmax, RoPE and
element-wise work are not counted.
"""
from __future__ import annotations

from .config import AttentionConfig, MLPConfig

CONVENTION = ("matmul FLOPs only (2mkp per (m x k)(k x p) product), causal core counted as half of n^2, "
              "forward+backward = 3x forward; norms, softmax, RoPE and element-wise ops not counted")


def _preconditioner_flops(cfg, n: int) -> float:
    per_token = {"none": 0, "psd": 2 * 2 * cfg.d_model * cfg.rank, "dlr": 4 * 2 * cfg.d_model * cfg.rank}
    return cfg.T * n * per_token[cfg.preconditioner]                  # P g = U (V^T g) + V (U^T g) ...


def attention_flops(cfg: AttentionConfig, n: int) -> dict[str, float]:
    """Projection and core FLOPs of one forward pass over n tokens."""
    d, H = cfg.d_model, cfg.n_heads
    if cfg.untied:
        projections = 4 * 2 * n * d * d                                # q, k, v, o
    else:
        projections = (1 + 2 * cfg.T) * 2 * n * d * d                  # k once; q and the readout W_Q^T per step
    core_width = d + (H * d if cfg.diagonal != "none" else 0)          # per head d_h (+ d with D+LR)
    core = cfg.T * 2 * (2 * n * n * core_width) / 2                    # q k'^T and a v', causal half
    extra = _preconditioner_flops(cfg, n)
    return {"projections": float(projections), "core": float(core), "preconditioner": float(extra),
            "total": float(projections + core + extra)}


def mlp_flops(cfg: MLPConfig, n: int) -> dict[str, float]:
    """Projection FLOPs of one forward pass over n tokens (SwiGLU: 3 matmuls; CEM: gate once, 2 per step)."""
    one = 2 * n * cfg.d_model * cfg.d_ff
    projections = 3 * one if cfg.untied else (1 + 2 * cfg.T) * one
    extra = _preconditioner_flops(cfg, n)
    return {"projections": float(projections), "preconditioner": float(extra), "total": float(projections + extra)}


def model_flops(cfg, n: int) -> dict[str, float]:
    """One forward pass of a ModelConfig's language model over n tokens: a block (attention and MLP),
    all blocks, and the output head (d x vocabulary per token)."""
    block = attention_flops(cfg.attention_config(), n)["total"] + mlp_flops(cfg.mlp_config(), n)["total"]
    head = 2.0 * n * cfg.d_model * cfg.vocab_size
    return {"block": block, "blocks": cfg.n_layers * block, "head": head, "total": cfg.n_layers * block + head}
