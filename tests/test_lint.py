"""The code reads the same everywhere: ruff (the settings in pyproject.toml: pyflakes, pycodestyle
with 120 columns, sorted imports) finds nothing in the package, the app, the tests, the notebooks'
sources and the benchmarks."""
import subprocess
import sys

from conftest import ROOT


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
