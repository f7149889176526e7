"""Every invalid setting raises ValueError naming the field, the value and what is allowed."""
from dataclasses import fields

import pytest
import torch

from cem_core import (
    AttentionConfig,
    CEMAttention,
    CEMGatedMLP,
    CEMOptions,
    LanguageModel,
    LlamaAttention,
    LlamaAttentionConfig,
    MLPConfig,
    ModelConfig,
    SwiGLU,
    SwiGLUConfig,
)

BAD_ATTENTION = [
    (dict(d_model=30, n_heads=4), "d_model"),
    (dict(d_model=0, n_heads=1), "d_model"),
    (dict(d_model=16, n_heads=0), "n_heads"),
    (dict(d_model=12, n_heads=4, rope=True), "n_heads"),          # odd head dim with RoPE
    (dict(d_model=16, n_heads=2, T=0), "T"),
    (dict(d_model=16, n_heads=2, T=2.5), "T"),
    (dict(d_model=16, n_heads=2, eta=0.0), "eta"),
    (dict(d_model=16, n_heads=2, eta=-1.0), "eta"),
    (dict(d_model=16, n_heads=2, eta=float("nan")), "eta"),
    (dict(d_model=16, n_heads=2, anchor=-0.1), "anchor"),
    (dict(d_model=16, n_heads=2, diagonal="full"), "diagonal"),
    (dict(d_model=16, n_heads=2, preconditioner="lbfgs"), "preconditioner"),
    (dict(d_model=16, n_heads=2, preconditioner="psd", rank=0), "rank"),
    (dict(d_model=16, n_heads=2, preconditioner="dlr", rank=17), "rank"),
    (dict(d_model=16, n_heads=2, eta_per_step=True), "eta_per_step"),
    (dict(d_model=16, n_heads=2, learn_eta="yes"), "learn_eta"),
    (dict(d_model=16, n_heads=2, norm_eps=0.0), "norm_eps"),
]


@pytest.mark.parametrize("kwargs,field", BAD_ATTENTION)
def test_bad_attention_config_names_field(kwargs, field):
    with pytest.raises(ValueError) as err:
        AttentionConfig(**kwargs)
    msg = str(err.value)
    assert msg.startswith(f"{field}={kwargs[field]!r} is invalid: "), msg
    assert len(msg) > len(f"{field}={kwargs[field]!r} is invalid: ") + 10   # says what is allowed


BAD_MLP = [
    (dict(d_model=16, d_ff=0), "d_ff"),
    (dict(d_model=16, d_ff=32, activation="tanh"), "activation"),
    (dict(d_model=16, d_ff=32, T=100), "T"),
    (dict(d_model=16, d_ff=32, T=100), "T"),
    (dict(d_model=0, d_ff=32), "d_model"),
]


@pytest.mark.parametrize("kwargs,field", BAD_MLP)
def test_bad_mlp_config_names_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}="):
        MLPConfig(**kwargs)


# the baselines' configs validate what they share with the CEM configs in the same way
BAD_BASELINE = [
    (LlamaAttentionConfig, dict(d_model=30, n_heads=4), "d_model"),
    (LlamaAttentionConfig, dict(d_model=12, n_heads=4, rope=True), "n_heads"),
    (LlamaAttentionConfig, dict(d_model=16, n_heads=2, rope_base=0.5), "rope_base"),
    (LlamaAttentionConfig, dict(d_model=16, n_heads=2, norm_eps=-1.0), "norm_eps"),
    (SwiGLUConfig, dict(d_model=16, d_ff=0), "d_ff"),
    (SwiGLUConfig, dict(d_model=16, d_ff=8, activation="tanh"), "activation"),
]


@pytest.mark.parametrize("cls,kwargs,field", BAD_BASELINE)
def test_bad_baseline_config_names_field(cls, kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}={kwargs[field]!r} is invalid: "):
        cls(**kwargs)


def test_allowed_values_are_listed():
    with pytest.raises(ValueError, match="'none', 'per_head', 'shared'"):
        AttentionConfig(d_model=16, n_heads=2, diagonal="diag")


@pytest.mark.parametrize("switch", ["T", "eta", "learn_eta", "anchor", "preconditioner", "diagonal", "untied"])
def test_baseline_configs_have_no_cem_switches(switch):
    """A baseline is not a gradient step on an energy: its config cannot even be given a CEM switch."""
    for cls, kwargs in ((LlamaAttentionConfig, dict(d_model=16, n_heads=2)), (SwiGLUConfig, dict(d_model=16, d_ff=8))):
        assert switch not in {f.name for f in fields(cls)}
        with pytest.raises(TypeError, match=switch):
            cls(**kwargs, **{switch: 2})
    assert "untied" not in {f.name for f in fields(AttentionConfig)} | {f.name for f in fields(MLPConfig)}


def test_layers_take_only_their_own_config():
    """A CEM config does not build a baseline, nor a baseline config a CEM layer."""
    with pytest.raises(ValueError, match="LlamaAttentionConfig; got AttentionConfig"):
        LlamaAttention(AttentionConfig(d_model=16, n_heads=2))
    with pytest.raises(ValueError, match="SwiGLUConfig; got MLPConfig"):
        SwiGLU(MLPConfig(d_model=16, d_ff=8))
    with pytest.raises(ValueError, match="AttentionConfig; got LlamaAttentionConfig"):
        CEMAttention(LlamaAttentionConfig(d_model=16, n_heads=2))
    with pytest.raises(ValueError, match="MLPConfig; got SwiGLUConfig"):
        CEMGatedMLP(SwiGLUConfig(d_model=16, d_ff=8))
    with pytest.raises(ValueError, match="AttentionConfig"):
        CEMAttention(MLPConfig(d_model=16, d_ff=8))


@pytest.mark.parametrize("bad,match", [
    (torch.randn(2, 5, 15), "shape"),
    (torch.randn(5, 16), "shape"),
    (torch.randn(2, 0, 16), "shape"),
    (torch.randint(0, 3, (2, 5, 16)), "dtype"),
    (torch.full((2, 5, 16), float("nan")), "NaN"),
    (torch.full((2, 5, 16), float("inf")), "infinite"),
    ([[0.0] * 16], "torch.Tensor"),
])
def test_bad_input_tensor(bad, match):
    att = CEMAttention(AttentionConfig(d_model=16, n_heads=2))
    mlp = CEMGatedMLP(MLPConfig(d_model=16, d_ff=8))
    for layer in (att, mlp):
        for call in (lambda: layer(bad), lambda: layer.trace(bad)):
            with pytest.raises(ValueError, match=match):
                call()


def _baselines():
    return LlamaAttention(LlamaAttentionConfig(d_model=16, n_heads=2)), SwiGLU(SwiGLUConfig(d_model=16, d_ff=8))


def test_baselines_have_no_energy_view():
    for layer in _baselines():
        assert not any(hasattr(layer, name) for name in ("energy", "energy_at", "trace", "step_sizes"))


@pytest.mark.parametrize("bad,match", [(torch.randn(2, 5, 15), "shape"), (torch.full((2, 5, 16), float("nan")), "NaN")])
def test_baselines_check_their_input(bad, match):
    for layer in _baselines():
        with pytest.raises(ValueError, match=match):
            layer(bad)


def test_energy_shape_mismatch():
    att = CEMAttention(AttentionConfig(d_model=16, n_heads=2))
    with pytest.raises(ValueError, match="must match"):
        att.energy(torch.randn(1, 3, 16), torch.randn(1, 4, 16))


@pytest.mark.parametrize("kwargs,field", [
    (dict(attention="gpt"), "attention"),
    (dict(mlp="moe"), "mlp"),
    (dict(n_layers=0), "n_layers"),
    (dict(attention="cem", cem=dict(T=2)), "cem"),
    (dict(attention="llama", cem=CEMOptions(diagonal="shared")), "diagonal"),
    (dict(attention="llama", mlp="llama", cem=CEMOptions(T=2)), "cem"),
    (dict(mlp="cem", cem=CEMOptions(preconditioner="psd", rank=1000)), "rank"),
])
def test_bad_model_config(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}"):
        ModelConfig(d_model=32, n_heads=4, d_ff=64, **kwargs)


@pytest.mark.parametrize("idx,match", [
    (torch.zeros(2, 5), "integer"),
    (torch.zeros(5, dtype=torch.long), "shape"),
    (torch.full((1, 3), 99), "vocab_size"),
    (torch.full((1, 3), -1), "vocab_size"),
    (torch.zeros(1, 65, dtype=torch.long), "max_seq_len"),
])
def test_bad_token_ids(idx, match):
    model = LanguageModel(ModelConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_seq_len=64))
    with pytest.raises(ValueError, match=match):
        model(idx)


def test_token_id_range_check_can_be_turned_off():
    """With the check off (a trainer on a GPU), no reduction runs over the ids: an out-of-range id
    reaches the embedding itself, which fails in its own way."""
    model = LanguageModel(ModelConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_seq_len=64))
    model.check_token_ids = False
    assert model(torch.full((1, 3), 49)).shape == (1, 3, 50)
    with pytest.raises(IndexError):
        model(torch.full((1, 3), 99))


def test_bad_generate_settings():
    model = LanguageModel(ModelConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_seq_len=8))
    idx = torch.zeros(1, 4, dtype=torch.long)
    for kwargs, field in [(dict(max_new_tokens=5), "max_new_tokens"), (dict(max_new_tokens=-1), "max_new_tokens"),
                          (dict(max_new_tokens=2, temperature=-1.0), "temperature"),
                          (dict(max_new_tokens=2, top_k=0), "top_k")]:
        with pytest.raises(ValueError, match=rf"^{field}="):
            model.generate(idx, **kwargs)


@pytest.mark.parametrize("kwargs,field", [
    (dict(T=0), "T"), (dict(T=65), "T"), (dict(T=2.0), "T"), (dict(eta=0.0), "eta"), (dict(eta=float("nan")), "eta"),
    (dict(eta_mode="adaptive"), "eta_mode"), (dict(anchor=-1.0), "anchor"), (dict(diagonal="full"), "diagonal"),
    (dict(preconditioner="lbfgs"), "preconditioner"), (dict(rank=0), "rank"), (dict(rank=True), "rank"),
])
def test_bad_cem_switches_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}="):
        CEMOptions(**kwargs)


def test_cem_switches_map_onto_the_layer_configs():
    cem = CEMOptions(T=3, eta=0.5, eta_mode="per_step", anchor=0.2, diagonal="shared", preconditioner="psd", rank=2)
    att = AttentionConfig(d_model=8, n_heads=2, **cem.attention_fields())
    mlp = MLPConfig(d_model=8, d_ff=16, **cem.descent_fields())
    for config in (att, mlp):
        assert (config.T, config.eta, config.learn_eta, config.eta_per_step, config.anchor, config.preconditioner,
                config.rank) == (3, 0.5, True, True, 0.2, "psd", 2)
    assert att.diagonal == "shared" and "diagonal" not in cem.descent_fields()
    assert CEMOptions(eta_mode="learned").descent_fields()["eta_per_step"] is False


def test_the_model_shape_is_one_object_that_every_model_config_holds():
    """ModelShape holds the sizes and the activation once: ModelConfig is one, and its activation reaches every
    block's MLP (SwiGLU, the CEM gated MLP, the joint block), whose outputs then differ from silu's."""
    from cem_core.experiments.bench import BenchConfig
    from cem_core.experiments.gp.model import GPModelConfig
    from cem_core.experiments.lm.presets import SWEEP_PRESETS
    from cem_core.experiments.lm.train_config import LMTrainConfig
    from cem_core.nn.config import SHAPE_FIELDS, ModelShape, as_shape
    from cem_core.ui.design_controls import DesignControls
    from cem_core.ui.gp_controls import GPControls

    shape = ModelShape(d_model=16, n_layers=1, n_heads=2, d_ff=32, activation="gelu")
    for variant in ("llama", "cem-mlp", "cem-full"):
        config = ModelConfig.variant(variant, shape=shape, vocab_size=11, max_seq_len=8)
        assert as_shape(config) == shape and type(as_shape(config)) is ModelShape
        assert config.mlp_config().activation == "gelu"
        torch.manual_seed(0)
        gelu = LanguageModel(config)
        torch.manual_seed(0)
        silu = LanguageModel(ModelConfig.variant(variant, shape=ModelShape(**{**shape.shape_fields(),
                                                                              "activation": "silu"}),
                                                 vocab_size=11, max_seq_len=8))
        ids = torch.arange(8)[None] % 11
        assert not torch.allclose(gelu(ids)[0], silu(ids)[0])
    joint = ModelConfig.variant("cem-full", cem=CEMOptions(T=2, block="joint"), shape=shape, vocab_size=11)
    assert joint.block_config().activation == "gelu"
    holders = (LMTrainConfig(), GPModelConfig(), BenchConfig(), DesignControls(), GPControls(),
               SWEEP_PRESETS["default"])
    assert all(type(h.shape) is ModelShape for h in holders)
    assert {f.name for f in fields(ModelShape)} == set(SHAPE_FIELDS)
    assert not any(name in {f.name for f in fields(type(h))} for h in holders for name in SHAPE_FIELDS)


def test_a_shape_from_json_is_checked_field_by_field():
    from cem_core.nn.config import ModelShape, as_shape

    assert as_shape({"d_model": 8, "n_heads": 2}) == ModelShape(d_model=8, n_heads=2)
    for bad, field in ((dict(d_model=0), "d_model"), (dict(activation="tanh"), "activation"),
                       (dict(width=8), "shape"), ("wide", "shape")):
        with pytest.raises(ValueError, match=rf"^{field}="):
            as_shape(bad)


def test_run_hashes_keep_the_flat_form_and_count_the_activation_only_off_its_default():
    """The shape's fields sit among an LM run's own in its identity (and under width and depth in a GP run's), as
    the committed results' hashes were computed; silu is left out, any other activation changes the hash."""
    from cem_core.experiments.gp.model import GPModelConfig
    from cem_core.experiments.gp.task import GPTaskConfig
    from cem_core.experiments.gp.train import GPTrainConfig, RunSpec
    from cem_core.experiments.lm.data_config import DataConfig
    from cem_core.experiments.lm.train_config import LMTrainConfig
    from cem_core.nn.config import ModelShape

    data = DataConfig(source="demo")
    lm = LMTrainConfig(shape=ModelShape(d_model=64, n_heads=2))
    config = lm.identity(data)["config"]
    assert "shape" not in config and "activation" not in config
    assert (config["d_model"], config["n_layers"], config["n_heads"], config["d_ff"]) == (64, 2, 2, 344)
    gelu = LMTrainConfig(shape=ModelShape(d_model=64, n_heads=2, activation="gelu"))
    assert gelu.identity(data)["config"]["activation"] == "gelu" and gelu.run_hash(data) != lm.run_hash(data)
    spec = RunSpec(task=GPTaskConfig(), model=GPModelConfig(), train=GPTrainConfig(), group="g")
    model = spec.config()["model"]
    assert (model["width"], model["depth"], model["n_heads"], model["d_ff"]) == (64, 1, 4, 128)
    assert not {"shape", "d_model", "n_layers", "activation"} & set(model)
    relu = RunSpec(task=GPTaskConfig(), model=GPModelConfig().with_shape(activation="relu"), train=GPTrainConfig(),
                   group="g")
    assert relu.config()["model"]["activation"] == "relu" and relu.hash != spec.hash


def test_both_trainers_hold_one_optimizer_config_and_record_its_fields_flat():
    """OptimConfig holds lr, its schedule, weight decay and clipping once: the LM and GP training configs each hold
    one (`optim`), neither repeats its fields, and both records list them among their own (the committed hashes'
    form), so a changed weight decay changes either hash."""
    from dataclasses import replace

    from cem_core.experiments.gp.model import GPModelConfig
    from cem_core.experiments.gp.task import GPTaskConfig
    from cem_core.experiments.gp.train import GP_OPTIM, GPTrainConfig, RunSpec
    from cem_core.experiments.lm.data_config import DataConfig
    from cem_core.experiments.lm.train_config import LMTrainConfig
    from cem_core.experiments.schedule import OPTIM_FIELDS, OptimConfig

    lm, gp = LMTrainConfig(), GPTrainConfig()
    assert type(lm.optim) is OptimConfig and gp.optim == GP_OPTIM and GP_OPTIM.weight_decay == 0.01
    assert not set(OPTIM_FIELDS) & ({f.name for f in fields(LMTrainConfig)} | {f.name for f in fields(GPTrainConfig)})
    data = DataConfig(source="demo")
    config = lm.identity(data)["config"]
    assert "optim" not in config and {k: config[k] for k in OPTIM_FIELDS} == {
        "lr": 3e-3, "min_lr_ratio": 0.1, "warmup": 0.05, "weight_decay": 0.1, "grad_clip": 1.0}
    assert replace(lm, optim=replace(lm.optim, weight_decay=0.0)).run_hash(data) != lm.run_hash(data)
    spec = RunSpec(task=GPTaskConfig(), model=GPModelConfig(), train=gp, group="g")
    train = spec.config()["train"]
    assert "optim" not in train and train["weight_decay"] == 0.01 and train["lr"] == 3e-3
    other = replace(spec, train=replace(gp, optim=replace(GP_OPTIM, weight_decay=0.1)))
    assert other.hash != spec.hash
    assert LMTrainConfig.from_preset("cpu-tiny", weight_decay=0.0, lr=1e-2).optim == OptimConfig(lr=1e-2,
                                                                                               weight_decay=0.0)
    assert LMTrainConfig(optim={"lr": 1e-2}).optim == OptimConfig(lr=1e-2)    # as run.json holds it


def test_the_schedule_warms_up_linearly_and_decays_to_its_floor():
    from cem_core.experiments.schedule import OptimConfig

    optim = OptimConfig(lr=1e-2, warmup=0.1, min_lr_ratio=0.2)
    rates = [optim.lr_at(step, 100) for step in range(100)]
    assert rates[:10] == pytest.approx([1e-3 * (s + 1) for s in range(10)])      # 10 warm-up steps to lr
    assert rates[10] == pytest.approx(1e-2) and all(a >= b for a, b in zip(rates[10:], rates[11:]))
    assert rates[-1] == pytest.approx(2e-3, rel=2e-3)                            # cosine to lr * min_lr_ratio


def test_a_shape_whose_heads_do_not_divide_the_width_is_refused_by_the_shape_itself():
    from cem_core.nn.config import ModelShape

    with pytest.raises(ValueError, match=r"^d_model=30 is invalid: must be divisible by n_heads=4"):
        ModelShape(d_model=30, n_heads=4)
