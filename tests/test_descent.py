"""Causality and what the energy does along the descent (docs/design.md#invariant-3-causality,
docs/design.md#invariant-4-energy-along-the-descent)."""
import itertools

import pytest
import torch
from conftest import covering, randomize_

from cem_core import (
    VARIANTS,
    AttentionConfig,
    BlockConfig,
    CEMAttention,
    CEMBlock,
    CEMGatedMLP,
    CEMOptions,
    LanguageModel,
    MLPConfig,
    ModelConfig,
)

# -- causality ---------------------------------------------------------------------------------


@pytest.mark.parametrize("diagonal,preconditioner,rope", covering(list(itertools.product(
    ("none", "per_head", "shared"), ("none", "dlr", "psd"), (False, True)))))
def test_attention_is_causal(float64, diagonal, preconditioner, rope):
    torch.manual_seed(0)
    layer = randomize_(CEMAttention(AttentionConfig(d_model=16, n_heads=2, T=3, diagonal=diagonal,
                                                    preconditioner=preconditioner, rope=rope, anchor=0.3)))
    h = torch.randn(2, 8, 16)
    i = 4
    h2 = h.clone()
    h2[:, i + 1:] += 5 * torch.randn(2, 8 - i - 1, 16)          # change only the future of token i
    y, y2 = layer(h), layer(h2)
    torch.testing.assert_close(y[:, : i + 1], y2[:, : i + 1], rtol=0, atol=1e-12)
    assert (y[:, i + 1:] - y2[:, i + 1:]).abs().max() > 1e-3     # the perturbation is visible later
    tr, tr2 = layer.trace(h), layer.trace(h2)
    torch.testing.assert_close(tr.energies[:, :, : i + 1], tr2.energies[:, :, : i + 1], rtol=0, atol=1e-12)
    assert tr.weights[..., : i + 1, i + 1:].abs().max() == 0     # no weight on j > i


@pytest.mark.parametrize("variant", VARIANTS)
def test_language_model_is_causal(float64, variant):
    torch.manual_seed(0)
    cfg = ModelConfig.variant(variant, vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_layers=2,
                              cem=CEMOptions(T=2, diagonal="shared"))
    model = LanguageModel(cfg)
    idx = torch.randint(0, 40, (2, 10))
    idx2 = idx.clone()
    idx2[:, 6:] = (idx2[:, 6:] + 1) % 40
    torch.testing.assert_close(model(idx)[:, :6], model(idx2)[:, :6], rtol=0, atol=1e-12)


# -- energy descent (docs/design.md#invariant-4-energy-along-the-descent) ---------------------------------------


@pytest.mark.parametrize("preconditioner,eta", list(itertools.product(("none", "psd"), (0.05, 1.0, 20.0))))
@pytest.mark.parametrize("diagonal", ("none", "shared"))
def test_attention_energy_falls_at_every_step(float64, preconditioner, eta, diagonal):
    """E_att is concave, so with P = I or P positive definite every step lowers it, for any eta."""
    torch.manual_seed(3)
    layer = randomize_(CEMAttention(AttentionConfig(d_model=16, n_heads=4, T=12, eta=eta, diagonal=diagonal,
                                                    preconditioner=preconditioner)))
    tr = layer.trace(torch.randn(3, 9, 16))
    steps = tr.energies[1:] - tr.energies[:-1]
    assert steps.max() < 0, f"energy rose by {steps.max():.3e}"


def test_mlp_energy_falls_for_psd_and_small_eta(float64):
    torch.manual_seed(4)
    layer = randomize_(CEMGatedMLP(MLPConfig(d_model=12, d_ff=24, T=15, eta=0.05, preconditioner="psd")))
    tr = layer.trace(torch.randn(3, 6, 12))
    assert (tr.energies[1:] - tr.energies[:-1]).max() < 0


def test_mlp_energy_can_rise_for_large_eta(float64):
    """The MLP energy is not concave: a too-large step overshoots (the app explains this)."""
    torch.manual_seed(4)
    layer = CEMGatedMLP(MLPConfig(d_model=12, d_ff=24, T=6, eta=50.0))
    tr = layer.trace(torch.randn(3, 6, 12))
    assert (tr.energies[1:] - tr.energies[:-1]).max() > 0


def _paper_form_step_that_raises(layer_cls, config, h, token):
    """Build P = diag(softplus(p)) + U V^T + V U^T with U = g/|g|, V = -g/|g| for the gradient g
    of one token: then g^T P g = g^T D g - 2|g|^2 < 0 and a small step raises that token's energy."""
    layer = layer_cls(config)
    x0 = layer.norm(h).detach().requires_grad_(True)
    (g,) = torch.autograd.grad(layer.energy(x0, h)[0, token], x0)
    g = g[0, token]
    u = (g / g.norm())[:, None]
    with torch.no_grad():
        layer.preconditioner.p.fill_(0.5413248546129181)            # softplus(p) = 1: D = I
        layer.preconditioner.U.copy_(u)
        layer.preconditioner.V.copy_(-u)
    return layer


@pytest.mark.parametrize("kind", ["attention", "mlp"])
def test_indefinite_paper_form_preconditioner_raises_energy(float64, kind):
    torch.manual_seed(5)
    h = torch.randn(1, 5, 8)
    if kind == "attention":
        layer = _paper_form_step_that_raises(CEMAttention, AttentionConfig(
            d_model=8, n_heads=2, eta=0.01, preconditioner="dlr", rank=1), h, token=3)
    else:
        layer = _paper_form_step_that_raises(CEMGatedMLP, MLPConfig(
            d_model=8, d_ff=16, eta=0.01, preconditioner="dlr", rank=1), h, token=3)
    eig = torch.linalg.eigvalsh(layer.preconditioner.matrix())
    assert eig.min() < -0.5                                          # P = I - 2 u u^T: eigenvalue -1
    tr = layer.trace(h)
    assert tr.energies[1, 0, 3] > tr.energies[0, 0, 3]              # the step raised the energy


def test_psd_preconditioner_is_positive_definite(float64):
    for seed in range(5):
        torch.manual_seed(seed)
        layer = randomize_(CEMAttention(AttentionConfig(d_model=16, n_heads=2, preconditioner="psd", rank=8)),
                           seed=seed, scale=2.0)
        P = layer.preconditioner.matrix()
        torch.testing.assert_close(P, P.T)
        assert torch.linalg.eigvalsh(P).min() > 0


def test_anchor_converges_where_plain_energy_runs_off(float64):
    torch.manual_seed(0)
    h = torch.randn(1, 6, 16)
    plain = CEMAttention(AttentionConfig(d_model=16, n_heads=2, T=60, eta=0.5))
    anchored = CEMAttention(AttentionConfig(d_model=16, n_heads=2, T=60, eta=0.5, anchor=1.0))
    anchored.load_state_dict(plain.state_dict())
    tp, ta = plain.trace(h), anchored.trace(h)
    # T = 1 is unchanged by the anchor (its gradient is zero at x^(0))
    torch.testing.assert_close(tp.iterates[1], ta.iterates[1], rtol=1e-12, atol=1e-12)
    # anchored: update norm -> 0 and the iterates stay bounded
    assert ta.update_norms[-1].max() < 1e-6 * ta.update_norms[0].max()
    # plain: no minimum; steps do not shrink and |x| grows roughly linearly in t
    assert tp.update_norms[-10:].min() > 0.2 * tp.update_norms[0].min()
    radius = tp.iterates.norm(dim=-1)[:, 0]                          # (T+1, n)
    assert (radius[-1] > 3 * radius[0]).all()
    assert (radius[60] - radius[30] > 0.5 * (radius[30] - radius[0])).all()


@pytest.mark.parametrize("kind", ["attention", "mlp", "joint"])
@pytest.mark.parametrize("rope,diagonal,form", [(False, "none", "bilinear"), (True, "per_head", "bilinear"),
                                               (True, "shared", "distance")])
def test_energy_at_equals_energy_with_the_token_replaced(float64, kind, rope, diagonal, form):
    torch.manual_seed(7)
    fields = dict(d_model=8, n_heads=2, rope=rope, diagonal=diagonal, diagonal_form=form, anchor=0.4)
    if kind == "attention":
        layer = randomize_(CEMAttention(AttentionConfig(**fields)))
    elif kind == "joint":
        layer = randomize_(CEMBlock(BlockConfig(d_ff=12, **fields)))
    else:
        layer = randomize_(CEMGatedMLP(MLPConfig(d_model=8, d_ff=12, anchor=0.4)))
    h = torch.randn(1, 6, 8)
    points = torch.randn(5, 8)
    token = 3
    ours = layer.energy_at(points, h, token)
    x = layer.norm(h).detach().repeat(5, 1, 1)
    x[:, token] = points
    expected = layer.energy(x, h.repeat(5, 1, 1))[:, token]
    torch.testing.assert_close(ours, expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="token=6"):
        layer.energy_at(points, h, 6)
