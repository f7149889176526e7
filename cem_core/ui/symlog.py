"""A symmetric log scale for a Plotly axis whose values span orders of magnitude."""
from __future__ import annotations

import math

import numpy as np

SYMLOG_SPAN = 1e2     # values whose largest is more than this many times their first step's: a symmetric log axis


class SymLog:
    """A symmetric log scale y -> sign(y) log10(1 + |y| / c), linear within about c of zero: an axis whose values
    span orders of magnitude (a diverging descent's energies reach 1e28) keeps its early steps apart instead of
    flat at zero. c is the early values' typical size (the median magnitude of the first step's). Calling it maps
    values; ``axis`` gives the y axis's ticks, labelled with the values they stand for (±10^k)."""

    def __init__(self, c: float, values: np.ndarray):
        finite = values[np.isfinite(values)]
        self.c, self.top = c, float(np.abs(finite).max())
        self.signs = (bool((finite < 0).any()), bool((finite > 0).any()))

    @staticmethod
    def needed(values, pinned=None) -> SymLog | None:
        """The scale for per-step values (steps, n) and the pinned state's, or None when a linear axis shows
        them: when the largest is more than SYMLOG_SPAN times the first step's typical size."""
        values = np.asarray(values, dtype=float)
        everything = np.concatenate([np.ravel(values)] + ([] if pinned is None else [np.ravel(pinned)]))
        first = np.abs(values[0][np.isfinite(values[0])])
        first = first[first > 0]
        top = np.abs(everything[np.isfinite(everything)])
        if not len(first) or not len(top) or top.max() <= SYMLOG_SPAN * np.median(first):
            return None
        return SymLog(float(np.median(first)), everything)

    @staticmethod
    def on_axis(values, pinned=None) -> tuple:
        """The values (and the pinned state's) as a per-token plot draws them, and the scale (None: linear)."""
        scale = SymLog.needed(values, pinned)
        if scale is None:
            return np.asarray(values, dtype=float), pinned, None
        return scale(values), None if pinned is None else scale(pinned), scale

    def __call__(self, values):
        values = np.asarray(values, dtype=float)
        return np.sign(values) * np.log10(1 + np.abs(values) / self.c)

    def axis(self) -> dict:
        """Ticks at 0 and at ±10^k from ten times c (nearer, a tick would sit on the zero's) to the largest value,
        at most three a side (a short plot has room for no more)."""
        high = math.floor(math.log10(self.top))
        low = min(math.ceil(math.log10(self.c)) + 1, high)
        every = max(1, -(-(high - low + 1) // 3))
        powers = list(range(low, high + 1, every))
        vals, text = [0.0], ["0"]
        for sign, shown in ((-1, self.signs[0]), (1, self.signs[1])):
            if shown:
                vals += [float(self(sign * 10.0 ** k)) for k in powers]
                text += [f"{'−' if sign < 0 else ''}10<sup>{k}</sup>" for k in powers]
        return dict(tickmode="array", tickvals=vals, ticktext=text)
