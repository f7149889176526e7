"""Driving the app in a real browser: `streamlit run app.py` on a free local port and Debian's headless
Chromium through Playwright (never a downloaded browser). Used by the browser tests and by
`benchmarks/browser_latency.py`."""
from __future__ import annotations

import contextlib
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


def settle(page, timeout: float = 60000) -> None:
    """Wait until the page's script has finished running (Streamlit marks its root element), with a
    title drawn."""
    page.wait_for_selector("h1", timeout=timeout)
    page.wait_for_timeout(150)                      # a rerun that has been asked for starts within this
    page.wait_for_selector(SETTLED, timeout=timeout)
