"""What presentation mode draws, checked on the figures (the browser journey checks the page): a symmetric log axis
where values span orders of magnitude, only the followed token in a short legend, larger fonts."""
import numpy as np
import pytest

from cem_core.ui import descent_figures, figure_style, lesson, playback
from cem_core.ui.explore import explore
from cem_core.ui.symlog import SymLog


def test_a_diverging_descent_gets_a_symmetric_log_axis_that_keeps_its_early_steps_apart():
    step = next(s for s in lesson.STEPS if s.course == "diverges" and s.state.get("layer") is None)
    energies = explore(step.controls())["phases"][0]["energies"]           # up to about 6e19
    scale = SymLog.needed(energies)
    assert scale is not None
    shown = scale(energies)
    # On a linear axis steps 0-3 lie within 1e-15 of the axis' span; here each of them moves at least 1% of it.
    span = shown.max() - shown.min()
    assert np.abs(energies[:4]).max() < 1e-15 * (energies.max() - energies.min())
    assert np.all(np.abs(np.diff(shown[:4], axis=0)).max(axis=1) > 0.01 * span)
    axis = scale.axis()
    assert axis["ticktext"][0] == "0" and "10<sup>" in axis["ticktext"][-1]
    assert len([t for t in axis["ticktext"] if not t.startswith("−")]) <= 4        # 0 and three a side at most
    five = np.log10(1 + 5 / scale.c)
    assert scale(np.array([-5.0, 0.0, 5.0])) == pytest.approx([-five, 0, five])


def test_values_within_two_orders_of_magnitude_keep_a_linear_axis():
    assert SymLog.needed(np.array([[1.0, -2.0], [30.0, -80.0]])) is None
    assert SymLog.needed(np.array([[1.0, -2.0], [300.0, -80.0]])) is not None


def test_the_figure_and_its_playback_frames_use_the_same_axis():
    energies = np.array([[1.0, 2.0], [1e3, -1e6], [1e9, -1e12]])
    fig = descent_figures.per_token_figure(energies, "e", "energy", token=1)
    scale = SymLog.needed(energies)
    line = next(t for t in fig.data if t.name == "token 1")
    assert list(line.y) == pytest.approx(list(scale(energies[:, 1])))
    assert line.text[-1] == "-1e+12"                                      # hover: the value, not its log
    phase = {"energies": energies, "update_norms": np.ones((2, 2)), "weights": None,
             "landscape": {"trajectory": np.zeros((3, 2))}}
    now = next(u for u in playback.frames(phase, 1, 0)[2] if u["figure"] == "energy" and u["meta"] == "now")
    assert now["y"] == pytest.approx([float(scale(-1e12))])
    assert "symmetric log" in fig.layout.title.text


def test_a_presented_legend_shows_the_followed_token_only():
    values = np.arange(24.0).reshape(3, 8)
    fig = descent_figures.per_token_figure(values, "e", "energy", token=5, legend="followed")
    assert [t.name for t in fig.data if t.showlegend is not False and t.name.startswith("token")] == ["token 5"]
    every = descent_figures.per_token_figure(values, "e", "energy", token=5)
    assert len([t for t in every.data if t.showlegend is not False and t.name.startswith("token")]) == 8


def test_enlarged_scales_every_font_of_a_figure():
    fig = descent_figures.per_token_figure(np.ones((2, 2)), "t", "y")
    big = figure_style.enlarged(fig, 1.25)
    assert big.layout.font.size == round(fig.layout.font.size * 1.25)
    assert big.layout.title.font.size == round(fig.layout.title.font.size * 1.25)
    assert fig.layout.font.size == figure_style.FONT_PX                     # the original is not changed


def test_every_lesson_step_names_two_views_of_its_page():
    for step in lesson.STEPS:
        assert len(set(step.views)) == 2 and set(step.views) <= set(lesson.VIEWS[step.page]), step.title
        assert step.points_at in (*step.views, "note"), step.title
