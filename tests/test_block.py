"""The block as one energy and the distance-form diagonal (docs/design.md#214-the-block-as-one-energy): what
each is, beyond the exactness grid (tests/test_exactness.py): T = 1 is a parallel block, the distance score is
the literal -(1/2)(x - c)^T D (x - c), its energy is bounded below, and both reach the models, the configs,
the parameter counts, the FLOP counts and the generation cache."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from cem_core import (
    AttentionCache,
    AttentionConfig,
    BlockConfig,
    CEMAttention,
    CEMBlock,
    CEMGatedMLP,
    CEMOptions,
    LanguageModel,
    MLPConfig,
    ModelConfig,
    param_breakdown,
)
from cem_core.nn.energy import attention_scores
from cem_core.nn.flops import attention_flops, block_flops, mlp_flops, model_flops

JOINT = CEMOptions(T=2, diagonal="shared", diagonal_form="distance", preconditioner="psd", rank=3,
                   eta_mode="per_step", block="joint")


@pytest.mark.slow
def test_one_joint_step_is_a_parallel_block(float64):
    """T = 1: h + x^(1) - x^(0) = h + Attn(Norm h) + MLP(Norm h), the tied attention and MLP of one norm
    added side by side (GPT-J and PaLM's parallel block), not one after the other."""
    torch.manual_seed(0)
    fields = dict(d_model=16, n_heads=2, T=1, eta=0.7, diagonal="per_head", rope=True)
    block = CEMBlock(BlockConfig(d_ff=24, **fields))
    attention = CEMAttention(AttentionConfig(**fields))
    mlp = CEMGatedMLP(MLPConfig(d_model=16, d_ff=24, T=1, eta=0.7))
    with torch.no_grad():
        block.norm.weight.normal_(1.0, 0.2)
        block.diag.normal_(0.0, 0.5)
        for layer in (attention, mlp):
            layer.load_state_dict({k: v for k, v in block.state_dict().items() if k in layer.state_dict()})
    h = torch.randn(2, 7, 16)
    parallel = h + (attention(h) - h) + (mlp(h) - h)
    torch.testing.assert_close(block(h), parallel, rtol=1e-12, atol=1e-12)
    sequential = mlp(attention(h))
    assert (block(h) - sequential).abs().max() > 1e-3                  # and it is not the sequential block


def test_the_distance_score_is_the_literal_squared_distance(float64):
    """The reference expands -(1/2)(x_i - c_j)^T D_k (x_i - c_j); here it is computed term by term."""
    torch.manual_seed(1)
    x, c = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    w_q, w_k, diag = torch.randn(8, 8), torch.randn(8, 8), torch.rand(2, 8)
    s = attention_scores(x, c, w_q, w_k, 2, diag, diagonal_form="distance")
    bilinear = attention_scores(x, c, w_q, w_k, 2)
    diff = x[:, None, :, None, :] - c[:, None, None, :, :]               # x_i - c_j: (B, 1, n, n, d)
    literal = -0.5 * (diff * diag[None, :, None, None, :] * diff).sum(-1)
    torch.testing.assert_close(s, bilinear + literal, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("diagonal", ["per_head", "shared"])
def test_the_distance_form_is_bounded_below_and_the_bilinear_form_is_not(float64, diagonal):
    """Along any ray x = r v the distance form's energy grows (D = softplus(p) > 0: its quadratic
    (1/2) sum_k x^T D_k x outgrows the log-sum-exp's linear part); the bilinear form's falls without bound
    along some direction, as plain attention's does."""
    torch.manual_seed(2)
    layers = {form: CEMAttention(AttentionConfig(d_model=8, n_heads=2, diagonal=diagonal, diagonal_form=form,
                                                 rope=False)) for form in ("bilinear", "distance")}
    with torch.no_grad():
        layers["bilinear"].diag.normal_(0.0, 0.5)
    assert (layers["distance"].diagonal_matrix() > 0).all()
    h = torch.randn(1, 6, 8)
    directions = torch.randn(64, 8)
    radii = torch.tensor([1.0, 10.0, 100.0, 1000.0])
    energy = {form: torch.stack([layer.energy_at(r * directions, h, 5) for r in radii])
              for form, layer in layers.items()}
    assert (energy["distance"][-1] > 0).all() and (energy["distance"][-1] > energy["distance"][-2]).all()
    assert energy["bilinear"][-1].min() < -100 * energy["bilinear"][0].abs().max()


def test_distance_descent_settles_where_bilinear_recursion_keeps_moving(float64):
    """The step lengths of a distance-form layer fall (the energy has a minimum to settle in); those of
    plain attention's T steps do not fall below a fixed fraction of the first."""
    torch.manual_seed(3)
    cfg = dict(d_model=16, n_heads=2, T=16, rope=False)
    distance = CEMAttention(AttentionConfig(**cfg, diagonal="shared", diagonal_form="distance"))
    plain = CEMAttention(AttentionConfig(**cfg))
    for layer in (distance, plain):
        with torch.no_grad():
            layer.k_proj.weight.copy_(distance.k_proj.weight)
            layer.q_proj.weight.copy_(distance.q_proj.weight * 3)
    h = torch.randn(1, 8, 16)
    steps = {name: layer.trace(h).update_norms.mean(dim=(1, 2)) for name, layer in
             (("distance", distance), ("plain", plain))}
    assert steps["distance"][-1] < 0.1 * steps["distance"][0]
    assert steps["plain"][-1] > 0.5 * steps["plain"][0]
    energies = distance.trace(h).energies.mean(dim=(1, 2))
    assert (energies[1:] <= energies[:-1] + 1e-12).all()               # it descends, step after step


def test_the_key_bias_is_computed_once_for_all_steps(float64, monkeypatch):
    """-(1/2) c_j^T D c_j depends on the history only: the context is built once per forward, at any T."""
    import cem_core.nn.attention as attention_module
    calls = []
    context = attention_module.InteractionTerm._interaction_context
    monkeypatch.setattr(attention_module.InteractionTerm, "_interaction_context",
                        lambda self, c, cache=None: calls.append(1) or context(self, c, cache))
    layer = CEMAttention(AttentionConfig(d_model=8, n_heads=2, T=6, diagonal="shared", diagonal_form="distance"))
    layer(torch.randn(1, 5, 8))
    assert len(calls) == 1


def test_configs_refuse_what_does_not_exist():
    with pytest.raises(ValueError, match="^diagonal_form='distance' is invalid: needs a diagonal"):
        CEMOptions(diagonal_form="distance")
    with pytest.raises(ValueError, match="^diagonal_form='distance' is invalid: needs a diagonal"):
        AttentionConfig(d_model=8, n_heads=2, diagonal_form="distance")
    with pytest.raises(ValueError, match="^diagonal_form='euclid' is invalid"):
        CEMOptions(diagonal="shared", diagonal_form="euclid")
    with pytest.raises(ValueError, match=r"^block='joint' is invalid: needs attention='cem' and mlp='cem' \(joint: T "):
        ModelConfig(attention="cem", mlp="llama", cem=CEMOptions(block="joint"))
    with pytest.raises(ValueError, match="^block='stacked' is invalid"):
        CEMOptions(block="stacked")
    with pytest.raises(ValueError, match="^config must be a BlockConfig"):
        CEMBlock(AttentionConfig(d_model=8, n_heads=2))
    # a variant whose layers cannot take a switch drops it (as a diagonal without CEM attention)
    assert ModelConfig.variant("cem-attn", cem=JOINT).cem.block == "sequential"
    assert ModelConfig.variant("cem-mlp", cem=JOINT).cem.diagonal_form == "bilinear"


def test_later_switches_are_recorded_only_off_their_defaults():
    """So every committed run keeps the hash it was recorded with (tests/test_gp_study.py and
    tests/test_lm_sweep.py check the committed results against the current configuration)."""
    assert set(CEMOptions(T=2).recorded()) == {"T", "eta", "eta_mode", "anchor", "diagonal", "preconditioner", "rank"}
    assert JOINT.recorded()["diagonal_form"] == "distance" and JOINT.recorded()["block"] == "joint"


@pytest.mark.parametrize("tie", [True, False])
def test_a_joint_model_counts_each_term_once(tie):
    cfg = ModelConfig.variant("cem-full", cem=JOINT, vocab_size=50, d_model=24, n_heads=3, d_ff=40, n_layers=3,
                              tie_embeddings=tie)
    model = LanguageModel(cfg)
    counts = cfg.param_counts()
    assert param_breakdown(model) == counts and counts["total"] == sum(p.numel() for p in model.parameters())
    d, f, L = 24, 40, 3
    assert counts["attention.projections"] == L * 2 * d * d and counts["mlp.projections"] == L * 2 * d * f
    assert counts["attention.diagonal"] == L * d                       # one shared row per block
    assert counts["block.preconditioner"] == L * (d + d * 3) and counts["block.eta"] == L * 2
    assert counts["attention.preconditioner"] == counts["mlp.preconditioner"] == 0
    sequential = ModelConfig.variant("cem-full", cem=CEMOptions(**{**JOINT.recorded(), "block": "sequential"}),
                                     vocab_size=50, d_model=24, n_heads=3, d_ff=40, n_layers=3, tie_embeddings=tie)
    # one norm, one preconditioner and one set of step sizes per block instead of two
    assert sequential.param_counts()["total"] - counts["total"] == L * (d + (d + 3 * d) + 2)


def test_every_parameter_of_a_joint_model_receives_gradient():
    torch.manual_seed(4)
    model = LanguageModel(ModelConfig.variant("cem-full", cem=JOINT, vocab_size=30, d_model=16, n_heads=2, d_ff=24))
    idx = torch.randint(0, 30, (2, 9))
    model(idx[:, :-1], idx[:, 1:])[1].backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert all(block.attn is None and block.mlp is None for block in model.blocks)


@pytest.mark.slow
@pytest.mark.parametrize("diagonal,form", [("none", "bilinear"), ("per_head", "distance"), ("shared", "distance")])
def test_joint_and_distance_generation_with_the_cache_equals_without(float64, diagonal, form):
    torch.manual_seed(5)
    for block in ("sequential", "joint"):
        cem = CEMOptions(T=3, diagonal=diagonal, diagonal_form=form, block=block)
        model = LanguageModel(ModelConfig.variant("cem-full", cem=cem, vocab_size=40, d_model=16, n_heads=2,
                                                  d_ff=24, max_seq_len=32))
        prompt = torch.randint(0, 40, (2, 5))
        tokens = [model.generate(prompt, 10, temperature=0.0, use_cache=c).tokens for c in (True, False)]
        assert torch.equal(*tokens)
        caches = [AttentionCache() for _ in model.blocks]
        idx = torch.randint(0, 40, (2, 11))
        chunks = [model(idx[:, :4], caches=caches), model(idx[:, 4:], caches=caches)]
        torch.testing.assert_close(torch.cat(chunks, 1), model(idx), rtol=1e-10, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("preconditioner", ["none", "dlr"])
def test_block_flops_are_its_terms_with_one_preconditioner(T, preconditioner, monkeypatch):
    """A joint block costs attention's x-space steps plus the MLP's, with P applied once per step to the
    sum; torch's own count of the dispatched matmuls agrees (the core as explicit full n x n matmuls, as in
    tests/test_flops.py)."""
    import cem_core.nn.attention as attention_module
    original = attention_module.causal_attention
    monkeypatch.setattr(attention_module, "causal_attention",
                        lambda q, k, v, scale, offset=0, need_weights=False, key_bias=None:
                        original(q, k, v, scale, offset, True, key_bias))
    d, f, n = 32, 48, 16
    cfg = BlockConfig(d_model=d, n_heads=4, d_ff=f, T=T, preconditioner=preconditioner, rank=3, rope=False)
    ours = block_flops(cfg, n)
    assert ours["core"] == attention_flops(AttentionConfig(d_model=d, n_heads=4, T=T, rope=False), n)["core"]
    assert ours["projections"] == (1 + 2 * T) * 2 * n * d * d + mlp_flops(MLPConfig(d_model=d, d_ff=f, T=T), n)["total"]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        CEMBlock(cfg)(torch.randn(1, n, d))
    assert counter.get_total_flops() == ours["projections"] + 2 * ours["core"] + ours["preconditioner"]
    model = ModelConfig.variant("cem-full", cem=CEMOptions(T=T, preconditioner=preconditioner, rank=3, block="joint"),
                                d_model=d, n_heads=4, d_ff=f, n_layers=2, rope=False)
    assert model_flops(model, n)["block"] == ours["total"]
