"""The energy page's data: key points, landscapes, and the diagnostics the classroom walkthrough relies on."""
import numpy as np
import pytest
import torch

from cem_core.ui.controls import EnergyControls
from cem_core.ui.explore import build_layers, diagnose, explore
from cem_core.ui.figdata import descent_input, key_tips


@pytest.mark.parametrize("rope,diagonal", [(False, "none"), (True, "shared")])
def test_first_step_is_the_attention_weighted_key_points(rope, diagonal):
    """With one head, x^(1) = sum_j a_ij (x^(0) + eta P v_j): the convex combination of the key points."""
    c = EnergyControls.from_values(heads=1, width=8, seq_len=6, rope=rope, diagonal=diagonal, preconditioner="psd",
                                   eta=0.7)
    (_, layer), = build_layers(c)
    h = descent_input(c.seq_len, c.width, c.seed)
    trace = layer.trace(h)
    token = 4
    tips = key_tips(layer, h, token)[0]                                     # (j, d)
    weights = trace.weights[0, 0, 0, token, : token + 1]                    # a_ij at step 1
    torch.testing.assert_close(weights @ tips, trace.iterates[1, 0, token], rtol=1e-10, atol=1e-10)


def test_landscape_values_are_the_layer_energy():
    c = EnergyControls.from_values(width=6, heads=2, seq_len=5, T=3)
    data = explore(c, token=3)
    land = data["phases"][0]["landscape"]
    (_, layer), = build_layers(c)
    h = descent_input(c.seq_len, c.width, c.seed)
    assert land["energy"].shape == (len(land["b"]), len(land["a"]))
    np.testing.assert_allclose(land["trajectory"][0], [0.0, 0.0], atol=1e-12)     # the plane passes through x^(0)
    assert np.abs(land["off_plane"][:3]).max() < 1e-9                              # x^(0..2) span the plane
    for k, j in ((0, 0), (7, 30), (40, 11)):                                        # grid point (a_j, b_k)
        x = torch.from_numpy(land["origin"] + land["a"][j] * land["basis"][0] + land["b"][k] * land["basis"][1])
        with torch.no_grad():
            assert abs(land["energy"][k, j] - float(layer.energy_at(x[None], h, 3))) < 1e-12
    with pytest.raises(ValueError, match="token=5"):
        explore(c, token=5)


def _levels(c):
    return [level for level, _ in diagnose(c, explore(c))]


def test_walkthrough_claims_hold():
    # 2: defaults, attention: every step descends, no minimum (an info note, no warning)
    assert _levels(EnergyControls()) == ["info"]
    # 3: the anchor makes the update norm vanish
    norms = explore(EnergyControls.from_values(anchor=1.0, T=16))["phases"][0]["update_norms"]
    assert norms[-1, -1] < 1e-6 * norms[0, -1]
    # 4: the paper-form P at scale 2 is indefinite; with seed 2 a step goes uphill; psd never does
    dlr = EnergyControls.from_values(preconditioner="dlr", p_scale=2.0, seed=2)
    notes = diagnose(dlr, explore(dlr))
    assert any(level == "warning" and "negative" in text for level, text in notes)
    for seed in range(4):
        assert "warning" not in _levels(EnergyControls.from_values(preconditioner="psd", p_scale=2.0, seed=seed))
    # 5: the MLP energy is not concave: eta = 20 overshoots
    mlp = EnergyControls.from_values(layer="mlp", eta=20.0)
    assert any(level == "warning" and "not concave" in text for level, text in diagnose(mlp, explore(mlp)))
