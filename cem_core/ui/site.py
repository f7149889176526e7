"""The static site: the energy page as one folder that opens from file:// and from any static host, computed in the
browser (``make site``, ``python -m cem_core site --out DIR``; docs/site.md).

``build`` writes the explorer page (cem_core/web/explorer.html as index.html) with the scripts it loads beside it:
Python's number formats (pyformat.js), the computation (explore.js), the figures (figures.js), their downloads
(exports.js), the controls (controls.js), the player (player.js, the app's too) and the page's own (explorer.js),
plotly.min.js from the installed plotly package (the Python figures' own), the MathJax files the equations need from
the installed jupyter_server_mathjax package, and site-data.js, what the page reads from the Python core
(cem_core.ui.site_data).
Nothing is fetched at run time: every script is a classic <script src> of a file in the folder.

The folder is built beside `out` and renamed into place, so a reader never sees half a site; `out` may be missing,
an empty folder or an earlier site (which is replaced), never a file or a folder of other files.
"""
from __future__ import annotations

import importlib.resources
import importlib.util
import shutil
import tempfile
from pathlib import Path

import plotly

from . import site_data, site_models

WEB = Path(str(importlib.resources.files("cem_core") / "web"))   # the package's own web folder (package data)
PAGE = "explorer.html"                         # the site's index.html
FILES = ("explorer.js", "explorer.css", "pyformat.js", "explore.js", "figures.js", "exports.js", "controls.js",
         "player.js", "player.css", "inside.html", "gp.js", "inside_figures.js", "inside_page.js", "gp.html",
         "gp_page.js", "lesson_nav.js")
PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
# MathJax 2 as the page configures it (TeX in, HTML-CSS out with the STIX-Web fonts, the combined configuration's
# extensions): its localisation (English is built in), its SVG output and the speech rule engine of its accessibility
# explorer (switched off with the menu) stay out, 9 of its 12 MB
MATHJAX = ("MathJax.js", "LICENSE", "config/TeX-AMS-MML_HTMLorMML-full.js", "jax/input/TeX", "jax/element",
           "jax/output/HTML-CSS", "fonts/HTML-CSS/STIX-Web", "extensions/TeX", "extensions/HTML-CSS",
           "extensions/MathML", "extensions/a11y/accessibility-menu.js", *(
               f"extensions/{name}" for name in ("MathEvents.js", "MathMenu.js", "MathZoom.js", "tex2jax.js",
                                                 "mml2jax.js", "toMathML.js", "AssistiveMML.js", "FontWarnings.js",
                                                 "Safe.js")))
MARK = ".cem-lab-site"                         # in every site built here: only such a folder is ever replaced
LIMIT_BYTES = 25_000_000                       # the whole folder at most (docs/site.md)


def mathjax_folder() -> Path:
    """The installed jupyter_server_mathjax package's MathJax (found without importing the package)."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    folder = Path(spec.submodule_search_locations[0]) / "static" if spec and spec.submodule_search_locations else None
    if folder is None or not (folder / "MathJax.js").is_file():
        raise ValueError("the site's equations need MathJax from the package 'jupyter_server_mathjax', which is not "
                         "installed: pip install --no-deps -r requirements-assets.txt")
    return folder


def check_out(out: Path) -> None:
    """Refuse, before anything is written, an `out` that is a file, a link, or a folder of other files."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ValueError(f"--out {out} is a file or a link, not a folder: choose a folder (it is never written "
                         "through)")
    if out.is_dir() and any(out.iterdir()) and not (out / MARK).is_file():
        raise ValueError(f"--out {out} holds files that no site build put there, and a build replaces the whole "
                         "folder: choose an empty or new folder, or an earlier site")


def write(folder: Path, root: Path) -> None:
    """The site's files into `folder` (an empty one); the committed results and figures read under `root`."""
    shutil.copyfile(WEB / PAGE, folder / "index.html")
    for name in FILES:
        shutil.copyfile(WEB / name, folder / name)
    shutil.copyfile(PLOTLY_JS, folder / "plotly.min.js")
    (folder / "site-data.js").write_text(site_data.script(root), encoding="utf-8")
    (folder / "site-models.js").write_text(site_models.models_script(), encoding="utf-8")
    (folder / "figures").mkdir()
    for name in site_data.STUDY_IMAGES:                    # the factor study's committed figures (from the root)
        shutil.copyfile(root / "figures" / f"{name}.png", folder / "figures" / f"{name}.png")
    (folder / "functions").mkdir()
    for first in site_models.function_chunks():
        (folder / "functions" / f"{first}.js").write_text(site_models.functions_script(first), encoding="utf-8")
    source = mathjax_folder()
    for part in MATHJAX:
        target = folder / "mathjax" / part
        target.parent.mkdir(parents=True, exist_ok=True)
        if (source / part).is_dir():
            shutil.copytree(source / part, target)
        else:
            shutil.copyfile(source / part, target)
    (folder / MARK).write_text("built by python -m cem_core site; the next build replaces this folder\n")


def size(folder: Path) -> int:
    """The bytes of every file under `folder`."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def build(out: Path, finish=None, root: Path = Path(".")) -> Path:
    """The site in `out` (see the module doc); returns its index.html. `finish(folder)`, if given, adds to the
    folder before it is renamed into place (the app's component: app_pages/explorer.py); `root`: the repository's
    root, where the committed results and figures the site draws are (the current folder by default). Refused with
    ValueError:
    an `out` that ``check_out`` refuses, and a site over LIMIT_BYTES."""
    out = Path(out).absolute()
    check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    new = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-new-"))
    old = None
    try:
        write(new, Path(root))
        if finish is not None:
            finish(new)
        if size(new) > LIMIT_BYTES:
            raise ValueError(f"the site would take {size(new) / 1e6:.1f} MB, more than the {LIMIT_BYTES / 1e6:g} MB "
                             "it is allowed")
        new.chmod(0o755)                                   # mkdtemp's folder is the owner's alone; a site is served
        if out.is_dir() and any(out.iterdir()):            # an earlier site: aside, removed once the new one is in
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-old-"))
            out.rename(old / "site")
        new.rename(out)                                    # (an empty folder is replaced as it is)
    except BaseException:
        if old is not None and not out.exists():
            (old / "site").rename(out)
        raise
    finally:
        if new.exists():
            shutil.rmtree(new)
        if old is not None:
            shutil.rmtree(old)
    return out / "index.html"
