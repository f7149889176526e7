"""Execute the notebooks top to bottom and, when asked (``--write``), write each ``NN_name.ipynb`` with its
outputs, so that GitHub and nbviewer show the mathematics and figures without running anything.

Run from the repository root: ``make notebook-outputs`` (= ``.venv/bin/python notebooks/execute.py --write``),
or name notebooks: ``.venv/bin/python notebooks/execute.py --write 01_attention_from_energy``. Without
``--write`` it only says whether each committed .ipynb is current (exit 1 when one is stale); ``--help`` lists
the options. Each notebook's wall time is printed. The .ipynb records a hash of its .py source
(``metadata.cem_lab.source_sha256``); tests/test_notebooks.py fails when that hash is stale, and when a fresh
run's outputs differ from the committed ones (``digest``).
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import struct
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def sources() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def tags(cell) -> list[str]:
    return cell.metadata.get("tags", [])


def source_hash(nb: nbformat.NotebookNode) -> str:
    """sha256 of the cells' types, sources and tags: what the outputs were computed from."""
    cells = [(c.cell_type, c.source, tags(c)) for c in nb.cells]
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


def execute(nb: nbformat.NotebookNode, timeout: int = 120, env: dict | None = None) -> nbformat.NotebookNode:
    """Run nb in a fresh "python3" kernel from the notebooks folder (no timings, no widget state stored);
    ``env``: the kernel's environment variables (None: this process's)."""
    NotebookClient(nb, kernel_name="python3", timeout=timeout, record_timing=False, store_widget_state=False,
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute(**({"env": env} if env else {}))
    return nb


def png_size_and_dpi(data: bytes) -> tuple[int, int, float | None]:
    """(width, height, dots per inch from the pHYs chunk or None) of a PNG."""
    width, height = struct.unpack(">II", data[16:24])
    at = data.find(b"pHYs")
    if at < 0:
        return width, height, None
    per_metre, _, unit = struct.unpack(">IIB", data[at + 4:at + 13])
    return width, height, per_metre * 0.0254 if unit == 1 else None


# rounding-level numbers, an exact zero among them (float64 sums can come out 0.0 or 1e-16 on another processor)
_VOLATILE = [(re.compile(r"[-+]?\d(\.\d+)?e-(0[7-9]|[1-9]\d)|(?<![\d.])[-+]?0(\.0+)?e[-+]00"), "<tiny>"),
             (re.compile(r" at 0x[0-9a-f]+"), " at 0x...")]


def _text(value) -> str:
    text = "".join(value) if isinstance(value, list) else str(value)
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text


def digest(nb: nbformat.NotebookNode) -> list[list]:
    """Each code cell's outputs in a comparable form: texts (rounding-level numbers masked), PNG sizes;
    live widget views are left out (the committed files do not keep them, see ``run``)."""

    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                outputs.append(["stream", out.name, _text(out.text)])
            elif out.output_type == "error":
                outputs.append(["error", out.ename])
            else:
                data = {}
                for mime, value in out.data.items():
                    if mime == "image/png":
                        data[mime] = list(png_size_and_dpi(base64.b64decode(value))[:2])
                    elif mime != WIDGET_VIEW:
                        data[mime] = _text(value)
                outputs.append(["display", sorted(set(out.data) - {WIDGET_VIEW}), data])
        cells.append(outputs)
    return cells


def run(py: Path) -> tuple[nbformat.NotebookNode, float]:
    """Execute the notebook of py as it will be committed; returns it and the wall time in seconds."""
    nb = jupytext.read(py)
    for k, cell in enumerate(nb.cells):
        cell.id = f"cell-{k:03d}"                  # stable ids (jupytext makes random ones): reruns do not churn
    start = time.perf_counter()
    execute(nb)
    seconds = time.perf_counter() - start
    for cell in nb.cells:                          # widget state is not stored, so a saved view would only
        for out in cell.get("outputs", []):        # say "model not found": keep the static PNG beside it
            out.get("data", {}).pop(WIDGET_VIEW, None)
    nb.metadata["cem_lab"] = {"source_sha256": source_hash(jupytext.read(py))}
    return nb, seconds


def is_current(py: Path, nb: nbformat.NotebookNode) -> bool:
    """Whether the committed .ipynb of py was executed from this source and shows these outputs."""
    committed = py.with_suffix(".ipynb")
    if not committed.exists():
        return False
    old = nbformat.read(committed, as_version=4)
    return (old.metadata.get("cem_lab", {}).get("source_sha256") == nb.metadata["cem_lab"]["source_sha256"]
            and digest(old) == digest(nb))


# the committed results the notebooks read: without them the committed outputs would become "results are not
# there" (a notebook run by hand says so; the committed .ipynb must show the evidence)
RESULTS = ("gp-default", "gp-study", "lm-default")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Execute the notebooks top to bottom (each in a fresh kernel, from "
                                     "the notebooks folder) and say whether each committed .ipynb is current; with "
                                     "--write, write each .ipynb with its outputs (`make notebook-outputs`).")
    parser.add_argument("names", nargs="*", metavar="NAME", help="notebooks to run, e.g. 01_attention_from_energy "
                        "(default: all)")
    parser.add_argument("--write", action="store_true", help="write the executed .ipynb files (the committed outputs)")
    args = parser.parse_args(argv)
    chosen = [p for p in sources() if not args.names or p.stem in args.names]
    if args.names and len(chosen) != len(args.names):
        print(f"unknown notebook in {args.names}: choose from {[p.stem for p in sources()]}", file=sys.stderr)
        return 2
    results = Path(__file__).resolve().parents[1] / "results"
    missing = [name for name in RESULTS if not (results / name / "results.json").is_file()]
    if missing:
        print(f"the committed results {', '.join(missing)} are not in {results}: the outputs would say so instead "
              f"of showing them; restore them first (git checkout -- results)", file=sys.stderr)
        return 2
    stale = []
    try:
        for py in chosen:
            nb, seconds = run(py)
            if args.write:
                jupytext.write(nb, py.with_suffix(".ipynb"))
                print(f"{py.stem}: executed in {seconds:.1f} s, written", flush=True)
            else:
                current = is_current(py, nb)
                stale += [] if current else [py.stem]
                print(f"{py.stem}: executed in {seconds:.1f} s, committed outputs "
                      f"{'current' if current else 'stale'}", flush=True)
    except OSError as err:                       # a read-only checkout, a full disk
        print(f"cannot write {err.filename or 'the notebook'}: {err.strerror or err}", file=sys.stderr)
        return 2
    if stale:
        print(f"stale: {', '.join(stale)}; run `make notebook-outputs` (execute.py --write) to write them",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
