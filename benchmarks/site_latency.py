"""Latency of the energy explorer computed in the browser (`make site`): a key press on a control to the plot
redrawn, in Debian's headless Chromium (1280 x 720, through Playwright), the page opened from file:// with no
server at all.

    .venv/bin/python benchmarks/site_latency.py [--repeats 20] [--load N]

Two states: the defaults and the largest one the page allows (benchmarks/browser_latency.py's: a block, width
and sequence length 128, per-head D+LR, T 16). In each, the slider "step size eta" is focused and moved one
arrow key press at a time, back and forth between two values (every press a new state: the page keeps no
computed state but the pinned one, so each is computed afresh: the descent, the notes, the figures and the
drawing). Each press is timed in the page with performance.now(), from the keydown reaching the window
(a capturing listener) to:

- "redrawn": the first phase's energy plot shows its new data, painted (a MutationObserver reads the plot's data
  after every change of the page's DOM, at the end of the task that made it; the time is that of the next
  animation frame, when the change is painted; the data must be the plot's final ones);
- "settled": every player holds the new state, every plot of every phase drawn (body data-state "drawn"; a block
  has two phases of four plots).

"held": the same slider held down, 30 presses 33 ms apart (a key's auto-repeat), timed from the last press's
keydown to settled; no press may be lost (the page must end on the value all 30 make). Changes that arrive
while a state is drawn are merged and the latest drawn next, so the page never works through stale states.

The same rows for the app's energy page in Instant mode ("app, instant": `streamlit run app.py` on a local port,
opened at `/?instant=true&...`): the same explorer in a Streamlit component's iframe, timed the same way inside
it; the state goes to the server only once the page is idle, after the times are taken. "--no-app" skips them.

"--load N" runs N busy processes (a Python loop each) beside the browser for the whole benchmark.

Targets: at most 50 ms median to redraw at the defaults, at most 100 ms at the largest state. Prints
median [min, max] per state and measure, PASS or MISS, the held-key times, and the cores and load average
before and after: the numbers are only as quiet as the machine.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from appdriver import serve_app, settle  # noqa: E402  (tests/ is not a package)

EXPLORER = "iframe[src*='cem_explorer']"                # the app's Instant explorer (app_pages/explorer.py)
LARGEST = {"layer": "block", "width": 128, "seq_len": 128, "diagonal": "per_head", "T": 16}
TARGETS = {"defaults": 50.0, "largest": 100.0}        # ms, median of "redrawn"
HELD = 30                                             # presses of a held key, 33 ms apart
TIMEOUT_MS = 60_000

# Installed before the page's own scripts: the time of every keydown; after each change of the page's DOM (the end
# of the task that made it, before that frame is painted), the first phase's energy plot's data, with the time of the
# frame that paints it; and the time the body says every player is drawn.
TIMER = """
window.__bench = {keydown: 0, seen: [], settled: 0};
const energyPlot = () => document.querySelector("#phases .playback .plot[data-name='energy']");
window.__bench.data = () => { const div = energyPlot(); return div && div.data ? JSON.stringify(div.data) : ""; };
window.addEventListener("keydown", () => { __bench.keydown = performance.now(); __bench.seen = []; }, true);
new MutationObserver(() => {
  const data = __bench.data(), seen = __bench.seen;
  if (seen.length && seen[seen.length - 1].data === data) return;
  const entry = {data, painted: 0};
  seen.push(entry);
  requestAnimationFrame(() => { entry.painted = performance.now(); });
}).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
new MutationObserver(() => {
  if (document.body.dataset.state === "drawn") __bench.settled = performance.now();
}).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-state"]});
"""
# The first time the energy plot showed its final data (the data once every player is drawn), painted.
REDRAWN = """() => { const last = __bench.data(); const hit = __bench.seen.find(e => e.data === last);
                     return hit ? hit.painted - __bench.keydown : null; }"""


def query(values: dict) -> str:
    return "&".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items())


def open_page(browser, index: Path, values: dict):
    """The site's page at `values`, drawn: (page, the frame the explorer is in: here the page's own)."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.add_init_script(TIMER)
    page.goto(f"{index.as_uri()}?{query(values)}")
    page.wait_for_function("document.body.dataset.state === 'drawn'", timeout=TIMEOUT_MS)
    return page, page.main_frame


def open_app(browser, url: str, values: dict):
    """The app's energy page in Instant mode at `values`, drawn: (page, the explorer's iframe, TIMER installed in it
    once drawn: an init script would run in the iframe's first, blank document, whose window the explorer's page
    keeps, and watch the blank document)."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{url}/?instant=true&{query(values)}")
    settle(page)
    frame = page.locator(EXPLORER).element_handle(timeout=TIMEOUT_MS).content_frame()
    frame.wait_for_function("document.body && document.body.dataset.state === 'drawn'", timeout=TIMEOUT_MS)
    frame.evaluate(TIMER)
    return page, frame


def eta_slider(frame):
    return frame.locator("[data-control='eta'] input[type='range']")


def drawn(frame, before: str) -> None:
    """Wait until the state after a key press is drawn, its energy plot changed and painted."""
    frame.wait_for_function(f"([before]) => __bench.settled > __bench.keydown && __bench.data() !== before && "
                            f"({REDRAWN})() > 0", arg=[before], timeout=TIMEOUT_MS)


def presses(page, frame, repeats: int) -> tuple[list[float], list[float]]:
    """One arrow key press at a time on eta, back and forth: (redrawn, settled) in ms per press."""
    slider = eta_slider(frame)
    slider.focus()
    redrawn, settled = [], []
    for i in range(repeats):
        before = frame.evaluate("__bench.data()")
        page.keyboard.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
        drawn(frame, before)
        redrawn.append(frame.evaluate(REDRAWN))
        settled.append(frame.evaluate("__bench.settled - __bench.keydown"))
    return redrawn, settled


def held(page, frame) -> tuple[float, bool]:
    """30 presses 33 ms apart; from the last keydown to every phase drawn, and whether no press was lost (the eta
    drawn: the page's own state, which the site's link and the app's server are given once idle)."""
    slider = eta_slider(frame)
    slider.focus()
    start = float(slider.input_value())
    before = frame.evaluate("__bench.data()")
    for _ in range(HELD):
        page.keyboard.down("ArrowRight")
        page.wait_for_timeout(33)
    page.keyboard.up("ArrowRight")
    drawn(frame, before)
    last = frame.evaluate("__bench.settled - __bench.keydown")
    expected = round(start + HELD * 0.05, 10)
    shown = frame.evaluate("CEMExplorer.page.values.eta")
    return last, abs(shown - expected) < 1e-9


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):7.1f} [{min(xs):.1f}, {max(xs):.1f}]"


def load_average() -> str:
    return f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--load", type=int, default=0, help="busy processes to run beside it (default 0)")
    parser.add_argument("--no-app", action="store_true", help="only the static site, not the app's Instant mode")
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("site_latency: Debian's chromium is not installed (apt install chromium)")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        print(f"before: {load_average()}; --load {args.load}, --repeats {args.repeats}")
        rows = []

        def measure(where: str, opened) -> None:
            for state, values in (("defaults", {}), ("largest", LARGEST)):
                page, frame = opened(values)
                redrawn, settled = presses(page, frame, args.repeats)
                last, kept = held(page, frame)
                page.close()
                verdict = "PASS" if statistics.median(redrawn) <= TARGETS[state] else "MISS"
                rows.append((f"{where}{state}", state, redrawn, settled, last, kept, verdict))

        with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
            index = site.build(Path(tmp) / "site")
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--headless"])
            measure("", lambda values: open_page(browser, index, values))
            if not args.no_app:
                env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
                with serve_app(env) as app:
                    measure("app, instant: ", lambda values: open_app(browser, app.url, values))
            browser.close()
        print(f"{'state':23} {'key press -> redrawn, ms':>28} {'-> settled, ms':>28} {'held key (30), ms':>18}  "
              "target")
        for name, state, redrawn, settled, last, kept, verdict in rows:
            print(f"{name:23} {spread(redrawn):>28} {spread(settled):>28} {last:15.1f}{'' if kept else ' LOST'}  "
                  f"{verdict} (median <= {TARGETS[state]:g} ms)")
        print(f"after: {load_average()}")
    finally:
        for proc in busy:
            proc.kill()


if __name__ == "__main__":
    main()
