"""The corpora built from the Python installation (`DataConfig.source` "demo" and "prose"): no download, no files.

- "demo": the source text and docstrings of the Python standard library installed here (PSF licence): sorted
  module files, test suites, site-packages and the codec tables of encodings/ left out, the first
  `demo_max_bytes` bytes. It is NOT SlimPajama; `DEMO_LABEL` says so wherever it is shown. Deterministic for a
  given Python installation.
- "prose": English prose from the same installation (`prose_corpus`): the Python documentation's topics and the
  standard library's docstrings, their interactive examples removed (PSF licence); about 2.2 MB, the trained
  language models' corpus (models/). Also NOT SlimPajama; `PROSE_LABEL` says so.

Their validation split is the ceil(fraction * n) documents with the smallest hashes, so it is never empty.
"""
from __future__ import annotations

import math
import os
import re
import sysconfig
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from .data_config import DataConfig, DataStats
from .filters import hash_unit, too_long
from .tokenizer import first_bytes

DEMO_LABEL = ("demo corpus: Python standard library source and docstrings (PSF licence), "
              "not SlimPajama")
PROSE_LABEL = ("English prose corpus: the Python documentation's topics and the standard library's docstrings, "
               "interactive examples removed (PSF licence), not SlimPajama")
DEMO_SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages",
                               "__pycache__", "encodings"})   # encodings/: generated codec tables


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


@lru_cache(maxsize=4)
def demo_corpus(max_bytes: int) -> tuple[str, ...]:
    """The standard library's module files (sorted by relative path, non-empty, DEMO_SKIPPED_DIRS
    left out) up to `max_bytes` bytes of UTF-8, the last one cut to fit."""
    root = stdlib_root()
    texts = (file.read_bytes().decode("utf-8", errors="replace") for file in _stdlib_modules(root))
    return tuple(first_bytes((text for text in texts if text.strip()), max_bytes))


def _stdlib_modules(root: Path) -> list[Path]:
    """The *.py files under `root` sorted by relative path, skipped folders not entered."""
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in DEMO_SKIPPED_DIRS]
        files.extend(Path(folder, name) for name in names if name.endswith(".py"))
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


@lru_cache(maxsize=4)
def prose_corpus(max_bytes: int) -> tuple[str, ...]:
    """English prose from the Python installation, up to `max_bytes` bytes of UTF-8 (the last document cut to
    fit): the Python documentation's topics (``pydoc_data.topics``, the text ``help()`` shows: the language
    reference's chapters), one document each in sorted order, then one document per standard-library module
    (``_stdlib_modules``' order) holding its module, class and function docstrings, blank-line separated. The
    interactive examples (a ``>>>`` line and the lines up to the next blank one) are removed: what is left is
    the documentation's sentences, with its inline names and literal blocks."""
    import ast
    from pydoc_data.topics import topics

    def prose(text: str) -> str:
        kept, example = [], False
        for line in text.splitlines():
            example = line.lstrip().startswith(">>>") or (example and line.strip() != "")
            if not example:
                kept.append(line)
        return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()

    def docstrings(file: Path) -> str:
        try:
            tree = ast.parse(file.read_bytes())
        except (SyntaxError, ValueError):                              # not this Python's syntax: no prose taken
            return ""
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        found = (ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, kinds))
        return "\n\n".join(p for doc in found if doc and (p := prose(doc)))

    texts = [prose(topics[key]) for key in sorted(topics)]
    texts += [docstrings(file) for file in _stdlib_modules(stdlib_root())]
    return tuple(first_bytes((text for text in texts if text.strip()), max_bytes))


def installed_corpus(config: DataConfig) -> tuple[str, ...]:
    """The documents of an installed source: the demo corpus (code) or the prose corpus."""
    return (demo_corpus if config.source == "demo" else prose_corpus)(config.demo_max_bytes)


def installed_split(config: DataConfig, split: str, rank: int, world_size: int,
                     stats: DataStats) -> Iterator[str]:
    docs = installed_corpus(config)
    scores = [hash_unit(doc) for doc in docs]
    n_validation = math.ceil(config.validation_fraction * len(docs))
    threshold = sorted(scores)[n_validation - 1]
    chosen = [doc for doc, score in zip(docs, scores) if (score <= threshold) == (split == "validation")]
    for doc in chosen[rank::world_size]:
        if too_long(doc, config.max_document_bytes):
            stats.oversized += 1
            continue
        stats.documents += 1
        yield doc
