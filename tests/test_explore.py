"""The energy page's data: key points, landscapes, and the diagnostics the classroom lesson relies on."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.ui import lesson
from cem_core.ui.controls import EnergyControls
from cem_core.ui.descent_figures import per_token_figure
from cem_core.ui.explore import RISE_TOLERANCE, ROUNDING, SETTLED, build_layers, diagnose, explore, seeded_input
from cem_core.ui.figdata import key_tips
from cem_core.ui.symlog import SymLog

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("rope,diagonal", [(False, "none"), (True, "shared")])
def test_first_step_is_the_attention_weighted_key_points(rope, diagonal):
    """With one head, x^(1) = sum_j a_ij (x^(0) + eta P v_j): the convex combination of the key points."""
    c = EnergyControls.from_values(heads=1, width=8, seq_len=6, rope=rope, diagonal=diagonal, preconditioner="psd",
                                   eta=0.7)
    (_, layer), = build_layers(c)
    h = seeded_input(c)
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
    h = seeded_input(c)
    assert land["energy"].shape == (len(land["b"]), len(land["a"]))
    np.testing.assert_allclose(land["trajectory"][0], [0.0, 0.0], atol=1e-12)     # the plane passes through x^(0)
    assert np.abs(land["off_plane"][:3]).max() < 1e-9                              # x^(0..2) span the plane
    for k, j in ((0, 0), (7, 30), (40, 11)):                                        # grid point (a_j, b_k)
        x = torch.from_numpy(land["origin"] + land["a"][j] * land["basis"][0] + land["b"][k] * land["basis"][1])
        with torch.no_grad():
            assert abs(land["energy"][k, j] - float(layer.energy_at(x[None], h, 3))) < 1e-12
    with pytest.raises(ValueError, match="token=5"):
        explore(c, token=5)


def _energy_problems(step) -> list[str]:
    controls = step.controls()
    data = explore(controls)
    out = [p for d in diagnose(controls, data) for p in lesson.problems(step, d)]
    if step.lower_than_pinned:
        pinned = explore(step.pinned_controls())
        out += lesson.lower_problems(data["phases"][0]["energies"], pinned["phases"][0]["energies"])
    return out


def test_lesson_claims_hold():
    """Every energy step of the lesson sets a state whose note says what the step says (and a depth step's energies
    end below the pinned state's); the GP step's claim holds on the committed sweep."""
    assert len(lesson.STEPS) >= 8
    pages = [s.page for s in lesson.STEPS]
    assert pages.count("energy") >= 7 and "gp" in pages
    assert any(s.lower_than_pinned for s in lesson.STEPS)                # the recursion-depth step
    for step in lesson.STEPS:
        if step.page == "energy":
            assert _energy_problems(step) == [], (step.title, lesson.state_link(step))
    records = gp_sweep.GP_SWEEP.load(ROOT / gp_sweep.COMMITTED_GP_SWEEP / "results.json")
    gp_step, = (s for s in lesson.STEPS if s.page == "gp")
    assert lesson.gp_problems(gp_step, records) == []
    numbers = lesson.gp_numbers(records)
    assert f"{numbers['T1']:.2f}" in lesson.text(gp_step, records) and f"{numbers['Tmax']:.2f}" in lesson.text(
        gp_step, records)


def test_lesson_checker_can_fail():
    """The checks are not vacuous: the psd step's claim is false on the dlr state, a depth claim is false against
    itself, and the GP claim is false on a sweep where deeper T helps."""
    dlr, psd = (next(s for s in lesson.STEPS if s.state.get("preconditioner") == p and "T" not in s.state)
                for p in ("dlr", "psd"))
    diagnosis, = diagnose(dlr.controls(), explore(dlr.controls()))
    assert lesson.problems(psd, diagnosis)
    depth = next(s for s in lesson.STEPS if s.lower_than_pinned)
    energies = explore(depth.controls())["phases"][0]["energies"]
    assert lesson.lower_problems(energies, energies)
    records = gp_sweep.GP_SWEEP.load(ROOT / gp_sweep.COMMITTED_GP_SWEEP / "results.json")
    helped = [r | {"rmse_ratio": r["rmse_ratio"] / r["T"]} if r["attention"] != "llama" else r for r in records]
    gp_step, = (s for s in lesson.STEPS if s.page == "gp")
    assert lesson.gp_problems(gp_step, helped)


def test_a_lesson_step_is_checked_at_construction():
    with pytest.raises(ValueError, match="points_at"):
        lesson.Step("t", "s", points_at="gp-ratio")
    with pytest.raises(ValueError, match="T"):
        lesson.Step("t", "s", state={"T": 99})
    with pytest.raises(ValueError, match="pins"):
        lesson.Step("t", "s", page="gp", views=("gp-ratio", "gp-scaling"), points_at="gp-ratio", pinned={})
    with pytest.raises(ValueError, match="views"):                  # two distinct plots of the step's page
        lesson.Step("t", "s", views=("energy", "energy"))
    with pytest.raises(ValueError, match="views"):
        lesson.Step("t", "s", views=("energy", "gp-ratio"))
    with pytest.raises(ValueError, match="points_at"):              # a view the step shows, or the note
        lesson.Step("t", "s", views=("energy", "norm"), points_at="landscape")


def _independent_traces(c: EnergyControls):
    """The phases' traces recomputed here from the layers (a block's MLP sees the attention's output)."""
    h = seeded_input(c)
    out = []
    for name, layer in build_layers(c):
        with torch.no_grad():
            trace = layer.trace(h)
        P = layer.preconditioner.matrix().detach().numpy()
        out.append((name, trace.energies[:, 0].numpy(), trace.update_norms[:, 0].numpy(), np.linalg.eigvalsh(P)))
        h = h + trace.iterates[-1] - trace.iterates[0]
    return out


GRID = [dict(layer=layer, preconditioner=p, anchor=anchor, T=T, eta=eta, p_scale=scale, seed=seed)
        for layer in ("attention", "mlp", "block") for p in ("none", "dlr", "psd") for anchor in (0.0, 1.0)
        for T, eta in ((1, 1.0), (4, 1.0), (16, 1.0), (4, 20.0), (16, 0.05))
        for scale, seed in (((0.3, 0), (2.0, 2)) if p != "none" else ((0.3, 0),))]


@pytest.mark.slow
def test_no_note_contradicts_the_trace_or_another_note():
    """Over a grid of states: one note per phase, and everything it says holds on the trace recomputed here
    (which tokens rose at which steps, falling at every step, settling, running off, diverging, P's negative
    eigenvalues, the numbers it quotes); the energy plot rings exactly the rises."""
    courses = set()
    for values in GRID:
        c = EnergyControls.from_values(**values)
        data = explore(c)
        diagnoses = diagnose(c, data)
        traces = _independent_traces(c)
        assert len(diagnoses) == len(traces) == len(data["phases"])
        for d, (name, E, N, eigs), phase in zip(diagnoses, traces, data["phases"]):
            where = (values, d.text)
            assert d.phase == name, where
            rise = np.diff(E, axis=0) > RISE_TOLERANCE * max(1.0, np.abs(E).max())    # (T, n)
            rises = {(i, t + 1) for t, i in zip(*np.nonzero(rise))}
            assert {(r.token, t) for r in d.rises for t in r.steps} == rises, where
            assert ("fell at every step" in d.text) == (not rises), where
            for r in d.rises[:4]:
                assert f"token {r.token} at step" in d.text, where
                assert abs(r.amount - np.diff(E[:, r.token]).max()) <= 1e-9 * max(1.0, abs(r.amount)), where
            ratio = N[-1] / N[0]
            worst = ratio.max()
            expected = ("one step" if len(N) == 1 else "settles" if worst <= SETTLED else "slows" if worst < 0.5
                        else "runs off" if worst <= 10 else "diverges")
            assert d.course == expected, where
            assert ("settle into a minimum" in d.text) == (d.course == "settles"), where
            assert "has a minimum" not in d.text, where
            assert ("run off" in d.text) == (d.course == "runs off"), where
            assert ("diverge" in d.text) == (d.course == "diverges"), where
            negative = int((eigs < -1e-12).sum())
            assert d.negative == negative and (("negative eigenvalue" in d.text) == (negative > 0)), where
            m = re.search(r"token (\d+): update norm (\S+) → (0 \(to rounding\)|\S+),", d.text)
            assert m and int(m[1]) == d.token == int(np.argmax(ratio)), where
            assert np.isclose(float(m[2]), N[0, d.token], rtol=5e-3), where
            if m[3] == "0 (to rounding)":                                  # the independent trace's last step too
                assert N[-1, d.token] <= 10 * ROUNDING * d.radius[1], where
            else:
                assert np.isclose(float(m[3]), N[-1, d.token], rtol=5e-3), where
            assert d.level == ("warning" if rises or d.course == "diverges" else "info"), where
            ringed = [t for t in per_token_figure(phase["energies"], "", "", rose=phase["rose"]).data
                      if t.name == "energy rose"]
            scale = SymLog.needed(phase["energies"])                     # the axis the rings are drawn on
            shown = E if scale is None else scale(E)
            assert np.allclose(sorted(zip(*(ringed[0].x, ringed[0].y))), sorted(
                (t, shown[t, i]) for i, t in rises), rtol=1e-12) if rises else not ringed, where
            courses.add(d.course)
    assert courses == {"one step", "settles", "slows", "runs off", "diverges"}       # the grid reaches every course


def test_a_step_at_rounding_is_said_so_not_printed_as_digits():
    """A descent that settled to float64's rounding (T 16 with the anchor: the last step ~6e-14 of |x| 2.8) names its
    last update norm "0 (to rounding)": the digits of rounding noise differ between numpy and the browser's
    arithmetic, and say nothing. A last step above ROUNDING x |x| keeps its digits."""
    from cem_core.ui.controls import EnergyControls

    c = EnergyControls.from_values(T=16, anchor=1.0)
    (note,) = diagnose(c, explore(c))
    assert note.norms[1] <= ROUNDING * note.radius[1] and "→ 0 (to rounding), |x|" in note.text
    c = EnergyControls.from_values(T=4)
    (note,) = diagnose(c, explore(c))
    assert note.norms[1] > ROUNDING * note.radius[1] and "(to rounding)" not in note.text
    assert f"→ {note.norms[1]:.3g}, |x|" in note.text
