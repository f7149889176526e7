"""LaTeX of the update a CEM layer performs, for the selected options (rendered by the app)."""
from __future__ import annotations

from cem_core.nn.activations import ACTIVATIONS
from cem_core.nn.config import CEMOptions
from cem_core.nn.diagonals import DIAGONAL_FORMS, DIAGONALS
from cem_core.nn.precondition import PRECONDITIONERS
from cem_core.nn.ties import ATTENTION_TIES, MLP_TIES

NO_ENERGY = r"\text{not a gradient of an energy: its ties are dropped}"


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


def _untied_lines(layer: str, cem: CEMOptions, activation: str) -> list[str]:
    """The update direction u(x) of a layer whose ties are dropped (docs/design.md#215-the-ties): no energy, so no
    E line and no gradient, the attention weights and phi as the tied layer has them."""
    act = ACTIVATIONS[activation]
    weights = r"a^k_{ij} = \operatorname{softmax}_j\big(\beta\, x^\top W_{Q,k}^\top W_{K,k} c_j\big)"
    phi = rf"\phi(z) = {act.phi_latex}\ \ (\text{{{act.label}}})"
    attention, mlp = ATTENTION_TIES[cem.attn_ties].update_latex, MLP_TIES[cem.mlp_ties].update_latex
    if layer == "attention":
        return [rf"u(x) = {attention}", weights, NO_ENERGY]
    if layer == "mlp":
        return [rf"u(x) = {mlp}", phi, NO_ENERGY]
    return [rf"u(x) = {attention} + {mlp}", weights, phi, NO_ENERGY]


def update_latex(layer: str, cem: CEMOptions = CEMOptions(), activation: str = "silu") -> list[str]:
    """The equations of one CEM layer ("attention", "mlp" or "joint", the block as one energy) with these
    switches and the MLP's activation (a name in ACTIVATIONS), one LaTeX string per line, each short enough for
    half a projected page (a display line does not wrap). A layer whose ties are dropped has no energy: its lines
    give the update direction u(x) and x^(t+1) = x^(t) + eta P u(x^(t)) instead (``_untied_lines``)."""
    anchor, T = cem.anchor, cem.T
    tied = {"attention": ATTENTION_TIES[cem.attn_ties].energy, "mlp": MLP_TIES[cem.mlp_ties].energy}
    if layer in ("attention", "mlp") and not tied[layer] or layer == "joint" and not all(tied.values()):
        pull = r" - \lambda (x^{(t)} - x^{(0)})" if anchor else ""
        return _untied_lines(layer, cem, activation) + [
            PRECONDITIONERS[cem.preconditioner].latex,
            rf"x^{{(0)}} = \operatorname{{Norm}}(h_i), \qquad "
            rf"x^{{(t+1)}} = x^{{(t)}} + \eta\, P\,\big(u(x^{{(t)}}){pull}\big)",
            steps_latex(T) + rf", \qquad h_i' = h_i + x^{{({T})}} - x^{{(0)}}",
        ]
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
