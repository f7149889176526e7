"""Every fast forward equals T explicit steps x - eta P grad E by autograd on the energy
(docs/design.md#invariant-1-fast-path-equals-autograd-descent).

Tolerances: relative to the size of the update, 1e-9 in float64 and 1e-4 in float32.
The checker itself is tested by permanent mutations (a perturbed output projection, a dropped
causal mask): it must reject both.
"""
import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import randomize_

import cem_core.nn.attention as attention_module
from cem_core import AttentionConfig, CEMAttention, CEMGatedMLP, MLPConfig, assert_exact, exactness_error

RTOL64, RTOL32 = 1e-9, 1e-4

ATTENTION_GRID = list(itertools.product(("none", "per_head", "shared"), ("none", "dlr", "psd"),
                                        (1, 2, 3, 8), (False, True), (0.0, 0.7)))


@pytest.mark.parametrize("diagonal,preconditioner,T,rope,anchor", ATTENTION_GRID)
def test_attention_fast_path_is_autograd_descent(float64, diagonal, preconditioner, T, rope, anchor):
    torch.manual_seed(T)
    cfg = AttentionConfig(d_model=16, n_heads=4, T=T, eta=0.8, diagonal=diagonal,
                          preconditioner=preconditioner, rank=3, rope=rope, anchor=anchor)
    layer = randomize_(CEMAttention(cfg), seed=T)
    h = 2.0 * torch.randn(2, 7, 16)
    assert_exact(layer, h, RTOL64)
    trace = layer.trace(h)
    torch.testing.assert_close(trace.energies[0], layer.energy(layer.norm(h), h), rtol=0, atol=0)
    torch.testing.assert_close(h + trace.iterates[-1] - trace.iterates[0], layer(h), rtol=1e-12, atol=1e-12)


MLP_GRID = list(itertools.product(("none", "dlr", "psd"), (1, 2, 3, 8), (0.0, 0.7), ("silu", "gelu", "relu")))


@pytest.mark.parametrize("preconditioner,T,anchor,activation", MLP_GRID)
def test_mlp_fast_path_is_autograd_descent(float64, preconditioner, T, anchor, activation):
    torch.manual_seed(T)
    cfg = MLPConfig(d_model=12, d_ff=20, T=T, eta=0.5, preconditioner=preconditioner, rank=2,
                    anchor=anchor, activation=activation)
    layer = randomize_(CEMGatedMLP(cfg), seed=T)
    h = torch.randn(2, 5, 12)
    assert_exact(layer, h, RTOL64)
    trace = layer.trace(h)
    torch.testing.assert_close(trace.energies[0], layer.energy(layer.norm(h), h), rtol=0, atol=0)
    torch.testing.assert_close(h + trace.iterates[-1] - trace.iterates[0], layer(h), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eta_per_step", [False, True])
def test_learned_eta_is_exact_and_positive(float64, eta_per_step):
    layer = CEMAttention(AttentionConfig(d_model=16, n_heads=2, T=3, learn_eta=True, eta_per_step=eta_per_step))
    with torch.no_grad():
        layer.log_eta.copy_(torch.linspace(-3.0, 0.5, layer.log_eta.numel()))
    assert all(e > 0 for e in layer.step_size_values())
    assert_exact(layer, torch.randn(1, 6, 16), RTOL64)


def test_float32_tolerance():
    torch.manual_seed(0)
    att = randomize_(CEMAttention(AttentionConfig(d_model=32, n_heads=4, T=4, diagonal="shared", preconditioner="psd")))
    mlp = randomize_(CEMGatedMLP(MLPConfig(d_model=32, d_ff=64, T=4, eta=0.5, preconditioner="dlr")))
    h = torch.randn(2, 9, 32)
    assert_exact(att, h, RTOL32)
    assert_exact(mlp, h, RTOL32)


def test_acceptance_snippet_runs():
    att = CEMAttention(AttentionConfig(d_model=64, n_heads=4, T=2, diagonal="shared", preconditioner="psd", rank=4,
                                       rope=False))
    mlp = CEMGatedMLP(MLPConfig(d_model=64, d_ff=128, T=2))
    h = torch.randn(2, 10, 64)
    y, e, tr = att(h), att.energy(h, h), att.trace(h)
    z = mlp(h)
    assert y.shape == z.shape == h.shape and e.shape == (2, 10)
    assert tr.iterates.shape == (3, 2, 10, 64) and tr.energies.shape == (3, 2, 10)
    assert tr.weights.shape == (2, 2, 4, 10, 10)
    torch.testing.assert_close(tr.weights.sum(-1), torch.ones(2, 2, 4, 10))   # rows are softmax weights


# -- the checker rejects broken layers -------------------------------------------------------


def _attention(float_rope=True):
    torch.manual_seed(1)
    return randomize_(CEMAttention(AttentionConfig(d_model=16, n_heads=2, T=2, diagonal="per_head", rope=float_rope)))


def test_checker_rejects_perturbed_output_projection(float64, monkeypatch):
    layer = _attention()
    h = torch.randn(2, 6, 16)
    assert exactness_error(layer, h) < RTOL64
    noise = 1e-3 * torch.randn(16, 16)
    monkeypatch.setattr(layer, "_readout", lambda o: o @ (layer.q_proj.weight + noise))
    with pytest.raises(AssertionError, match="differs"):
        assert_exact(layer, h, RTOL64)


def test_checker_rejects_dropped_causal_mask(float64, monkeypatch):
    layer = _attention()
    h = torch.randn(2, 6, 16)
    assert exactness_error(layer, h) < RTOL64

    def non_causal(q, k, v, scale, offset=0, need_weights=False):
        return F.scaled_dot_product_attention(q, k, v, scale=scale), None

    monkeypatch.setattr(attention_module, "causal_attention", non_causal)
    with pytest.raises(AssertionError, match="differs"):
        assert_exact(layer, h, RTOL64)


def test_checker_rejects_perturbed_mlp_readout(float64, monkeypatch):
    torch.manual_seed(2)
    layer = CEMGatedMLP(MLPConfig(d_model=8, d_ff=16, T=2))
    h = torch.randn(2, 4, 8)
    assert exactness_error(layer, h) < RTOL64
    monkeypatch.setattr(layer, "_readout", lambda z: z @ (1.001 * layer.up_proj.weight))
    with pytest.raises(AssertionError):
        assert_exact(layer, h, RTOL64)
