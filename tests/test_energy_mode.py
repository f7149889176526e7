"""The energy page's mode (cem_core.ui.energy_mode): what each of its four modes shows, decided in one place (the
AppTest and browser walks check the page that asks it: tests/test_app.py, tests/test_journeys.py)."""
import pytest

from cem_core.ui import lesson
from cem_core.ui.energy_mode import PAGE_PLOTS, PRESENT_CONTROLS, PRESENT_PLOTS, PRESENT_VIEWS, EnergyMode

ALL = ("energy", "norm", "landscape", "heatmap")
ENERGY_STEPS = [i for i, s in enumerate(lesson.STEPS) if s.page == "energy"]


def decisions(mode: EnergyMode) -> dict:
    return {"title": mode.title, "controls_at": mode.controls_at, "bar_says": mode.bar_says,
            "note_beside_words": mode.note_beside_words, "pin_buttons": mode.pin_buttons,
            "pinned_caption": mode.pinned_caption, "layer_caption": mode.layer_caption, "details": mode.details,
            "plots": mode.plots}


def test_the_sidebar_mode_shows_the_whole_page():
    mode = EnergyMode()
    assert mode.name == "sidebar" and mode.step is None
    assert decisions(mode) == {"title": True, "controls_at": "sidebar", "bar_says": True, "note_beside_words": False,
                               "pin_buttons": True, "pinned_caption": False, "layer_caption": True, "details": True,
                               "plots": PAGE_PLOTS}
    assert mode.controls is None and mode.views(ALL) is None
    assert mode.highlight is None and not mode.note_above and mode.start_key == "free"


@pytest.mark.parametrize("index", ENERGY_STEPS)
def test_a_lesson_step_keeps_the_page_and_frames_what_it_points_at(index):
    mode, step = EnergyMode(lesson=index), lesson.STEPS[index]
    assert mode.name == "lesson" and mode.step is step
    assert decisions(mode) == decisions(EnergyMode()) | {"title": False}          # its bar heads the page
    assert mode.controls is None and mode.views(ALL) is None
    assert mode.highlight == step.points_at and mode.note_above == (step.points_at == "note")
    assert mode.start_key == f"lesson-{index}"                                     # opens at the step's last step


def test_presentation_mode_shows_a_row_of_controls_and_two_plots_for_the_room():
    mode = EnergyMode(present=True)
    assert mode.name == "presentation"
    assert decisions(mode) == {"title": False, "controls_at": "row", "bar_says": True, "note_beside_words": False,
                               "pin_buttons": False, "pinned_caption": True, "layer_caption": False,
                               "details": False, "plots": PRESENT_PLOTS}
    assert mode.controls == PRESENT_CONTROLS and mode.views(ALL) == PRESENT_VIEWS
    assert mode.highlight is None and mode.start_key == "free"
    assert PRESENT_PLOTS.height < PAGE_PLOTS.height and PRESENT_PLOTS.font_scale > PAGE_PLOTS.font_scale
    assert PRESENT_PLOTS.legend == "followed" and PRESENT_PLOTS.relative and not PAGE_PLOTS.relative


@pytest.mark.parametrize("index", ENERGY_STEPS)
def test_a_presented_step_puts_its_controls_words_and_note_beside_its_two_plots(index):
    mode, step = EnergyMode(present=True, lesson=index), lesson.STEPS[index]
    assert mode.name == "presented lesson"
    assert decisions(mode) == decisions(EnergyMode(present=True)) | {"controls_at": "beside words",
                                                                     "bar_says": False, "note_beside_words": True}
    assert mode.controls == step.used() and mode.views(ALL) == step.views
    assert mode.highlight == step.points_at and mode.start_key == f"lesson-{index}"


def test_a_phase_without_one_of_the_step_s_plots_fills_up_from_the_presented_views():
    step = next(i for i in ENERGY_STEPS if "norm" in lesson.STEPS[i].views and "energy" not in lesson.STEPS[i].views)
    other = next(v for v in lesson.STEPS[step].views if v != "norm")
    assert EnergyMode(present=True, lesson=step).views(("energy", other)) == (other, "energy")
    assert EnergyMode(present=True).views(("energy", "norm", "landscape")) == PRESENT_VIEWS


def test_a_step_of_another_page_or_out_of_range_is_refused():
    elsewhere = next(i for i, s in enumerate(lesson.STEPS) if s.page != "energy")
    for index in (elsewhere, -1, len(lesson.STEPS)):
        with pytest.raises(ValueError, match="lesson step of the energy page"):
            EnergyMode(lesson=index)
