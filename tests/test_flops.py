"""FLOP counts: the closed forms of docs/design.md#41-flop-convention and a count of the actual matmuls."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import cem_core.nn.attention as attention_module
import cem_core.nn.baselines as baselines_module
from cem_core import (
    AttentionConfig,
    CEMAttention,
    CEMGatedMLP,
    CEMOptions,
    LlamaAttention,
    LlamaAttentionConfig,
    MLPConfig,
    ModelConfig,
    SwiGLU,
    SwiGLUConfig,
)
from cem_core.nn.flops import attention_flops, mlp_flops, model_flops


def ratio(a, b):
    return a["total"] / b["total"]


def test_design_ratios_at_d512_n512_h8():
    llama = attention_flops(LlamaAttentionConfig(d_model=512, n_heads=8), 512)
    assert ratio(attention_flops(AttentionConfig(d_model=512, n_heads=8, T=1), 512), llama) == pytest.approx(0.8)
    assert ratio(attention_flops(AttentionConfig(d_model=512, n_heads=8, T=2), 512), llama) == pytest.approx(1.4)
    # T = 2 in query space: k, q, o M, readout and M = W_Q W_Q^T (one more projection's worth at batch 1,
    # a quarter at batch 4) instead of 5 projections
    assert ratio(attention_flops(AttentionConfig(d_model=512, n_heads=8, T=2), 512, batch=4),
                 llama) == pytest.approx(1.25)
    x_space = AttentionConfig(d_model=512, n_heads=8, T=2, anchor=0.5, preconditioner="psd", rank=4)
    p_per_step = 512 * 2 * 2 * 512 * 4                                 # U (U^T g) for n tokens
    assert attention_flops(x_space, 512)["total"] == pytest.approx(7 * 2 * 512 ** 3 + 2 * p_per_step)  # 5 + 2 cores
    plain = attention_flops(AttentionConfig(d_model=512, n_heads=8), 512)
    # a shared diagonal doubles the core (bias and head-summed readout); one per head makes it (H + 1) x
    assert ratio(attention_flops(AttentionConfig(d_model=512, n_heads=8, diagonal="shared"), 512),
                 plain) == pytest.approx(1.25)
    assert ratio(attention_flops(AttentionConfig(d_model=512, n_heads=8, diagonal="per_head"), 512),
                 llama) == pytest.approx(2.4)
    swiglu = mlp_flops(SwiGLUConfig(d_model=512, d_ff=1376), 512)
    assert ratio(mlp_flops(MLPConfig(d_model=512, d_ff=1376), 512), swiglu) == pytest.approx(1.0)
    assert ratio(mlp_flops(MLPConfig(d_model=512, d_ff=1376, T=2), 512), swiglu) == pytest.approx(5 / 3)


def _measured(layer, n, d):
    """FLOPs torch actually dispatches (full, non-causal n^2 core counted by torch)."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        layer(torch.randn(1, n, d))
    return counter.get_total_flops()


@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("diagonal", ["none", "per_head", "shared"])
@pytest.mark.parametrize("preconditioner", ["none", "dlr"])
def test_attention_count_matches_dispatched_matmuls(T, diagonal, preconditioner, monkeypatch):
    """torch's counter does not see inside SDPA on CPU, so the core runs as explicit matmuls here;
    they compute the full n x n products (as the shared diagonal's core does in one block of queries),
    and ours halves them for causality: undo that to compare. Covers x space and query space."""
    original = attention_module.causal_attention
    for module in (attention_module, baselines_module):                # CEM attention and the Llama baseline
        monkeypatch.setattr(module, "causal_attention",
                            lambda q, k, v, scale, offset=0, need_weights=False, key_bias=None:
                            original(q, k, v, scale, offset, True, key_bias))
    d, H, n = 32, 4, 16
    cfg = AttentionConfig(d_model=d, n_heads=H, T=T, diagonal=diagonal, preconditioner=preconditioner, rank=3,
                          rope=False)
    ours = attention_flops(cfg, n)
    assert _measured(CEMAttention(cfg), n, d) == ours["projections"] + 2 * ours["core"] + ours["preconditioner"]
    llama_config = LlamaAttentionConfig(d_model=d, n_heads=H)
    llama = attention_flops(llama_config, n)
    assert _measured(LlamaAttention(llama_config), n, d) == llama["projections"] + 2 * llama["core"]


@pytest.mark.parametrize("T", [1, 2, 4])
def test_mlp_count_matches_dispatched_matmuls(T):
    d, f, n = 16, 40, 8
    cem = MLPConfig(d_model=d, d_ff=f, T=T)
    assert _measured(CEMGatedMLP(cem), n, d) == mlp_flops(cem, n)["total"]
    swiglu = SwiGLUConfig(d_model=d, d_ff=f)
    assert _measured(SwiGLU(swiglu), n, d) == mlp_flops(swiglu, n)["total"]


@pytest.mark.parametrize("variant", ["llama", "cem-attn", "cem-mlp", "cem-full"])
def test_model_flops_count_each_layer_kind(variant):
    """At T = 1 a block costs 4 (Llama) or 3 (CEM: W_K, W_Q, W_Q^T) d x d projections, the causal core
    2 n^2 d (two n x n x d products, half each) and 3 d x d_ff matmuls (SwiGLU, or CEM: G, U, U^T); the
    head costs d x vocabulary per token."""
    n, d, f, V, L = 32, 64, 96, 100, 3
    cfg = ModelConfig.variant(variant, cem=CEMOptions(), d_model=d, n_heads=4, d_ff=f, n_layers=L, vocab_size=V)
    block = {"llama": 4, "cem": 3}[cfg.attention] * 2 * n * d * d + 2 * n * n * d + 3 * 2 * n * d * f
    assert model_flops(cfg, n) == {"block": block, "blocks": L * block, "head": 2 * n * d * V,
                                   "total": L * block + 2 * n * d * V}
