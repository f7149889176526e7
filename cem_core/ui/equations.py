"""LaTeX of the update a CEM layer performs, for the selected options (rendered by the app)."""
from __future__ import annotations

from cem_core.nn.activations import ACTIVATIONS
from cem_core.nn.config import CEMOptions
from cem_core.nn.diagonals import DIAGONAL_FORMS, DIAGONALS
from cem_core.nn.precondition import PRECONDITIONERS


def steps_latex(T: int) -> str:
    """t = 0 (T = 1), t = 0, 1 (T = 2), t = 0, ..., T - 1 (more)."""
    return "t = 0" if T == 1 else "t = 0, 1" if T == 2 else rf"t = 0, \dots, {T - 1}"


def _attention_lines(cem: CEMOptions, name: str = "E") -> list[str]:
    """E_att's energy, its interaction, -grad E_att and the weights (the gradient third)."""
    return DIAGONAL_FORMS[cem.diagonal_form].lines(DIAGONALS[cem.diagonal], name)


def _mlp_lines(activation: str, name: str = "E") -> list[str]:
    """E_mlp, -grad E_mlp (the gradient second), then the activation phi and its energy Phi (Phi' = phi)."""
    act = ACTIVATIONS[activation]
    return [rf"{name}(x \mid c) = -\sum_m (G c)_m\, \Phi\big((U x)_m\big)",
            rf"-\nabla_x {name} = U^\top\big(\phi(U x) \odot G c\big)",
            rf"\phi(z) = {act.phi_latex}\ \ (\text{{{act.label}}}), \qquad \Phi' = \phi",
            rf"\Phi(z) = {act.Phi_latex}"]


def update_latex(layer: str, cem: CEMOptions = CEMOptions(), activation: str = "silu") -> list[str]:
    """The equations of one CEM layer ("attention", "mlp" or "joint", the block as one energy) with these
    switches and the MLP's activation (a name in ACTIVATIONS), one LaTeX string per line, each short enough for
    half a projected page (a display line does not wrap)."""
    anchor, T = cem.anchor, cem.T
    anchor_term = r" + \tfrac{\lambda}{2}\lVert x - x^{(0)}\rVert^2" if anchor else ""
    anchor_pull = r" - \lambda (x - x^{(0)})" if anchor else ""
    if layer in ("attention", "mlp"):
        lines = _attention_lines(cem) if layer == "attention" else _mlp_lines(activation)
        lines[0] += anchor_term
        lines[2 if layer == "attention" else 1] += anchor_pull
    elif layer == "joint":
        att, mlp = r"E_{\text{att}}", r"E_{\text{mlp}}"
        lines = [rf"E(x \mid c_{{1:i}}) = {att}(x \mid c_{{1:i}}) + {mlp}(x \mid c_i)" + anchor_term
                 + r"\ \ \text{(one energy)}",
                 *_attention_lines(cem, att), *_mlp_lines(activation, mlp),
                 rf"-\nabla_x E = -\nabla_x {att} - \nabla_x {mlp}" + anchor_pull,
                 r"T = 1:\ h_i' = h_i + \operatorname{Attn}(x^{(0)}) + \operatorname{MLP}(x^{(0)})"
                 r"\ \ \text{(a parallel block)}"]
    else:
        raise ValueError(f"layer={layer!r} is invalid: must be 'attention', 'mlp' or 'joint'")
    return lines + [
        PRECONDITIONERS[cem.preconditioner].latex,
        r"x^{(0)} = \operatorname{Norm}(h_i), \qquad x^{(t+1)} = x^{(t)} - \eta\, P\, \nabla_x E\big(x^{(t)}\big)",
        steps_latex(T) + rf", \qquad h_i' = h_i + x^{{({T})}} - x^{{(0)}}",
    ]
