"""Driving the app in a real browser: `streamlit run app.py` on a free local port and Debian's headless
Chromium through Playwright (never a downloaded browser). Used by the browser tests and by
`benchmarks/browser_latency.py`."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SETTLED = "[data-testid='stApp'][data-test-script-state='notRunning']"
# Page probes for page.evaluate: the boxes of the elements a selector finds, and every plot text with its size.
INSIDE = """(selector) => Array.from(document.querySelectorAll(selector)).map(e => {
    const r = e.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, scroll: e.scrollWidth, width: e.clientWidth};
})"""
PLOT_TEXT = """() => Array.from(document.querySelectorAll('.js-plotly-plot .main-svg text'))
    .filter(t => t.textContent.trim()).map(t => [t.textContent, parseFloat(getComputedStyle(t).fontSize)])"""


class Server:
    """A running app: its URL and its log (stdout and stderr together, read so far)."""

    def __init__(self, proc: subprocess.Popen, url: str, log: Path):
        self.proc, self.url, self.log_path = proc, url, log

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def serve_app(env: dict, timeout: float = 90):
    """The app served on 127.0.0.1 at a free port, with `env`; stopped on exit."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path(tempfile.mkdtemp(prefix="cem-app-")) / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                                 "--server.headless", "true", "--server.address", "127.0.0.1"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    try:
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"streamlit did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.5)
        yield Server(proc, url, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def chromium():
    """Debian's Chromium, headless, through Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def shots(tmp_path) -> Path:
    """Where a test's screenshots go: CEM_LAB_SCREENSHOTS when set (docs/screenshots is made so), else its
    tmp_path."""
    folder = Path(os.environ.get("CEM_LAB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def settle(page, timeout: float = 60000) -> None:
    """Wait until the page's script has finished running (Streamlit marks its root element), with a
    title drawn (or, in lesson and presentation modes, which have none, the page's first element)."""
    page.wait_for_selector("h1, .st-key-lesson-bar, [data-testid='stMainBlockContainer'] [data-testid='stSlider']",
                           timeout=timeout)
    page.wait_for_timeout(150)                      # a rerun that has been asked for starts within this
    page.wait_for_selector(SETTLED, timeout=timeout)


# -- controls, the way a person moves them ------------------------------------------------------------
# Every control of the app is mirrored in the URL, so a change has reached the server (a slider sends its
# value only after a short pause) once the URL has changed and the page has settled.


def committed(page, before: str, timeout: float = 20000) -> None:
    """Wait until the page's URL is no longer `before` (the server has the change), then until it settles."""
    page.wait_for_function("u => window.location.href !== u", arg=before, timeout=timeout)
    settle(page)


def slider(page, label: str):
    """The range input (the thumb) of the slider labelled `label`."""
    return page.locator(f"input[type='range'][aria-label='{label}']")


def slider_value(page, label: str) -> float:
    return float(slider(page, label).input_value())


def set_slider(page, label: str, value: float, step: float) -> None:
    """Move a slider with the keyboard, as a person without a mouse does: Home or End for its ends, else
    arrow presses from where it is, each one waited for. (Keys pressed faster than the app reruns interrupt
    its runs, and Streamlit can then show other widgets at their minimum and send that back:
    streamlit#4247, #4836.)"""
    thumb = slider(page, label)
    for _ in range(3):
        now = slider_value(page, label)
        if abs(now - value) < step / 2:
            return
        ends = {float(thumb.get_attribute("max")): "End", float(thumb.get_attribute("min")): "Home"}
        keys = [ends[value]] if value in ends else \
            ["ArrowRight" if value > now else "ArrowLeft"] * round(abs(value - now) / step)
        for key in keys:
            before = page.url
            thumb.focus()
            page.keyboard.press(key)
            committed(page, before)
    raise AssertionError(f"slider {label!r} is at {slider_value(page, label)}, not {value}")


def choose(page, label: str, option: str) -> None:
    """Pick `option` in the select box labelled `label`."""
    if selected(page, label) == option:
        return
    box, before = page.locator(f"[data-testid='stSelectbox'] input[aria-label='{label}']"), page.url
    box.click()
    box.fill(option)                                                   # the list filters as one types
    page.get_by_role("option", name=option, exact=True).click()
    committed(page, before)
    assert selected(page, label) == option, (label, selected(page, label), option)


def selected(page, label: str) -> str:
    return page.locator(f"[data-testid='stSelectbox'] input[aria-label='{label}']").input_value()


def type_number(page, label: str, value) -> None:
    """Type a value into the number input labelled `label` and press Enter."""
    box, before = page.get_by_label(label, exact=True), page.url
    if box.input_value() == str(value):
        return
    box.fill(str(value))
    box.press("Enter")
    committed(page, before)


def click_radio(page, option: str) -> None:
    before = page.url
    if page.get_by_role("radio", name=option, exact=True).is_checked():
        return
    page.locator("[data-testid='stRadio'] label").filter(has_text=option).click()
    committed(page, before)


def go_to(page, title: str) -> None:
    """Follow the sidebar's link to a page, as a person moves around the app."""
    page.locator("[data-testid='stSidebarNav'] a").filter(has_text=title).click()
    page.get_by_role("heading", name=title).first.wait_for(timeout=60000)
    settle(page)


def errors(page) -> list[str]:
    """The texts of every exception and error box on the page."""
    boxes = page.locator("[data-testid='stException'], [data-testid='stAlertContentError']")
    return [boxes.nth(i).inner_text() for i in range(boxes.count())]


def notes(page) -> list[str]:
    """The texts of the page's info and warning boxes."""
    boxes = page.locator("[data-testid='stAlertContentInfo'], [data-testid='stAlertContentWarning']")
    return [boxes.nth(i).inner_text() for i in range(boxes.count())]


# -- the energy page's step playback (an iframe: app_pages/playback/) ------------------------------------------

PLAYBACK = "iframe[src*='cem_playback']"


def playback(page, index: int = 0, timeout: float = 60000, version: str | None = None):
    """The frame of the energy page's playback (phase `index`), once it has drawn a state (other than
    `version`) and pre-rendered its heatmap's steps. Looked up afresh until then: a page switch replaces the
    iframe, and a frame held from before would never change."""
    ready = ("v => document.body.dataset.version !== undefined && document.body.dataset.version !== v && "
             "(!document.querySelector('[data-name=heatmap]') || document.body.dataset.images === 'ready')")
    deadline = time.time() + timeout / 1000
    while True:
        try:
            handle = page.locator(PLAYBACK).nth(index).element_handle(timeout=1000)
            frame = handle.content_frame() if handle else None
            if frame is not None and frame.evaluate(ready, version):
                return frame
        except Exception:  # noqa: BLE001 - the iframe is being replaced: look again
            if time.time() > deadline:
                raise
        if time.time() > deadline:
            page.screenshot(path="/tmp/timeout.png")
            raise TimeoutError(f"the playback {index} did not draw a new state within {timeout / 1000:.0f} s")
        time.sleep(0.1)


def version(frame) -> str:
    return frame.evaluate("() => document.body.dataset.version")


def traces(frame, plot: str) -> list[dict]:
    """The traces of one playback plot (energy, norm, landscape, heatmap) as the browser holds them."""
    return frame.evaluate("""name => document.querySelector(`[data-name=${name}]`).data.map(t => ({name: t.name,
        meta: t.meta, x: t.x ? Array.from(t.x) : null, y: t.y ? Array.from(t.y) : null}))""", plot)


def marker(frame, plot: str) -> list:
    """Where the plot's step marker is: its x and y."""
    now, = [t for t in traces(frame, plot) if t["meta"] == "now"]
    return [now["x"], now["y"]]
