"""Data of the app's energy-descent page: the layers chosen by ``EnergyControls``, their traces
(per phase: attention, MLP, both for a block, or the joint block's one descent), the landscape of one
token's energy, and one diagnosis per phase of what the descent did, read off the trace. Numpy out,
nothing drawn.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from cem_core.nn.attention import CEMAttention
from cem_core.nn.block import CEMBlock
from cem_core.nn.diagonals import DIAGONAL_FORMS
from cem_core.nn.mlp import CEMGatedMLP

from . import seeded
from .controls import LANDSCAPE_GRID, EnergyControls
from .figdata import landscape

RISE_TOLERANCE = 1e-12     # a step "raises" the energy when it grows by more than this times max |E| (rounding)
SETTLED = 1e-3             # the iterates settle when every token's last step is at most this times its first
SHRINKING = 0.5            # below this ratio (and above SETTLED) the steps shrink but have not settled
GROWING = 10.0             # above it the steps grow: the descent diverges
ROUNDING = 1e-12           # a last step below this times |x| is float64's rounding, not a step: "0 (to rounding)"


def build_layers(c: EnergyControls) -> list[tuple[str, torch.nn.Module]]:
    """Float64 layers with the seed's weights (``seeded``, mirrored in JavaScript); a block is attention then MLP
    (its two phases), a joint block one phase. Both read the same W_Q, W_K, diagonal, U and G."""
    layers = []
    if c.attention_config() is not None:
        layers.append(("attention", CEMAttention(c.attention_config()).double()))
    if c.mlp_config() is not None:
        layers.append(("mlp", CEMGatedMLP(c.mlp_config()).double()))
    if c.block_config() is not None:
        layers.append(("joint", CEMBlock(c.block_config()).double()))
    for name, layer in layers:
        _seed_weights(c, name, layer)
    return layers


@torch.no_grad()
def _seed_weights(c: EnergyControls, name: str, layer: torch.nn.Module) -> None:
    """The layer's weights from the seed: W_Q, W_K, U, G as torch's Linear init draws them (uniform on
    ±1/sqrt(d)); a visible diagonal d_k ~ N(0, 0.5^2) (it starts at zero in training), in distance form its
    parameter p_k ~ N(-1.5, 0.5^2), so D = softplus(p) is about 0.2, a pull -eta sum_k D x that does not overshoot
    at eta 1; P's factors U, V ~ N(0, p_scale^2 / d) (P's own streams for the MLP phase)."""
    def fill(tensor, values):
        tensor.copy_(torch.from_numpy(values))

    if hasattr(layer, "q_proj"):
        fill(layer.q_proj.weight, seeded.linear(c.seed, "W_Q", tuple(layer.q_proj.weight.shape)))
        fill(layer.k_proj.weight, seeded.linear(c.seed, "W_K", tuple(layer.k_proj.weight.shape)))
    if getattr(layer, "diag", None) is not None:
        mean = -1.5 if DIAGONAL_FORMS[c.cem.diagonal_form].centred else 0.0
        fill(layer.diag, mean + 0.5 * seeded.normal(c.seed, "diag", tuple(layer.diag.shape)))
    if hasattr(layer, "up_proj"):
        fill(layer.up_proj.weight, seeded.linear(c.seed, "U_mlp", tuple(layer.up_proj.weight.shape)))
        fill(layer.gate_proj.weight, seeded.linear(c.seed, "G_mlp", tuple(layer.gate_proj.weight.shape)))
    for factor in ("U", "V"):
        if hasattr(layer.preconditioner, factor):
            tensor = getattr(layer.preconditioner, factor)
            stream = f"P_{'mlp' if name == 'mlp' else 'att'}.{factor}"
            fill(tensor, c.p_scale / c.width ** 0.5 * seeded.normal(c.seed, stream, tuple(tensor.shape)))


def seeded_input(c: EnergyControls) -> torch.Tensor:
    """The seed's residual stream h (1, n, d), standard normal (``seeded``'s stream "h")."""
    return torch.from_numpy(seeded.normal(c.seed, "h", (1, c.seq_len, c.width)))


@torch.no_grad()
def explore(c: EnergyControls, token: int | None = None) -> dict:
    """Everything the energy page draws, for one set of controls.

    Returns {"phases": [{"name", "energies" (T+1, n), "update_norms" (T, n), "radius" (T+1, n), "path" (T+1, d)
    (the iterates of `token`, default the controls' followed token),
    "weights" (T, H, n, n) or None, "landscape", "rose" (T, n): whether token i's energy rose at step t + 1
    (by more than RISE_TOLERANCE of the largest |E|), "eigenvalues" of P}], "token": i}."""
    token = c.followed() if token is None else token
    if not 0 <= token < c.seq_len:
        raise ValueError(f"token={token} is invalid: must be in [0, {c.seq_len - 1}]")
    h = seeded_input(c)
    phases = []
    for name, layer in build_layers(c):
        trace = layer.trace(h)
        steps = trace.energies[1:, 0] - trace.energies[:-1, 0]                  # (T, n)
        scale = trace.energies[:, 0].abs().max().clamp_min(1.0)
        phases.append({
            "name": name,
            "energies": trace.energies[:, 0].numpy(),
            "update_norms": trace.update_norms[:, 0].numpy(),
            "radius": trace.iterates[:, 0].norm(dim=-1).numpy(),
            "path": trace.iterates[:, 0, token].numpy(),                          # x_token^(t), (T+1, d)
            "weights": None if trace.weights is None else trace.weights[:, 0].numpy(),
            "landscape": landscape(layer, h, token, trace.iterates[:, 0, token], LANDSCAPE_GRID),
            "rose": (steps > RISE_TOLERANCE * scale).numpy(),                # (T, n): E(x^(t+1)) > E(x^(t))
            "eigenvalues": np.linalg.eigvalsh(layer.preconditioner.matrix().double().numpy()),
        })
        h = h + trace.iterates[-1] - trace.iterates[0]                 # the layer's output: a block's MLP sees it
    return {"phases": phases, "token": token}


@dataclass(frozen=True)
class Rise:
    """One token whose energy rose: at these steps t (E(x^(t)) > E(x^(t-1))), by at most `amount`."""

    token: int
    steps: tuple[int, ...]
    amount: float


@dataclass(frozen=True)
class Diagnosis:
    """What one phase's descent did, read off its trace, with the one note the page shows for it.

    `course` is "one step" (T = 1), "settles" (every token's last step is at most SETTLED times its
    first), "slows" (the steps shrink, below SHRINKING, but have not settled), "runs off" (the steps do
    not shrink) or "diverges" (they grow more than GROWING times). The numbers are those of `token`, the
    token whose steps shrank least."""

    phase: str
    rises: tuple[Rise, ...]
    course: str
    token: int
    norms: tuple[float, float]             # its first and last update norm
    radius: tuple[float, float]            # |x^(0)| and |x^(T)|
    energy: tuple[float, float]            # E(x^(0)) and E(x^(T))
    negative: int                          # negative eigenvalues of P
    level: str                             # "info" or "warning"
    text: str


def _steps_text(steps: tuple[int, ...]) -> str:
    """1, 2, 3, 5 -> '1–3, 5'."""
    runs, start = [], steps[0]
    for prev, t in zip(steps, steps[1:] + (None,)):
        if t != prev + 1:
            runs.append(str(start) if start == prev else f"{start}–{prev}")
            start = t
    return ", ".join(runs)


def diagnose_phase(c: EnergyControls, phase: dict) -> Diagnosis:
    """The diagnosis of one phase of ``explore``: which tokens' energy rose at which steps and by how much,
    whether the iterates settle, slow down, run off or diverge, and why, as one note."""
    name, energies, norms, radius = phase["name"], phase["energies"], phase["update_norms"], phase["radius"]
    label = {"attention": "attention", "mlp": "MLP", "joint": "joint block"}[name]
    rises = tuple(Rise(int(i), tuple(int(t) + 1 for t in np.flatnonzero(phase["rose"][:, i])),
                       float(np.diff(energies[:, i])[phase["rose"][:, i]].max()))
                  for i in range(energies.shape[1]) if phase["rose"][:, i].any())
    eigs = phase["eigenvalues"]
    negative, p_max = int((eigs < 0).sum()), float(eigs.max())
    ratio = norms[-1] / np.maximum(norms[0], 1e-300)                  # last step over first, per token
    token = int(np.argmax(ratio))
    worst = float(ratio[token])
    T = norms.shape[0]
    course = ("one step" if T == 1 else "settles" if worst <= SETTLED else "slows" if worst < SHRINKING
              else "runs off" if worst <= GROWING else "diverges")
    first, last = float(norms[0, token]), float(norms[-1, token])
    shown = "0 (to rounding)" if last <= ROUNDING * float(radius[-1, token]) else f"{last:.3g}"  # no noise's digits
    facts = (f"token {token}: update norm {first:.3g} → {shown}, |x| {radius[0, token]:.3g} → "
             f"{radius[-1, token]:.3g}, E {energies[0, token]:.4g} → {energies[-1, token]:.4g}")
    overshoot = c.cem.eta * c.cem.anchor * p_max                       # eta lambda p_max: above 2 a step overshoots
    parts = _rise_notes(c, name, rises, negative, overshoot) + _course_notes(course, facts, T, worst)
    if course in ("runs off", "diverges"):
        parts += _runoff_reason(c, name, negative, overshoot)
    level = "warning" if rises or course == "diverges" else "info"
    return Diagnosis(phase=name, rises=rises, course=course, token=token, norms=(first, last),
                     radius=(float(radius[0, token]), float(radius[-1, token])),
                     energy=(float(energies[0, token]), float(energies[-1, token])), negative=negative,
                     level=level, text=f"**{label}**: " + " ".join(parts))


def _distance(c: EnergyControls, name: str) -> bool:
    """Whether the phase's attention term is in distance form (bounded below)."""
    return DIAGONAL_FORMS[c.cem.diagonal_form].centred and name != "mlp"


def _rise_notes(c: EnergyControls, name: str, rises: tuple, negative: int, overshoot: float) -> list[str]:
    """Where the energy rose (or that it fell throughout), and what in P or the energy let it."""
    eta = c.cem.eta
    if not rises:
        return ["the energy fell at every step for every token."] + (
            [f"P has {negative} negative eigenvalue(s), yet no step here went uphill; raise η, T or the "
             "scale, or change the seed, to see a rise."] if negative else [])
    shown = "; ".join(f"token {r.token} at step{'s' if len(r.steps) > 1 else ''} {_steps_text(r.steps)} "
                      f"(up to +{r.amount:.3g})" for r in rises[:4])
    more = f"; and {len(rises) - 4} more token(s)" if len(rises) > 4 else ""
    parts = [f"the energy rose: {shown}{more} (marked ○ on the energy plot)."]
    if negative:
        parts.append(f"P has {negative} negative eigenvalue(s): the paper's form diag + UVᵀ + VUᵀ is indefinite "
                     "here, so −P∇E can point uphill. The psd form diag + UUᵀ always points downhill.")
    elif name != "attention" or _distance(c, name):
        parts.append(f"P is positive definite, so each step starts downhill, but "
                     f"{'E_mlp is' if name == 'mlp' else 'the energy is'} not concave: a step of "
                     f"η = {eta:g} can overshoot; a smaller η descends.")
    else:
        parts.append(f"P is positive definite, so each step starts downhill, but the anchor makes the energy curve "
                     f"upwards and a step of η = {eta:g} can overshoot (η λ p_max = {overshoot:.3g}).")
    return parts


def _course_notes(course: str, facts: str, T: int, worst: float) -> list[str]:
    """Where the iterates go: one step, settling, slowing, running off or diverging."""
    if course == "one step":
        return [f"One step ({facts}) is exactly what the tied layer computes; more steps T show where the "
                "iterates go."]
    if course == "settles":
        return [f"The iterates settle into a minimum: every token's steps shrink to at most {SETTLED:g} of its "
                f"first ({facts})."]
    if course == "slows":
        return [f"The steps shrink but have not settled within T = {T} ({facts}); more steps show where they go."]
    return [("The iterates run off: the steps do not shrink" if course == "runs off" else
             f"The iterates diverge: the steps grow {worst:.3g}×") + f" ({facts})."]


def _runoff_reason(c: EnergyControls, name: str, negative: int, overshoot: float) -> list[str]:
    """Why iterates that run off or diverge find no minimum: the energy's shape, P or the step."""
    anchor, eta, distance = c.cem.anchor, c.cem.eta, _distance(c, name)
    hold = (f"; the anchor λ = {anchor:g} is not strong enough to hold it." if anchor
            else "; the anchor (λ/2)|x − x⁽⁰⁾|² can hold it.")
    if name == "attention" and distance:
        return ["In distance form E_att is bounded below (its −½(x − c)ᵀD(x − c), D > 0, pulls x back), "
                f"but a step of η = {eta:g} can overshoot that pull; a smaller η settles."]
    if name == "joint":
        return ["E_att + E_mlp has no minimum here: "
                + ("the attention term is bounded below in distance form, but " if distance else
                   "the attention term is unbounded below (the distance form bounds it), and ")
                + "a unit with a positive gate (Gc)ₘ lowers E_mlp without bound" + hold]
    if name == "attention" and anchor == 0:
        return ["E_att is concave and unbounded below, so it has no minimum to settle into; the anchor "
                "(λ/2)|x − x⁽⁰⁾|², our extension, or the distance form gives it one."]
    if name == "attention" and negative:
        return ["Along P's negative eigenvectors each step pushes x further from x⁽⁰⁾ than the anchor "
                "pulls it back."]
    if name == "attention" and overshoot > 2:
        return [f"η λ p_max = {overshoot:.3g} > 2: each step overshoots the anchor's pull "
                "and lands farther away on the other side."]
    if name == "mlp":
        return ["Φ grows like z²/2, so a unit with a positive gate (Gc)ₘ lowers E_mlp without bound along "
                "its direction" + hold]
    return []


def diagnose(c: EnergyControls, data: dict) -> list[Diagnosis]:
    """One diagnosis per phase of ``explore(c)``: the page's only notes, so two can never disagree."""
    return [diagnose_phase(c, phase) for phase in data["phases"]]
