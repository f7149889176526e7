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
