"""What every result file records and how it is written: provenance, and atomic writes (a
temporary file, then a rename, so a crash never leaves a half-written file behind)."""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import numpy as np
import torch


def provenance() -> dict:
    """The git commit, package versions and machine a result came from."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    from . import __version__
    return {"git_commit": commit, "python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__, "cem_lab": __version__, "machine": platform.machine()}


def atomic_write(path, write) -> None:
    """Call write(tmp_path), then rename tmp_path onto path."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def atomic_write_text(path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))
