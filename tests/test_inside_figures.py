"""Inside the trained models: the static figures (figures/trained_*.png) show what the models and their measured
test_time.json hold, and test-time T that runs the iterates off (predictions that overflow) is reported as such."""
import math

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
