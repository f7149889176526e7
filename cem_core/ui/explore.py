"""Data of the app's energy-descent page: the layers chosen by ``EnergyControls``, their traces
(per phase: attention, MLP, or both for a block), the landscape of one token's energy, and
plain-language diagnostics of what the descent did. Numpy out, nothing drawn.
"""
from __future__ import annotations

import numpy as np
import torch

from cem_core.nn.attention import CEMAttention
from cem_core.nn.mlp import CEMGatedMLP

from .controls import LANDSCAPE_GRID, EnergyControls
from .figdata import descent_input, landscape


def build_layers(c: EnergyControls) -> list[tuple[str, torch.nn.Module]]:
    """Seeded float64 layers; a block is attention then MLP (its two phases)."""
    layers = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(c.seed)
        if c.attention_config() is not None:
            layers.append(("attention", CEMAttention(c.attention_config()).double()))
        if c.mlp_config() is not None:
            layers.append(("mlp", CEMGatedMLP(c.mlp_config()).double()))
        with torch.no_grad():
            for _, layer in layers:
                if getattr(layer, "diag", None) is not None:   # a visible diagonal (it starts at zero in training)
                    layer.diag.normal_(0.0, 0.5)
                for name in ("U", "V"):                          # U, V ~ N(0, p_scale^2 / d)
                    if hasattr(layer.preconditioner, name):
                        getattr(layer.preconditioner, name).normal_(0.0, c.p_scale / c.width ** 0.5)
    return layers


@torch.no_grad()
def explore(c: EnergyControls, token: int | None = None) -> dict:
    """Everything the energy page draws, for one set of controls.

    Returns {"phases": [{"name", "energies" (T+1, n), "update_norms" (T, n), "radius" (T+1, n),
    "weights" (T, H, n, n) or None, "landscape", "rises" (steps where some token's energy rose),
    "eigenvalues" of P}], "token": i}."""
    token = c.seq_len - 1 if token is None else token
    if not 0 <= token < c.seq_len:
        raise ValueError(f"token={token} is invalid: must be in [0, {c.seq_len - 1}]")
    h = descent_input(c.seq_len, c.width, c.seed)
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
            "weights": None if trace.weights is None else trace.weights[:, 0].numpy(),
            "landscape": landscape(layer, h, token, trace.iterates[:, 0, token], LANDSCAPE_GRID),
            "rises": [int(t) for t in torch.nonzero((steps > 1e-12 * scale).any(-1)).flatten()],
            "eigenvalues": np.linalg.eigvalsh(layer.preconditioner.matrix().double().numpy()),
        })
        h = h + trace.iterates[-1] - trace.iterates[0]                 # the layer's output: a block's MLP sees it
    return {"phases": phases, "token": token}


def diagnose(c: EnergyControls, data: dict) -> list[tuple[str, str]]:
    """Plain-language notes on what the descent did and why: (level, text), level in info/warning."""
    notes = []
    for phase in data["phases"]:
        name = "attention" if phase["name"] == "attention" else "MLP"
        radius, norms = phase["radius"], phase["update_norms"]
        negative = int((phase["eigenvalues"] < 0).sum())
        if phase["rises"]:
            steps = ", ".join(str(t + 1) for t in phase["rises"][:8])
            if negative:
                notes.append(("warning", f"{name}: the energy rose at step(s) {steps}. P has {negative} negative "
                                         "eigenvalue(s): the paper's form diag + UVᵀ + VUᵀ is not positive definite, "
                                         "so -P∇E need not point downhill. The psd form diag + UUᵀ cannot do this."))
            elif phase["name"] == "mlp":
                notes.append(("warning", f"{name}: the energy rose at step(s) {steps}. The MLP energy is not concave, "
                                         f"so a step of eta = {c.cem.eta:g} can overshoot; a smaller eta descends."))
            else:
                notes.append(("warning", f"{name}: the energy rose at step(s) {steps}: with the anchor term the "
                                         "energy is no longer concave and a large eta can overshoot its minimum."))
        elif negative:
            notes.append(("info", f"{name}: P has {negative} negative eigenvalue(s), yet every step here happened to "
                                  "descend; raise eta, T or the seed to see a rise."))
        if phase["name"] == "attention" and c.cem.anchor == 0:
            notes.append(("info", f"attention: the energy is concave and unbounded below, so it has no minimum: "
                                  f"every step descends, and the iterates run off (|x| of the last token grows "
                                  f"from {radius[0, -1]:.2f} to {radius[-1, -1]:.2f}). The anchor term "
                                  "(λ/2)|x - x⁽⁰⁾|², our extension, gives it one."))
        if c.cem.anchor > 0 and len(norms):
            notes.append(("info", f"{name}: with the anchor λ = {c.cem.anchor:g} the energy has a minimum; the update "
                                  f"norm of the last token went from {norms[0, -1]:.3g} to {norms[-1, -1]:.3g}."))
    return notes
