"""The controls of the page "Inside a trained model": a trained GP or language model at a test-time T (see
cem_core.ui.controls)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from cem_core.experiments.gp.inspect import parse_points
from cem_core.experiments.gp.trained import GP_MODELS
from cem_core.experiments.lm.trained import LM_MODELS
from cem_core.nn.readout import TEST_T_FACTOR
from cem_core.nn.validate import fail

from .controls import Controls


def _most_T(trained: int, cem: bool) -> int:
    """The largest test-time T a trained model offers: TEST_T_FACTOR x its trained T (1 without CEM layers)."""
    return TEST_T_FACTOR * trained if cem else 1


@dataclass(frozen=True, kw_only=True)
class InsideControls(Controls):
    """The page "Inside a trained model": a trained GP model on one function (``gp.inspect``), or a trained
    language model reading a text (``lm.inspect``), each at a test-time T up to TEST_T_FACTOR x its trained T."""

    SPECS = {"side": ("choice", ("gp", "lm")), "gp_model": ("choice", tuple(GP_MODELS)), "seed": ("int", (0, 9999)),
             "context": ("int", (1, 31)), "gp_T": ("int", (1, TEST_T_FACTOR * 8)),
             "lm_model": ("choice", tuple(LM_MODELS)), "text": ("text", None), "lm_T": ("int", (1, TEST_T_FACTOR * 2)),
             "layer": ("int", (0, 7)), "step": ("int", (0, TEST_T_FACTOR * 2)), "head": ("int", (0, 7)),
             "points": ("text", None)}
    LABELS = {"gp_model": "GP checkpoint", "seed": "function seed", "context": "points seen",
              "gp_T": "test-time T", "lm_model": "language model", "lm_T": "test-time T (LM)",
              "layer": "CEM layer", "step": "step t", "head": "attention head", "points": "your points"}
    PREFIX = "in_"

    side: str = "gp"
    gp_model: str = "gp-cem-T8"
    seed: int = 0
    context: int = 8
    gp_T: int = 8                 # test-time T of the GP model's CEM layers (its trained T by default)
    lm_model: str = "lm-cem-full"
    text: str = "Return a new list containing all items from the iterable in ascending order."
    lm_T: int = 2
    layer: int = 0                # which of the language model's CEM layers the lens reads
    step: int = 2                 # the step t it reads after (shown as min(step, lm_T))
    head: int = 0                 # the attention head shown
    points: str = ""              # a learner's own context "x1:y1,x2:y2,..." (gp.inspect.parse_points): the seed's
                                  # function when empty

    @staticmethod
    def gp_most_T(name: str) -> int:
        entry = GP_MODELS[name]
        return _most_T(entry.T, entry.attention != "llama")

    @staticmethod
    @functools.cache
    def lm_most_T(name: str) -> int:
        options = LM_MODELS[name].config.cem_options()
        return _most_T(options.T, LM_MODELS[name].config.variant != "llama")

    @classmethod
    def from_link(cls, query: dict):
        """As ``Controls.from_link``; a link that names a checkpoint without a test-time T opens it at its trained T
        (the default T belongs to the default checkpoint), and the lens's step at the last one."""
        query = dict(query)
        gp, lm = query.get(cls.PREFIX + "gp_model"), query.get(cls.PREFIX + "lm_model")
        if gp in GP_MODELS and cls.PREFIX + "gp_T" not in query:
            query[cls.PREFIX + "gp_T"] = str(GP_MODELS[gp].T)
        if lm in LM_MODELS and cls.PREFIX + "lm_T" not in query:
            query[cls.PREFIX + "lm_T"] = str(max(1, cls.lm_most_T(lm) // TEST_T_FACTOR))
        if cls.PREFIX + "step" not in query and cls.PREFIX + "lm_T" in query:
            query[cls.PREFIX + "step"] = query[cls.PREFIX + "lm_T"]
        return super().from_link(query)

    @classmethod
    def settle(cls, values: dict) -> tuple[dict, list[str]]:
        """A test-time T beyond what the checkpoint offers comes down to its largest (with a note), and the step
        shown to the last of the test-time T."""
        values, notes = dict(values), []
        for key, name, most in (("gp_T", values["gp_model"], cls.gp_most_T), ("lm_T", values["lm_model"],
                                                                                cls.lm_most_T)):
            if values[key] > most(name):
                notes.append(f"test-time T {values[key]} → {most(name)}: {name} offers T up to {most(name)}.")
                values[key] = most(name)
        values["step"] = min(values["step"], values["lm_T"])
        return values, notes

    def __post_init__(self) -> None:
        self._validate()
        for key, name, most in (("gp_T", self.gp_model, self.gp_most_T), ("lm_T", self.lm_model, self.lm_most_T)):
            if getattr(self, key) > most(name):
                fail(key, getattr(self, key), f"must be in [1, {most(name)}] for {name} (up to {TEST_T_FACTOR} "
                     "times its trained T; 1 without CEM layers)")
        if self.step > self.lm_T:
            fail("step", self.step, f"must be in [0, {self.lm_T}] (the test-time T)")
        self.own_points()                                                # a ValueError names points

    def own_points(self) -> list[tuple[float, float]] | None:
        """The learner's points (``parse_points`` on the GP checkpoint's task), or None for the seed's function."""
        return parse_points(self.points, GP_MODELS[self.gp_model].spec.task) if self.points.strip() else None
