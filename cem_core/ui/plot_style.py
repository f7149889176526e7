"""What the matplotlib figures share: an axis's finish (log2 ticks, labels, legend) and names with subscripts."""
from __future__ import annotations

import re

import matplotlib
import matplotlib.ticker


def finish_axes(fig, ax, log2_x=False, **labels):
    """Set ax's labels (and a base-2 x axis with plain numbers), add its legend and tighten fig's layout."""
    if log2_x:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())   # 1 2 4 8, not 2^k
    ax.set(**labels)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def subscripts(text: str) -> str:
    """A name's one-letter subscripts as matplotlib's mathtext: "d_x = 2" is drawn d with a subscript x."""
    return re.sub(r"\b([A-Za-z])_([A-Za-z0-9])\b", r"\1$_\2$", text)
