"""The lecture as a lecturer uses it: `make slides` builds a deck that opens offline and a browser steps
through every slide; `make handout` prints at most four A4 pages with the derivations, the figure, the
exercises and the verdicts; `make notebooks` opens JupyterLab as root; the lecture runs well inside its
time (notebooks/publish.py, notebooks/00_lecture.py)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unicodedata
import urllib.request
from pathlib import Path

import pytest
from conftest import free_port, require_system_package

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
from publish import HANDOUT_PAGES, PublishError, chromium  # noqa: E402

pytestmark = pytest.mark.slow          # builds the deck and the handout, starts a browser, chromium and JupyterLab

CHROMIUM = shutil.which("chromium")
SECTIONS = ["Where this comes from", "1. The causal interaction energy", "2. The tied weights",
            "3. The gated MLP from an element-wise energy", "4. More steps in one layer", "5. What the evidence says",
            "Takeaways"]


def make(target: str, out: Path, **env) -> subprocess.CompletedProcess:
    done = subprocess.run(["make", "-s", target, f"OUT={out}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})
    return done


@pytest.fixture(scope="module")
def deck(tmp_path_factory):
    out = tmp_path_factory.mktemp("slides")
    done = make("slides", out)
    assert done.returncode == 0, done.stderr
    return out / "00_lecture.slides.html"


def test_the_deck_needs_nothing_from_the_network(deck):
    """Every script and style sheet of the deck is a file beside it (reveal.js, MathJax), none a CDN's."""
    html = deck.read_text()
    sources = re.findall(r'<(?:script|link)\b[^>]*\b(?:src|href)="([^"]+)"', html)
    assert sources and not [s for s in sources if re.match(r"(https?:)?//", s)], sources
    for source in sources:
        assert (deck.parent / source.split("?")[0]).is_file(), source
    assert "reveal.js 5" in (deck.parent / "reveal.js/dist/reveal.js").read_text()[:200]


def test_a_browser_steps_through_every_slide_offline(deck, tmp_path):
    """In Chromium with every network request refused: Reveal starts, each press of the space bar (a clicker's
    next) shows the next slide until the last, the section titles come in the lecture's order, the maths is
    typeset (no raw TeX left outside the code), the explorer's figure is drawn, and no slide is wider than
    the screen."""
    require_system_package(CHROMIUM is not None, "the browser test", "chromium")
    from playwright.sync_api import sync_playwright

    refused = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--headless"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.route(re.compile(r"^(?!file:)(?!about:).*"), lambda route: (refused.append(route.request.url),
                                                                         route.abort()))
        page.goto(deck.as_uri())
        page.wait_for_function("() => window.Reveal && Reveal.isReady() && window.MathJax && MathJax.isReady")
        total = page.evaluate("() => Reveal.getTotalSlides()")
        assert total >= 10
        titles, raw_tex, typeset, images = [], [], 0, 0
        page.locator("body").click()
        for k in range(total):
            page.evaluate("() => new Promise(done => MathJax.Hub.Queue(done))")        # typesetting finished
            slide = page.evaluate("""() => { const s = Reveal.getCurrentSlide();
                const prose = s.cloneNode(true);
                prose.querySelectorAll('.jp-InputArea, script').forEach(e => e.remove());
                return {heading: (s.querySelector('h1, h2') || {}).textContent || '', text: prose.textContent,
                        math: s.querySelectorAll('.MathJax').length, wide: s.scrollWidth > s.clientWidth + 2,
                        images: Array.from(s.querySelectorAll('img')).filter(i => i.naturalWidth > 0).length,
                        index: Reveal.getSlidePastCount()}; }""")
            assert slide["index"] == k and not slide["wide"], (k, slide["heading"])
            titles.append(slide["heading"].strip().rstrip("¶"))
            raw_tex += re.findall(r"\$\$|\\nabla|\\sum|\\frac", slide["text"])
            typeset += slide["math"]
            images += slide["images"]
            if k in (0, 2, total - 1):
                page.screenshot(path=str(tmp_path / f"slide-{k:02d}.png"))
            page.keyboard.press("Space")                         # a presenter clicker's "next"
        assert page.evaluate("() => Reveal.isLastSlide()")
        browser.close()
    shown = [t for t in dict.fromkeys(titles) if t]
    assert [s for s in SECTIONS if any(t.startswith(s) for t in shown)] == SECTIONS
    assert [next(i for i, t in enumerate(shown) if t.startswith(s)) for s in SECTIONS] == \
        sorted(next(i for i, t in enumerate(shown) if t.startswith(s)) for s in SECTIONS)
    assert typeset > 20 and not raw_tex and images >= 1
    assert refused == []


def test_make_handout_prints_at_most_four_pages_with_the_lecture_in_them(tmp_path):
    require_system_package(CHROMIUM is not None, "the handout", "chromium")
    from pypdf import PdfReader

    done = make("handout", tmp_path)
    assert done.returncode == 0, done.stderr
    reader = PdfReader(tmp_path / "00_lecture.pdf")
    assert 2 <= len(reader.pages) <= HANDOUT_PAGES
    text = unicodedata.normalize("NFKC", " ".join(page.extract_text() for page in reader.pages))   # ligatures
    for words in ["A transformer layer is gradient descent on an energy", *SECTIONS, "Exercise 1: the first token",
                  "Exercise 2: the parameter count", "proved", "CEM attention costs little perplexity"]:
        assert words in text, words
    assert not re.search(r"\$\$|\\nabla|\\sum|\\frac|W_Q\^", text)       # the maths was typeset, not left as TeX
    assert "def check" not in text and "import" not in text               # outputs only, no code
    size = reader.pages[0].mediabox
    assert abs(float(size.width) - 595) < 2 and abs(float(size.height) - 842) < 2     # A4 in points


def test_without_chromium_the_handout_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-such-browser"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PublishError, match="apt install chromium"):
        chromium()
    done = subprocess.run([sys.executable, str(ROOT / "notebooks" / "publish.py"), "handout", "--out", str(tmp_path)],
                          capture_output=True, text=True, env={**os.environ, "PATH": str(tmp_path),
                                                               "CHROMIUM": "no-such-browser"})
    assert done.returncode == 1 and "apt install chromium" in done.stderr and "Traceback" not in done.stderr


def test_make_notebooks_opens_jupyterlab_as_root_too():
    """As root (containers, lab machines) `make notebooks` passes --allow-root, and JupyterLab answers."""
    port = free_port()
    lab_args = f"--no-browser --port={port} --ServerApp.token= --ServerApp.password="
    dry = subprocess.run(["make", "-n", "notebooks", f"LAB_ARGS={lab_args}"], cwd=ROOT, capture_output=True, text=True)
    assert ("--allow-root" in dry.stdout) == (os.geteuid() == 0)
    server = subprocess.Popen(["make", "-s", "notebooks", f"LAB_ARGS={lab_args}"], cwd=ROOT, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, status = time.monotonic() + 90, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2) as answer:
                    status = answer.status
                    break
            except OSError:
                time.sleep(0.5)
        assert status == 200, server.stderr.read() if server.poll() is not None else "no answer in 90 s"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
