"""A real browser: `streamlit run app.py` on a free local port, driven by headless Chromium
(Debian's package) through Playwright (tests/appdriver.py). Screenshots of every page go to the
test's tmp_path. The journeys of a whole session are in tests/test_journeys.py.

Without Chromium the test is skipped with a loud warning (see conftest.py); in CI
(CEM_LAB_CI=1, set by .ci/run) a missing browser fails the suite instead.
"""
import pytest
from appdriver import (
    CHROMIUM,
    choose,
    chromium,
    click_radio,
    errors,
    playback,
    selected,
    serve_app,
    settle,
    traces,
    version,
)
from conftest import child_env, require_system_package

from cem_core.ui.pages import APP_PAGES

pytestmark = pytest.mark.slow          # a real Chromium against a real Streamlit server
PAGES = {p.key: p.path for p in APP_PAGES}
TITLES = {p.key: p.title for p in APP_PAGES}

require_system_package(CHROMIUM is not None, "the browser test", "chromium", module_level=True)


@pytest.fixture(scope="module")
def server():
    with serve_app(child_env()) as running:
        yield running.url


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def _open(browser, url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    settle(page)
    return page


def _first_plot_x(page, version=None):
    """The x values of the first trace of the energy plot (in the page's playback), once a state other than
    `version` is drawn."""
    return traces(playback(page, version=version), "energy")[0]["x"]


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
    before, old = _first_plot_x(page), version(playback(page))
    slider = page.get_by_role("slider", name="steps T")
    slider.focus()
    page.keyboard.press("ArrowRight")                                   # T: 4 -> 5
    after = _first_plot_x(page, old)
    assert len(after) == len(before) + 1 and after != before
    assert "T=5" in page.url
    page.screenshot(path=tmp_path / "energy-T5.png", full_page=True)
    page.close()


def test_choosing_the_activation_changes_the_mlp_energy(server, browser, tmp_path):
    """The activation control (MLP and block layers only) reaches the layer: gelu's energies differ from silu's,
    and the link records the choice."""
    page = _open(browser, f"{server}/?layer=mlp&T=4")
    before = traces(playback(page), "energy")[0]["y"]
    old = version(playback(page))
    assert selected(page, "activation φ") == "silu"
    choose(page, "activation φ", "gelu")
    after = traces(playback(page, version=old), "energy")[0]["y"]
    assert len(after) == len(before) and after != before
    assert "activation=gelu" in page.url and not errors(page)
    page.screenshot(path=tmp_path / "energy-gelu.png", full_page=True)
    click_radio(page, "CEM attention")                                  # attention alone has no activation
    page.get_by_text("activation φ").first.wait_for(state="detached", timeout=60000)
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


def test_a_links_values_are_shown_as_plain_text(server, browser, tmp_path):
    """A URL's values went into Markdown: bold, a clickable link and an image the browser fetched from
    another address. They are now shown as the characters they are (the lesson's value: tests/test_app.py)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    elsewhere = []
    page.on("request", lambda request: elsewhere.append(request.url) if request.url.startswith("http://127.0.0.1:9/")
            else None)
    for k, query in enumerate(["lm?lm_data=![img](http://127.0.0.1:9/pixel.png)",
                               "?layer=**bold** [a link](http://127.0.0.1:9/) $x^2$ http://127.0.0.1:9/auto"]):
        page.goto(f"{server}/{query}")
        settle(page)
        alert = page.locator("[data-testid='stAlertContentError']").first
        alert.wait_for(timeout=60000)
        value = query.split("=", 1)[1]
        assert value in alert.inner_text().replace("\u2060", "")     # word joiners keep addresses from autolinking
        assert alert.locator("img, a, strong, em, .katex").count() == 0, alert.inner_html()
        assert page.locator("[data-testid='stException']").count() == 0
        page.screenshot(path=tmp_path / f"plain-{k}.png", full_page=True)
    assert not elsewhere
    page.close()



def _camera(page, where, tmp_path) -> str:
    """Hover over the first chart in `where` (the page or a frame of it), click its toolbar's camera, and return the
    name of the PNG that arrives (checked to be a PNG)."""
    chart = where.locator(".js-plotly-plot").first
    chart.scroll_into_view_if_needed()
    chart.hover()
    with page.expect_download(timeout=30000) as download:
        chart.locator(".modebar-btn[data-title='Download plot as a PNG']").click()
    path = tmp_path / download.value.suggested_filename
    download.value.save_as(path)
    assert path.read_bytes().startswith(b"\x89PNG"), path
    return download.value.suggested_filename


def test_a_charts_png_is_plotlys_own_download_named_after_the_chart(server, browser, tmp_path):
    """The PNG of a chart is the camera in the chart's own toolbar (app_pages/common.chart_config), drawn by the
    browser as the reader sees it. On the GP page a person hovers over a chart and clicks the camera, and a PNG
    named after the chart arrives; on the energy page a playback chart's camera gives a PNG named after its plot.
    The page points to the camera where the server's PNG button was."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page.goto(f"{server}/{PAGES['gp']}")
    settle(page)
    assert page.get_by_text("PNG: the chart's camera icon").count()
    labels = [text.split()[-1] for text in page.locator("button").all_inner_texts() if text.strip()]
    assert "CSV" in labels and "PNG" not in labels, labels
    assert _camera(page, page, tmp_path) == "gp-ratio-vs-t.png"
    page.goto(f"{server}/{PAGES['energy']}")
    settle(page)
    assert _camera(page, playback(page), tmp_path) == "cem-energy.png"
