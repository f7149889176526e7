"""The energy page's mode, chosen once a run: what the sidebar, a lesson step and presentation mode show.

Four modes come from two switches, presentation mode and the lesson step shown (on this page):

- the sidebar's: every control in the sidebar, the page's title, the pin buttons, and under each phase its
  explanations, downloads and equations;
- a lesson step's: the same page, with the step's plot (or note) framed and its playback opening at its last step;
- presentation mode's: a row of a few controls above two plots per phase drawn for the room (shorter, larger
  fonts, only the followed token in the legends), the pinned state named in a caption, nothing under the plots;
- a presented lesson step's: as presentation mode, with the step's controls stacked beside its words and the first
  phase's note, and the two plots the step talks about.

The page asks an ``EnergyMode`` instead of testing the switches itself. Nothing here draws or imports Streamlit.
"""
from __future__ import annotations

from dataclasses import dataclass

from .lesson import STEPS, Step

PRESENT_CONTROLS = ("T", "eta", "anchor")     # presentation mode outside a lesson step
PRESENT_VIEWS = ("energy", "landscape")       # its plots outside a lesson step


@dataclass(frozen=True)
class PlotStyle:
    """How a phase's plots are drawn: their height (the landscape's `landscape_extra` px taller, for its legend
    below), their legends (every token, "all", or only the "followed" one, which never scrolls out of a short
    legend), whether beside a pinned state the energy is drawn from step 0 (`relative`: where each state ends,
    compared at a glance) and their fonts' scale."""

    height: int
    landscape_extra: int
    legend: str
    relative: bool
    font_scale: float


# the page's: two plots side by side fit under the title at 1280 x 720
PAGE_PLOTS = PlotStyle(height=330, landscape_extra=60, legend="all", relative=False, font_scale=1.0)
# presentation mode's: the step's two plots in one row, larger fonts
PRESENT_PLOTS = PlotStyle(height=250, landscape_extra=0, legend="followed", relative=True, font_scale=1.25)


@dataclass(frozen=True)
class EnergyMode:
    """The energy page's mode: `present`, presentation mode; `lesson`, the index of the lesson step shown when it is
    a step of this page (None: no lesson step here)."""

    present: bool = False
    lesson: int | None = None

    def __post_init__(self) -> None:
        if self.lesson is not None and not (0 <= self.lesson < len(STEPS) and STEPS[self.lesson].page == "energy"):
            raise ValueError(f"lesson={self.lesson!r} is invalid: must be the index of a lesson step of the energy "
                             "page")

    @property
    def step(self) -> Step | None:
        return None if self.lesson is None else STEPS[self.lesson]

    @property
    def name(self) -> str:
        return {(False, False): "sidebar", (False, True): "lesson", (True, False): "presentation",
                (True, True): "presented lesson"}[self.present, self.lesson is not None]

    @property
    def title(self) -> bool:
        """Whether the page shows its title, introduction and notebook links (in a lesson its bar heads the page)."""
        return self.name == "sidebar"

    @property
    def controls(self) -> tuple[str, ...] | None:
        """The controls drawn on the page, in the sidebar's stead (None: every control, in the sidebar)."""
        if not self.present:
            return None
        return self.step.used() if self.step else PRESENT_CONTROLS

    @property
    def controls_at(self) -> str:
        """Where the controls are drawn: the "sidebar", a "row" above the plots, or stacked "beside words": beside
        what the lesson step says (the page says it, not the lesson bar)."""
        return {"presentation": "row", "presented lesson": "beside words"}.get(self.name, "sidebar")

    @property
    def bar_says(self) -> bool:
        """Whether the lesson bar says the step's words (not when the page says them beside its controls)."""
        return self.controls_at != "beside words"

    @property
    def note_beside_words(self) -> bool:
        """Whether the first phase's note is drawn beside the step's words, where the room sees it with the plots,
        instead of with its phase's plots."""
        return self.controls_at == "beside words"

    @property
    def pin_buttons(self) -> bool:
        """Whether the page offers to pin the state shown (presentation mode names the pinned state instead)."""
        return not self.present

    @property
    def pinned_caption(self) -> bool:
        """Whether a caption names the pinned state and the state shown (presentation mode: it has no pin bar)."""
        return self.present

    @property
    def layer_caption(self) -> bool:
        """Whether a caption says what a block or a joint block runs."""
        return not self.present

    @property
    def details(self) -> bool:
        """Whether each phase's explanations, downloads and update equations follow its plots."""
        return not self.present

    @property
    def plots(self) -> PlotStyle:
        return PRESENT_PLOTS if self.present else PAGE_PLOTS

    def views(self, available) -> tuple[str, ...] | None:
        """The plots a phase shows, in order, of those it has (`available`): None, all of them; in presentation mode
        two: the step's (or PRESENT_VIEWS) that it has, filled up from PRESENT_VIEWS (an MLP has no heatmap)."""
        if not self.present:
            return None
        names = [name for name in (self.step.views if self.step else PRESENT_VIEWS) if name in available]
        return tuple(names + [name for name in PRESENT_VIEWS if name not in names][: 2 - len(names)])

    @property
    def highlight(self) -> str | None:
        """The element the playback frames: what the lesson step points at (None outside a lesson)."""
        return None if self.step is None else self.step.points_at

    @property
    def note_above(self) -> bool:
        """Whether a phase's note goes above its plots (the step points at it) rather than below them."""
        return self.highlight == "note"

    @property
    def start_key(self) -> str:
        """The playback's start key: a lesson step opens at its last step, whatever step the reader was on."""
        return "free" if self.lesson is None else f"lesson-{self.lesson}"
