"""Server-side time of one rerun of the energy page (AppTest, no browser): on defaults with a
cold cache, on defaults with a warm cache, and after a T change (a cache miss).

    python benchmarks/app_rerun.py [--repeats 10]

Target (docs/design.md#43-app-and-sweep-targets): at most 300 ms on 2 cores. Prints medians and the spread.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

from cem_core.ui.cache import clear_shared

APP = str(Path(__file__).resolve().parents[1] / "app.py")
logging.getLogger("streamlit").setLevel(logging.ERROR)   # "No runtime found" notes from bare mode


def clear_caches() -> None:
    """Forget every cached page result (the energy page keeps its data and figures in a shared cache)."""
    st.cache_data.clear()
    st.cache_resource.clear()
    clear_shared()


def timed(at: AppTest) -> float:
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()                                                            # imports, first render
    cold, warm, change = [], [], []
    for r in range(args.repeats):
        clear_caches()
        cold.append(timed(at))
        warm.append(timed(at))
        slider = next(s for s in at.slider if s.key == "en_T")
        slider.set_value(5 + r % 10)                                    # a T not seen yet in this round
        clear_caches()
        change.append(timed(at))
        slider.set_value(4)
        timed(at)
    print(f"energy page, server-side rerun time over {args.repeats} repeats (median [min, max]):")
    for name, xs in (("defaults, cold cache", cold), ("defaults, warm cache", warm), ("after a T change", change)):
        print(f"  {name:<22} {1000 * statistics.median(xs):7.1f} ms  [{1000 * min(xs):.1f}, {1000 * max(xs):.1f}]")
    print("target: <= 300 ms")


if __name__ == "__main__":
    main()
