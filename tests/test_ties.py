"""The ties as a switch (docs/design.md#215-the-ties): each registered Tie's counts are the modules' own, both fast
paths agree with a tie dropped, an untied layer refuses its energy with a message, and the configs refuse what the
paths cannot do. (That untied at T = 1 is Llama's layer, against Hugging Face: test_against_transformers.py.)"""
import pytest
import torch
from test_flops import _measured
from torch.utils.flop_counter import FlopCounterMode

from cem_core.experiments.lm.variants import TIE_RELATIVES, TIE_VARIANTS
from cem_core.nn.attention import CEMAttention
from cem_core.nn.config import AttentionConfig, CEMOptions, MLPConfig
from cem_core.nn.descent import EnergyDescentLayer, reference_forward
from cem_core.nn.flops import attention_flops, mlp_flops
from cem_core.nn.mlp import CEMGatedMLP
from cem_core.nn.model import LanguageModel, ModelConfig, param_breakdown
from cem_core.nn.ties import ATTENTION_TIES, FREE_PROJECTIONS, MLP_TIES, energy_view, not_an_energy

D, H, F = 16, 2, 24


def _numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _random(layer, seed=0, std=0.4):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(std * torch.randn(p.shape, generator=g, dtype=p.dtype) + (1.0 if p.ndim == 1 else 0.0))
    return layer


@pytest.mark.parametrize("name", list(ATTENTION_TIES))
def test_an_attention_tie_adds_its_free_projections(name):
    tie = ATTENTION_TIES[name]
    layer, tied = CEMAttention(AttentionConfig(d_model=D, n_heads=H, attn_ties=name)), CEMAttention(
        AttentionConfig(d_model=D, n_heads=H))
    assert _numel(layer) - _numel(tied) == tie.params(D, 0) == D * D * len(tie.free)
    def names(m):
        return {n.split(".")[0] for n, _ in m.named_parameters()}
    assert names(layer) - names(tied) == set(tie.free)
    assert all(free in FREE_PROJECTIONS for free in tie.free)
    assert sum(layer.config.param_counts().values()) == _numel(layer)
    assert tie.energy == (name == "both")


@pytest.mark.parametrize("name", list(MLP_TIES))
def test_an_mlp_tie_adds_its_free_projection(name):
    tie = MLP_TIES[name]
    layer, tied = CEMGatedMLP(MLPConfig(d_model=D, d_ff=F, mlp_ties=name)), CEMGatedMLP(MLPConfig(d_model=D, d_ff=F))
    assert _numel(layer) - _numel(tied) == tie.params(D, F) == D * F * len(tie.free)
    assert sum(layer.config.param_counts().values()) == _numel(layer)
    assert tie.energy == (name == "tied")


@pytest.mark.parametrize("variant", list(TIE_VARIANTS))
def test_a_tie_variant_counts_what_it_builds(variant):
    """Each untied variant of the tie ladder: the closed-form counts are the model's, and it has exactly the free
    projections' parameters more than its tied relative, per layer."""
    from cem_core.experiments.lm.variants import SWEEP_VARIANTS
    shape = dict(vocab_size=40, d_model=D, n_heads=H, d_ff=F, n_layers=2)
    kind, options = SWEEP_VARIANTS[variant]
    relative_kind, relative_options = SWEEP_VARIANTS[TIE_RELATIVES[variant]]
    cfg = ModelConfig.variant(kind, options, **shape)
    relative = ModelConfig.variant(relative_kind, relative_options, **shape)
    model = LanguageModel(cfg)
    assert param_breakdown(model) == cfg.param_counts() and cfg.param_counts()["total"] == _numel(model)
    free = ATTENTION_TIES[options.attn_ties].params(D, F) + MLP_TIES[options.mlp_ties].params(D, F)
    assert cfg.param_counts()["total"] - relative.param_counts()["total"] == 2 * free > 0
    assert not cfg.cem.energy_view and relative.cem.energy_view


@pytest.mark.parametrize("name", list(ATTENTION_TIES))
@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("preconditioner", ["none", "dlr"])
@pytest.mark.parametrize("rope", [False, True])
def test_both_attention_paths_agree_with_any_tie(name, T, preconditioner, rope, float64):
    """The fast path (query space from T = 2 with P = I or no anchor) and the x-space loop: the same T steps."""
    cfg = AttentionConfig(d_model=D, n_heads=H, attn_ties=name, T=T, preconditioner=preconditioner, rank=3, rope=rope,
                          eta=0.7)
    layer = _random(CEMAttention(cfg))
    h = torch.randn(2, 7, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert cfg.query_space == (T > 1)
    torch.testing.assert_close(layer(h), EnergyDescentLayer.forward(layer, h), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in ATTENTION_TIES if n != "both"])
def test_an_untied_step_is_not_the_energys_gradient(name, float64):
    """A dropped tie changes the update: with the free projection set to its tied value the layer is the tied
    one again (to float64 rounding), and perturbed it is not. So the free weight is the one read. Without RoPE: a
    free W_V's values are not rotated (Llama's form), so with RoPE W_V = W_K is not the tied layer."""
    tied = _random(CEMAttention(AttentionConfig(d_model=D, n_heads=H, T=2, rope=False)))
    untied = CEMAttention(AttentionConfig(d_model=D, n_heads=H, T=2, attn_ties=name, rope=False))
    untied.load_state_dict(tied.state_dict(), strict=False)
    with torch.no_grad():
        if "v_proj" in ATTENTION_TIES[name].free:
            untied.v_proj.weight.copy_(tied.k_proj.weight)
        if "o_proj" in ATTENTION_TIES[name].free:
            untied.o_proj.weight.copy_(tied.q_proj.weight.T)
    h = torch.randn(1, 6, D, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    torch.testing.assert_close(untied(h), tied(h), rtol=0, atol=1e-12)
    torch.testing.assert_close(untied(h), reference_forward(tied, h), rtol=0, atol=1e-12)
    with torch.no_grad():
        getattr(untied, ATTENTION_TIES[name].free[0]).weight.add_(0.1)
    assert (untied(h) - tied(h)).abs().max() > 1e-3


def test_an_untied_mlp_with_its_readout_set_to_u_transpose_is_the_tied_one(float64):
    tied = _random(CEMGatedMLP(MLPConfig(d_model=D, d_ff=F, T=3, eta=0.5)))
    untied = CEMGatedMLP(MLPConfig(d_model=D, d_ff=F, T=3, eta=0.5, mlp_ties="untied"))
    untied.load_state_dict(tied.state_dict(), strict=False)
    with torch.no_grad():
        untied.down_proj.weight.copy_(tied.up_proj.weight.T)
    h = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    torch.testing.assert_close(untied(h), reference_forward(tied, h), rtol=0, atol=1e-12)


@pytest.mark.parametrize("layer", [CEMAttention(AttentionConfig(d_model=D, n_heads=H, attn_ties="qo")),
                                   CEMGatedMLP(MLPConfig(d_model=D, d_ff=F, mlp_ties="untied"))],
                         ids=["attention-qo", "mlp-untied"])
def test_an_untied_layer_refuses_its_energy_with_the_reason(layer):
    h = torch.randn(1, 4, D)
    for call in (lambda: layer.energy(h, h), lambda: layer.energy_at(torch.randn(3, D), h, 1),
                 lambda: layer.trace(h), lambda: reference_forward(layer, h)):
        with pytest.raises(ValueError, match="has no energy: its ties .* leave the energy view"):
            call()
    assert layer(h).isfinite().all()                                  # it still runs forward
    assert not_an_energy(layer.config) and not energy_view(layer.config.__dict__.get("attn_ties", "both"),
                                                           layer.config.__dict__.get("mlp_ties", "tied"))


def test_a_tied_layer_keeps_its_energy():
    layer = CEMAttention(AttentionConfig(d_model=D, n_heads=H))
    h = torch.randn(1, 4, D)
    assert not_an_energy(layer.config) == "" and layer.energy(layer.norm(h), h).shape == (1, 4)


@pytest.mark.parametrize("options, match", [
    (dict(attn_ties="kv", diagonal="shared"), "needs diagonal='none'"),
    (dict(attn_ties="none", diagonal="per_head"), "needs diagonal='none'"),
    (dict(block="joint", attn_ties="qo"), "descends one energy, so it needs every tie"),
    (dict(block="joint", mlp_ties="untied"), "descends one energy, so it needs every tie"),
    (dict(attn_ties="all"), "attn_ties"),
    (dict(mlp_ties="half"), "mlp_ties"),
])
def test_configs_refuse_what_the_paths_cannot_do(options, match):
    with pytest.raises(ValueError, match=match):
        CEMOptions(**options)


def test_ties_are_refused_where_they_do_not_apply():
    with pytest.raises(ValueError, match="applies to CEM attention only"):
        ModelConfig(d_model=D, n_heads=H, d_ff=F, attention="llama", mlp="cem", cem=CEMOptions(attn_ties="none"))
    with pytest.raises(ValueError, match="applies to the CEM MLP only"):
        ModelConfig(d_model=D, n_heads=H, d_ff=F, attention="cem", mlp="llama", cem=CEMOptions(mlp_ties="untied"))
    # variant() drops a tie that does not apply, as it drops a diagonal
    assert ModelConfig.variant("cem-attn", CEMOptions(mlp_ties="untied"), d_model=D, n_heads=H, d_ff=F).cem.mlp_ties \
        == "tied"


def test_untied_runs_keep_the_earlier_records_hashes():
    """The ties were added after results were committed: at their defaults they are not recorded."""
    assert "attn_ties" not in CEMOptions().recorded() and "mlp_ties" not in CEMOptions().recorded()
    assert CEMOptions(attn_ties="kv").recorded()["attn_ties"] == "kv"


@pytest.mark.parametrize("name", list(ATTENTION_TIES))
@pytest.mark.parametrize("T", [1, 3])
def test_attention_flops_count_the_free_projections(name, T, monkeypatch):
    """As test_flops's dispatched count, for every tie: a free W_V adds one projection of the history, a free W_O
    replaces the tied readout. Counted with autograd on: torch's module tracker fails on W_O^T, a view of a
    parameter made under no_grad, passed to the preconditioner module."""
    import cem_core.nn.attention as attention_module
    original = attention_module.causal_attention
    monkeypatch.setattr(attention_module, "causal_attention",
                        lambda q, k, v, scale, offset=0, need_weights=False, key_bias=None:
                        original(q, k, v, scale, offset, True, key_bias))
    cfg = AttentionConfig(d_model=32, n_heads=4, T=T, attn_ties=name, rope=False)
    ours = attention_flops(cfg, 16)
    with FlopCounterMode(display=False) as counter:
        CEMAttention(cfg)(torch.randn(1, 16, 32))
    assert counter.get_total_flops() == ours["projections"] + 2 * ours["core"] + ours["preconditioner"]
    tied = attention_flops(AttentionConfig(d_model=32, n_heads=4, T=T, rope=False), 16)
    assert ours["projections"] - tied["projections"] == ATTENTION_TIES[name].once * 2 * 16 * 32 * 32


@pytest.mark.parametrize("T", [1, 2])
def test_mlp_flops_are_the_same_untied(T):
    cfg = MLPConfig(d_model=16, d_ff=40, T=T, mlp_ties="untied")
    assert _measured(CEMGatedMLP(cfg), 8, 16) == mlp_flops(cfg, 8)["total"] == mlp_flops(
        MLPConfig(d_model=16, d_ff=40, T=T), 8)["total"]


def test_gradients_reach_the_free_projections():
    model = LanguageModel(ModelConfig.variant("cem-full", CEMOptions(T=2, attn_ties="none", mlp_ties="untied"),
                                              vocab_size=30, d_model=D, n_heads=H, d_ff=F, n_layers=1))
    tokens = torch.randint(0, 30, (2, 9))
    logits = model(tokens)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    for name, p in model.named_parameters():
        if any(free in name for free in FREE_PROJECTIONS):
            assert p.grad is not None and p.grad.abs().sum() > 0, name
