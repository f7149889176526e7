"""The training depth (train_depths.TRAIN_DEPTHS): which in-layer depths a training step averages its loss over, in
both trainers, refused where it cannot apply, and absent from the hashes of every run trained before it."""
import collections
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from cem_core.experiments.gp.model import GPModelConfig, GPTransformer
from cem_core.experiments.gp.task import GPTaskConfig, sample_batch
from cem_core.experiments.gp.train import GPTrainConfig, RunSpec, train_gp
from cem_core.experiments.lm.data_config import DataConfig
from cem_core.experiments.lm.train_config import LMTrainConfig
from cem_core.experiments.train_depths import TRAIN_DEPTHS, depth_loss
from cem_core.nn.config import CEMOptions, ModelShape
from cem_core.nn.model import cem_layers

SHAPE = ModelShape(d_model=16, n_layers=1, n_heads=2, d_ff=32)


def test_each_training_depth_names_its_depths():
    assert TRAIN_DEPTHS["fixed"].depths(4, 0, 7) == (4,)
    assert TRAIN_DEPTHS["every step"].depths(4, 0, 7) == (1, 2, 3, 4)
    assert [TRAIN_DEPTHS[name].cost(4) for name in TRAIN_DEPTHS] == [1.0, 5 / 8, 10 / 4]
    assert all(d.label and d.equation for d in TRAIN_DEPTHS.values())


def test_the_random_depth_is_uniform_over_1_to_T_and_a_function_of_the_seed_and_step_alone():
    """4,000 draws at T = 4: every depth within 0.03 of 1/4 (about 4 standard errors); the same (seed, step) draws
    the same depth in any order (a resumed run trains at the same depths); another seed draws another sequence."""
    random = TRAIN_DEPTHS["random"]
    draws = [random.depths(4, 3, step)[0] for step in range(4000)]
    counts = collections.Counter(draws)
    assert set(counts) == {1, 2, 3, 4}
    assert all(abs(counts[t] / 4000 - 0.25) < 0.03 for t in counts)
    assert [random.depths(4, 3, step)[0] for step in reversed(range(4000))] == draws[::-1]
    assert [random.depths(4, 4, step)[0] for step in range(50)] != draws[:50]
    assert {random.depths(1, 0, step) for step in range(20)} == {(1,)}


def _gp_model(T=3, **cem):
    torch.manual_seed(0)
    model = GPTransformer(GPTaskConfig(), GPModelConfig(shape=SHAPE).with_cem(T=T, **cem)).double()
    xs, ys = sample_batch(GPTaskConfig(), 8, torch.Generator().manual_seed(1))
    return model, xs.double(), ys.double()


def test_the_depth_loss_is_the_mean_of_the_losses_at_each_depth_and_its_gradient_theirs():
    """Computed by hand: the model rebuilt at each T (float64), the losses and gradients averaged (to 1e-12); the
    trained T is back afterwards."""
    model, xs, ys = _gp_model(T=3)
    loss = depth_loss(model, lambda: F.mse_loss(model(xs, ys), ys), (1, 2, 3))
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    assert [layer.config.T for layer in cem_layers(model)] == [3]
    by_hand, by_hand_grads = [], []
    for t in (1, 2, 3):
        other, _, _ = _gp_model(T=t)
        other.load_state_dict(model.state_dict())
        value = F.mse_loss(other(xs, ys), ys)
        by_hand.append(value)
        by_hand_grads.append(torch.autograd.grad(value, list(other.parameters()), allow_unused=True))
    assert loss.item() == pytest.approx(sum(v.item() for v in by_hand) / 3, rel=1e-12)
    for k, g in enumerate(grads):
        parts = [gs[k] for gs in by_hand_grads if gs[k] is not None]
        if g is None:
            assert not parts
            continue
        assert torch.allclose(g, sum(parts) / 3, rtol=1e-10, atol=1e-14)


def test_a_depth_of_the_trained_T_alone_is_one_plain_forward():
    model, xs, ys = _gp_model(T=2)
    calls = []
    assert depth_loss(model, lambda: calls.append(1) or F.mse_loss(model(xs, ys), ys), (2,)).item() == \
        pytest.approx(F.mse_loss(model(xs, ys), ys).item(), rel=0)
    assert calls == [1]


def test_training_depths_other_than_fixed_are_refused_where_they_cannot_apply():
    with pytest.raises(ValueError, match="train_depth='sideways' is invalid"):
        GPTrainConfig(train_depth="sideways")
    with pytest.raises(ValueError, match="applies to CEM layers only"):
        LMTrainConfig(variant="llama", train_depth="random")
    with pytest.raises(ValueError, match="eta_mode='per_step' learns exactly T"):
        LMTrainConfig(variant="cem-attn", cem=CEMOptions(T=2, eta_mode="per_step"), train_depth="every step")
    with pytest.raises(ValueError, match="applies to CEM layers only"):
        train_gp(GPTaskConfig(), GPModelConfig(attention="llama", shape=SHAPE),
                 GPTrainConfig(steps=1, batch_size=2, eval_size=4, train_depth="random"))


def test_the_training_depth_is_recorded_only_off_its_default_so_earlier_hashes_stand():
    spec = RunSpec(task=GPTaskConfig(), model=GPModelConfig(shape=SHAPE), train=GPTrainConfig(), group="g")
    assert "train_depth" not in spec.config()["train"]
    other = replace(spec, train=replace(spec.train, train_depth="every step"))
    assert other.config()["train"]["train_depth"] == "every step" and other.hash != spec.hash
    data = DataConfig(source="demo")
    cfg = LMTrainConfig(variant="cem-attn", T=2)
    assert "train_depth" not in cfg.identity(data)["config"]
    assert replace(cfg, train_depth="random").run_hash(data) != cfg.run_hash(data)


def test_a_gp_run_trained_at_every_depth_differs_from_fixed_and_is_reproducible():
    """A few steps: the every-step loss trains another model than fixed T (its loss curve differs), and the same
    configuration trains the same model twice (bit for bit)."""
    task, model = GPTaskConfig(), GPModelConfig(shape=SHAPE).with_cem(T=3)
    train = GPTrainConfig(steps=4, batch_size=4, eval_size=16)
    runs = {name: train_gp(task, model, replace(train, train_depth=name)) for name in ("fixed", "every step")}
    again = train_gp(task, model, replace(train, train_depth="every step"))
    assert runs["fixed"].losses[1:] != runs["every step"].losses[1:]
    assert again.losses == runs["every step"].losses and again.rmse == runs["every step"].rmse
