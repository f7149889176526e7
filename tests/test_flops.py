"""FLOP counts: the closed forms of docs/design.md#41-flop-convention and a count of the actual matmuls."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import cem_core.nn.attention as attention_module
from cem_core import AttentionConfig, CEMAttention, CEMGatedMLP, LlamaAttention, MLPConfig, SwiGLU
from cem_core.nn.flops import attention_flops, mlp_flops


def ratio(a, b):
    return a["total"] / b["total"]


def test_design_ratios_at_d512_n512_h8():
    llama = attention_flops(AttentionConfig(d_model=512, n_heads=8, untied=True), 512)
    assert ratio(attention_flops(AttentionConfig(d_model=512, n_heads=8, T=1), 512), llama) == pytest.approx(0.8)
    assert ratio(attention_flops(AttentionConfig(d_model=512, n_heads=8, T=2), 512), llama) == pytest.approx(1.4)
    assert ratio(attention_flops(AttentionConfig(d_model=512, n_heads=8, diagonal="shared"), 512),
                 llama) == pytest.approx(2.4)
    swiglu = mlp_flops(MLPConfig(d_model=512, d_ff=1376, untied=True), 512)
    assert ratio(mlp_flops(MLPConfig(d_model=512, d_ff=1376), 512), swiglu) == pytest.approx(1.0)
    assert ratio(mlp_flops(MLPConfig(d_model=512, d_ff=1376, T=2), 512), swiglu) == pytest.approx(5 / 3)


def _measured(layer, n, d):
    """FLOPs torch actually dispatches (full, non-causal n^2 core counted by torch)."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        layer(torch.randn(1, n, d))
    return counter.get_total_flops()


@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("diagonal", ["none", "per_head"])
def test_attention_count_matches_dispatched_matmuls(T, diagonal, monkeypatch):
    """torch's counter does not see inside SDPA on CPU, so the core runs as explicit matmuls here;
    they compute the full n x n products, and ours halves them for causality: undo that to compare."""
    original = attention_module.causal_attention
    monkeypatch.setattr(attention_module, "causal_attention",
                        lambda q, k, v, scale, offset, need_weights: original(q, k, v, scale, offset, True))
    d, H, n = 32, 4, 16
    cfg = AttentionConfig(d_model=d, n_heads=H, T=T, diagonal=diagonal, rope=False)
    ours = attention_flops(cfg, n)
    assert _measured(CEMAttention(cfg), n, d) == ours["projections"] + 2 * ours["core"]
    llama = attention_flops(AttentionConfig(d_model=d, n_heads=H, untied=True), n)
    assert _measured(LlamaAttention(AttentionConfig(d_model=d, n_heads=H)), n, d) == llama["projections"] + 2 * llama["core"]


@pytest.mark.parametrize("T", [1, 2, 4])
def test_mlp_count_matches_dispatched_matmuls(T):
    d, f, n = 16, 40, 8
    assert _measured(CEMGatedMLP(MLPConfig(d_model=d, d_ff=f, T=T)), n, d) == mlp_flops(MLPConfig(d_model=d, d_ff=f, T=T), n)["total"]
    assert _measured(SwiGLU(MLPConfig(d_model=d, d_ff=f)), n, d) == mlp_flops(MLPConfig(d_model=d, d_ff=f, untied=True), n)["total"]
