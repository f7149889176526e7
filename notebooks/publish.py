"""Publish the lecture (notebooks/00_lecture.ipynb, with its committed outputs) as a reveal.js deck and as a
printable handout, both offline.

    make slides    (= .venv/bin/python notebooks/publish.py slides)   ->  build/slides/00_lecture.slides.html
    make handout   (= .venv/bin/python notebooks/publish.py handout)  ->  build/handout/00_lecture.pdf

The deck is nbconvert's reveal template without its CDN scripts (templates/cem_slides): reveal.js comes from
the files the sphinx-revealjs package ships and MathJax from jupyter-server-mathjax's, both copied beside the
deck (requirements-assets.txt), so it opens from a USB stick in a lecture hall. The deck shows no code: a
Markdown cell that starts a ``#``, ``##`` or ``###`` heading, or is tagged ``new-slide``, starts a slide; a
code cell appears (its outputs only) when tagged ``slides``; Markdown tagged ``notes`` becomes the speaker notes
of its slide (``S`` opens the speaker view); cells tagged ``slides-skip`` are left out.

The handout keeps the Markdown (not the speaker notes) and the outputs of the cells tagged ``handout`` (the
derivations, the key figure, the verdicts), with room to answer each exercise (``<div class="answer-space">``),
and prints them to A4 with Debian's chromium (``chromium --headless --print-to-pdf``), at most
``HANDOUT_PAGES`` pages, titled ``TITLE``.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
from execute import tags
from nbconvert import HTMLExporter, SlidesExporter

from cem_core.experiments.records import atomic_write_text

NOTEBOOKS = Path(__file__).resolve().parent
LECTURE = NOTEBOOKS / "00_lecture.ipynb"
TEMPLATES = NOTEBOOKS / "templates"
BUILD = NOTEBOOKS.parent / "build"
HANDOUT_PAGES = 4
TITLE = "A transformer layer is gradient descent on an energy"
MATHJAX = """\
<script type="text/x-mathjax-config">
MathJax.Hub.Config({tex2jax: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], processEscapes: true},
                   messageStyle: "none", showMathMenu: false,
                   "HTML-CSS": {availableFonts: [], imageFont: null, preferredFont: null, webFont: "STIX-Web"}});
</script>
<script src="mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"></script>"""


class PublishError(RuntimeError):
    """Something the publishing needs is missing; the message says what to do."""


def package_folder(module: str, inside: str) -> Path:
    """The folder ``inside`` of an installed package, found without importing it (sphinx-revealjs is
    installed without Sphinx: only its reveal.js files are used)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise PublishError(f"the package {module!r} is not installed: run `make slides` (or "
                           f"`pip install --no-deps -r requirements-assets.txt`)")
    folder = Path(spec.submodule_search_locations[0]) / inside
    if not folder.is_dir():
        raise PublishError(f"{folder} is missing: reinstall {module!r} from requirements-assets.txt")
    return folder


ASSETS_MARK = ".cem-lab-assets"     # in each asset folder we copied: only those are ever replaced


def asset_sources(reveal: bool) -> dict[str, Path]:
    """The package folders copied beside the page: MathJax, and reveal.js for a deck."""
    assets = {"mathjax": package_folder("jupyter_server_mathjax", "static")}
    if reveal:
        assets["reveal.js"] = package_folder("sphinx_revealjs", "_static/revealjs")
    return assets


def _ours(folder: Path, source: Path) -> bool:
    """Whether folder is a copy we made: marked, or (a copy from before the mark) every file in it a file of the
    same size in the package folder it was copied from."""
    if (folder / ASSETS_MARK).is_file():
        return True
    files = [f for f in folder.rglob("*") if not f.is_dir()]
    return bool(files) and all(not f.is_symlink() and (source / f.relative_to(folder)).is_file()
                               and (source / f.relative_to(folder)).stat().st_size == f.stat().st_size for f in files)


def prepare(out: Path, files: list[str], assets: dict[str, Path]) -> None:
    """Refuse, before writing anything, an ``out`` that is a file, an output file or asset folder that is a
    symbolic link (never written through), and an asset folder that we did not copy (never deleted)."""
    if out.exists() and not out.is_dir():
        raise PublishError(f"--out {out} is a file, not a folder: choose a folder")
    out.mkdir(parents=True, exist_ok=True)
    for name in (*files, *assets):
        if (out / name).is_symlink():
            raise PublishError(f"{out / name} is a symbolic link, which publishing never writes through: remove it "
                               "or choose another --out")
    for name, source in assets.items():
        if (out / name).exists() and not ((out / name).is_dir() and _ours(out / name, source)):
            raise PublishError(f"{out / name} holds files that publishing did not put there; it never deletes them: "
                               "move it away or choose another --out")


def copy_assets(out: Path, assets: dict[str, Path]) -> None:
    """The asset folders beside the page, under the relative paths the templates use, each marked as ours
    (``prepare`` has refused anything else there)."""
    for name, folder in assets.items():
        if (out / name).exists():
            shutil.rmtree(out / name)
        shutil.copytree(folder, out / name, ignore=shutil.ignore_patterns("*.map", "*.scss", "*.ts"))
        (out / name / ASSETS_MARK).write_text("copied by notebooks/publish.py; replaced on the next build\n")


def lecture() -> nbformat.NotebookNode:
    if not LECTURE.exists():
        raise PublishError(f"{LECTURE} is missing: run `make notebook-outputs`")
    return nbformat.read(LECTURE, as_version=4)


def slide_types(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Set each cell's slideshow type from its tags and headings (module docstring)."""
    for cell in nb.cells:
        text, markdown, cell_tags = cell.source.lstrip(), cell.cell_type == "markdown", tags(cell)
        if "slides-skip" in cell_tags or (not markdown and "slides" not in cell_tags):
            kind = "skip"
        elif markdown and "notes" in cell_tags:
            kind = "notes"
        elif markdown and (text.startswith(("# ", "## ", "### ")) or "new-slide" in cell_tags):
            kind = "slide"
        else:
            kind = "-"
        cell.metadata["slideshow"] = {"slide_type": kind}
    return nb


def slides(out: Path) -> Path:
    """The reveal.js deck in ``out`` (with reveal.js and MathJax beside it); returns the deck's path."""
    assets = asset_sources(reveal=True)
    prepare(out, ["00_lecture.slides.html"], assets)
    exporter = SlidesExporter(template_name="cem_slides", extra_template_basedirs=[str(TEMPLATES)],
                              reveal_url_prefix="reveal.js", reveal_theme="white", reveal_transition="none",
                              exclude_input=True)
    nb = slide_types(lecture())
    nb.metadata["title"] = TITLE
    body, _ = exporter.from_notebook_node(nb, resources={"local_mathjax": MATHJAX})
    copy_assets(out, assets)
    deck = out / "00_lecture.slides.html"
    atomic_write_text(deck, body)
    return deck


def handout_notebook() -> nbformat.NotebookNode:
    """The lecture's Markdown and its ``handout`` cells (outputs only), nothing else."""
    nb = copy.deepcopy(lecture())
    nb.cells = [c for c in nb.cells if (c.cell_type == "markdown" and "notes" not in tags(c)) or "handout" in tags(c)]
    nb.metadata["title"] = TITLE
    return nb


def chromium() -> str:
    found = shutil.which(os.environ.get("CHROMIUM") or "chromium") or shutil.which("chromium-browser")
    if not found:
        raise PublishError("the handout is printed by Debian's chromium, which is not installed: "
                           "`sudo apt install chromium` (or set CHROMIUM to a Chromium binary)")
    return found


def print_pdf(page: Path, pdf: Path, timeout: float = 120) -> None:
    """Print ``page`` to ``pdf`` with headless chromium, after its scripts (MathJax) have run."""
    with tempfile.TemporaryDirectory() as profile:
        command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                   "--no-pdf-header-footer", "--virtual-time-budget=30000", "--run-all-compositor-stages-before-draw",
                   f"--print-to-pdf={pdf}", page.as_uri()]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not pdf.exists():
        raise PublishError(f"chromium could not print {page}: {done.stderr.strip()[-500:]}")


def handout(out: Path) -> Path:
    """The printable handout, ``out``/00_lecture.pdf (and the page it was printed from); returns the PDF."""
    assets = asset_sources(reveal=False)
    prepare(out, ["00_lecture.handout.html", "00_lecture.pdf"], assets)
    exporter = HTMLExporter(template_name="cem_handout", extra_template_basedirs=[str(TEMPLATES)], exclude_input=True)
    body, _ = exporter.from_notebook_node(handout_notebook(), resources={"local_mathjax": MATHJAX})
    copy_assets(out, assets)
    page = out / "00_lecture.handout.html"
    atomic_write_text(page, body)
    pdf = out / "00_lecture.pdf"
    pdf.unlink(missing_ok=True)
    print_pdf(page, pdf)
    return pdf


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("slides", "handout"))
    parser.add_argument("--out", type=Path, help="output folder (default build/slides or build/handout)")
    args = parser.parse_args(argv)
    try:
        made = (slides if args.what == "slides" else handout)(args.out or BUILD / args.what)
    except PublishError as error:
        print(f"make {args.what}: {error}", file=sys.stderr)
        return 1
    print(f"{args.what}: {made}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
