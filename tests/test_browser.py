"""A real browser: `streamlit run app.py` on a free local port, driven by headless Chromium
(Debian's package) through Playwright. Screenshots of every page go to the test's tmp_path.

Without Chromium the test is skipped with a loud warning (see conftest.py); in CI
(CEM_LAB_CI=1, set by .ci/run) a missing browser fails the suite instead.
"""
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import ROOT, child_env, free_port, require_system_package

pytestmark = pytest.mark.slow          # a real Chromium against a real Streamlit server
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGES = {"energy": "", "design": "design", "gp": "gp", "lm": "lm"}
TITLES = {"energy": "Energy descent", "design": "Design space", "gp": "GP recursion", "lm": "Mini language model"}

require_system_package(CHROMIUM is not None, "the browser test", "chromium", module_level=True)

from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def server():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                             "--server.headless", "true", "--server.address", "127.0.0.1"],
                            cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(f"streamlit did not start: {proc.stdout.read().decode()[-2000:]}")
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
                                    "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


def _open(browser, url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    _settle(page)
    return page


def _settle(page):
    """Wait until the script has finished running (Streamlit marks its root element)."""
    page.wait_for_selector("h1", timeout=60000)
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=60000)


def _first_plot_x(page):
    """The x values of the first trace of the first Plotly chart (the energy plot on the energy page)."""
    page.wait_for_selector(".js-plotly-plot", timeout=60000)
    return page.evaluate("() => Array.from(document.querySelector('.js-plotly-plot').data[0].x)")


@pytest.mark.parametrize("name", list(PAGES))
def test_every_page_renders(server, browser, tmp_path, name):
    page = _open(browser, f"{server}/{PAGES[name]}")
    page.get_by_role("heading", name=TITLES[name]).first.wait_for(timeout=60000)
    assert page.locator("[data-testid='stException']").count() == 0
    assert page.locator("[data-testid='stAlertContentError']").count() == 0
    page.screenshot(path=tmp_path / f"{name}.png", full_page=True)
    assert (tmp_path / f"{name}.png").stat().st_size > 10_000
    page.close()


def test_moving_T_changes_the_energy_plot(server, browser, tmp_path):
    page = _open(browser, server)
    before = _first_plot_x(page)
    slider = page.get_by_role("slider", name="steps T")
    slider.focus()
    page.keyboard.press("ArrowRight")                                   # T: 4 -> 5
    page.wait_for_function("() => document.querySelector('.js-plotly-plot').data[0].x.length === %d"
                           % (len(before) + 1), timeout=60000)
    after = _first_plot_x(page)
    assert len(after) == len(before) + 1 and after != before
    assert "T=5" in page.url
    page.screenshot(path=tmp_path / "energy-T5.png", full_page=True)
    page.close()


def test_a_link_restores_the_view(server, browser, tmp_path):
    page = _open(browser, f"{server}/?layer=mlp&T=9&eta=0.5&seed=3")
    slider = page.locator("[data-testid='stSlider']").filter(has_text="steps T")
    thumb = slider.locator("[data-testid='stSliderThumbValue']")
    assert thumb.inner_text() == "9"
    assert page.get_by_role("radio", name="CEM gated MLP").is_checked()
    assert len(_first_plot_x(page)) == 10                               # steps 0..9
    page.screenshot(path=tmp_path / "restored.png", full_page=True)
    page.close()


def test_a_bad_link_shows_an_error_not_a_traceback(server, browser):
    page = _open(browser, f"{server}/?T=banana")
    page.get_by_text("could not be used").first.wait_for(timeout=60000)
    assert page.locator("[data-testid='stException']").count() == 0
    page.close()
