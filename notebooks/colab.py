"""Set-up for a notebook opened where cem_core is not installed (Colab, a fresh JupyterHub).

The first code cell of every notebook (tagged ``colab-setup``) does nothing where cem_core imports. Elsewhere
it clones the project (``CEM_LAB_SOURCE``, default its GitHub URL) into ``cem-lab`` and runs this file,
which installs the clone (editable, with the ``app`` and ``notebooks`` extras; torch, numpy and the rest
already on Colab satisfy the unpinned requirements of pyproject.toml) and makes its ``notebooks`` folder
the working directory and first on the path, so the notebook goes on as in a local checkout.
``CEM_LAB_EXTRAS`` and ``CEM_LAB_PIP_FLAGS`` change the pip call (the tests use ``--no-deps``).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def install(clone: Path, extras: str = "app,notebooks", pip_flags: tuple[str, ...] = ()) -> Path:
    """pip install -e the clone, then work from its notebooks folder; returns that folder."""
    target = f"{clone.resolve()}[{extras}]" if extras else str(clone.resolve())
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *pip_flags, "-e", target], check=True)
    notebooks = clone.resolve() / "notebooks"
    sys.path[:0] = [str(clone.resolve()), str(notebooks)]
    os.chdir(notebooks)
    return notebooks


if __name__ == "__main__":
    install(Path("cem-lab"), os.environ.get("CEM_LAB_EXTRAS", "app,notebooks"),
            tuple(os.environ.get("CEM_LAB_PIP_FLAGS", "").split()))
