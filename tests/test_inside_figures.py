"""Inside the trained models: the static figures (figures/trained_*.png) show what the models and their measured
test_time.json hold, and test-time T that runs the iterates off (predictions that overflow) is reported as such."""
import math

import pytest
import torch
from conftest import ROOT

from cem_core.experiments.gp import inspect as gp_inspect
from cem_core.experiments.gp.model import GPModelConfig, GPTransformer
from cem_core.experiments.gp.task import GPTaskConfig
from cem_core.experiments.gp.train import GPTrainConfig
from cem_core.nn.config import CEMOptions

MODELS = ROOT / "models"


def test_a_test_time_T_whose_predictions_overflow_has_no_mean_and_says_so(monkeypatch):
    """gp-block-T8's iterates run off past T = 19 (its energy has no minimum): a function whose prediction is not
    finite used to end the measurement in statistics.stdev; now mean, se and the interval are nan and the
    functions are counted."""
    task = GPTaskConfig(n_points=8)
    torch.manual_seed(0)
    model = GPTransformer(task, GPModelConfig(shape=dict(d_model=8, n_layers=1, n_heads=2, d_ff=16),
                                              attention="cem", cem=CEMOptions(T=2))).eval()
    honest = gp_inspect.per_function_ratio

    def overflowing(model, task, xs, ys, optimum):
        ratios = honest(model, task, xs, ys, optimum)
        if model.cem_layers()[0].config.T == 4:
            ratios[:3] = math.inf
        return ratios

    monkeypatch.setattr(gp_inspect, "per_function_ratio", overflowing)
    study = gp_inspect.scaling(model, task, GPTrainConfig(eval_size=16), n_functions=16)
    assert study["T"] == [1, 2, 3, 4, 5, 6, 7, 8]
    at4 = study["by_T"][3]
    assert math.isnan(at4["mean"]) and math.isnan(at4["se"]) and at4["overflowed"] == 3
    assert all(s["overflowed"] == 0 and math.isfinite(s["mean"]) for k, s in enumerate(study["by_T"]) if k != 3)
    assert study["vs_trained"][3]["overflowed"] == 3 and math.isnan(study["vs_trained"][3]["low"])
    assert "overflows (is not finite) on 3 of 16 held-out functions" in gp_inspect.scaling_reading(study, 4)
    assert gp_inspect.scaling_reading(study, 3).startswith("Over 16 held-out functions, the RMSE ratio at T = 3 is")


# -- the figures of the trained models (figures/trained_*.png, notebook 06), on the committed models -------------


def test_the_steps_figure_plays_each_model_to_its_forward_pass_against_the_posterior():
    """figdata.gp_steps_on_function: after the trained T steps the prediction is the model's own (predict_at, float32
    rounding of two orders of summation), the posterior is the GP's given the same context, and the RMSE to it is
    the prediction's."""
    from cem_core.experiments.gp.task import gp_posterior_on_grid
    from cem_core.experiments.gp.trained import load_gp_model
    from cem_core.ui import figdata

    data = figdata.gp_steps_on_function(root=MODELS)
    assert list(data["models"]) == list(figdata.STEP_MODELS) and data["seed"] == figdata.STEP_FUNCTION["seed"]
    cx, cy, grid = (torch.tensor(data[k]) for k in ("context_x", "context_y", "grid"))
    assert len(cx) == data["context"] == figdata.STEP_FUNCTION["context"]
    for name, m in data["models"].items():
        model, task = load_gp_model(name, MODELS)
        assert m["prediction"].shape == (m["T"] + 1, len(grid)) and m["T"] == model.cem_layers()[0].config.T
        own = model.predict_at(cx[:, None].float(), cy.float(), grid[:, None].float()).numpy()
        assert abs(m["prediction"][-1] - own).max() < 1e-4, name
        mean, sd = gp_posterior_on_grid(task, cx[None, :, None], cy[None], grid[None, :, None])
        assert abs(data["posterior_mean"] - mean[0].numpy()).max() < 1e-12
        assert abs(data["posterior_sd"] - sd[0].numpy()).max() < 1e-12
        rmse = ((m["prediction"] - data["posterior_mean"]) ** 2).mean(-1) ** 0.5
        assert abs(m["rmse_to_posterior"] - rmse).max() < 1e-5


def test_the_test_time_figures_show_what_was_measured():
    """figdata.gp_test_time_curves and lm_test_time_curves are each model's test_time.json; every CEM layer read
    after the trained T gives the forward pass's validation loss, ln of the perplexity at the trained T; the
    builders star the trained T and mark where the block's predictions overflow."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cem_core.experiments.models import test_time
    from cem_core.ui import figdata, trained_plots

    gp = figdata.gp_test_time_curves(root=MODELS)
    for name, c in gp.items():
        measured = test_time(name, MODELS)
        assert list(c["T"]) == measured["T"] and c["trained_T"] == measured["trained_T"]
        assert [s["mean"] for s in measured["by_T"]] == pytest.approx(list(c["mean"]), nan_ok=True)
    assert gp["gp-block-T8"]["overflowed"].max() == gp["gp-block-T8"]["functions"] > 0     # its energy has no minimum
    lm = figdata.lm_test_time_curves(root=MODELS)
    for name, layers in lm["steps"].items():
        at = list(lm["ppl"][name]["T"]).index(lm["ppl"][name]["trained_T"])
        assert all(losses[-1] == pytest.approx(math.log(lm["ppl"][name]["ppl"][at]), abs=1e-6)
                   for losses in layers.values())
    assert not lm["steps"]["lm-llama"] and len(lm["steps"]["lm-cem-full"]) == 4
    fig = trained_plots.mpl_trained_test_time(gp)
    texts = " ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))
    assert "from T = 20: not finite on 25 of 256 functions" in texts and "the trained T" in texts
    stars = [line for line in fig.axes[0].lines if line.get_marker() == "*"]
    assert len(stars) == 5                                  # four models with steps, and the legend's
    plt.close(fig)
    plt.close(trained_plots.mpl_trained_lm_steps(lm))
    plt.close(trained_plots.mpl_trained_steps(figdata.gp_steps_on_function(root=MODELS)))


def test_the_steps_on_a_learners_points():
    """figdata.gp_steps_on_function with a learner's points (notebook 06's `points`): each model reads exactly those
    points (its prediction after the trained T is inspect_function's on them), there is no truth, and the figure
    says whose points it shows."""
    import matplotlib.pyplot as plt
    import numpy as np

    from cem_core.experiments.gp.inspect import inspect_function
    from cem_core.experiments.gp.trained import load_gp_model
    from cem_core.ui import figdata, trained_plots

    points = [(-0.6, 0.4), (0.0, -0.9), (0.7, 1.1)]
    data = figdata.gp_steps_on_function(root=MODELS, points=points)
    assert data["truth"] is None and data["seed"] is None and data["context"] == 3
    assert data["context_x"].tolist() == [x for x, _ in points]
    for name, m in data["models"].items():
        model, task = load_gp_model(name, MODELS)
        want = inspect_function(model, task, None, points=points)["layers"][0]["prediction"][-1]
        assert np.allclose(m["prediction"][-1], want, rtol=0, atol=1e-12)
    fig = trained_plots.mpl_trained_steps(data)
    assert fig._suptitle.get_text() == "Trained GP models on your 3 points, step by step"
    plt.close(fig)
