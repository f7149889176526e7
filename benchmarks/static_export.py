"""Plotly's own static export (Kaleido, driving a Chromium) against the project's translator (cem_core.ui.static,
matplotlib) on the figures they would both draw: the GP sweep's three figures from the committed results, one
after the other in one process, side by side. Kaleido is not a dependency of the project; give it on the path:

    pip install --target /tmp/kaleido kaleido==1.5.1
    PYTHONPATH=/tmp/kaleido BROWSER_PATH=$(which chromium) python benchmarks/static_export.py [--repeats 3] [--server]

Prints, per figure, the median seconds of a PNG by each route (Kaleido's first figure, which starts the browser,
apart) and their ratio; --server keeps one Kaleido browser for every figure. The decision it informs:
docs/design.md#74-static-plotly-export-needs-chrome.
"""
from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from pathlib import Path

import plotly.io as pio

from cem_core.experiments.gp.sweep import GP_SWEEP
from cem_core.ui import gp_figures, static

ROOT = Path(__file__).resolve().parents[1]
FIGURES = {"gp_rmse_vs_context": gp_figures.gp_context_figure, "gp_ratio_vs_T": gp_figures.gp_ratio_figure,
           "gp_test_time_scaling": gp_figures.gp_scaling_figure}


def translated_png(fig, dpi: int = 110) -> bytes:
    """The translator's PNG of a figure, as figures/ writes it: drawn by matplotlib from the Plotly figure."""
    buffer = io.BytesIO()
    static.to_matplotlib(fig).savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def timed(draw) -> tuple[float, bytes]:
    start = time.perf_counter()
    png = draw()
    return time.perf_counter() - start, png


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server", action="store_true", help="keep one Kaleido browser for every figure")
    args = parser.parse_args()
    records = GP_SWEEP.load(ROOT / "results" / "gp-default" / "results.json")
    figures = {name: build(records) for name, build in FIGURES.items()}
    if args.server:                  # one browser kept for every figure (Kaleido 1.x with plotly >= 6.1)
        import kaleido
        kaleido.start_sync_server()
    first, _ = timed(lambda: pio.to_image(next(iter(figures.values())), format="png", width=900, height=500))
    print(f"Kaleido's first PNG, with the browser's start: {first:.2f} s")
    print("| figure | translator (matplotlib) | Kaleido (Chromium) | Kaleido / translator |")
    print("| --- | ---: | ---: | ---: |")
    ratios = []
    for name, fig in figures.items():
        ours = statistics.median(timed(lambda: translated_png(fig))[0] for _ in range(args.repeats))
        theirs = statistics.median(timed(lambda: pio.to_image(fig, format="png", width=900, height=500))[0]
                                   for _ in range(args.repeats))
        ratios.append(theirs / ours)
        print(f"| {name} | {ours:.3f} s | {theirs:.3f} s | {theirs / ours:.1f} |")
    print(f"median ratio {statistics.median(ratios):.1f}; cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
