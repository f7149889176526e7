"""Set-up for a notebook opened where the project is not installed (Colab, a fresh JupyterHub), safe to run again.

Every notebook's first code cell (tagged ``colab-setup``, written by ``setup_cell``) clones the project into
``cem-lab``, unless the working folder is the project's notebooks folder or already holds the clone, and runs this
file. This file installs the clone where ``cem_core`` does not import: the clone itself without dependencies, then
only the requirements that no installed distribution provides, so Colab's own torch, numpy and jupyter stay as
they are. On every run it makes the notebooks folder the working folder and puts it and the clone first on the
path. A kernel restart resets the working folder and the path but not what is installed, so running the cell
again restores both.

The repository's address lives in one place, ``[project.urls] Repository`` in pyproject.toml. A fork changes it
there and runs ``python notebooks/colab.py --sync``, which rewrites each notebook's set-up cell and its "Open in
Colab" link from it (tests/test_notebooks.py checks that they agree). ``CEM_LAB_SOURCE`` clones from elsewhere,
``CEM_LAB_NO_DEPS=1`` installs the clone only (the tests, which must not download).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXTRAS = ("notebooks",)                     # what the notebooks need beyond the core dependencies
SETUP_MARK = "# %% tags=[\"colab-setup\""   # the set-up cell's header in a notebook's .py (jupytext percent format)


def project(root: Path = HERE.parent) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]


def repository(root: Path = HERE.parent) -> str:
    return project(root)["urls"]["Repository"]


def colab_link(name: str, root: Path = HERE.parent) -> str:
    """The "Open in Colab" address of notebooks/<name>.ipynb on the repository's main branch."""
    path = re.sub(r"^https://github\.com/", "", repository(root)).removesuffix(".git")
    return f"https://colab.research.google.com/github/{path}/blob/main/notebooks/{name}.ipynb"


def setup_cell(root: Path = HERE.parent) -> str:
    """The source of every notebook's first code cell."""
    return f'''# Set-up, safe to run again (a kernel restart too): away from the project's notebooks (Colab),
# clone the project; notebooks/colab.py installs what is missing and works from its notebooks folder.
import os
import pathlib
import runpy
import subprocess

REPOSITORY = "{repository(root)}"   # pyproject.toml; a fork: notebooks/colab.py --sync
if not pathlib.Path("nbhelpers.py").exists() and not pathlib.Path("cem-lab").exists():
    source = os.environ.get("CEM_LAB_SOURCE", REPOSITORY)
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", source, "cem-lab"], check=True)
colab = runpy.run_path("colab.py" if pathlib.Path("nbhelpers.py").exists() else "cem-lab/notebooks/colab.py")
colab["set_up"](pathlib.Path.cwd())'''


def requirement_names(root: Path) -> list[str]:
    """The distributions the notebooks need: the project's dependencies and its EXTRAS (self-references
    expanded), by name."""
    meta = project(root)
    wanted, names = list(meta["dependencies"]), []
    for extra in EXTRAS:
        wanted += meta["optional-dependencies"][extra]
    while wanted:
        requirement = wanted.pop(0)
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        if name == meta["name"]:                                  # "cem-lab[lm]": that extra's requirements
            for extra in re.findall(r"\[([^\]]+)\]", requirement)[0].split(","):
                wanted += meta["optional-dependencies"][extra.strip()]
        elif name not in names:
            names.append(name)
    return names


def missing(names: list[str]) -> list[str]:
    """The names no installed distribution provides (whatever its version: Colab's pins are kept)."""
    def installed(name: str) -> bool:
        try:
            importlib.metadata.distribution(name)
            return True
        except importlib.metadata.PackageNotFoundError:
            return False
    return [name for name in names if not installed(name)]


def install(clone: Path) -> None:
    """pip install the clone without dependencies, then the requirements nothing installed provides."""
    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--no-deps", "-e", str(clone)], check=True)
    needed = [] if os.environ.get("CEM_LAB_NO_DEPS") == "1" else missing(requirement_names(clone))
    if needed:
        subprocess.run([*pip, *needed], check=True)
    importlib.invalidate_caches()


def work_from(notebooks: Path) -> None:
    """The notebooks folder as the working folder, and it and the clone first on the path (once)."""
    for folder in (str(notebooks.parent), str(notebooks)):
        if folder in sys.path:
            sys.path.remove(folder)
    sys.path[:0] = [str(notebooks), str(notebooks.parent)]
    os.chdir(notebooks)


def set_up(cwd: Path) -> None:
    """From the working folder `cwd` (the notebooks folder, or one holding the clone ``cem-lab``): install where
    ``cem_core`` does not import, then work from the notebooks folder. It returns nothing, so the set-up cell shows
    no output (a path there would differ from one machine to the next)."""
    notebooks = cwd if (cwd / "nbhelpers.py").exists() else (cwd / "cem-lab" / "notebooks").resolve()
    if importlib.util.find_spec("cem_core") is None:
        install(notebooks.parent)
    work_from(notebooks)


def sync(root: Path = HERE.parent) -> list[Path]:
    """Rewrite each notebook's set-up cell and its "Open in Colab" link from pyproject.toml; returns the notebooks
    changed (their .ipynb then need `make notebook-outputs`)."""
    changed = []
    for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.py")):
        text = path.read_text()
        start = text.index(SETUP_MARK)
        body = text.index("\n", start) + 1
        end = text.index("\n# %%", body)
        new = text[:body] + setup_cell(root) + "\n" + text[end:]
        new = re.sub(r"\[Open in Colab\]\([^)]*\)", f"[Open in Colab]({colab_link(path.stem, root)})", new)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


if __name__ == "__main__":
    if sys.argv[1:] == ["--sync"]:
        for changed in sync():
            print(f"rewrote {changed}")
    elif sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
    else:
        set_up(Path.cwd())
