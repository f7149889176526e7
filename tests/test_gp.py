"""The Gaussian-process task: exact posterior, sampling, baselines, training, the sweep."""
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import COMMITTED_SWEEP, ROOT, tiny_gp_specs

from cem_core import CEMOptions, LanguageModel, ModelConfig
from cem_core.__main__ import main
from cem_core.experiments.gp import study as gp_study
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.gp import train as gp_train
from cem_core.experiments.gp.model import GPModelConfig, GPTransformer, make_tokens
from cem_core.experiments.gp.task import (
    GPTaskConfig,
    gp_posterior_mean,
    gp_predictive,
    nearest_neighbour_predictor,
    predict_in_batches,
    rmse,
    sample_batch,
    zero_predictor,
)
from cem_core.experiments.gp.train import GPTrainConfig, baseline_rmses, eval_set, evaluate_at_T, train_gp
from cem_core.experiments.lm import runner
from cem_core.nn.config import ModelShape
from cem_core.nn.model import recursion_depth

SMALL = ModelShape(d_model=16, n_layers=1, n_heads=4, d_ff=32)   # a GP model of a few seconds

TASKS = [GPTaskConfig(n_points=12), GPTaskConfig(kernel="matern52", lengthscale=0.5, n_points=12, d_x=2),
         GPTaskConfig(kernel="periodic", lengthscale=0.8, period=0.7, signal_var=2.0, noise_var=0.05, n_points=12)]


def sklearn_kernel(task):
    """The task's kernel in scikit-learn (an independent implementation), imported here: the quick loop, which runs
    none of the tests that use it, does without scikit-learn's import."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, ExpSineSquared, Matern

    scale = ConstantKernel(task.signal_var, constant_value_bounds="fixed")
    if task.kernel == "rbf":
        return scale * RBF(task.lengthscale, length_scale_bounds="fixed")
    if task.kernel == "matern52":
        return scale * Matern(task.lengthscale, length_scale_bounds="fixed", nu=2.5)
    return scale * ExpSineSquared(task.lengthscale, task.period, length_scale_bounds="fixed",
                                  periodicity_bounds="fixed")


def sklearn_regressor(task):
    """scikit-learn's GP regressor on the task's kernel and noise, with the hyperparameters held fixed."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    return GaussianProcessRegressor(sklearn_kernel(task), alpha=task.noise_var, optimizer=None)


@pytest.mark.slow                       # scikit-learn
@pytest.mark.parametrize("task", TASKS, ids=lambda t: f"{t.kernel}-dx{t.d_x}")
def test_posterior_mean_equals_sklearn(task):
    xs, ys = sample_batch(task, 3, torch.Generator().manual_seed(0))
    ours = gp_posterior_mean(task, xs, ys)
    assert ours.dtype == torch.float64 and ours.shape == (3, task.n_points)
    for b in range(3):
        assert ours[b, 0] == 0.0                                            # the prior mean at j = 0
        for j in range(1, task.n_points):
            gpr = sklearn_regressor(task)
            gpr.fit(xs[b, :j].double().numpy(), ys[b, :j].double().numpy())
            expected = gpr.predict(xs[b, j:j + 1].double().numpy())[0]
            assert abs(float(ours[b, j]) - expected) < 1e-6, (b, j)


@pytest.mark.slow                       # scikit-learn
def test_predictive_variance_equals_sklearn():
    task = TASKS[0]
    xs, ys = sample_batch(task, 1, torch.Generator().manual_seed(1))
    _, var = gp_predictive(task, xs, ys)
    j = 7
    gpr = sklearn_regressor(task)
    gpr.fit(xs[0, :j].double().numpy(), ys[0, :j].double().numpy())
    _, std = gpr.predict(xs[0, j:j + 1].double().numpy(), return_std=True)
    assert abs(float(var[0, j]) - (std[0] ** 2 + task.noise_var)) < 1e-8   # f variance + noise


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.kernel)
def test_samples_have_the_kernel_covariance(task):
    """Whitened by sklearn's kernel (an independent implementation), the samples must be N(0, I):
    each entry of the empirical covariance of z = L^-1 y is within 0.035 of I (about 5 standard
    errors at 20,000 samples)."""
    task = replace(task, n_points=6)
    xs, ys = sample_batch(task, 20000, torch.Generator().manual_seed(2))
    k = sklearn_kernel(task)
    zs = []
    for x, y in zip(xs.double().numpy(), ys.double().numpy()):
        L = np.linalg.cholesky(k(x) + task.noise_var * np.eye(task.n_points))
        zs.append(np.linalg.solve(L, y))
    zs = np.array(zs)
    assert np.abs(zs.mean(0)).max() < 0.035
    assert np.abs(zs.T @ zs / len(zs) - np.eye(task.n_points)).max() < 0.035


@pytest.mark.slow
def test_samples_detect_a_wrong_lengthscale():
    """The covariance test above can fail: whitening with another lengthscale is far from N(0, I)."""
    task = GPTaskConfig(n_points=6)
    xs, ys = sample_batch(task, 5000, torch.Generator().manual_seed(3))
    k = sklearn_kernel(replace(task, lengthscale=0.6))
    zs = np.array([np.linalg.solve(np.linalg.cholesky(k(x) + task.noise_var * np.eye(6)), y)
                   for x, y in zip(xs.double().numpy(), ys.double().numpy())])
    assert np.abs(zs.T @ zs / len(zs) - np.eye(6)).max() > 0.2


@pytest.mark.slow
def test_gp_optimum_beats_every_baseline_and_a_trained_model():
    task, train = GPTaskConfig(n_points=16), GPTrainConfig(steps=40, eval_size=256, batch_size=32)
    base = baseline_rmses(task, train)
    result = train_gp(task, GPModelConfig(shape=SMALL, cem=CEMOptions(T=2)), train)
    assert base["gp"]["rmse"] < min(base["zero"]["rmse"], base["nearest_neighbour"]["rmse"], result.rmse)
    # per position too, after the first point (where the GP and zero predictor both predict 0)
    gp, nn_ = np.array(base["gp"]["rmse_by_position"]), np.array(base["nearest_neighbour"]["rmse_by_position"])
    assert (gp[1:] < nn_[1:]).all()


@pytest.mark.slow
def test_short_training_lowers_rmse():
    task = GPTaskConfig(n_points=16)
    train = GPTrainConfig(steps=80, eval_size=256, batch_size=32, seed=1)
    config = GPModelConfig(shape=SMALL, cem=CEMOptions(T=2))
    torch.manual_seed(train.seed)
    untrained = GPTransformer(task, config)
    xs, ys = eval_set(task, train)
    before = rmse(predict_in_batches(untrained, xs, ys), ys)
    after = train_gp(task, config, train)
    assert after.rmse < 0.9 * before and not after.diverged
    assert np.mean(after.losses[-10:]) < np.mean(after.losses[:10])


@pytest.mark.parametrize("tokens, mlp, loops", [("pairs", "llama", 1), ("interleaved", "llama", 1),
                                                ("pairs", "none", 1), ("pairs", "cem", 3)])
def test_predictions_are_causal_and_tokens_documented(tokens, mlp, loops):
    """Both token formats, attention-only blocks and looped blocks: the prediction of y_j sees x_{<=j} and
    y_{<j} only."""
    task = GPTaskConfig(n_points=8)
    xs, ys = sample_batch(task, 2, torch.Generator().manual_seed(4))
    pairs = make_tokens(xs, ys)
    torch.testing.assert_close(pairs[:, 3], torch.cat((xs[:, 3], xs[:, 2], ys[:, 2, None], torch.zeros(2, 1)), -1))
    assert (pairs[:, 0, 1:] == torch.tensor([0.0, 0.0, 1.0])).all()
    interleaved = make_tokens(xs, ys, "interleaved")
    assert interleaved.shape == (2, 16, 3)
    torch.testing.assert_close(interleaved[:, 6], torch.cat((xs[:, 3], torch.zeros(2, 1), torch.ones(2, 1)), -1))
    torch.testing.assert_close(interleaved[:, 7], torch.cat((xs[:, 3], ys[:, 3, None], torch.zeros(2, 1)), -1))
    model = GPTransformer(task, GPModelConfig(shape=SMALL, cem=CEMOptions(T=3, diagonal="shared"),
                                              tokens=tokens, mlp=mlp, loops=loops))
    ys2 = ys.clone()
    ys2[:, 5:] += 3.0                                                       # y_j and later: invisible at j = 5
    xs2 = xs.clone()
    xs2[:, 6:] += 0.5                                                       # x_6 and later: invisible at j = 5
    with torch.no_grad():
        p, p2 = model(xs, ys), model(xs2, ys2)
    assert p.shape == (2, 8)
    torch.testing.assert_close(p[:, :6], p2[:, :6])
    assert not torch.allclose(p[:, 6:], p2[:, 6:])                         # and they do see what comes before
    for predictor in (zero_predictor, nearest_neighbour_predictor,
                      lambda a, b: gp_posterior_mean(task, a, b).float()):
        torch.testing.assert_close(predictor(xs, ys)[:, :6], predictor(xs2, ys2)[:, :6])


def test_eval_at_other_T_restores_and_per_step_refuses():
    task, train = GPTaskConfig(n_points=8), GPTrainConfig(eval_size=32)
    model = GPTransformer(task, GPModelConfig(shape=SMALL, cem=CEMOptions(T=2, eta_mode="learned")))
    out = evaluate_at_T(model, task, train, [1, 2, 5])
    assert set(out) == {1, 2, 5} and all(layer.config.T == 2 for layer in model.cem_layers())
    assert out[1] != out[5]
    per_step = GPTransformer(task, GPModelConfig(shape=SMALL, cem=CEMOptions(T=2, eta_mode="per_step")))
    with pytest.raises(ValueError, match="^eval_T=3"):
        evaluate_at_T(per_step, task, train, [3])
    assert all(layer.config.T == 2 for layer in per_step.cem_layers())


@pytest.mark.parametrize("cls,kwargs,field", [
    (GPTaskConfig, dict(kernel="linear"), "kernel"),
    (GPTaskConfig, dict(lengthscale=0.0), "lengthscale"),
    (GPTaskConfig, dict(noise_var=-1.0), "noise_var"),
    (GPTaskConfig, dict(d_x=0), "d_x"),
    (GPTaskConfig, dict(n_points=1), "n_points"),
    (GPTaskConfig, dict(box=(1.0, -1.0)), "box"),
    (GPTaskConfig, dict(box="wide"), "box"),
    (GPModelConfig, dict(shape=dict(d_model=30, n_heads=4)), "d_model"),
    (GPModelConfig, dict(attention="llama", cem=CEMOptions(T=2)), "cem"),
    (GPModelConfig, dict(attention="llama", mlp="cem", cem=CEMOptions(diagonal="shared")), "diagonal"),
    (GPTrainConfig, dict(steps=0), "steps"),
    (GPTrainConfig, dict(optim=dict(lr=0.0)), "lr"),
    (GPTrainConfig, dict(optim=dict(warmup=1.0)), "warmup"),
    (GPTrainConfig, dict(optim=dict(momentum=0.9)), "optim"),
])
def test_invalid_settings_name_the_field(cls, kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}="):
        cls(**kwargs)


def test_invalid_preset_and_cli_eval_T(capsys):
    with pytest.raises(ValueError, match="^preset="):
        gp_sweep.gp_preset_runs("huge")
    assert main(["gp", "train", "--eta-mode", "per_step", "--T", "2", "--eval-T", "4", "--steps", "1"]) == 2
    assert "eval_T=4 is invalid" in capsys.readouterr().err


def test_sweep_writes_results_and_skips_finished_runs(tmp_path, monkeypatch):
    specs = tiny_gp_specs()
    records = gp_sweep.run_gp_sweep(tmp_path, specs[:1])
    assert [r["hash"] for r in records] == [specs[0].hash]
    calls = []
    real = gp_sweep.run_spec
    monkeypatch.setattr(gp_sweep, "run_spec", lambda spec, **kw: calls.append(spec.hash) or real(spec, **kw))
    records = gp_sweep.run_gp_sweep(tmp_path, specs)
    assert calls == [specs[1].hash]                                          # the finished run was not retrained
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [r["hash"] for r in saved] == [s.hash for s in specs]
    for key in ("attention", "T", "diagonal", "preconditioner", "eta_mode", "seed", "params", "rmse", "rmse_gp",
                "rmse_ratio"):
        assert key in saved[1]
    assert saved[1]["provenance"]["torch"] == torch.__version__ and len(saved[1]["provenance"]["git_commit"]) > 0
    assert saved[1]["rmse_ratio"] == pytest.approx(saved[1]["rmse"] / saved[1]["rmse_gp"])
    assert "rmse_by_eval_T" in saved[1] and "rmse_by_eval_T" not in saved[0]
    assert (tmp_path / "results.csv").read_text().count("\n") == 3
    gp_sweep.run_gp_sweep(tmp_path, specs)
    assert calls == [specs[1].hash]


def test_run_hash_covers_every_setting():
    spec = tiny_gp_specs()[1]
    assert spec.hash != replace(spec, train=replace(spec.train, seed=1)).hash
    assert spec.hash != replace(spec, model=spec.model.with_cem(anchor=0.5)).hash
    assert spec.hash != replace(spec, task=replace(spec.task, noise_var=0.02)).hash


def test_committed_results_match_the_default_sweep():
    """results/gp-default/results.json must hold exactly the default preset's runs (by config hash),
    so a change to the task, models or training cannot leave stale results in the app and docs/."""
    records = gp_sweep.GP_SWEEP.load(COMMITTED_SWEEP / "results.json")
    missing, extra = gp_sweep.stale_hashes(records, "default")
    assert not missing and not extra, f"{len(missing)} runs missing, {len(extra)} stale: rerun the default sweep"


@pytest.mark.slow
def test_report_and_figures_from_results(tmp_path, capsys):
    gp_sweep.run_gp_sweep(tmp_path, tiny_gp_specs())
    assert main(["gp", "report", str(tmp_path / "results.json")]) == 0
    out = capsys.readouterr().out
    assert "Llama attention (depth 1)" in out and "CEM T=2 (depth 1)" in out and "GP optimum RMSE" in out
    runner.run_sweep(tmp_path / "lm", "quick")
    assert main(["figures", "--out", str(tmp_path / "fig"), "--gp-results", str(tmp_path / "results.json"),
                 "--lm-results", str(tmp_path / "lm" / "results.json"),
                 "--ladder-results", str(tmp_path / "lm" / "results.json"),
                 "--budget-ladder-results", str(tmp_path / "lm" / "results.json"),
                 "--gp-study-results", str(ROOT / gp_study.COMMITTED_STUDY / "results.json")]) == 0
    for name in ("gp_rmse_vs_context", "gp_ratio_vs_T", "gp_test_time_scaling"):
        for ext in ("png", "svg"):
            assert (tmp_path / "fig" / f"{name}.{ext}").stat().st_size > 1000


def test_gp_train_cli(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["gp", "train", "--T", "2", "--steps", "3", "--d-model", "8", "--d-ff", "16", "--n-heads", "2",
                 "--activation", "gelu", "--n-points", "8", "--eval-T", "1", "3", "--weight-decay", "0.05",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "held-out RMSE" in text and "test-time scaling" in text
    record = json.loads(out.read_text())
    assert set(record["rmse_by_eval_T"]) == {"1", "3"}
    # the shape as GP records have always held it (width, depth), the activation only off its default
    assert {k: record["config"]["model"][k] for k in ("width", "depth", "d_ff", "activation")} == {
        "width": 8, "depth": 1, "d_ff": 16, "activation": "gelu"} and record["width"] == 8
    assert (record["config"]["train"]["weight_decay"], record["config"]["train"]["lr"]) == (0.05, 3e-3)   # the flag


def test_posterior_on_grid_agrees_with_the_causal_posterior():
    task = GPTaskConfig(n_points=10)
    xs, ys = sample_batch(task, 2, torch.Generator().manual_seed(5))
    from cem_core.experiments.gp.task import gp_posterior_on_grid
    mean, std = gp_posterior_on_grid(task, xs[:, :6], ys[:, :6], xs[:, 6:7])
    causal_mean, causal_var = gp_predictive(task, xs, ys)
    torch.testing.assert_close(mean[:, 0], causal_mean[:, 6])
    torch.testing.assert_close(std[:, 0] ** 2 + task.noise_var, causal_var[:, 6])
    prior_mean, prior_std = gp_posterior_on_grid(task, xs[:, :0], ys[:, :0], xs)
    assert (prior_mean == 0).all() and torch.allclose(prior_std, torch.ones_like(prior_std))


def test_model_predict_at_equals_its_causal_prediction():
    task = GPTaskConfig(n_points=10)
    xs, ys = sample_batch(task, 1, torch.Generator().manual_seed(6))
    model = GPTransformer(task, GPModelConfig(shape=SMALL, cem=CEMOptions(T=2)))
    with torch.no_grad():
        full = model(xs, ys)[0]
    at = model.predict_at(xs[0, :4], ys[0, :4], xs[0, 4:7])
    torch.testing.assert_close(at[0], full[4])                              # the query after 4 points is position 4


def test_sampled_function_for_plots():
    from cem_core.experiments.gp.task import sample_function_on_grid
    task = GPTaskConfig(n_points=12)
    xs, ys, grid, f = sample_function_on_grid(task, seed=3, grid_size=50)
    assert xs.shape == ys.shape == (12,) and grid.shape == f.shape == (50,)
    again = sample_function_on_grid(task, seed=3, grid_size=50)
    assert all(torch.equal(a, b) for a, b in zip((xs, ys, grid, f), again))
    assert (ys - torch.from_numpy(np.interp(xs.numpy(), grid.numpy(), f.numpy()))).abs().max() < 0.6
    with pytest.raises(ValueError, match="^d_x="):
        sample_function_on_grid(replace(task, d_x=2), seed=0)


def test_attention_only_and_looped_models():
    """mlp="none" leaves the MLP out (no MLP parameters; a block is its attention sublayer); loops = 2 runs
    the same blocks twice over; both leave the hashes of runs that do not use them unchanged."""
    task = GPTaskConfig(n_points=6)
    xs, ys = sample_batch(task, 3, torch.Generator().manual_seed(1))
    base = GPModelConfig(shape=SMALL, cem=CEMOptions(T=2))
    torch.manual_seed(0)
    attention_only = GPTransformer(task, replace(base, mlp="none"))
    assert attention_only.blocks[0].mlp is None
    assert not any("mlp" in name for name, _ in attention_only.named_parameters())
    lm = ModelConfig(vocab_size=11, d_model=16, n_heads=2, d_ff=32, n_layers=2, attention="cem", mlp="none")
    assert lm.param_counts()["total"] == sum(p.numel() for p in LanguageModel(lm).parameters())
    assert lm.param_counts()["mlp.projections"] == 0
    h = torch.randn(3, 6, 16)
    torch.testing.assert_close(attention_only.blocks[0](h), attention_only.blocks[0].attn(h))
    torch.manual_seed(0)
    looped = GPTransformer(task, replace(base, loops=2))
    with torch.no_grad():
        h = looped.in_proj(make_tokens(xs, ys))
        h = looped.blocks[0](looped.blocks[0](h))
        torch.testing.assert_close(looped(xs, ys), looped.head(looped.norm(h)).squeeze(-1))
    train = GPTrainConfig()
    assert gp_sweep.RunSpec(task, base, train, "g").config()["model"].keys().isdisjoint({"tokens", "loops"})
    assert gp_sweep.RunSpec(task, replace(base, loops=2), train, "g").config()["model"]["loops"] == 2


def test_step_diagnostics_read_the_layer_after_each_step():
    """After all T steps the diagnostic's readout is the model's own prediction; after 0 steps it is the
    model with the attention layer removed; the energies are the layer's; entropies lie in [0, log n]."""
    task, train = GPTaskConfig(n_points=10), GPTrainConfig(eval_size=64)
    torch.manual_seed(0)
    model = GPTransformer(task, GPModelConfig(shape=SMALL, cem=CEMOptions(T=3, eta=0.5), tokens="interleaved"))
    model.eval()
    d = gp_train.step_diagnostics(model, task, train, n_functions=32)
    xs, ys = (t[:32] for t in eval_set(task, train))
    optimum = rmse(gp_posterior_mean(task, xs, ys), ys)
    with torch.no_grad():
        assert d["rmse_ratio_after_step"][-1] == pytest.approx(rmse(model(xs, ys), ys) / optimum, rel=1e-5)
        with recursion_depth(model, 1):
            assert d["rmse_ratio_after_step"][1] == pytest.approx(rmse(model(xs, ys), ys) / optimum, rel=1e-5)
    assert d["T"] == 3 and len(d["energy_change"]) == 4 and d["energy_change"][0] == 0.0
    assert d["step_size"] == [0.5] * 3 and all(n > 0 for n in d["update_norm"])
    assert all(0 <= e <= math.log(20) for e in d["attention_entropy"])
    with pytest.raises(ValueError, match="one CEM attention block"):
        gp_train.step_diagnostics(GPTransformer(task, GPModelConfig(attention="llama", shape=SMALL)), task, train)


def test_training_records_a_held_out_curve():
    task = GPTaskConfig(n_points=6)
    result = train_gp(task, GPModelConfig(shape=SMALL), GPTrainConfig(steps=20, batch_size=8, eval_size=32,
                                                                           eval_every=5))
    assert [step for step, _ in result.rmse_curve] == [5, 10, 15, 20]
    assert result.rmse_curve[-1][1] == pytest.approx(result.rmse)


@pytest.mark.slow
def test_a_sweep_reuses_runs_of_the_same_configuration(tmp_path, monkeypatch, capsys):
    """--reuse takes another sweep's runs of the same configuration (same hash) as they are, under this
    sweep's group, and trains only the rest; runs of other configurations are not taken."""
    first = tiny_gp_specs()
    gp_sweep.run_gp_sweep(tmp_path / "a", first)
    other = replace(first[1], group="elsewhere")                             # same configuration, another group
    new = replace(first[0], train=replace(first[0].train, seed=5))           # not in the first sweep
    calls = []
    real = gp_sweep.run_spec
    monkeypatch.setattr(gp_sweep, "run_spec", lambda spec, **kw: calls.append(spec.hash) or real(spec, **kw))
    monkeypatch.setattr(gp_sweep, "gp_preset_runs", lambda preset: [other, new])
    assert main(["gp", "sweep", "--preset", "quick", "--out", str(tmp_path / "b"), "--jobs", "1",
                 "--reuse", str(tmp_path / "a")]) == 0
    assert calls == [new.hash]
    records = {r["hash"]: r for r in gp_sweep.GP_SWEEP.load(tmp_path / "b" / "results.json")}
    source = {r["hash"]: r for r in gp_sweep.GP_SWEEP.load(tmp_path / "a" / "results.json")}
    unsealed = lambda record: {k: v for k, v in record.items() if k != "checksums"}  # noqa: E731
    assert unsealed(records[other.hash]) == unsealed(source[other.hash]) | {"group": "elsewhere"}
    assert gp_sweep.GP_SWEEP.problem(records[other.hash]) == ""                # sealed anew under its group
    assert first[0].hash not in records
