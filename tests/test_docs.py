"""Citations of the project's design notes resolve, and no legacy citation form is left.

The one citation syntax is a repository path to a markdown file under docs/ with a GitHub anchor:

    docs/<file>.md#<anchor>            e.g. docs/design.md#2-the-mathematics

(a bare ``docs/<file>.md`` refers to the whole file). The anchor is the one GitHub generates for a
heading of that file (see ``github_anchor``). The scan covers every text file that git tracks or
would track (``git ls-files`` plus untracked files that are not ignored): code, tests, notebooks
(.py and .ipynb), the README, app_pages/, benchmarks/, scripts/ and configuration files. results/
is left out; docs/ is checked for citations that resolve (the notes cite each other) but not for
legacy forms, since the notes themselves name their headings in prose. This file is left out of
both scans because it spells out bad citations on purpose.

Legacy forms, which fail the test wherever they appear outside docs/:
- ``design.md`` or ``paper-notes`` not preceded by ``docs/`` (the old team-internal references);
- a docs citation followed by a section sign instead of an anchor;
- "invariant N" / "Invariants N and M" in prose (cite ``docs/design.md#invariant-N-...`` instead).
"""
from __future__ import annotations

import re
import subprocess
import unicodedata
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()
DOCS = "docs/"
SKIPPED_DIRS = (".venv/", "results/", "runs/", "data/")
SECTION = "\u00a7"   # the section sign, written as an escape so this file never contains it

CITATION = re.compile(r"docs/(?P<file>[\w./-]+?\.md)(?:#(?P<anchor>[\w-]*))?")
LEGACY = [
    (re.compile(r"(?<!docs/)\bdesign\.md\b", re.IGNORECASE), "design.md without docs/"),
    (re.compile(r"(?<!docs/)\bpaper-notes\b", re.IGNORECASE), "paper-notes without docs/"),
    (re.compile(r"docs/[\w./-]+\.md\s*" + SECTION), "section sign instead of an anchor"),
    (re.compile(r"\binvariants?\s+#?\d", re.IGNORECASE), "invariant number in prose"),
]


# -- anchors, the way GitHub computes them ------------------------------------------------------


def _kept(ch: str) -> bool:
    """github-slugger keeps letters, marks, numbers, connector punctuation (_), spaces and hyphens."""
    return ch in " -" or unicodedata.category(ch)[0] in "LMN" or unicodedata.category(ch) == "Pc"


def heading_text(raw: str) -> str:
    """The rendered text of an ATX heading's content: links reduced to their text, HTML tags and
    closing hashes removed (emphasis and code marks go with the other punctuation)."""
    text = re.sub(r"\s+#+\s*$", "", raw.strip())                  # closing sequence "## Title ##"
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)          # [text](url), ![alt](src)
    return re.sub(r"<[^>]+>", "", text).strip()


def github_anchor(heading: str) -> str:
    """GitHub's anchor for one heading: lowercase, drop every character that is not a letter,
    digit, space, hyphen or underscore, then each space becomes a hyphen."""
    return "".join(ch for ch in heading_text(heading).lower() if _kept(ch)).replace(" ", "-")


def headings(markdown: str) -> list[str]:
    """The ATX headings of a markdown text, outside fenced code blocks."""
    found, fence = [], None
    for line in markdown.splitlines():
        stripped = line.lstrip(" ")
        if len(line) - len(stripped) <= 3:
            marker = re.match(r"(`{3,}|~{3,})", stripped)
            if marker:
                if fence is None:
                    fence = marker.group(1)
                elif stripped.startswith(fence) and not stripped[len(fence):].strip():
                    fence = None
                continue
            if fence is None:
                m = re.match(r"#{1,6}(?:[ \t]+(.*)|[ \t]*)$", stripped)
                if m:
                    found.append(m.group(1) or "")
    return found


def anchors(markdown: str) -> set[str]:
    """Every anchor of a markdown text; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    result = set()
    for heading in headings(markdown):
        base = slug = github_anchor(heading)
        while slug in seen:
            seen[base] += 1
            slug = f"{base}-{seen[base]}"
        seen[slug] = 0
        result.add(slug)
    return result


@lru_cache(maxsize=None)
def doc_anchors(relative: str) -> frozenset[str] | None:
    path = ROOT / DOCS / relative
    if not path.is_file():
        return None
    return frozenset(anchors(path.read_text(encoding="utf-8")))


# -- which files --------------------------------------------------------------------------------


def _git_files(*args: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", *args], cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


@lru_cache(maxsize=None)
def scanned_files() -> tuple[tuple[str, str], ...]:
    """(path, text) of every tracked or untracked-but-not-ignored text file that is scanned."""
    paths = sorted(set(_git_files()) | set(_git_files("--others", "--exclude-standard")))
    files = []
    for rel in paths:
        if rel == THIS or rel.startswith(SKIPPED_DIRS):
            continue
        path = ROOT / rel
        if not path.is_file():          # deleted or moved in the working tree
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue                    # binary
        try:
            files.append((rel, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return tuple(files)


def citation_problems(text: str) -> list[tuple[int, str, str]]:
    """(line, citation, why) for every docs citation in text that does not resolve."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in CITATION.finditer(line):
            found = doc_anchors(m.group("file"))
            if found is None:
                problems.append((number, m.group(0), f"no file docs/{m.group('file')}"))
            elif m.group("anchor") is not None and m.group("anchor") not in found:
                problems.append((number, m.group(0), "no heading of that file has this anchor"))
    return problems


def legacy_problems(text: str) -> list[tuple[int, str, str]]:
    """(line, snippet, why) for every legacy citation form in text."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        # Citations in the new syntax are blanked out first, so that "invariant-1" in an anchor or
        # docs/design.md itself cannot count as a legacy form; the section-sign rule needs them.
        blanked = CITATION.sub(lambda m: " " * len(m.group(0)), line)
        for pattern, why in LEGACY:
            target = line if SECTION in pattern.pattern else blanked
            for m in pattern.finditer(target):
                problems.append((number, line[max(0, m.start() - 20): m.end() + 20].strip(), why))
    return problems


def _report(rows: list[str]) -> str:
    return f"{len(rows)} problem(s):\n" + "\n".join(rows)


# -- the checks ---------------------------------------------------------------------------------


def test_docs_exist_with_their_stable_headings():
    design, notes = doc_anchors("design.md"), doc_anchors("paper-notes.md")
    assert design is not None and notes is not None
    for anchor in ("1-architecture", "2-the-mathematics", "3-invariants-the-tests-prove",
                   "4-performance-targets-and-the-flop-convention", "5-real-parts", "6-run-integrity",
                   "7-known-pitfalls"):
        assert anchor in design, anchor
    numbered = [a for a in design if re.match(r"invariant-\d-", a)]
    assert sorted(a.split("-")[1] for a in numbered) == [str(n) for n in range(1, 8)], numbered
    for anchor in ("what-the-paper-reports", "our-derivations", "choices-the-paper-leaves-open"):
        assert anchor in notes, anchor


def test_every_citation_resolves():
    rows = [f"{rel}:{line}: {cited}  ({why})"
            for rel, text in scanned_files() for line, cited, why in citation_problems(text)]
    assert not rows, _report(rows)


@pytest.mark.slow
def test_no_legacy_citations():
    rows = [f"{rel}:{line}: {snippet!r}  ({why})"
            for rel, text in scanned_files() if not rel.startswith(DOCS)
            for line, snippet, why in legacy_problems(text)]
    assert not rows, _report(rows)


def test_the_scan_sees_the_project():
    names = {rel for rel, _ in scanned_files()}
    assert {"README.md", "docs/design.md", "docs/paper-notes.md"} <= names
    assert any(n.startswith("cem_core/") and n.endswith(".py") for n in names)
    assert any(n.endswith(".ipynb") for n in names)
    assert not any(n.startswith(SKIPPED_DIRS) for n in names) and THIS not in names


# -- self-tests of the machinery ----------------------------------------------------------------


@pytest.mark.parametrize("heading,anchor", [
    ("2. The mathematics", "2-the-mathematics"),
    ("2.3 Interaction energy and attention", "23-interaction-energy-and-attention"),
    ("Invariant 1: fast path equals autograd descent", "invariant-1-fast-path-equals-autograd-descent"),
    ("D+LR interaction", "dlr-interaction"),
    ("Energy → attention", "energy--attention"),
    ("The anchor (our extension)", "the-anchor-our-extension"),
    ("Layer API: forward/energy/trace", "layer-api-forwardenergytrace"),
    ("`st.cache_data` hashing", "stcache_data-hashing"),
    ("Snake_case and CamelCase", "snake_case-and-camelcase"),
    ("Über-naïve Φ", "über-naïve-φ"),
    ("[Linked](https://example.org) heading", "linked-heading"),
    ("Closing hashes ##", "closing-hashes"),
])
def test_github_anchor(heading, anchor):
    assert github_anchor(heading) == anchor


def test_duplicate_headings_and_code_fences():
    text = "# A\n## A\n```\n# not a heading\n```\n### A\n#NoSpace\n    # indented code\n## B: c\n"
    assert headings(text) == ["A", "A", "A", "B: c"]
    assert anchors(text) == {"a", "a-1", "a-2", "b-c"}


def test_citation_checker_flags_what_it_should():
    good = "see docs/design.md#2-the-mathematics and docs/paper-notes.md#choices-the-paper-leaves-open."
    assert citation_problems(good) == []
    assert citation_problems("whole file: docs/design.md") == []
    bad = "x docs/design.md#2-mathematics y\nz docs/nothing.md#a\ndocs/design.md#"
    assert [(line, cited) for line, cited, _ in citation_problems(bad)] == [
        (1, "docs/design.md#2-mathematics"), (2, "docs/nothing.md#a"), (3, "docs/design.md#")]


@pytest.mark.parametrize("line", [
    "(design.md " + SECTION + "2)",
    "the checker behind design.md " + SECTION + "3, invariant 1",
    "see `design.md` " + SECTION + "7",
    "(paper-notes.md, \"Choices\")",
    "- **Exactness** (design invariant 1): for",
    "\"\"\"Invariants 3 and 4: causality\"\"\"",
    "# -- energy descent (invariant 4) --",
    "docs/design.md " + SECTION + "4",
])
def test_legacy_forms_are_flagged(line):
    assert legacy_problems(line), line


@pytest.mark.parametrize("line", [
    "cited as docs/design.md#invariant-1-fast-path-equals-autograd-descent here",
    "docs/paper-notes.md#choices-the-paper-leaves-open",
    "the loop invariant holds; an invariant of the data",
    "x is invariant under rotation by 2 pi",
    "see ../docs/design.md#27-preconditioners",
    "app_design.md and mydesign.md are other files",
])
def test_plain_text_is_not_flagged(line):
    assert legacy_problems(line) == [], line


def test_the_app_page_walkthrough_is_the_lesson():
    """The classroom walkthrough of docs/app.md is generated from the lesson definition (cem_core.ui.lesson): it
    fails when either changes alone."""
    from cem_core.experiments.gp import sweep as gp_sweep
    from cem_core.ui import lesson

    page = (ROOT / "docs" / "app.md").read_text()
    records = gp_sweep.GP_SWEEP.load(ROOT / gp_sweep.COMMITTED_GP_SWEEP / "results.json")
    assert lesson.doc_section(page) == lesson.markdown(records), (
        "docs/app.md's lesson differs from cem_core.ui.lesson: paste lesson.markdown(records) between its markers")
    for index in range(len(lesson.STEPS)):
        assert lesson.link(index) in page


# -- the README as a front door, and the links of every page ------------------------------------

README_MAX_LINES = 250
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
SCHEME = re.compile(r"[a-z][a-z0-9+.-]*:", re.IGNORECASE)          # http:, https:, mailto:


def pages() -> list[Path]:
    """The README and every page of docs/: the markdown a reader walks through."""
    return [ROOT / "README.md", *sorted((ROOT / DOCS).glob("*.md"))]


def prose_lines(markdown: str) -> list[tuple[int, str]]:
    """(number, line) of every line outside fenced code blocks."""
    found, fence = [], None
    for number, line in enumerate(markdown.splitlines(), 1):
        marker = re.match(r" {0,3}(`{3,}|~{3,})", line)
        if marker and (fence is None or line.strip() == marker.group(1)[0] * len(line.strip())):
            fence = marker.group(1) if fence is None else None
        elif fence is None:
            found.append((number, line))
    return found


def link_problems(path: Path) -> list[tuple[int, str, str]]:
    """(line, target, why) for every relative link of a markdown file that does not resolve to an existing
    file, or to a heading of a markdown file when it names an anchor."""
    problems = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for m in LINK.finditer(line):
            target = m.group("target")
            if SCHEME.match(target):
                continue
            name, _, anchor = target.partition("#")
            linked = (path.parent / name).resolve() if name else path
            if not linked.exists():
                problems.append((number, target, "no such file"))
            elif anchor and linked.suffix != ".md":
                problems.append((number, target, "an anchor into a file that is not markdown"))
            elif anchor and anchor not in anchors(linked.read_text(encoding="utf-8")):
                problems.append((number, target, "no heading of that file has this anchor"))
    return problems


def test_every_link_of_the_readme_and_the_docs_resolves():
    rows = [f"{path.relative_to(ROOT)}:{line}: {target}  ({why})"
            for path in pages() for line, target, why in link_problems(path)]
    assert not rows, _report(rows)


def test_the_link_checker_flags_what_it_should(tmp_path):
    (tmp_path / "other.md").write_text("# A heading\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n[ok](other.md#a-heading) [ok](#page) [web](https://example.org/x#y)\n"
                    "```\n[in code](missing.md)\n```\n"
                    "[gone](missing.md) [bad](other.md#nothing) ![img](other.png) [self](#nowhere)\n")
    assert [(line, target) for line, target, _ in link_problems(page)] == [
        (6, "missing.md"), (6, "other.md#nothing"), (6, "other.png"), (6, "#nowhere")]


def test_the_readme_is_a_front_door_to_every_page_of_docs():
    """At most 250 lines; a link to every page of docs/, and each page a title and a link back."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES, len(readme.splitlines())
    linked = {(ROOT / m.group("target").partition("#")[0]).resolve() for m in LINK.finditer(readme)}
    unlinked = [p.name for p in pages()[1:] if p.resolve() not in linked]
    assert not unlinked, f"pages of docs/ the README does not link to: {unlinked}"
    for path in pages()[1:]:
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# "), f"{path.name} has no title"
        below_title = text.split("\n\n", 2)[1]
        assert "](../README.md)" in below_title, f"{path.name} has no link back to the README below its title"


def test_the_readme_keeps_its_set_up_commands_and_the_quick_loop():
    """The two commands, the quick loop, and the test command CI runs (.ci/run) is the README's."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^make app\s+#", readme, re.MULTILINE) and re.search(r"^make test\s+#", readme, re.MULTILINE)
    assert 'python -m pytest -m "not slow"' in readme
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == "make test"
