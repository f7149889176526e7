"""The README's classroom walkthrough of the energy page, as data: what to move at each step, the link
of the state it leaves, and what the page's note must then say. Done in the order written, each step
starts from the state the one before left (tests/test_explore.py checks the notes of every state,
tests/test_journeys.py walks it in a browser, tests/test_docs.py checks that the README states each
step's link)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .controls import EnergyControls
from .explore import Diagnosis
from .links import APP_ADDRESS


@dataclass(frozen=True)
class Step:
    """One step: the controls it moves (widget values by control name), what the lecturer says, and
    what the page's note on the moved-to state must hold: the course of the descent, whether some
    token's energy rose, and phrases of the note."""

    say: str
    changes: dict = field(default_factory=dict)
    course: str = ""
    rises: bool = False
    phrases: tuple[str, ...] = ()


STEPS = (
    Step("Defaults (attention, T = 4): step 1 *is* a tied attention layer, and the energy falls at every step. "
         "The update norms do not shrink: the note says the iterates run off, since E_att is concave and has "
         "no minimum.",
         course="runs off", phrases=("fell at every step", "run off", "no minimum")),
    Step("Set the anchor λ to 1 and T to 16: the update norm goes to zero and the trajectory stops on the "
         "landscape; the note says the iterates settle into a minimum.",
         {"anchor": 1.0, "T": 16}, course="settles", phrases=("settle into a minimum",)),
    Step("Set the anchor back to 0 and T to 4, the preconditioner to `dlr`, its scale to 2 and the seed to 2: "
         "P has negative eigenvalues, and token 3's energy rises at steps 1–2 (ringed on the energy plot): "
         "the paper's P can be indefinite, and −P∇E can point uphill.",
         {"anchor": 0.0, "T": 4, "preconditioner": "dlr", "p_scale": 2.0, "seed": 2}, course="runs off", rises=True,
         phrases=("token 3 at steps 1–2", "negative eigenvalue")),
    Step("Switch the preconditioner to `psd`: P is positive definite and E_att concave, so every step descends.",
         {"preconditioner": "psd"}, course="runs off", phrases=("fell at every step",)),
    Step("Keep `psd` and set the anchor to 1 and T to 16 again: now even the positive-definite P fails. "
         "η λ p_max > 2, every step overshoots the anchor's minimum, the energy rises and the iterates diverge.",
         {"anchor": 1.0, "T": 16}, course="diverges", rises=True, phrases=("overshoot", "diverge")),
    Step("Switch the layer to the gated MLP, the preconditioner to `none`, the anchor to 0, T to 4 and eta to 20: "
         "the MLP energy is not concave, so even with P = I a large step overshoots, and the note says so.",
         {"layer": "mlp", "preconditioner": "none", "anchor": 0.0, "T": 4, "eta": 20.0}, course="diverges",
         rises=True, phrases=("not concave",)),
)


def states() -> list[EnergyControls]:
    """The energy page's controls after each step, done in order from the defaults."""
    values, out = {}, []
    for step in STEPS:
        values |= step.changes
        out.append(EnergyControls.from_values(**values))
    return out


def link(controls: EnergyControls) -> str:
    """The app link of an energy-page state, naming only the controls that differ from the defaults."""
    query = controls.to_query()
    defaults = EnergyControls().to_query()
    changed = "&".join(f"{k}={v}" for k, v in query.items() if defaults[k] != v)
    return f"{APP_ADDRESS}/" + (f"?{changed}" if changed else "")


def problems(step: Step, diagnosis: Diagnosis) -> list[str]:
    """What in the page's note on a step's state contradicts the step's claim (empty: the claim holds)."""
    out = []
    if diagnosis.course != step.course:
        out.append(f"course {diagnosis.course!r}, the walkthrough says {step.course!r}")
    if bool(diagnosis.rises) != step.rises:
        out.append(f"rises {[(r.token, r.steps) for r in diagnosis.rises]}, the walkthrough says "
                   f"{'some' if step.rises else 'none'}")
    out += [f"the note does not say {p!r}: {diagnosis.text}" for p in step.phrases if p not in diagnosis.text]
    return out
