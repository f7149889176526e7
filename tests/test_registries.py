"""Each design choice is one registered object that carries its mathematics, its label and its equations, and
everything else iterates the registry: an activation registered here, inside the test, reaches the command
line's help, config validation, the exactness check, the parameter and FLOP counts and the app's equations with
no other edit (docs/design.md#12-rules-that-keep-the-layers-honest)."""
import pytest
import torch
from test_exactness import attention, check_mlp_exact

from cem_core import assert_exact, gradient_exactness_error
from cem_core.__main__ import main
from cem_core.nn.activations import ACTIVATIONS, Activation, register_activation
from cem_core.nn.attention import CEMAttention
from cem_core.nn.block_modes import BLOCK_MODES, BlockMode, register_block_mode
from cem_core.nn.config import AttentionConfig, CEMOptions
from cem_core.nn.diagonals import DIAGONAL_FORMS, DIAGONALS
from cem_core.nn.flops import attention_flops, model_flops
from cem_core.nn.model import LanguageModel, ModelConfig
from cem_core.nn.precondition import PRECONDITIONERS, Preconditioner, PreconditionerKind, register_preconditioner
from cem_core.ui.equations import update_latex
from cem_core.ui.figdata import preconditioner_spectra


def log_cosh(z: torch.Tensor) -> torch.Tensor:
    """Phi for tanh (Phi' = tanh), stable for large |z|: |z| + softplus(-2|z|) - log 2."""
    a = z.abs()
    return a + torch.nn.functional.softplus(-2 * a) - torch.log(torch.tensor(2.0, dtype=z.dtype))


@pytest.fixture
def tanh():
    """A throwaway activation, registered for the test and removed after."""
    activation = register_activation(Activation("tanh", "Tanh", torch.tanh, log_cosh, r"\tanh z", r"\log \cosh z"))
    yield activation
    del ACTIVATIONS["tanh"]


def test_a_new_activation_is_one_registration(tanh, capsys, float64):
    for command in (["lm", "train"], ["lm", "compare"], ["gp", "train"]):     # a choice of --activation
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        assert "tanh" in capsys.readouterr().out.split("--activation")[1].split("--")[0], command
    check_mlp_exact("dlr", 3, 0.7, "tanh")                                    # the exactness grid's check
    for kind, mlp, block in (("cem", "cem", "sequential"), ("cem", "cem", "joint"), ("llama", "llama", None)):
        options = {"cem": CEMOptions(block=block)} if block else {}
        configs = {a: ModelConfig(d_model=16, n_layers=2, n_heads=2, d_ff=24, attention=kind, mlp=mlp,
                                  activation=a, **options) for a in ("silu", "tanh")}
        assert configs["tanh"].param_counts() == configs["silu"].param_counts()     # phi adds no parameter
        assert model_flops(configs["tanh"], 32) == model_flops(configs["silu"], 32)  # nor a matmul
        model = LanguageModel(configs["tanh"])
        assert sum(p.numel() for p in model.parameters()) == configs["tanh"].param_counts()["total"]
        assert model(torch.randint(0, 256, (1, 8))).isfinite().all()
    lines = "\n".join(update_latex("mlp", CEMOptions(), "tanh"))
    assert r"\text{Tanh}" in lines and r"\tanh z" in lines and r"\log \cosh z" in lines
    with pytest.raises(ValueError, match="registered already"):
        register_activation(tanh)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_the_equations_show_the_activation_chosen(name):
    """The app printed "Phi' = phi = SiLU" whatever the activation, so with GELU or ReLU chosen the energy shown
    was not the one computed. Each activation's equations name it and give its own phi and Phi, in the MLP's
    lines and in the joint block's, and no other activation's."""
    activation = ACTIVATIONS[name]
    for layer in ("mlp", "joint"):
        lines = "\n".join(update_latex(layer, CEMOptions(block="joint"), name))
        assert rf"\text{{{activation.label}}}" in lines and activation.phi_latex in lines
        assert activation.Phi_latex in lines
        others = [a for a in ACTIVATIONS.values() if a.name != name]
        assert not any(rf"\text{{{a.label}}}" in lines or a.Phi_latex in lines for a in others), layer


@pytest.fixture
def diagonal_only():
    """A throwaway form of P, diag(softplus p) alone, registered for the test and removed after."""
    kind = register_preconditioner(PreconditionerKind(
        "diagonal_only", "diagonal only: diag(softplus p)", r"P = \operatorname{diag}(\operatorname{softplus}(p))",
        (), 0, lambda module, g: torch.zeros_like(g)))
    yield kind
    del PRECONDITIONERS["diagonal_only"]


def test_a_new_preconditioner_is_one_registration(diagonal_only, capsys, float64):
    for command in (["lm", "train"], ["lm", "compare"], ["gp", "train"], ["info"]):   # --preconditioner choices
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        assert "diagonal_only" in capsys.readouterr().out.split("--preconditioner")[1].split("--")[0], command
    for diagonal in ("none", "shared"):                                       # the exactness checks, both paths
        layer = attention(diagonal, "diagonal_only", 3, True, 0.7)
        h = 2.0 * torch.randn(2, 7, 16)
        assert_exact(layer, h, 1e-9)
        assert gradient_exactness_error(layer, h) <= 1e-9
    check_mlp_exact("diagonal_only", 3, 0.7, "silu")
    P = Preconditioner(6, "diagonal_only")
    torch.testing.assert_close(P.matrix(), torch.diag(torch.nn.functional.softplus(P.p)))
    counts = {kind: ModelConfig(d_model=16, n_layers=2, n_heads=2, d_ff=24, attention="cem", mlp="cem",
                                cem=CEMOptions(preconditioner=kind)) for kind in ("none", "diagonal_only")}
    parts = {kind: config.param_counts() for kind, config in counts.items()}
    assert parts["diagonal_only"]["total"] - parts["none"]["total"] == 2 * 2 * 16     # p: d, in attention and MLP
    assert sum(p.numel() for p in LanguageModel(counts["diagonal_only"]).parameters()) == \
        parts["diagonal_only"]["total"]
    assert model_flops(counts["diagonal_only"], 32) == model_flops(counts["none"], 32)  # no factor products
    assert r"P = \operatorname{diag}(\operatorname{softplus}(p))" in update_latex(
        "attention", CEMOptions(preconditioner="diagonal_only"))
    assert "diagonal_only" in preconditioner_spectra(d_model=6, rank=2)
    with pytest.raises(ValueError, match="registered already"):
        register_preconditioner(diagonal_only)


@pytest.mark.parametrize("name", sorted(DIAGONALS))
def test_each_diagonal_carries_its_count_its_core_width_and_its_equation(name):
    """The diagonal D is one registered object too (nn/diagonals.py): the layer's parameters, the FLOP count's core
    and the app's equation come from it."""
    diagonal = DIAGONALS[name]
    d, H = 16, 4
    cfg = AttentionConfig(d_model=d, n_heads=H, diagonal=name)
    layer = CEMAttention(cfg)
    assert cfg.param_counts()["diagonal"] == diagonal.params(d, H)
    assert sum(p.numel() for p in layer.parameters()) == sum(cfg.param_counts().values())
    core = attention_flops(cfg, 32)["core"]
    assert core == 2 * 32 * diagonal.core_width(d, H) * 32                     # q k'^T and a v', the causal half
    forms = ("bilinear",) if diagonal.D is None else ("bilinear", "distance")
    for form in forms:
        lines = update_latex("attention", CEMOptions(diagonal=name, diagonal_form=form))
        assert (diagonal.interaction_latex if form == "bilinear" else diagonal.distance_latex()) in "\n".join(lines)


@pytest.mark.parametrize("form", sorted(DIAGONAL_FORMS))
def test_each_diagonal_form_carries_its_score_its_validation_and_its_equations(form, float64):
    """The diagonal's form is one registered object (nn/diagonals.py): the reference energy's score term, the refusal
    of a form that needs a diagonal without one, the parameter's start and the app's equations come from it."""
    kind = DIAGONAL_FORMS[form]
    for diagonal in DIAGONALS:
        if kind.needs_diagonal and diagonal == "none":
            with pytest.raises(ValueError, match=f"^diagonal_form='{form}' is invalid: needs a diagonal"):
                CEMOptions(diagonal=diagonal, diagonal_form=form)
            continue
        lines = update_latex("attention", CEMOptions(diagonal=diagonal, diagonal_form=form))
        assert lines[:4] == kind.lines(DIAGONALS[diagonal], "E")
    x, c, diag = torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.rand(2, 4)
    expected = torch.einsum("bid,hd,bjd->bhij", x, diag, c)                   # x_i^T D_k c_j, by hand
    if kind.centred:                                                          # -(1/2)(x_i - c_j)^T D_k (x_i - c_j)
        diff = x[:, None, :, None, :] - c[:, None, None, :, :]
        expected = -0.5 * (diff * diag[None, :, None, None, :] * diff).sum(-1)
    torch.testing.assert_close(kind.term(x, c, diag), expected, rtol=1e-12, atol=1e-12)
    layer = CEMAttention(AttentionConfig(d_model=8, n_heads=2, diagonal="shared", diagonal_form=form))
    torch.testing.assert_close(layer.diagonal_matrix()[0], kind.matrix(torch.full((8,), kind.start(4, 8))))
    assert (layer.diagonal_matrix() > 0).all() if kind.centred else (layer.diagonal_matrix() == 0).all()


@pytest.fixture
def interleaved():
    """A throwaway block mode laid out as "sequential" is, registered for the test and removed after."""
    mode = register_block_mode(BlockMode("interleaved", "interleaved: a test's copy of sequential", False, None,
                                         BLOCK_MODES["sequential"].sections))
    yield mode
    del BLOCK_MODES["interleaved"]


def test_a_new_block_mode_is_one_registration(interleaved, capsys):
    """A block mode is one registered object (nn/block_modes.py): the command line's choices, the configs' validation,
    the parameter and FLOP counts and the model's blocks read its sections, so a new mode needs no other edit."""
    for command in (["lm", "train"], ["gp", "train"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        assert "interleaved" in capsys.readouterr().out.split("--block")[1].split("--")[0], command
    configs = {mode: ModelConfig(d_model=16, n_layers=2, n_heads=2, d_ff=24, attention="llama", mlp="cem",
                                 cem=CEMOptions(T=2, block=mode)) for mode in ("sequential", "interleaved")}
    assert configs["interleaved"].param_counts() == configs["sequential"].param_counts()
    assert model_flops(configs["interleaved"], 32) == model_flops(configs["sequential"], 32)
    model = LanguageModel(configs["interleaved"])
    assert sum(p.numel() for p in model.parameters()) == configs["interleaved"].param_counts()["total"]
    with pytest.raises(ValueError, match=r"^block='joint' is invalid: needs attention='cem' and mlp='cem'"):
        ModelConfig(attention="llama", mlp="cem", cem=CEMOptions(block="joint"))
    assert ModelConfig.variant("cem-mlp", cem=CEMOptions(block="joint")).cem.block == "sequential"   # dropped
    with pytest.raises(ValueError, match="registered already"):
        register_block_mode(interleaved)
