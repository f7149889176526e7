"""LaTeX of the update a CEM layer performs, for the selected options (rendered by the app)."""
from __future__ import annotations

from cem_core.nn.config import CEMOptions

PRECONDITIONER_LATEX = {
    "none": r"P = I",
    "dlr": r"P = \operatorname{diag}(\operatorname{softplus}(p)) + U V^\top + V U^\top"
           r"\ \ \text{(paper)}",
    "psd": r"P = \operatorname{diag}(\operatorname{softplus}(p)) + U U^\top \succ 0\ \ \text{(ours)}",
}

INTERACTION_LATEX = {
    "none": r"A_k = W_{Q,k}^\top W_{K,k}",
    "per_head": r"A_k = \operatorname{diag}(d_k) + W_{Q,k}^\top W_{K,k}",
    "shared": r"A_k = \operatorname{diag}(d) + W_{Q,k}^\top W_{K,k}\ \ \text{(one d, all heads)}",
}


def steps_latex(T: int) -> str:
    """t = 0 (T = 1), t = 0, 1 (T = 2), t = 0, ..., T - 1 (more)."""
    return "t = 0" if T == 1 else "t = 0, 1" if T == 2 else rf"t = 0, \dots, {T - 1}"


def update_latex(layer: str, cem: CEMOptions = CEMOptions()) -> list[str]:
    """The equations of one CEM layer ("attention" or "mlp") with these switches, one LaTeX string per
    line, each short enough for half a projected page (a display line does not wrap)."""
    anchor, T = cem.anchor, cem.T
    anchor_term = r" + \tfrac{\lambda}{2}\lVert x - x^{(0)}\rVert^2" if anchor else ""
    anchor_pull = r" - \lambda (x - x^{(0)})" if anchor else ""
    if layer == "attention":
        lines = [
            r"E(x \mid c_{1:i}) = -\sum_{k=1}^{H} \frac{1}{\beta} \log \sum_{j \le i} "
            r"e^{\beta\, x^\top A_k c_j}" + anchor_term,
            INTERACTION_LATEX[cem.diagonal] + r", \qquad \beta = 1/\sqrt{d_h}",
            r"-\nabla_x E = \sum_k A_k \sum_{j \le i} a^k_{ij} c_j" + anchor_pull,
            r"a^k_{ij} = \operatorname{softmax}_j\big(\beta\, x^\top A_k c_j\big)",
        ]
    elif layer == "mlp":
        lines = [
            r"E(x \mid c) = -\sum_m (G c)_m\, \Phi\big((U x)_m\big)" + anchor_term,
            r"\Phi' = \phi = \operatorname{SiLU}",
            r"-\nabla_x E = U^\top\big(\phi(U x) \odot G c\big)" + anchor_pull,
        ]
    else:
        raise ValueError(f"layer={layer!r} is invalid: must be 'attention' or 'mlp'")
    return lines + [
        PRECONDITIONER_LATEX[cem.preconditioner],
        r"x^{(0)} = \operatorname{Norm}(h_i), \qquad x^{(t+1)} = x^{(t)} - \eta\, P\, \nabla_x E\big(x^{(t)}\big)",
        steps_latex(T) + rf", \qquad h_i' = h_i + x^{{({T})}} - x^{{(0)}}",
    ]
