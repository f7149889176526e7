"""Small helpers shared by the notebooks: explicit-entry SymPy matrices and display.

Explicit entries, never ``MatrixSymbol``: SymPy 1.14 silently returns 0 when it differentiates a
log-sum-exp of MatrixSymbol expressions (docs/design.md#71-sympy-returns-0-for-matrixsymbol-gradients);
explicit entries differentiate correctly.
"""
from __future__ import annotations

import io

import matplotlib.pyplot as plt
import sympy as sp
from IPython.display import Image, Math, display


def vector(name: str, size: int) -> sp.Matrix:
    """A column of explicit entry symbols name_0 .. name_{size-1}."""
    return sp.Matrix(sp.symbols(f"{name}_0:{size}", real=True))


def matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    """A rows x cols matrix of explicit entry symbols name_{rs}."""
    return sp.Matrix(rows, cols, lambda r, s: sp.Symbol(f"{name}_{{{r}{s}}}", real=True))


def show(lhs: str, expr) -> None:
    """Display lhs = expr with SymPy's LaTeX printer."""
    display(Math(lhs + " = " + sp.latex(expr)))


def show_figure(fig) -> None:
    """Display a matplotlib figure as a small PNG and close it (works under any backend,
    including the Agg backend that cem_core.ui.plots selects)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=72)
    plt.close(fig)
    display(Image(buffer.getvalue()))
