"""The lecture as a lecturer uses it: `make slides` builds a deck that opens offline and a browser steps
through every slide, each inside 1280 x 720 with text of at least 28 px, no code and speaker notes; `make
handout` prints at most four well-filled A4 pages with the derivations, the figure, room for the exercises and
the verdicts, no lecturer-only text; `make notebooks` opens JupyterLab as root (notebooks/publish.py,
notebooks/00_lecture.py). Screenshots of two slides and the handout's first page go to CEM_LAB_SCREENSHOTS
(docs/screenshots) when set."""
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
from publish import HANDOUT_PAGES, TITLE, PublishError, chromium  # noqa: E402

pytestmark = pytest.mark.slow          # builds the deck and the handout, starts a browser, chromium and JupyterLab

CHROMIUM = shutil.which("chromium")
PDFTOPPM = shutil.which("pdftoppm")
SHOWN = {4: "lecture-slide-derivation.png", 9: "lecture-slide-figure.png"}      # slides docs/notebooks.md shows


def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CEM_LAB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
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


SLIDE = """() => { const s = Reveal.getCurrentSlide(); const frame = Reveal.getConfig();
    const prose = s.cloneNode(true);
    prose.querySelectorAll('.jp-InputArea pre, script, aside').forEach(e => e.remove());
    const shown = [...s.querySelectorAll('p, li, td, th, h1, h2, h3, .jp-OutputArea-output')]
        .filter(e => e.closest('aside') === null && e.textContent.trim());
    return {heading: (s.querySelector('h1, h2, h3') || {}).textContent || '', text: prose.textContent,
            math: s.querySelectorAll('.MathJax').length, height: s.scrollHeight, width: s.scrollWidth,
            frame: [frame.width, frame.height],
            small: shown.filter(e => parseFloat(getComputedStyle(e).fontSize) < 28).map(e => e.textContent.slice(0, 9)),
            code: s.querySelectorAll('.jp-CodeCell .jp-InputArea, .jp-CodeMirrorEditor').length,
            notes: ((s.querySelector('aside.notes') || {}).textContent || '').trim(),
            links: [...s.querySelectorAll('a[href^="http"]')].map(a => a.target),
            images: Array.from(s.querySelectorAll('img')).filter(i => i.naturalWidth > 0).length,
            index: Reveal.getSlidePastCount()}; }"""


def test_a_browser_steps_through_every_slide_offline(deck, tmp_path):
    """In Chromium at 1280 x 720 with every network request refused: Reveal starts, each press of the space bar
    (a clicker's next) shows the next slide until the last, the section titles come in the lecture's order, the
    maths is typeset (no raw TeX), and every slide is designed for a projector: its content inside the 1280 x 720
    frame (measured on every slide, height and width), no text under 28 px, no code, speaker notes that say
    what to say and how long, and links that open in a new tab. Each slide is photographed."""
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
        assert total >= 12
        titles, raw_tex, typeset, images, links = [], [], 0, 0, []
        page.locator("body").click()
        for k in range(total):
            page.evaluate("() => new Promise(done => MathJax.Hub.Queue(done))")        # typesetting finished
            page.wait_for_timeout(200)
            slide = page.evaluate(SLIDE)
            heading = slide["heading"].strip().rstrip("¶")
            assert slide["index"] == k, (k, heading)
            assert slide["height"] <= slide["frame"][1] and slide["width"] <= slide["frame"][0], (k, heading, slide)
            assert not slide["small"] and slide["code"] == 0, (k, heading, slide["small"], slide["code"])
            assert slide["notes"].startswith("Speaker notes") and re.search(r"\(\d+ min", slide["notes"]), (k, heading)
            titles.append(heading)
            raw_tex += re.findall(r"\$\$|\\nabla|\\sum|\\frac", slide["text"])
            typeset += slide["math"]
            images += slide["images"]
            links += slide["links"]
            page.screenshot(path=str(tmp_path / f"slide-{k:02d}.png"))
            if k in SHOWN:
                page.screenshot(path=str(screenshots(tmp_path) / SHOWN[k]))
            page.keyboard.press("Space")                         # a presenter clicker's "next"
        assert page.evaluate("() => Reveal.isLastSlide()")
        browser.close()
    shown = [t for t in dict.fromkeys(titles) if t]
    assert [s for s in SECTIONS if any(t.startswith(s) for t in shown)] == SECTIONS
    assert [next(i for i, t in enumerate(shown) if t.startswith(s)) for s in SECTIONS] == \
        sorted(next(i for i, t in enumerate(shown) if t.startswith(s)) for s in SECTIONS)
    assert titles[SHOWN_TITLE[0]] == SHOWN_TITLE[1] and titles[9].startswith("4. More steps")
    assert typeset > 20 and not raw_tex and images >= 1
    assert links and set(links) == {"_blank"}
    assert refused == []


SHOWN_TITLE = (4, "One step is an attention head")


def test_make_handout_prints_at_most_four_well_filled_pages_a_student_keeps(tmp_path):
    """The handout: 2 to 4 A4 pages titled with the lecture's title, every section, both exercises each with a box
    to answer in, the claims whole, the maths typeset, no code, no widget, no speaker notes or make commands; every
    page but the last at least a third full (pdftoppm renders them)."""
    require_system_package(CHROMIUM is not None, "the handout", "chromium")
    require_system_package(PDFTOPPM is not None, "the handout's page check", "poppler-utils")
    import numpy as np
    from PIL import Image
    from pypdf import PdfReader

    done = make("handout", tmp_path)
    assert done.returncode == 0, done.stderr
    reader = PdfReader(tmp_path / "00_lecture.pdf")
    assert 2 <= len(reader.pages) <= HANDOUT_PAGES and reader.metadata.title == TITLE
    text = unicodedata.normalize("NFKC", " ".join(page.extract_text() for page in reader.pages))   # ligatures
    for words in ["A transformer layer is gradient descent on an energy", *SECTIONS, "Exercise 1: the first token",
                  "Exercise 2: the parameter count", "proved", "CEM attention costs little perplexity against Llama",
                  "The fully CEM transformer trains stably, with perplexity comparable to Llama's and fewer parameters",
                  "not SlimPajama", "abstract and a summary"]:
        assert words in " ".join(text.split()), words
    assert not re.search(r"\$\$|\\nabla|\\sum|\\frac|W_Q\^", text)       # the maths was typeset, not left as TeX
    assert "def check" not in text and "import" not in text               # outputs only, no code
    for lecturer_only in ("Speaker notes", "make slides", "make handout", "EnergyExplorer", "min)"):
        assert lecturer_only not in text, lecturer_only
    assert (tmp_path / "00_lecture.handout.html").read_text().count('class="answer-space"') == 2
    size = reader.pages[0].mediabox
    assert abs(float(size.width) - 595) < 2 and abs(float(size.height) - 842) < 2     # A4 in points
    subprocess.run([PDFTOPPM, "-r", "40", "-png", str(tmp_path / "00_lecture.pdf"), str(tmp_path / "page")],
                   check=True, timeout=120)
    pages = sorted(tmp_path.glob("page-*.png"))
    fill = []
    for path in pages:
        ink = np.asarray(Image.open(path).convert("L")) < 200
        rows = np.flatnonzero(ink.any(axis=1))
        fill.append((rows.max() - rows.min()) / ink.shape[0] if rows.size else 0.0)
    assert len(pages) == len(reader.pages) and all(f > 1 / 3 for f in fill[:-1]), fill
    shutil.copy(pages[0], screenshots(tmp_path) / "handout-page-1.png")


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
