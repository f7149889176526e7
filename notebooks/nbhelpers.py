"""Small helpers shared by the notebooks: explicit-entry SymPy matrices, display, and exercises.

Explicit entries, never ``MatrixSymbol``: SymPy 1.14 silently returns 0 when it differentiates a
log-sum-exp of MatrixSymbol expressions (docs/design.md#71-sympy-returns-0-for-matrixsymbol-gradients);
explicit entries differentiate correctly.
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp
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
    any backend, including the Agg backend that cem_core.ui.plots selects)."""
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
