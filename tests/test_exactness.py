"""Every fast forward and backward equals T explicit steps x - eta P grad E by autograd on the energy
(docs/design.md#invariant-1-fast-path-equals-autograd-descent).

Tolerances: relative to the size of the update (forward) or of the largest gradient entry
(backward), 1e-9 in float64 and 1e-4 in float32. The grid covers both attention fast paths beside
the generic one: the shared diagonal's head-independent core (whole, in blocks of queries, and in
blocks recomputed in backward) and query-space recursion (no diagonal, T > 1), each diagonal in both
forms (bilinear and distance), and the joint block (T steps on E_att + E_mlp). The checkers are
tested by permanent mutations (a perturbed output projection, a dropped causal mask, a detached
term that leaves the forward exact, a wrong sign in the distance form's or the joint block's
gradient): they must reject each.
"""
import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import covering, randomize_

import cem_core.nn.attention as attention_module
from cem_core import (
    AttentionConfig,
    BlockConfig,
    CEMAttention,
    CEMBlock,
    CEMGatedMLP,
    MLPConfig,
    assert_exact,
    exactness_error,
    gradient_exactness_error,
)
from cem_core.nn.activations import ACTIVATIONS
from cem_core.nn.attention import InteractionTerm
from cem_core.nn.diagonals import DIAGONAL_FORMS as FORMS
from cem_core.nn.diagonals import DIAGONALS
from cem_core.nn.energy import attention_energy, mlp_energy
from cem_core.nn.precondition import PRECONDITIONERS

RTOL64, RTOL32 = 1e-9, 1e-4

# how the shared diagonal's core runs over the 7 queries: whole, in blocks of 3 (3, 3, 1), or in
# blocks of 3 recomputed in backward
BLOCKINGS = ("whole", "blocks", "recompute")
# every registered diagonal in every registered form that it allows (a form may need a diagonal)
DIAGONAL_FORMS = tuple((diagonal, form) for diagonal in DIAGONALS for form, kind in FORMS.items()
                       if not (kind.needs_diagonal and diagonal == "none"))
ATTENTION_GRID = [(diagonal, form, *rest, blocking)
                  for (diagonal, form), *rest in itertools.product(DIAGONAL_FORMS, tuple(PRECONDITIONERS),
                                                                   (1, 2, 3, 8), (False, True), (0.0, 0.7))
                  for blocking in (BLOCKINGS if diagonal == "shared" else ("whole",))]


def block_queries(monkeypatch, layer: CEMAttention, blocking: str) -> CEMAttention:
    """Make the shared-diagonal core run over blocks of 3 queries (kept, or recomputed in backward)."""
    if blocking != "whole":
        monkeypatch.setattr(attention_module, "query_blocks", lambda *sizes: (3, blocking == "recompute"))
    return layer


def attention(diagonal, preconditioner, T, rope, anchor, form="bilinear", **kwargs) -> CEMAttention:
    torch.manual_seed(T)
    cfg = AttentionConfig(d_model=16, n_heads=4, T=T, eta=0.8, diagonal=diagonal, diagonal_form=form,
                          preconditioner=preconditioner, rank=3, rope=rope, anchor=anchor, **kwargs)
    return stable_distance(randomize_(CEMAttention(cfg), seed=T))


def stable_distance(layer):
    """A distance-form diagonal D = softplus(p) of about 0.1 (p about -2): a descent that settles. With
    randomize_'s D of about 0.7 and P's eigenvalues up to 3, x <- x - eta P (sum_k D_k) x + ... grows about
    5x per step at eta 0.8, so at T = 8 rounding differences between two exact computations grow 10^6-fold."""
    if layer.config.diagonal_form == "distance":
        with torch.no_grad():
            layer.diag.sub_(2.0)
    return layer


@pytest.mark.parametrize("diagonal,form,preconditioner,T,rope,anchor,blocking", covering(ATTENTION_GRID))
def test_attention_fast_path_is_autograd_descent(float64, monkeypatch, diagonal, form, preconditioner, T, rope, anchor,
                                                 blocking):
    layer = block_queries(monkeypatch, attention(diagonal, preconditioner, T, rope, anchor, form), blocking)
    h = 2.0 * torch.randn(2, 7, 16)
    assert_exact(layer, h, RTOL64)
    trace = layer.trace(h)
    torch.testing.assert_close(trace.energies[0], layer.energy(layer.norm(h), h), rtol=0, atol=0)
    torch.testing.assert_close(h + trace.iterates[-1] - trace.iterates[0], layer(h), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("diagonal,form,preconditioner,T,rope,anchor,blocking", covering(ATTENTION_GRID))
def test_attention_backward_is_autograd_descent(float64, monkeypatch, diagonal, form, preconditioner, T, rope, anchor,
                                                blocking):
    """The gradients with respect to h and every parameter equal those of the T autograd steps."""
    layer = block_queries(monkeypatch, attention(diagonal, preconditioner, T, rope, anchor, form), blocking)
    assert gradient_exactness_error(layer, 2.0 * torch.randn(2, 7, 16)) <= RTOL64


@pytest.mark.parametrize("diagonal,preconditioner,anchor", [("none", "none", 0.0), ("none", "none", 0.7),
                                                            ("none", "dlr", 0.0), ("shared", "psd", 0.7)])
@pytest.mark.parametrize("eta_per_step", [False, True])
def test_learned_eta_is_exact_forward_and_backward(float64, diagonal, preconditioner, anchor, eta_per_step):
    """Learned step sizes (one, or one per step) on each fast path: exact, positive, and their own
    gradients (d loss / d log eta) equal the reference's."""
    layer = attention(diagonal, preconditioner, 3, True, anchor, learn_eta=True, eta_per_step=eta_per_step)
    with torch.no_grad():
        layer.log_eta.copy_(torch.linspace(-3.0, 0.5, layer.log_eta.numel()))
    assert all(e > 0 for e in layer.step_size_values())
    h = torch.randn(1, 6, 16)
    assert_exact(layer, h, RTOL64)
    assert gradient_exactness_error(layer, h) <= RTOL64


MLP_GRID = list(itertools.product(tuple(PRECONDITIONERS), (1, 2, 3, 8), (0.0, 0.7), tuple(ACTIVATIONS)))


@pytest.mark.parametrize("preconditioner,T,anchor,activation", covering(MLP_GRID))
def test_mlp_fast_path_is_autograd_descent(float64, preconditioner, T, anchor, activation):
    check_mlp_exact(preconditioner, T, anchor, activation)


def check_mlp_exact(preconditioner: str, T: int, anchor: float, activation: str) -> None:
    """The CEM gated MLP's fast path against autograd descent on its energy, and its trace (one point of the grid;
    the activation registry's test calls it for an activation registered in the test)."""
    torch.manual_seed(T)
    cfg = MLPConfig(d_model=12, d_ff=20, T=T, eta=0.5, preconditioner=preconditioner, rank=2,
                    anchor=anchor, activation=activation)
    layer = randomize_(CEMGatedMLP(cfg), seed=T)
    h = torch.randn(2, 5, 12)
    assert_exact(layer, h, RTOL64)
    trace = layer.trace(h)
    torch.testing.assert_close(trace.energies[0], layer.energy(layer.norm(h), h), rtol=0, atol=0)
    torch.testing.assert_close(h + trace.iterates[-1] - trace.iterates[0], layer(h), rtol=1e-12, atol=1e-12)


# the joint block: every diagonal form and preconditioner, T = 1 (a parallel block) and T = 3, each
# activation, with and without RoPE and the anchor
BLOCK_GRID = [(diagonal, form, preconditioner, T, rope, anchor, activation)
              for (diagonal, form), preconditioner, (T, rope), anchor in itertools.product(
                  DIAGONAL_FORMS, tuple(PRECONDITIONERS), ((1, False), (3, True)), (0.0, 0.7))
              for activation in (tuple(ACTIVATIONS)[len(form) % len(ACTIVATIONS)],)]


def joint_block(diagonal, form, preconditioner, T, rope, anchor, activation, **kwargs) -> CEMBlock:
    torch.manual_seed(T)
    cfg = BlockConfig(d_model=16, n_heads=4, d_ff=24, T=T, eta=0.6, diagonal=diagonal, diagonal_form=form,
                      preconditioner=preconditioner, rank=3, rope=rope, anchor=anchor, activation=activation, **kwargs)
    return stable_distance(randomize_(CEMBlock(cfg), seed=T))


@pytest.mark.parametrize("diagonal,form,preconditioner,T,rope,anchor,activation", covering(BLOCK_GRID))
def test_joint_block_fast_path_is_autograd_descent_on_the_summed_energy(float64, diagonal, form, preconditioner, T,
                                                                        rope, anchor, activation):
    layer = joint_block(diagonal, form, preconditioner, T, rope, anchor, activation)
    h = 2.0 * torch.randn(2, 7, 16)
    assert_exact(layer, h, RTOL64)
    trace = layer.trace(h)
    x0, c = layer.norm(h), layer.norm(h)
    summed = (attention_energy(x0, c, layer.q_proj.weight, layer.k_proj.weight, 4, diag=layer.diagonal_matrix(),
                               diagonal_form=form, rope_base=10000.0 if rope else None)
              + mlp_energy(x0, c, layer.up_proj.weight, layer.gate_proj.weight, activation))   # E_att + E_mlp
    torch.testing.assert_close(trace.energies[0], summed, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h + trace.iterates[-1] - trace.iterates[0], layer(h), rtol=1e-12, atol=1e-12)
    assert trace.weights.shape == (T, 2, 4, 7, 7)


@pytest.mark.parametrize("diagonal,form,preconditioner,T,rope,anchor,activation", covering(BLOCK_GRID))
def test_joint_block_backward_is_autograd_descent(float64, diagonal, form, preconditioner, T, rope, anchor, activation):
    layer = joint_block(diagonal, form, preconditioner, T, rope, anchor, activation,
                        learn_eta=True, eta_per_step=T > 1)
    assert gradient_exactness_error(layer, 2.0 * torch.randn(2, 7, 16)) <= RTOL64


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
    monkeypatch.setattr(layer, "_attention_readout", lambda o: o @ (layer.q_proj.weight + noise))
    with pytest.raises(AssertionError, match="differs"):
        assert_exact(layer, h, RTOL64)


def test_checker_rejects_dropped_causal_mask(float64, monkeypatch):
    layer = _attention()
    h = torch.randn(2, 6, 16)
    assert exactness_error(layer, h) < RTOL64

    def non_causal(q, k, v, scale, offset=0, need_weights=False, key_bias=None):
        return F.scaled_dot_product_attention(q, k, v, scale=scale), None

    monkeypatch.setattr(attention_module, "causal_attention", non_causal)
    with pytest.raises(AssertionError, match="differs"):
        assert_exact(layer, h, RTOL64)


def test_checker_rejects_perturbed_mlp_readout(float64, monkeypatch):
    torch.manual_seed(2)
    layer = CEMGatedMLP(MLPConfig(d_model=8, d_ff=16, T=2))
    h = torch.randn(2, 4, 8)
    assert exactness_error(layer, h) < RTOL64
    monkeypatch.setattr(layer, "_mlp_readout", lambda z: z @ (1.001 * layer.up_proj.weight))
    with pytest.raises(AssertionError):
        assert_exact(layer, h, RTOL64)


def test_checker_rejects_a_wrong_backward(float64, monkeypatch):
    """A forward that is exact but drops a gradient path (the diagonal's head-summed readout)."""
    layer = attention("shared", "none", 2, False, 0.0)
    h = torch.randn(2, 6, 16)
    assert gradient_exactness_error(layer, h) < RTOL64
    block = attention_module._shared_diagonal_block

    def detached_readout(*args):
        o, summed, weights = block(*args)
        return o, summed.detach(), weights

    monkeypatch.setattr(attention_module, "_shared_diagonal_block", detached_readout)
    assert exactness_error(layer, h) < RTOL64
    assert gradient_exactness_error(layer, h) > 1e-3


@pytest.mark.parametrize("diagonal,preconditioner,T,anchor,projections,cores", [
    ("none", "dlr", 3, 0.0, 1, 3),        # query space: W_Q x once, T cores
    ("none", "none", 2, 0.7, 1, 2),       # the anchor stays linear in query space with P = I
    ("none", "dlr", 2, 0.7, 2, 2),        # ... not with P != I: x space, W_Q x per step
    ("none", "none", 1, 0.0, 1, 1),
    ("shared", "psd", 2, 0.0, 2, 0),      # the shared diagonal's own core, not the flash core
    ("per_head", "psd", 2, 0.0, 2, 2),    # per head: the concatenated keys through the flash core
])
def test_each_configuration_takes_its_fast_path(monkeypatch, diagonal, preconditioner, T, anchor, projections,
                                                cores):
    layer = attention(diagonal, preconditioner, T, False, anchor)
    calls = {"q": 0, "core": 0}
    layer.q_proj.register_forward_hook(lambda *_: calls.__setitem__("q", calls["q"] + 1))
    flash = attention_module.causal_attention

    def counted(*args, **kwargs):
        calls["core"] += 1
        return flash(*args, **kwargs)

    monkeypatch.setattr(attention_module, "causal_attention", counted)
    layer(torch.randn(1, 5, 16))
    assert calls == {"q": projections, "core": cores}


# -- a wrong sign in the distance form's or the joint block's gradient ------------------------------


@pytest.mark.parametrize("diagonal", ["per_head", "shared"])
def test_checker_rejects_a_wrong_sign_in_the_distance_update(float64, monkeypatch, diagonal):
    """-grad E_att in distance form has the term -sum_k D_k x: with +sum_k D_k x instead the fast path is no
    longer a gradient step on the energy, and the checker says so."""
    layer = attention(diagonal, "none", 2, True, 0.0, "distance")
    h = torch.randn(2, 6, 16)
    assert exactness_error(layer, h) < RTOL64
    gradient = InteractionTerm._interaction_gradient

    def flipped(self, x, ctx, need_weights):
        u, weights = gradient(self, x, ctx, need_weights)
        return u + 2 * self.diagonal_matrix().sum(0) * x, weights     # -sum_k D_k x turned into +sum_k D_k x
    monkeypatch.setattr(InteractionTerm, "_interaction_gradient", flipped)
    with pytest.raises(AssertionError, match="differs"):
        assert_exact(layer, h, RTOL64)


@pytest.mark.parametrize("diagonal", ["per_head", "shared"])
def test_checker_rejects_a_wrong_sign_in_the_distance_key_bias(float64, monkeypatch, diagonal):
    layer = attention(diagonal, "none", 1, False, 0.0, "distance")
    h = torch.randn(2, 6, 16)
    assert exactness_error(layer, h) < RTOL64
    context = InteractionTerm._interaction_context

    def flipped(self, c, cache=None):
        ctx = context(self, c, cache)
        ctx.key_bias = -ctx.key_bias                                   # +(1/2) c_j^T D c_j instead of -(1/2)
        return ctx
    monkeypatch.setattr(InteractionTerm, "_interaction_context", flipped)
    with pytest.raises(AssertionError, match="differs"):
        assert_exact(layer, h, RTOL64)


@pytest.mark.parametrize("term", ["_elementwise_gradient", "_interaction_gradient"])
def test_checker_rejects_a_wrong_sign_in_either_term_of_the_joint_block(float64, monkeypatch, term):
    """The block's step is -grad E_att - grad E_mlp: with either term's sign flipped the forward and the
    backward checks fail."""
    layer = joint_block("shared", "distance", "psd", 2, True, 0.0, "silu")
    h = torch.randn(2, 6, 16)
    assert exactness_error(layer, h) < RTOL64 and gradient_exactness_error(layer, h) < RTOL64
    original = getattr(CEMBlock, term)

    def negated(*args):
        out = original(*args)
        return (-out[0], *out[1:]) if isinstance(out, tuple) else -out
    monkeypatch.setattr(CEMBlock, term, negated)
    with pytest.raises(AssertionError, match="differs"):
        assert_exact(layer, h, RTOL64)
    assert gradient_exactness_error(layer, h) > 1e-3
