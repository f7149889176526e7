"""Small helpers shared by the notebooks: explicit-entry SymPy matrices, display, and exercises.

Explicit entries, never ``MatrixSymbol``: SymPy 1.14 silently returns 0 when it differentiates a
log-sum-exp of MatrixSymbol expressions (docs/design.md#71-sympy-returns-0-for-matrixsymbol-gradients);
explicit entries differentiate correctly.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import sympy as sp
import torch
from IPython.display import Image, Markdown, Math, display

from cem_core.ui.widgets import png


def vector(name: str, size: int) -> sp.Matrix:
    """A column of explicit entry symbols name_0 .. name_{size-1}."""
    return sp.Matrix(sp.symbols(f"{name}_0:{size}", real=True))


def matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    """A rows x cols matrix of explicit entry symbols name_{rs}."""
    return sp.Matrix(rows, cols, lambda r, s: sp.Symbol(f"{name}_{{{r}{s}}}", real=True))


def numeric(expr, *args):
    """``sp.lambdify(args, expr)`` over NumPy arrays that needs no scipy (a test-only package, absent where
    `make notebooks` installs): erf is ``math.erf`` element-wise, where lambdify would pick scipy's or,
    without it, a scalar-only ``math.erf`` that fails on arrays."""
    return sp.lambdify(args, expr, modules=[{"erf": np.vectorize(math.erf, otypes=[float])}, "numpy"])


def show(lhs: str, expr) -> None:
    """Display lhs = expr with SymPy's LaTeX printer."""
    display(Math(lhs + " = " + sp.latex(expr)))


def proved(latex: str) -> None:
    """Display an identity SymPy has just proved (LaTeX), marked as proved."""
    display(Math(latex + r"\qquad \checkmark\ \text{proved}"))


def report(text: str) -> None:
    """Display a result in words (Markdown), instead of a printed string."""
    display(Markdown(text))


def show_figure(fig) -> None:
    """Display a matplotlib figure as a 150 dpi PNG cropped to what is drawn, and close it (works under
    any backend, including the Agg backend that cem_core.ui.figure_files selects)."""
    display(Image(png(fig)))


def check_answer(answer, check, exercise: str, success: str) -> None:
    """An exercise's check: a note while the answer is still None, else check(answer) (an AssertionError
    says what is wrong) and the success message."""
    if answer is None:
        report(f"**Exercise `{exercise}`: not answered yet.** Replace `None` in the cell above with your answer "
               f"and run both cells again. Stuck? The solution is in `notebooks/solutions.py` "
               f"(`EXERCISES[{exercise!r}]`).")
        return
    check(answer)
    report(f"✓ **Correct.** {success}")


# -- the lecture's plumbing (notebooks/00_lecture.py keeps only the ideas in view) ---------------------


def antiderivative(name: str, derivative):
    """An undefined SymPy function ``name`` whose derivative is the function ``derivative``: Phi with Phi' = phi."""
    return type(name, (sp.Function,), {"fdiff": lambda self, argindex=1: derivative(self.args[0])})


def entries(symbols: sp.Matrix, values) -> dict:
    """{symbol: float} pairing a symbolic matrix (or column) with a tensor of its shape, entry by entry."""
    flat = values.detach().double().reshape(-1).tolist()
    return dict(zip(list(symbols), flat, strict=True))


def step_error(layer, update: sp.Matrix, weights: dict, x: sp.Matrix, context: list, extra=None, seed: int = 0):
    """Largest |(layer(h) - h) - update| at the last token, in float64: ``update`` is a derived update of the
    state ``x`` given ``context`` (c_1..c_n), evaluated at the layer's random weights ({parameter name:
    symbolic matrix}), x = c_n and c_j = Norm(h_j), the layer's x^(0) (T = 1, eta = 1, P = I, no anchor)."""
    torch.manual_seed(seed)
    layer = layer.double()
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.7)
        h = torch.randn(1, len(context), len(x), dtype=torch.float64)
        moved, c0 = (layer(h) - h)[0, -1], layer.norm(h)[0]
    values = dict(extra or {})
    for name, matrix_ in weights.items():
        values.update(entries(matrix_, layer.get_parameter(name)))
    for c_j, row in zip(context, c0, strict=True):
        values.update(entries(c_j, row))
    values.update(entries(x, c0[-1]))
    derived = torch.tensor([float(v) for v in update.xreplace(values)], dtype=torch.float64)
    return (derived - moved).abs().max().item()


def evidence(gp_study_path: str, lm_sweep_path: str) -> dict:
    """The verdicts in brief, from the committed results (or what is missing), each with its scale and corpus and
    with the project's t-based reading beside the recorded rule: {"gp", "lm", "note" (what docs/paper-notes.md
    rests on): Markdown, "claims": the LM claims table in three parts, the paper's 1-4 and 5-8 and ours
    (Markdown, verdict first, every claim whole)}."""
    from cem_core.experiments import verdicts
    from cem_core.experiments.gp import study as gp_study
    from cem_core.experiments.gp import sweep as gp_sweep
    from cem_core.experiments.lm import report as lm_report
    from cem_core.experiments.lm import runner as lm_runner
    from cem_core.experiments.records import markdown_table

    def counted(verdicts_, words=("supported", "contradicted", "inconclusive")) -> str:
        return ", ".join(f"{verdicts_.count(v)} {v}" for v in words)

    parts = {}
    study = gp_sweep.GP_SWEEP.load(gp_study_path) if Path(gp_study_path).exists() else []
    if study:
        rows = [r for r in gp_study.table_rows(study)
                if r["condition"] not in gp_study.EQUAL_COMPUTE + gp_study.FORM_COMPARISONS]
        supported = [r["condition"] for r in rows if r["verdict"] == "supported"]
        params = sorted({r["params"] for r in study if r["depth"] == 1 and r["attention"] == "cem"})
        parts["gp"] = (f"**GP regression** ({len(study)} runs; one-layer models of {params[0] / 1e3:.0f}K to "
                     f"{params[-1] / 1e3:.0f}K parameters predicting functions drawn from a Gaussian process): "
                     f"*deeper recursion lowers the RMSE*, judged in {len(rows)} conditions: by the rule recorded "
                     f"before the runs (2 se), {counted([r['verdict'] for r in rows])}"
                     f"{' (supported: ' + ', '.join(supported) + ')' if supported else ''}; read with the t-based "
                       f"95% interval, {counted([r['t-based reading (95%)'] for r in rows])}.")
    else:
        parts["gp"] = f"**GP regression**: no study results at `{gp_study_path}` yet."
    lm = lm_runner.LM_SWEEP.load(lm_sweep_path) if Path(lm_sweep_path).exists() else []
    claims = lm_report.claim_rows(lm) if lm else []
    reading = lm_report.T_READING
    rows = [{"verdict": f"**{r['verdict']}**", "t reading": r[reading], "no.": str(r["#"]), "claim": r["claim"]}
            for r in claims]
    tables = [markdown_table(part) if part else "(no claims yet)" for part in (rows[:4], rows[4:8], rows[8:])]
    if lm:
        paper = [r for r in claims if not r["claim"].startswith("(ours)")]
        llama = next(r for r in lm if r["name"] == "llama")
        favour = [str(r["#"]) for r in paper if r[reading] == "in CEM's favour beyond the paper's claim"]
        parts["lm"] = (
            f"**Language models** ({len(lm)} runs; Llama of {llama['params'] / 1e6:.2f}M parameters trained on "
            f"{llama['tokens'] / 1e6:.2f}M tokens, 20 per parameter, on the demo corpus of Python source, **not "
            f"SlimPajama**; the paper's models have 86M–162M): of the paper's {len(paper)} claims, by the recorded "
            f"rule {counted([r['verdict'] for r in paper])}"
            + (f" (of the contradicted, claim {', '.join(favour)} goes in CEM's favour: a larger gain than the paper "
               "claims)" if favour else "")
            + f"; read with the t-based 95% interval, {counted([r[reading] for r in paper], verdicts.DIRECTIONS)}.")
    else:
        parts["lm"] = f"**Language models**: no runs at `{lm_sweep_path}` yet."
    parts["note"] = ("The paper's full text was not available to us: our notes on its claims come from its abstract "
                     "and a summary (`docs/paper-notes.md`).")
    return parts | {"claims": tables}

