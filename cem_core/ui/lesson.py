"""The classroom lesson, as data: one definition drives the app's lesson mode (app_pages/lesson.py), the
walkthrough in docs/app.md (``markdown``; tests/test_docs.py fails when that page differs) and the checks of
every step's claim (tests/test_explore.py on the page's data, tests/test_journeys.py in a real browser).

Each step sets a complete state from a clean one: its page's controls are the defaults changed by
`state`, and on the energy page `pinned` (also from the defaults) is pinned for comparison, or nothing is.
So a step shows the same thing however the lesson got there, and its link opens it alone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import inside
from .controls import EnergyControls
from .explore import Diagnosis
from .gp_controls import GPControls
from .inside_controls import InsideControls
from .links import APP_ADDRESS, APP_PATHS

PAGES = {page: APP_PATHS[page] for page in ("energy", "gp", "inside")}   # a step's page: its path in the app
VIEWS = {"energy": ("energy", "norm", "landscape", "heatmap"),       # the plots a step can show, by page
         "gp": ("gp-ratio", "gp-scaling", "gp-context"), "inside": inside.GP_PLOTS}
CONTROLS = {"energy": EnergyControls, "gp": GPControls, "inside": InsideControls}
CARRIED = ("towards", "away", "barely", "lost")      # what a step on the inside page says the steps do


@dataclass(frozen=True)
class Step:
    """One step: its title, what the lecturer says, the page and state it sets, the two views it talks about,
    the element it points at, and its claim. On the energy page the claim is about the note on the state: the
    course of the descent, whether some token's energy rose, phrases of the note, and (with a pinned state)
    whether every token's final energy is below the pinned state's. On the GP page it is about the committed
    sweep (``gp_problems``). On the inside page (a trained GP model on one function) it is `carries`: what the
    steps do to the prediction (``inside_problems``). `views`: the two plots presentation mode shows, in order,
    beside the step's words and the page's note; `uses`: the controls the step is about (presentation mode shows
    only these; default: the state's)."""

    title: str
    say: str
    page: str = "energy"
    state: dict = field(default_factory=dict)
    pinned: dict | None = None
    views: tuple[str, str] = ("energy", "norm")
    points_at: str = "note"
    uses: tuple[str, ...] = ()
    course: str = ""
    rises: bool = False
    phrases: tuple[str, ...] = ()
    lower_than_pinned: bool = False
    carries: str = ""

    def __post_init__(self) -> None:
        if self.page not in PAGES:
            raise ValueError(f"page={self.page!r} is invalid: must be one of {', '.join(PAGES)}")
        if len(self.views) != 2 or len(set(self.views)) != 2 or not set(self.views) <= set(VIEWS[self.page]):
            raise ValueError(f"views={self.views!r} is invalid on the {self.page} page: must be two of "
                             f"{', '.join(VIEWS[self.page])}")
        if self.points_at not in (*self.views, "note"):
            raise ValueError(f"points_at={self.points_at!r} is invalid: must be one of the step's views "
                             f"({', '.join(self.views)}) or the note")
        if self.pinned is not None and self.page != "energy":
            raise ValueError("only the energy page pins a state")
        if (self.page == "inside") != (self.carries in CARRIED):
            raise ValueError(f"carries={self.carries!r} is invalid: a step on the inside page says one of "
                             f"{', '.join(CARRIED)}, a step on another page none")
        self.controls()                                                # raises ValueError for a bad state

    def controls(self):
        """The step's complete state of its page."""
        return CONTROLS[self.page].from_values(**self.state)

    def pinned_controls(self) -> EnergyControls | None:
        return None if self.pinned is None else EnergyControls.from_values(**self.pinned)

    def used(self) -> tuple[str, ...]:
        return self.uses or tuple(self.state)


STEPS = (
    Step("One step is attention",
         "Defaults (attention, T = 4): step 1 *is* a tied attention layer, and the energy falls at every step. "
         "The update norms do not shrink: the note says the iterates run off, since E_att is concave and has "
         "no minimum. Press ▶ to watch x⁽ᵗ⁾ walk across the landscape.",
         views=("energy", "landscape"), points_at="energy", uses=("T",), course="runs off",
         phrases=("fell at every step", "run off", "no minimum")),
    Step("The anchor gives a minimum",
         "Set the anchor λ to 1 and T to 16: the update norm shrinks towards zero and the trajectory stops on the "
         "landscape; the note says the iterates settle into a minimum.",
         state={"anchor": 1.0, "T": 16}, views=("norm", "landscape"), points_at="norm", course="settles",
         phrases=("settle into a minimum",)),
    Step("Recursion depth",
         "Set the anchor to 1, η to 0.25 and T to 16; pinned is the same layer with T = 1 (faint, dashed). One "
         "small step goes only part of the way: with 16 steps every token's energy ends lower, and the path on "
         "the landscape goes on towards the minimum, its steps shrinking. (At η = λ = 1 the first step already "
         "lands almost on the minimum, and the other 15 change little.)",
         state={"anchor": 1.0, "eta": 0.25, "T": 16}, pinned={"anchor": 1.0, "eta": 0.25, "T": 1},
         views=("landscape", "energy"), points_at="landscape", uses=("T", "eta"), course="slows",
         phrases=("steps shrink",), lower_than_pinned=True),
    Step("The paper's preconditioner can point uphill",
         "Back to the defaults (T = 4, no anchor), then set the preconditioner to `dlr`, its scale to 2 and the "
         "seed to 2: P has negative eigenvalues, and "
         "token 1's energy rises at steps 1–4 (ringed on the energy plot): the paper's P can be indefinite, "
         "and −P∇E can point uphill.",
         state={"preconditioner": "dlr", "p_scale": 2.0, "seed": 2}, points_at="energy", course="runs off",
         rises=True, phrases=("token 1 at steps 1–4", "negative eigenvalue")),
    Step("A positive-definite P descends",
         "Switch the preconditioner to `psd`: P is positive definite and E_att concave, so every step descends.",
         state={"preconditioner": "psd", "p_scale": 2.0, "seed": 2}, points_at="energy", uses=("preconditioner",),
         course="runs off",
         phrases=("fell at every step",)),
    Step("Descent direction is not step length",
         "Keep `psd` and set the anchor to 1 and T to 16: now even the positive-definite P fails. "
         "η λ p_max > 2, every step overshoots the anchor's minimum, the energy rises and the iterates diverge.",
         state={"preconditioner": "psd", "p_scale": 2.0, "seed": 2, "anchor": 1.0, "T": 16},
         views=("norm", "energy"), points_at="norm",
         uses=("anchor", "T"), course="diverges", rises=True, phrases=("overshoot", "diverge")),
    Step("The gated MLP is not concave",
         "Back to the defaults, then switch the layer to the gated MLP and eta to 20: the MLP energy is not "
         "concave, so even with P = I a "
         "large step overshoots, and the note says so.",
         state={"layer": "mlp", "eta": 20.0}, points_at="energy", course="diverges", rises=True,
         phrases=("not concave",)),
    Step("What the GP evidence says",
         "The paper reports that deeper recursion keeps lowering the RMSE of in-context GP regression. In our "
         "committed sweep it does not: CEM attention's RMSE is {T1:.2f} times the GP optimum at T = 1 and "
         "{Tmax:.2f} at T = {Tlast}, while Llama attention reaches {llama:.2f}.",
         page="gp", views=("gp-ratio", "gp-scaling"), points_at="gp-ratio"),
    Step("Inside a trained model: steps that refine",
         "A trained checkpoint now: the block as one energy, trained long at T = 8, on one function with 16 points "
         "seen. Press ▶: at step 0 (the layer skipped) the red prediction is far from the blue posterior mean; each "
         "step carries it closer, and its RMSE to the posterior mean falls to a fraction of step 0's by the trained "
         "T = 8. Here the steps do what the paper says they do.",
         page="inside", state={"gp_model": "gp-block-T8", "seed": 4, "context": 16}, views=("curve", "rmse"),
         points_at="curve", uses=("gp_T",), carries="towards"),
    Step("Inside a trained model: steps that do not",
         "The same checkpoint and function, run with test-time T = 16, twice the steps it was trained with. Past "
         "step 8 the steps carry the prediction away from the posterior mean: within four more steps it is further "
         "from it than at step 0, and the note says the extra steps hurt. Trained to stop at T = 8, its descent does "
         "not settle where the prediction is good; turn T further and the iterates diverge.",
         page="inside", state={"gp_model": "gp-block-T8", "seed": 4, "context": 16, "gp_T": 16},
         views=("curve", "rmse"), points_at="rmse", uses=("gp_T",), carries="away"),
)


def link(index: int, address: str = APP_ADDRESS) -> str:
    """The app link of lesson step `index` (0-based): it opens the step's page in the step's state, on the app
    served at `address` (docs/app.md's: `make app`'s; the app's own: where it was opened, links.served_address)."""
    return f"{address}/{PAGES[STEPS[index].page]}?lesson={index + 1}"


def missing_step(wanted: str, quoted=repr) -> str | None:
    """What a link's ``?lesson=`` value that names no step is told, the value written as `quoted` gives it (the app
    escapes it for Markdown); None: it names step int(wanted)."""
    if not re.fullmatch(r"[0-9]{1,4}", wanted) or not 1 <= int(wanted) <= len(STEPS):   # ASCII digits: "²" and "①"
        # pass str.isdigit() and fail int(); 5,000 digits exceed int()'s limit
        return f"The link's lesson step {quoted(wanted)} does not exist: the lesson has steps 1 to {len(STEPS)}."
    return None


def state_link(step: Step) -> str:
    """The plain link of a step's state (its controls only, those that differ from the defaults)."""
    controls = step.controls()
    defaults = type(controls)().to_query()
    changed = "&".join(f"{k}={v}" for k, v in controls.to_query().items() if defaults[k] != v)
    return f"{APP_ADDRESS}/{PAGES[step.page]}" + (f"?{changed}" if changed else "")


GP_VARIANT = "CEM, diagonal none"    # the GP step's numbers: plain CEM attention against the committed sweep


def gp_numbers(records: list[dict]) -> dict:
    """The committed sweep's numbers the GP step quotes: the RMSE ratio at T = 1 and at the largest T."""
    from cem_core.experiments.gp import sweep as gp_sweep

    data = gp_sweep.ratio_vs_T(records)
    cem = data[GP_VARIANT]
    return {"T1": cem["mean"][0], "Tmax": cem["mean"][-1], "Tlast": cem["T"][-1], "llama": data["Llama"]["mean"]}


def text(step: Step, records: list[dict] | None = None) -> str:
    """What the lecturer says at a step, with the committed sweep's numbers filled in (GP step)."""
    return step.say.format(**gp_numbers(records)) if step.page == "gp" else step.say


def problems(step: Step, diagnosis: Diagnosis, pinned: Diagnosis | None = None) -> list[str]:
    """What in the page's note on an energy step's state contradicts the step's claim (empty: it holds)."""
    out = []
    if diagnosis.course != step.course:
        out.append(f"course {diagnosis.course!r}, the lesson says {step.course!r}")
    if bool(diagnosis.rises) != step.rises:
        out.append(f"rises {[(r.token, r.steps) for r in diagnosis.rises]}, the lesson says "
                   f"{'some' if step.rises else 'none'}")
    out += [f"the note does not say {p!r}: {diagnosis.text}" for p in step.phrases if p not in diagnosis.text]
    return out


def lower_problems(energies, pinned_energies) -> list[str]:
    """Where a token's final energy is not below the pinned state's final energy (a depth step's claim)."""
    return [f"token {i}: {a:.4g} after the steps, {b:.4g} pinned" for i, (a, b) in
            enumerate(zip(energies[-1], pinned_energies[-1])) if not a < b]


def gp_problems(step: Step, records: list[dict]) -> list[str]:
    """The GP step's claim against the committed sweep: deeper recursion did not lower the RMSE ratio."""
    numbers = gp_numbers(records)
    if not numbers["Tmax"] >= numbers["T1"]:
        return [f"the ratio falls from {numbers['T1']:.3f} at T = 1 to {numbers['Tmax']:.3f}: the lesson says it "
                "does not"]
    return []


def inside_problems(step: Step, data: dict) -> list[str]:
    """An inside-page step's claim against the model's data on its function (``gp.inspect.inspect_function``): what
    the steps do to the prediction (``inside.carried``, or "lost" where the iterates diverge)."""
    layer = data["layers"][0] if data["layers"] else None
    if layer is None:
        return [f"{data['trained_T']}: the model has no CEM layer, the lesson says its steps {step.carries}"]
    did = "lost" if inside.lost_at(layer["rmse_to_posterior"]) is not None else inside.carried(layer)
    if did != step.carries:
        r = layer["rmse_to_posterior"]
        return [f"the steps move the prediction {did!r} (RMSE to the posterior {r[0]:.3f} at step 0, {r[-1]:.3f} at "
                f"step {layer['T']}), the lesson says {step.carries!r}"]
    return []


def markdown(records: list[dict]) -> str:
    """The walkthrough docs/app.md holds: every step with its link and the plain link of its state."""
    lines = []
    for index, step in enumerate(STEPS):
        lines.append(f"{index + 1}. **{step.title}.** {text(step, records)}\n"
                     f"   Lesson step: {link(index)} · its state alone: {state_link(step)}")
    return "\n".join(lines) + "\n"


DOC_START = "<!-- lesson: generated by cem_core.ui.lesson.markdown; edit the lesson, not this list -->"
DOC_END = "<!-- /lesson -->"


def doc_section(doc: str) -> str:
    """The lesson's list as a page of docs/ holds it (between DOC_START and DOC_END)."""
    start, end = doc.index(DOC_START) + len(DOC_START) + 1, doc.index(DOC_END)
    return doc[start:end]
