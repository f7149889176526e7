"""Matmul FLOP counts of one forward pass of a layer over a sequence of n tokens (batch 1).

Convention (docs/design.md#41-flop-convention, printed by the benchmark): a matmul of (m x k) by (k x p) costs
2 m k p FLOPs; the causal attention core is counted as half of the full n x n products;
forward+backward is 3x forward (so ratios are the same for both); norms, softmax, RoPE and
element-wise work are not counted.

A layer's config says which layer is counted: ``LlamaAttentionConfig`` and ``SwiGLUConfig`` the
baselines, ``AttentionConfig`` and ``MLPConfig`` the CEM layers, ``BlockConfig`` a joint block.
"""
from __future__ import annotations

from dataclasses import replace

from .config import AttentionConfig, BlockConfig, LlamaAttentionConfig, MLPConfig, SwiGLUConfig
from .diagonals import DIAGONALS
from .precondition import PRECONDITIONERS
from .ties import ATTENTION_TIES

CONVENTION = ("matmul FLOPs only (2mkp per (m x k)(k x p) product), causal core counted as half of n^2, "
              "forward+backward = 3x forward; norms, softmax, RoPE and element-wise ops not counted")


def _matmuls(count: float, m: int, k: int, p: int) -> float:
    """`count` products of an (m x k) by a (k x p) matrix."""
    return count * 2 * m * k * p                                       # 2 m k p each


def _preconditioner_flops(cfg, rows: float) -> float:
    """P applied to `rows` vectors: its form's factor products (U (V^T g) + V (U^T g) for dlr, U (U^T g) for psd)."""
    return rows * PRECONDITIONERS[cfg.preconditioner].flops_per_row(cfg.d_model, cfg.rank)


def attention_flops(cfg: AttentionConfig | LlamaAttentionConfig, n: int, batch: int = 1) -> dict[str, float]:
    """Projection, core and preconditioner FLOPs of one forward pass over n tokens, for CEM or Llama
    attention, per sequence of a batch of `batch` (work on the weights alone is shared by the batch).

    CEM as it runs (docs/design.md#213-the-attention-fast-paths): in x space k once, then q and the
    readout W_Q^T per step (1 + 2T projections, P per step); in query space (``cfg.query_space``) k
    and q once, o M for T - 1 steps, one readout (T + 2), M = W_Q P W_Q^T formed once per batch and P
    applied once. The core is H heads of width d_h; a per-head diagonal widens each to d_h + d; a shared
    diagonal adds one head-independent bias (d * x) c^T and one readout (sum_k a) c, so 2d in all. A free W_V
    (``Tie.once``) adds one projection of the history, W_V c; a free W_O reads out through itself, at the cost of
    the tied readout (docs/design.md#215-the-ties)."""
    d = cfg.d_model
    weights = extra = 0.0
    if isinstance(cfg, LlamaAttentionConfig):
        steps, projections, width = 1, 4, d                            # q, k, v, o; one core d_h per head
    else:
        steps, width = cfg.T, DIAGONALS[cfg.diagonal].core_width(d, cfg.n_heads)
        if cfg.query_space:
            projections = cfg.T + 2                                    # k, q, (T - 1) o M, one readout
            weights = (_matmuls(1, d, d, d) + _preconditioner_flops(cfg, d)) / batch   # M = W_Q P W_Q^T
            extra = _preconditioner_flops(cfg, n)                      # P once, on the summed readout
        else:
            projections = 1 + 2 * cfg.T                                # k once; q and the readout per step
            extra = _preconditioner_flops(cfg, cfg.T * n)              # P g at every step
        projections += ATTENTION_TIES[cfg.attn_ties].once              # W_V c once, with a free W_V
    projections = _matmuls(projections, n, d, d) + weights
    core = steps * _matmuls(2, n, width, n) / 2                        # q k'^T and a v', causal half
    return {"projections": float(projections), "core": float(core), "preconditioner": float(extra),
            "total": float(projections + core + extra)}


def mlp_flops(cfg: MLPConfig | SwiGLUConfig, n: int) -> dict[str, float]:
    """Projection FLOPs of one forward pass over n tokens (SwiGLU: 3 matmuls; CEM: gate once, 2 per step, the
    readout through U^T or, untied, through a free W_D of the same size)."""
    if isinstance(cfg, SwiGLUConfig):
        matmuls, extra = 3, 0.0                                        # gate, up, down
    else:
        matmuls, extra = 1 + 2 * cfg.T, _preconditioner_flops(cfg, cfg.T * n)  # G c once; U x and U^T z per step
    projections = _matmuls(matmuls, n, cfg.d_model, cfg.d_ff)
    return {"projections": float(projections), "preconditioner": float(extra), "total": float(projections + extra)}


def block_flops(cfg: BlockConfig, n: int) -> dict[str, float]:
    """A joint block's forward over n tokens: attention's x-space steps (k once; q and the readout per step)
    and the MLP's (G c once; U x and U^T z per step), with P applied once per step to the summed gradient."""
    attention = attention_flops(replace(cfg, preconditioner="none"), n)   # query_space is False for a block
    mlp = mlp_flops(MLPConfig(d_model=cfg.d_model, d_ff=cfg.d_ff, T=cfg.T), n)
    extra = _preconditioner_flops(cfg, cfg.T * n)                      # P on the sum, once per step
    projections = attention["projections"] + mlp["projections"]
    return {"projections": projections, "core": attention["core"], "preconditioner": float(extra),
            "total": float(projections + attention["core"] + extra)}


def _sublayer_flops(config, n: int, batch: int) -> dict[str, float]:
    """One sublayer's forward over n tokens, by what its config says it is."""
    if isinstance(config, BlockConfig):
        return block_flops(config, n)
    if isinstance(config, (AttentionConfig, LlamaAttentionConfig)):
        return attention_flops(config, n, batch)
    return mlp_flops(config, n)


def model_flops(cfg, n: int, batch: int = 1) -> dict[str, float]:
    """One forward pass of a ModelConfig's language model over n tokens, per sequence of a batch of
    `batch`: a block (attention and MLP), all blocks, and the output head (d x vocabulary per token)."""
    block = sum(_sublayer_flops(config, n, batch)["total"] for _, config in cfg.sections() if config is not None)
    head = _matmuls(1, n, cfg.d_model, cfg.vocab_size)                  # the LM head, d x vocabulary per token
    return {"block": block, "blocks": cfg.n_layers * block, "head": head, "total": cfg.n_layers * block + head}
