"""The code reads the same everywhere: ruff (the settings in pyproject.toml: pyflakes, pycodestyle
with 120 columns, sorted imports) finds nothing in the package, the app, the tests, the notebooks'
sources and the benchmarks; and every benchmark script starts."""
import subprocess
import sys

import pytest
from conftest import ROOT, child_env


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_no_issue_numbers_in_code_or_docs():
    """The tracker's numbers mean nothing to a reader of the code: a decision is described by what it is, and
    research history lives beside its results (results/, whose recorded rules are data and are not read here)."""
    import re

    pattern = re.compile(r"\bissues?\s+#?\d+\b", re.IGNORECASE)
    files = [ROOT / "README.md", ROOT / "Makefile", *ROOT.glob("docs/*.md"), *ROOT.glob("notebooks/*.py"),
             *ROOT.glob("notebooks/templates/*"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*"),
             *(p for folder in ("cem_core", "app_pages", "tests") for p in (ROOT / folder).rglob("*")
               if p.suffix in (".py", ".js", ".html", ".md"))]
    found = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in files if path.is_file()
             for match in pattern.finditer(path.read_text(errors="replace"))]
    assert not found, found


@pytest.mark.slow                      # a subprocess per script
@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")))
def test_every_benchmark_script_starts(script):
    """A benchmark is run by hand, so nothing else notices when a change breaks its imports (a module split, a
    function removed): each script's --help must run."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"], cwd=ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage" in done.stdout, done.stderr[-2000:]
