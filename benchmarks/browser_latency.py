"""Latency of the energy page as a person sees it: `streamlit run app.py` and Debian's headless Chromium
(1280 x 720, through Playwright and tests/appdriver.py), timing each control change from the key press
to the new plot on the screen, and the step playback's frames.

    .venv/bin/python benchmarks/browser_latency.py [--repeats 10] [--only changes|playback]

Two states: the defaults (/) and the largest allowed one (width 128, sequence 128, a block, per-head
D+LR, T 16, or the largest width = sequence length at 2 heads that COST_LIMIT allows). In each, every
control starts from a fresh session on the link and makes --repeats changes: the sliders "steps T" and
"step size eta" one arrow key press each, the number input "seed" a value typed and entered. The first
half (rounded up) go to values this server has not computed before, "uncached" (misses of the page's cache):
a walk of slider positions towards the slider's farther end, or the next seeds. The rest go back and
forth between the last two values, "cached" (only the figures are rebuilt and sent). At the largest
state T walks down from 16, so its uncached renders are cheaper than a T = 16 one; the seeds are the
honest uncached changes there.

The page's charts are the plots of its step playback: one custom-component iframe per phase
(iframe[src*='cem_playback'], same origin), each holding a div per plot (energy, norm, landscape,
heatmap) in its #grid. Each change is timed in the page with performance.now(): it starts when the keydown
(the arrow, or the Enter that commits the number) reaches the window, once every playback has
pre-rendered its heatmap's steps (no work of the previous change left); MutationObservers on the main
document and on the document of every playback iframe (attached as iframes appear, and again when one
loads its document) read the plots' data after every DOM change (at the end of the task that changed it,
before that frame is painted, so paint adds up to one frame; reading costs the page about 1 % of a
change). "re-rendered" ends when the first chart (the energy plot of the first phase) is drawn with data
that differ from those before the key press (it must be their final value); "settled" ends at the later
of the script finishing (stApp's data-test-script-state back to notRunning) and the last change of any
chart, once every chart is drawn again (as many as before) and 0.3 s have passed without a change.

"playback": the step playback runs in the browser alone. At the defaults with T = 16 (/?T=16) and at the
largest state (T 16), a fresh page is loaded until every playback has pre-rendered its heatmap's steps;
then, in each phase's iframe, "apply" shows the steps one at a time (awaiting each: t = 0..T and back
down to 0, --repeats rounds), and "keys" focuses the scrubber (#scrub) and presses ArrowRight T times
and ArrowLeft T times, each press waited for until its step is painted. A frame is the playback's own
time (window.playback.frameTimes): from the input to the painted step. The websocket frames the page
sends meanwhile are counted: scrubbing must need no server round trip (0).

"held": a held arrow key on "step size eta" at the defaults, 30 presses 33 ms apart (a key's auto-repeat),
timed from the last press's keydown to settled; no press may be lost (the URL must hold the value they all
make). It is compared with one press's settled time in the same run: at most one rerun behind the last
input means at most about twice that (the run in flight, then the last one).

"inside" (``--only inside``): the page Inside a trained model on its defaults (/inside: gp-cem-T8 on one function, T
= 8), its "test-time T" slider and "function seed" typed, timed as above (charts[0] is its curve); and its step
playback at T = 32 (/inside?in_gp_T=32). Target: at most 1 s median to re-render (it reads a trained checkpoint
through all its steps); every playback frame at most 50 ms.

"--load N" runs N busy processes (a Python loop each) beside the server and the browser for the whole
benchmark: the page as it behaves on a machine that is doing other work.

Targets: at most 250 ms median to re-render at the defaults, at most 2 s median settled at the largest
allowed state, every playback frame at most 50 ms (the max) with 0 websocket frames sent. Prints median
[min, max] per state, control and kind, median and max per playback row, PASS or MISS per row, and the
cores and load average before and after: the numbers are only as quiet as the machine. About 5 minutes
at --repeats 10 on 2 busy cores.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
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
TARGETS = {"defaults": ("rerender", 250), "largest": ("settled", 2000), "inside": ("rerender", 1000)}
INSIDE = "/inside"        # the page "Inside a trained model" on its defaults (gp-cem-T8, T = 8)
PLAYBACK = "iframe[src*='cem_playback']"      # a phase's step playback (app_pages/playback/), same origin
FRAME_MS = 50             # the longest a playback frame may take
# A playback that has drawn a state and pre-rendered its heatmap's steps (or has no heatmap): run in its iframe
# (the probe's `idle` is the same test).
PLAYBACK_IDLE = ("() => !!document.body && !!document.body.dataset.version && "
                 "(!document.querySelector('[data-name=heatmap]') || document.body.dataset.images === 'ready')")

# Installed in the page once it has loaded: window.__bench.arm(key) before a key press, window.__bench.ready()
# polled until the change has settled, then window.__bench.result() gives the times since the keydown.
PROBE = """({quietMs, frames}) => {
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
  const options = {subtree: true, childList: true, attributes: true, characterData: true};
  const watched = new WeakSet();             // the iframes and documents observed so far
  const docs = () => Array.from(document.querySelectorAll(frames), f => f.contentDocument).filter(Boolean);
  const watch = () => {                      // observe every playback iframe's document, as they appear
    for (const f of document.querySelectorAll(frames)) {
      if (!watched.has(f)) {
        watched.add(f);
        f.addEventListener('load', look);      // its document is replaced when it loads
      }
      const doc = f.contentDocument;
      if (doc && !watched.has(doc)) {
        watched.add(doc);
        new MutationObserver(look).observe(doc, options);
      }
    }
  };
  function look() {                          // the plots of every phase, in the page's order: charts[0] is energy
    watch();
    const now = performance.now();
    const charts = docs().flatMap(doc => Array.from(doc.querySelectorAll('#grid > .plot'), signature));
    const all = charts.join('|');
    if (all !== b.all) Object.assign(b, {all, charts, changed: now});
    if (b.start !== null && b.render === null && charts[0] && charts[0] !== b.first) {
      b.render = now;
      b.shown = charts[0];
    }
  }
  new MutationObserver(look).observe(document.body, options);
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
  const idle = doc => !!doc.body && !!doc.body.dataset.version &&
    (!doc.querySelector('[data-name=heatmap]') || doc.body.dataset.images === 'ready');
  const pending = () => docs().some(doc => !idle(doc));    // a playback not drawn, or its heatmap pre-rendering
  look();
  window.__bench = {
    arm: key => {
      look();
      // (armed while a run goes, as in a held key's last press, the script has already left notRunning)
      Object.assign(b, {key, start: null, first: b.charts[0], count: b.charts.length, render: null,
                        left: app.getAttribute('data-test-script-state') !== 'notRunning', done: null});
    },
    idle: () => { look(); return !pending(); },
    rendered: () => { look(); return b.render !== null; },
    charts: () => { look(); return b.charts.length; },
    state: () => ({render: b.render, done: b.done, left: b.left, count: b.count, charts: b.charts.length,
                   drawn: drawn(), quiet: quiet(), start: b.start}),    // what ready() waits for, when it times out
    expect: n => { b.count = n; },          // the charts to wait for (armed while a playback is being rebuilt)
    loaded: () => {
      look();
      return app.getAttribute('data-test-script-state') === 'notRunning' && drawn() && quiet() && !pending();
    },
    ready: () => { look(); return b.render !== null && b.done !== null && b.charts.length === b.count && drawn()
                                  && quiet(); },
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
    stopwatch: list[float]


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
    page.wait_for_selector(f"{PLAYBACK}, {ERRORS}", timeout=TIMEOUT_MS)
    check_errors(page, f"on loading {url}")
    page.evaluate(PROBE, {"quietMs": QUIET_MS, "frames": PLAYBACK})
    page.wait_for_function("() => window.__bench.loaded()", timeout=TIMEOUT_MS)
    return page


def check_errors(page, when: str) -> None:
    boxes = page.locator(ERRORS)
    if boxes.count():
        raise RuntimeError(f"the page shows an error {when}: {boxes.first.inner_text()}")


def timed(page, key: str, act) -> tuple[float, float, float]:
    """(re-rendered, settled, stopwatch) in ms of one change: `act()` presses `key`, the timing starts at its
    keydown (once the playbacks have pre-rendered the last change's heatmap steps). The stopwatch is the driver's
    own clock, from before it sends the key press to when it sees the new plot (polling every animation frame):
    what a person with a stopwatch would measure, the input's and the observer's delays included."""
    page.wait_for_function("() => window.__bench.idle()", timeout=TIMEOUT_MS)
    page.evaluate("key => window.__bench.arm(key)", key)
    start = time.perf_counter()
    act()
    page.wait_for_function(f"() => window.__bench.rendered() || !!document.querySelector({ERRORS!r})",
                           timeout=TIMEOUT_MS)
    stopwatch = (time.perf_counter() - start) * 1000
    page.wait_for_function(f"() => window.__bench.ready() || !!document.querySelector({ERRORS!r})", timeout=TIMEOUT_MS)
    check_errors(page, f"after {key}")
    result = page.evaluate("() => window.__bench.result()")
    if not result["final"]:
        raise RuntimeError(f"the energy plot changed again after its first change ({key}): re-rendered is not final")
    return result["rerender"], result["settled"], stopwatch


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


def measure_slider(page, label: str, repeats: int) -> dict[str, list[tuple[float, float, float]]]:
    thumb = page.get_by_role("slider", name=label)
    times = {"uncached": [], "cached": []}
    for key, kind in slider_moves(page, label, repeats):
        thumb.focus()
        times[kind].append(timed(page, key, lambda: page.keyboard.press(key)))
    return times


def measure_number(page, label: str, repeats: int) -> dict[str, list[tuple[float, float, float]]]:
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
INSIDE_CONTROLS = (("test-time T", measure_slider), ("function seed", measure_number))


def measure_state(browser, url: str, state: str, repeats: int, controls=CONTROLS) -> list[Row]:
    rows = []
    for label, measure in controls:
        start = time.perf_counter()
        page = open_page(browser, url)                  # a fresh session: every control starts from the link
        for kind, pairs in measure(page, label, repeats).items():
            if pairs:
                rows.append(Row(state, label, kind, *([p[i] for p in pairs] for i in range(3))))
        page.close()
        print(f"  measured {state}: {label} ({time.perf_counter() - start:.0f} s)", flush=True)
    return rows


@dataclass
class Playback:
    state: str
    phase: int
    drive: str            # "apply" (awaited in the iframe) or "keys" (arrow presses on the scrubber)
    frames: list[float]   # ms from the input to the painted step, one per step shown
    sent: int             # websocket frames the page sent meanwhile


class Sent:
    """Counts the websocket frames a page sends (attached before it loads)."""

    def __init__(self, page):
        self.count = 0
        page.on("websocket", lambda ws: ws.on("framesent", self.add))

    def add(self, _payload) -> None:
        self.count += 1


def open_playback(browser, url: str):
    """A new session on `url`, with its websocket frames counted, once every phase's playback has drawn a state
    and pre-rendered its heatmap's steps. Returns the page, the counter and the playbacks' frames."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(TIMEOUT_MS)
    sent = Sent(page)
    page.goto(url, timeout=TIMEOUT_MS)
    settle(page, timeout=TIMEOUT_MS)
    page.wait_for_selector(f"{PLAYBACK}, {ERRORS}", timeout=TIMEOUT_MS)
    check_errors(page, f"on loading {url}")
    frames = [page.locator(PLAYBACK).nth(i).element_handle().content_frame()
              for i in range(page.locator(PLAYBACK).count())]
    for frame in frames:
        frame.wait_for_function(PLAYBACK_IDLE, timeout=TIMEOUT_MS)
    settle(page, timeout=TIMEOUT_MS)
    return page, sent, frames


def frame_times(frame, since: int) -> list[float]:
    return frame.evaluate("n => window.playback.frameTimes.slice(n)", since)


def applied(frame, rounds: int) -> list[float]:
    """Frame times of `rounds` rounds of apply(t), awaited one at a time, for t = 0..T and back down to 0."""
    since = frame.evaluate("() => window.playback.frameTimes.length")
    frame.evaluate("""async rounds => {
        const steps = Number(document.getElementById('scrub').max);
        const walk = [...Array(steps + 1).keys(), ...Array.from({length: steps}, (_, i) => steps - 1 - i)];
        for (let r = 0; r < rounds; r++) for (const t of walk) await apply(t);
    }""", rounds)
    return frame_times(frame, since)


def pressed(frame) -> list[float]:
    """Frame times of the scrubber (#scrub) focused and ArrowRight pressed T times from step 0, then ArrowLeft T
    times, each press waited for until its step is shown and painted."""
    frame.evaluate("() => apply(0)")
    steps = int(frame.evaluate("() => document.getElementById('scrub').max"))
    since = frame.evaluate("() => window.playback.frameTimes.length")
    frame.focus("#scrub")
    moves = [("ArrowRight", t) for t in range(1, steps + 1)] + [("ArrowLeft", t) for t in reversed(range(steps))]
    for key, t in moves:
        painted = frame.evaluate("() => window.playback.frameTimes.length")
        frame.press("#scrub", key)
        frame.wait_for_function("([t, n]) => document.body.dataset.step === String(t) && "
                                "window.playback.frameTimes.length > n", arg=[t, painted], timeout=TIMEOUT_MS)
    return frame_times(frame, since)


def measure_playback(browser, url: str, state: str, rounds: int) -> list[Playback]:
    """Each phase's playback on a fresh page: `rounds` rounds of apply, then a run of arrow keys."""
    start = time.perf_counter()
    page, sent, frames = open_playback(browser, url)
    rows = []
    for phase, frame in enumerate(frames, 1):
        for drive, run in (("apply", lambda: applied(frame, rounds)), ("keys", lambda: pressed(frame))):
            before = sent.count
            times = run()
            rows.append(Playback(state, phase, drive, times, sent.count - before))
    check_errors(page, "after the playback")
    page.close()
    print(f"  measured {state}: playback ({time.perf_counter() - start:.0f} s)", flush=True)
    return rows


HELD_PRESSES, HELD_GAP_MS = 30, 33     # a held arrow key: about 30 presses a second, a typical key repeat rate


def measure_held(browser, url: str, repeats: int) -> list[float]:
    """A held arrow key on "step size eta": HELD_PRESSES presses HELD_GAP_MS apart, alternately right and left,
    each round from a quiet page. The time runs from the last press's keydown to the page settled (as
    "settled" above); the URL must then hold the value all the presses make (none lost)."""
    page = open_page(browser, url)
    thumb = page.get_by_role("slider", name="step size eta")
    step, times = float(thumb.get_attribute("step")), []
    charts = page.evaluate("() => window.__bench.charts()")              # drawn, quiet: all of them
    for round_ in range(repeats):
        page.wait_for_function("() => window.__bench.idle()", timeout=TIMEOUT_MS)
        key, sign = ("ArrowRight", 1) if round_ % 2 == 0 else ("ArrowLeft", -1)
        target = round(float(thumb.input_value()) + sign * step * HELD_PRESSES, 6)
        thumb.focus()
        for _ in range(HELD_PRESSES - 1):
            page.keyboard.press(key)
            page.wait_for_timeout(HELD_GAP_MS)
        page.evaluate("([key, n]) => { window.__bench.arm(key); window.__bench.expect(n); }", [key, charts])
        page.keyboard.press(key)
        try:
            page.wait_for_function("() => window.__bench.ready()", timeout=TIMEOUT_MS)
        except Exception as err:
            raise RuntimeError(f"a held key's page never settled: {page.evaluate('() => window.__bench.state()')}") \
                from err
        check_errors(page, "after a held key")
        shown = float(dict(p.split("=") for p in page.url.split("?")[1].split("&"))["eta"])
        if abs(shown - target) > step / 2:
            raise RuntimeError(f"a held key lost presses: eta {shown} in the URL, {target} expected")
        times.append(page.evaluate("() => window.__bench.result()")["settled"])
    page.close()
    return times


def report_held(times: list[float], rows: list[Row]) -> None:
    one = next((r for r in rows if (r.state, r.control, r.kind) == ("defaults", "step size eta", "uncached")), None)
    print(f"\nheld key on step size eta at the defaults ({HELD_PRESSES} presses {HELD_GAP_MS} ms apart, "
          f"{len(times)} rounds), ms from the last keydown to settled: {spread(times)}")
    if one is not None:
        ratio = statistics.median(times) / statistics.median(one.settled)
        print(f"  against one press settled ({spread(one.settled)}): {ratio:.2f}x; target <= 2x (at most one rerun "
              f"behind: the run in flight, then the last): {'PASS' if ratio <= 2 else 'MISS'}")


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):7.0f} [{min(xs):.0f}, {max(xs):.0f}]"


def verdict(row: Row) -> str:
    which, limit = TARGETS[row.state]
    label = "re-render" if which == "rerender" else "settled"
    return f"{label} <= {limit} ms: {'PASS' if statistics.median(getattr(row, which)) <= limit else 'MISS'}"


def report(rows: list[Row], repeats: int) -> None:
    print(f"\nthe energy page (defaults, largest) and Inside a trained model (inside) in headless Chromium 1280x720, "
          f"{repeats} changes per control, ms from the keydown (median [min, max]):")
    print(f"{'state':<9} {'control':<14} {'kind':<9} {'n':>2}  {'re-rendered':<22} {'settled':<22} "
          f"{'stopwatch':<22} target")
    for r in rows:
        print(f"{r.state:<9} {r.control:<14} {r.kind:<9} {len(r.rerender):>2}  {spread(r.rerender):<22} "
              f"{spread(r.settled):<22} {spread(r.stopwatch):<22} {verdict(r)}")
    print("targets: <= 250 ms median to re-render at the defaults, <= 2 s median settled at the largest allowed state, "
          "<= 1 s median to re-render on Inside a trained model")


def report_playback(rows: list[Playback], rounds: int) -> None:
    print(f"\nstep playback in the browser (apply: {rounds} rounds of t = 0..T..0; keys: the scrubber's arrows, T "
          "each way), ms from the input to the painted step:")
    print(f"{'state':<9} {'phase':>5} {'drive':<6} {'n':>3}  {'median':>7} {'max':>7}  {'ws sent':>7}  target")
    for r in rows:
        ok = max(r.frames) <= FRAME_MS and r.sent == 0
        print(f"{r.state:<9} {r.phase:>5} {r.drive:<6} {len(r.frames):>3}  {statistics.median(r.frames):7.1f} "
              f"{max(r.frames):7.1f}  {r.sent:>7}  max <= {FRAME_MS} ms, 0 sent: {'PASS' if ok else 'MISS'}")
    print(f"target: every frame <= {FRAME_MS} ms, and no websocket frame sent while scrubbing")


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--load", type=int, default=0, help="busy processes to run beside it (default 0)")
    parser.add_argument("--only", choices=("changes", "playback", "inside"), default=None,
                        help="only the energy page's control changes, only its step playback, or only the page "
                             "Inside a trained model (its control changes and playback) (default: all)")
    args = parser.parse_args()
    if args.repeats < 2 and args.only != "playback":
        parser.error("--repeats must be at least 2: one uncached and one cached change per control")
    largest = largest_state()
    cost = EnergyControls.from_values(**largest).cost()
    print(f"cores: {os.cpu_count()}, load average (1, 5, 15 min) before: {load()}")
    print(f"largest allowed state: {largest} (cost {cost:.2e} of COST_LIMIT {COST_LIMIT:.0e})", flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    print(f"busy processes beside it: {args.load}", flush=True)
    try:
        run(args, env, largest)
    finally:
        for proc in busy:
            proc.kill()
    print(f"load average after: {load()}")


def run(args, env: dict, largest: dict) -> None:
    rows, playbacks, held = [], [], []
    with serve_app(env) as server, chromium() as browser:
        try:
            query = "&".join(f"{k}={v}" for k, v in largest.items())
            if args.only in (None, "inside"):
                rows += measure_state(browser, f"{server.url}{INSIDE}", "inside", args.repeats, INSIDE_CONTROLS)
                playbacks += measure_playback(browser, f"{server.url}{INSIDE}?in_gp_T=32", "inside", args.repeats)
            if args.only in (None, "changes"):
                rows += (measure_state(browser, f"{server.url}/", "defaults", args.repeats)
                         + measure_state(browser, f"{server.url}/?{query}", "largest", args.repeats))
                held = measure_held(browser, f"{server.url}/", max(2, args.repeats // 2))
            if args.only in (None, "playback"):
                playbacks += (measure_playback(browser, f"{server.url}/?T=16", "defaults", args.repeats)
                              + measure_playback(browser, f"{server.url}/?{query}", "largest", args.repeats))
        except Exception:
            print(f"server log (last 3000 characters):\n{server.log()[-3000:]}", file=sys.stderr)
            raise
    if rows:
        report(rows, args.repeats)
    if held:
        report_held(held, rows)
    if playbacks:
        report_playback(playbacks, args.repeats)


if __name__ == "__main__":
    main()
