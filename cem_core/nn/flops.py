"""Matmul FLOP counts of one forward pass of a layer over a sequence of n tokens (batch 1).

Convention (docs/design.md#41-flop-convention, printed by the benchmark): a matmul of (m x k) by (k x p) costs
2 m k p FLOPs; the causal attention core is counted as half of the full n x n products;
forward+backward is 3x forward (so ratios are the same for both); norms, softmax, RoPE and
element-wise work are not counted.

A layer's config says which layer is counted: ``LlamaAttentionConfig`` and ``SwiGLUConfig`` the
baselines, ``AttentionConfig`` and ``MLPConfig`` the CEM layers.
"""
from __future__ import annotations

from .config import AttentionConfig, LlamaAttentionConfig, MLPConfig, SwiGLUConfig

CONVENTION = ("matmul FLOPs only (2mkp per (m x k)(k x p) product), causal core counted as half of n^2, "
              "forward+backward = 3x forward; norms, softmax, RoPE and element-wise ops not counted")


def _matmuls(count: float, m: int, k: int, p: int) -> float:
    """`count` products of an (m x k) by a (k x p) matrix."""
    return count * 2 * m * k * p                                       # 2 m k p each


def _preconditioner_flops(cfg, n: int) -> float:
    per_token = {"none": 0, "psd": 2 * 2 * cfg.d_model * cfg.rank, "dlr": 4 * 2 * cfg.d_model * cfg.rank}
    return cfg.T * n * per_token[cfg.preconditioner]                  # P g = U (V^T g) + V (U^T g) ...


def attention_flops(cfg: AttentionConfig | LlamaAttentionConfig, n: int) -> dict[str, float]:
    """Projection and core FLOPs of one forward pass over n tokens, for CEM or Llama attention."""
    d = cfg.d_model
    if isinstance(cfg, LlamaAttentionConfig):
        steps, projections, width, extra = 1, 4, d, 0.0               # q, k, v, o; one core d_h per head
    else:
        steps, projections = cfg.T, 1 + 2 * cfg.T                      # k once; q and the readout W_Q^T per step
        width = d + (cfg.n_heads * d if cfg.diagonal != "none" else 0)  # per head d_h (+ d with D+LR)
        extra = _preconditioner_flops(cfg, n)
    projections = _matmuls(projections, n, d, d)
    core = steps * _matmuls(2, n, width, n) / 2                        # q k'^T and a v', causal half
    return {"projections": float(projections), "core": float(core), "preconditioner": float(extra),
            "total": float(projections + core + extra)}


def mlp_flops(cfg: MLPConfig | SwiGLUConfig, n: int) -> dict[str, float]:
    """Projection FLOPs of one forward pass over n tokens (SwiGLU: 3 matmuls; CEM: gate once, 2 per step)."""
    if isinstance(cfg, SwiGLUConfig):
        matmuls, extra = 3, 0.0                                        # gate, up, down
    else:
        matmuls, extra = 1 + 2 * cfg.T, _preconditioner_flops(cfg, n)  # G c once; U x and U^T z per step
    projections = _matmuls(matmuls, n, cfg.d_model, cfg.d_ff)
    return {"projections": float(projections), "preconditioner": float(extra), "total": float(projections + extra)}


def model_flops(cfg, n: int) -> dict[str, float]:
    """One forward pass of a ModelConfig's language model over n tokens: a block (attention and MLP),
    all blocks, and the output head (d x vocabulary per token)."""
    block = attention_flops(cfg.attention_config(), n)["total"] + mlp_flops(cfg.mlp_config(), n)["total"]
    head = _matmuls(1, n, cfg.d_model, cfg.vocab_size)                  # the LM head, d x vocabulary per token
    return {"block": block, "blocks": cfg.n_layers * block, "head": head, "total": cfg.n_layers * block + head}
