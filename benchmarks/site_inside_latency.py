"""Latency of the site's page "Inside a trained model" (inside.html, `make site`): a learner dragging a point of
their own on the curve plot, in Debian's headless Chromium (1280 x 900, through Playwright), the page opened from
file:// with no server at all.

    .venv/bin/python benchmarks/site_inside_latency.py [--moves 20] [--load N]

States: each trained checkpoint with CEM layers at the largest context (31 points: a seed's first 30 and one the
learner adds) and its largest test-time T (4 x the trained T: 32 for the T = 8 models), and Llama attention. The
learner's point is dragged back and forth one step of the mouse at a time, waiting for each to be drawn; each move is
timed in the page with performance.now() from the mousemove reaching the window (a capturing listener) to the next
animation frame after the player holds the new state ("redrawn": every plot of the page drawn: the prediction, its
RMSE per step, the token energies and the attention; the computation is every step's prediction on the 101-point
grid). "first paint": from the navigation's start to the first state drawn (performance.now() at body data-ready).

"--load N" runs N busy processes (a Python loop each) beside the browser for the whole benchmark.

Targets: at most 50 ms median from a move to every plot redrawn, at most 2 s to the first paint. Prints
median [min, max] per state, PASS or MISS, and the cores and load average before and after: the numbers are only as
quiet as the machine.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from cem_core.ui import site

STATES = {"gp-block-T8": 32, "gp-cem-T8": 32, "gp-block-T1": 4, "gp-llama": 1}   # checkpoint: its largest T
TARGET_MS, FIRST_PAINT_MS = 50.0, 2000.0
TIMEOUT_MS = 60_000

WATCH = """() => {
  window.__moves = []; window.__t0 = null;
  window.addEventListener("mousemove", () => { if (window.__t0 === null) window.__t0 = performance.now(); }, true);
  new MutationObserver(() => {
    if (window.__t0 === null) return;
    const t0 = window.__t0; window.__t0 = null;
    requestAnimationFrame(() => window.__moves.push(performance.now() - t0));
  }).observe(document.querySelector('#playback'), {attributes: true, attributeFilter: ['data-version']});
}"""


def load_average() -> str:
    return f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}"


def pixel(page, x: float, y: float) -> tuple[float, float]:
    return tuple(page.evaluate("""([x, y]) => {
        const div = document.querySelector('.plot[data-name=curve]'), box = div.getBoundingClientRect();
        const xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis;
        return [box.left + xa._offset + xa.l2p(x), box.top + ya._offset + ya.l2p(y)];
    }""", [x, y]))


def measure(browser, inside: Path, name: str, T: int, moves: int) -> tuple[list[float], float]:
    """The move times (ms) of dragging the 31st point, and the first paint (ms)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{inside.as_uri()}?in_gp_model={name}&in_seed=0&in_context=30&in_gp_T={T}")
    page.wait_for_selector("body[data-ready=true]", timeout=TIMEOUT_MS)
    first = page.evaluate("performance.now()")
    page.mouse.click(*pixel(page, 0.05, 0.5))                              # the learner's own 31st point
    page.wait_for_function("JSON.parse(document.body.dataset.state).points?.length === 31", timeout=TIMEOUT_MS)
    page.wait_for_timeout(300)
    page.evaluate(WATCH)
    x, y = pixel(page, 0.05, 0.5)
    page.mouse.move(x, y)
    page.mouse.down()
    for k in range(moves):
        count = page.evaluate("window.__moves.length")
        page.mouse.move(x + (6 if k % 2 == 0 else 0), y + (6 if k % 2 == 0 else 0))
        page.wait_for_function(f"window.__moves.length > {count}", timeout=TIMEOUT_MS)
    page.mouse.up()
    times = page.evaluate("window.__moves")
    page.close()
    return times, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moves", type=int, default=20)
    parser.add_argument("--load", type=int, default=0, help="busy processes to run beside it (default 0)")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        print(f"before: {load_average()}; --load {args.load}, --moves {args.moves}")
        with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
            inside = site.build(Path(tmp) / "site").parent / "inside.html"
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--headless"])
            print("| checkpoint (31 points) | test-time T | move → every plot redrawn | first paint |")
            print("| --- | ---: | ---: | ---: |")
            for name, T in STATES.items():
                times, first = measure(browser, inside, name, T, args.moves)
                median = statistics.median(times)
                verdict = "PASS" if median <= TARGET_MS else "MISS"
                paint = "PASS" if first <= FIRST_PAINT_MS else "MISS"
                print(f"| {name} | {T} | {median:.0f} ms [{min(times):.0f}, {max(times):.0f}] {verdict} | "
                      f"{first:.0f} ms {paint} |")
            browser.close()
        print(f"after: {load_average()}")
    finally:
        for proc in busy:
            proc.kill()


if __name__ == "__main__":
    main()
