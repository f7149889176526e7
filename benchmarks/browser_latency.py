"""Latency of the energy page as a person sees it: `streamlit run app.py` and Debian's headless Chromium
(1280 x 720, through Playwright and tests/appdriver.py), timing each control change from the key press
to the new plot on the screen.

    .venv/bin/python benchmarks/browser_latency.py [--repeats 10]

Two states: the defaults (/) and the largest allowed one (width 128, sequence 128, a block, per-head
D+LR, T 16, or the largest width = sequence length at 2 heads that COST_LIMIT allows). In each, every
control starts from a fresh session on the link and makes --repeats changes: the sliders "steps T" and
"step size eta" one arrow key press each, the number input "seed" a value typed and entered. The first
half (rounded up) go to values this server has not computed before, "uncached" (misses of the page's cache):
a walk of slider positions towards the slider's farther end, or the next seeds. The rest go back and
forth between the last two values, "cached" (only the figures are rebuilt and sent). At the largest
state T walks down from 16, so its uncached renders are cheaper than a T = 16 one; the seeds are the
honest uncached changes there.

Each change is timed in the page with performance.now(): it starts when the keydown (the arrow, or the
Enter that commits the number) reaches the window; a MutationObserver reads the Plotly charts' data
after every DOM change (at the end of the task that changed it, before that frame is painted, so paint
adds up to one frame; reading costs the page about 1 % of a change). "re-rendered" ends when the first
chart (the energy plot) is drawn with data that differ from those before the key press (it must be
their final value); "settled" ends at the later of the script finishing (stApp's
data-test-script-state back to notRunning) and the last change of any chart, once every chart is drawn
again (as many as before) and 0.3 s have passed without a change.

Targets: at most 250 ms median to re-render at the defaults, at most 2 s median settled at the largest
allowed state. Prints median [min, max] per state, control and kind, PASS or MISS per row, and the
cores and load average before and after: the numbers are only as quiet as the machine. About 5 minutes
at --repeats 10 on 2 busy cores.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cem_core.ui.controls import COST_LIMIT, EnergyControls

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from appdriver import chromium, serve_app, settle  # noqa: E402  (tests/ is not a package)

QUIET_MS = 300            # no chart change for this long, after the script finished: settled
TIMEOUT_MS = 90_000       # the longest wait for one change or one page load
LARGEST = {"width": 128, "seq_len": 128, "layer": "block", "diagonal": "per_head", "T": 16}
ERRORS = "[data-testid='stException'], [data-testid='stAlertContentError']"
TARGETS = {"defaults": ("rerender", 250), "largest": ("settled", 2000)}

# Installed in the page once it has loaded: window.__bench.arm(key) before a key press, window.__bench.ready()
# polled until the change has settled, then window.__bench.result() gives the times since the keydown.
PROBE = """quietMs => {
  const app = document.querySelector("[data-testid='stApp']");
  const fold = (v, acc) => {                 // a weighted sum of every number (and character) of a value
    if (v === null || v === undefined) return;
    if (typeof v === 'number') { acc.n++; acc.s += (Number.isFinite(v) ? v : 7.5) * (1 + acc.n % 97); return; }
    if (typeof v === 'string') { for (let i = 0; i < v.length; i++) fold(v.charCodeAt(i), acc); return; }
    if (typeof v === 'object') for (const x of (typeof v.length === 'number' ? v : Object.values(v))) fold(x, acc);
  };
  const signature = gd => {                  // '' for a chart not drawn yet
    if (!gd.data) return '';
    const acc = {n: 0, s: 0};
    for (const trace of gd.data) for (const k of ['x', 'y', 'z']) fold(trace[k], acc);
    return acc.n + ':' + acc.s;
  };
  const b = {all: '', charts: [], changed: performance.now(), key: null, start: null, first: '', count: 0,
             render: null, shown: '', left: false, done: null};
  const look = () => {
    const now = performance.now(), charts = Array.from(document.querySelectorAll('.js-plotly-plot'), signature);
    const all = charts.join('|');
    if (all !== b.all) Object.assign(b, {all, charts, changed: now});
    if (b.start !== null && b.render === null && charts[0] && charts[0] !== b.first) {
      b.render = now;
      b.shown = charts[0];
    }
  };
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                     characterData: true});
  new MutationObserver(records => {
    if (b.start === null) return;
    if (records.some(r => r.oldValue === 'notRunning')) b.left = true;
    if (b.left && b.done === null && app.getAttribute('data-test-script-state') === 'notRunning')
      b.done = performance.now();
  }).observe(app, {attributes: true, attributeFilter: ['data-test-script-state'], attributeOldValue: true});
  window.addEventListener('keydown', e => {
    if (b.start === null && e.key === b.key) b.start = performance.now();
  }, true);
  const drawn = () => b.charts.length > 0 && b.charts.every(c => c !== '');
  const quiet = () => performance.now() - b.changed >= quietMs;
  look();
  window.__bench = {
    arm: key => {
      look();
      Object.assign(b, {key, start: null, first: b.charts[0], count: b.charts.length, render: null, left: false,
                        done: null});
    },
    loaded: () => app.getAttribute('data-test-script-state') === 'notRunning' && drawn() && quiet(),
    ready: () => b.render !== null && b.done !== null && b.charts.length === b.count && drawn() && quiet(),
    result: () => ({rerender: b.render - b.start, settled: Math.max(b.done, b.changed) - b.start,
                    final: b.charts[0] === b.shown}),
  };
}"""


@dataclass
class Row:
    state: str
    control: str
    kind: str
    rerender: list[float]
    settled: list[float]


def largest_state() -> dict:
    """LARGEST if COST_LIMIT allows it, else the largest width = sequence length at 2 heads that it allows."""
    smaller = [{**LARGEST, "width": n, "seq_len": n, "heads": 2} for n in range(LARGEST["width"] - 1, 1, -1)]
    for values in [LARGEST, *smaller]:
        try:
            EnergyControls.from_values(**values)
        except ValueError:
            continue
        return values
    raise SystemExit(f"no state of the shape {LARGEST} is allowed")


def open_page(browser, url: str):
    """A new session on `url`, loaded, with every chart drawn and quiet, and the probe installed."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url, timeout=TIMEOUT_MS)
    settle(page, timeout=TIMEOUT_MS)
    page.wait_for_selector(f".js-plotly-plot, {ERRORS}", timeout=TIMEOUT_MS)
    check_errors(page, f"on loading {url}")
    page.evaluate(PROBE, QUIET_MS)
    page.wait_for_function("() => window.__bench.loaded()", timeout=TIMEOUT_MS)
    return page


def check_errors(page, when: str) -> None:
    boxes = page.locator(ERRORS)
    if boxes.count():
        raise RuntimeError(f"the page shows an error {when}: {boxes.first.inner_text()}")


def timed(page, key: str, act) -> tuple[float, float]:
    """(re-rendered, settled) in ms of one change: `act()` presses `key`, the timing starts at its keydown."""
    page.evaluate("key => window.__bench.arm(key)", key)
    act()
    page.wait_for_function(f"() => window.__bench.ready() || !!document.querySelector({ERRORS!r})", timeout=TIMEOUT_MS)
    check_errors(page, f"after {key}")
    result = page.evaluate("() => window.__bench.result()")
    if not result["final"]:
        raise RuntimeError(f"the energy plot changed again after its first change ({key}): re-rendered is not final")
    return result["rerender"], result["settled"]


def fresh_count(repeats: int) -> int:
    """How many of a control's `repeats` changes go to fresh values (uncached): half, rounded up."""
    return (repeats + 1) // 2


def slider_moves(page, label: str, repeats: int) -> list[tuple[str, str]]:
    """(arrow key, kind) of each change: a walk of fresh positions towards the slider's farther end, then
    back and forth between the last two positions."""
    thumb = page.get_by_role("slider", name=label)
    low, high, step = (float(thumb.get_attribute(a)) for a in ("min", "max", "step"))
    value = float(thumb.input_value())
    right, left = round((high - value) / step), round((value - low) / step)
    forward, back = ("ArrowRight", "ArrowLeft") if right >= left else ("ArrowLeft", "ArrowRight")
    fresh = min(fresh_count(repeats), max(right, left))
    return [(forward, "uncached")] * fresh + [(back if i % 2 == 0 else forward, "cached")
                                              for i in range(repeats - fresh)]


def measure_slider(page, label: str, repeats: int) -> dict[str, list[tuple[float, float]]]:
    thumb = page.get_by_role("slider", name=label)
    times = {"uncached": [], "cached": []}
    for key, kind in slider_moves(page, label, repeats):
        thumb.focus()
        times[kind].append(timed(page, key, lambda: page.keyboard.press(key)))
    return times


def measure_number(page, label: str, repeats: int) -> dict[str, list[tuple[float, float]]]:
    """Values typed and entered: fresh ones counting up from the current value, then back and forth between
    the last two."""
    box = page.get_by_label(label, exact=True)
    start, fresh = int(box.input_value()), fresh_count(repeats)
    shown = [start + i for i in range(fresh + 1)]                 # the value at load, then the fresh ones
    moves = [(v, "uncached") for v in shown[1:]] + [(shown[-2 + i % 2], "cached") for i in range(repeats - fresh)]
    times = {"uncached": [], "cached": []}
    for value, kind in moves:
        box.fill(str(value))
        times[kind].append(timed(page, "Enter", lambda: box.press("Enter")))
    return times


CONTROLS = (("steps T", measure_slider), ("step size eta", measure_slider), ("seed", measure_number))


def measure_state(browser, url: str, state: str, repeats: int) -> list[Row]:
    rows = []
    for label, measure in CONTROLS:
        start = time.perf_counter()
        page = open_page(browser, url)                  # a fresh session: every control starts from the link
        for kind, pairs in measure(page, label, repeats).items():
            if pairs:
                rows.append(Row(state, label, kind, [p[0] for p in pairs], [p[1] for p in pairs]))
        page.close()
        print(f"  measured {state}: {label} ({time.perf_counter() - start:.0f} s)", flush=True)
    return rows


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):7.0f} [{min(xs):.0f}, {max(xs):.0f}]"


def verdict(row: Row) -> str:
    which, limit = TARGETS[row.state]
    label = "re-render" if which == "rerender" else "settled"
    return f"{label} <= {limit} ms: {'PASS' if statistics.median(getattr(row, which)) <= limit else 'MISS'}"


def report(rows: list[Row], repeats: int) -> None:
    print(f"\nenergy page in headless Chromium 1280x720, {repeats} changes per control, ms from the "
          "keydown (median [min, max]):")
    print(f"{'state':<9} {'control':<14} {'kind':<9} {'n':>2}  {'re-rendered':<22} {'settled':<22} target")
    for r in rows:
        print(f"{r.state:<9} {r.control:<14} {r.kind:<9} {len(r.rerender):>2}  {spread(r.rerender):<22} "
              f"{spread(r.settled):<22} {verdict(r)}")
    print("targets: <= 250 ms median to re-render at the defaults, <= 2 s median settled at the largest allowed state")


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error("--repeats must be at least 2: one uncached and one cached change per control")
    largest = largest_state()
    cost = EnergyControls.from_values(**largest).cost()
    print(f"cores: {os.cpu_count()}, load average (1, 5, 15 min) before: {load()}")
    print(f"largest allowed state: {largest} (cost {cost:.2e} of COST_LIMIT {COST_LIMIT:.0e})", flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with serve_app(env) as server, chromium() as browser:
        try:
            query = "&".join(f"{k}={v}" for k, v in largest.items())
            rows = (measure_state(browser, f"{server.url}/", "defaults", args.repeats)
                    + measure_state(browser, f"{server.url}/?{query}", "largest", args.repeats))
        except Exception:
            print(f"server log (last 3000 characters):\n{server.log()[-3000:]}", file=sys.stderr)
            raise
    report(rows, args.repeats)
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
