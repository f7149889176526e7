"""``python -m cem_core docs``: rewrite the generated blocks of docs/ from the committed results (``--check``: only
say which are stale)."""
from __future__ import annotations

import sys
from pathlib import Path


def add_docs(docs) -> None:
    """The flags of ``docs``, on its parser."""
    docs.add_argument("--root", default=".", help="the repository's root (default: here)")
    docs.add_argument("--check", action="store_true",
                      help="rewrite nothing; exit 1 naming the blocks whose numbers differ from the records")
    docs.set_defaults(run=docs_command)


def docs_command(args) -> int:
    from cem_core.experiments import doc_blocks
    root = Path(args.root)
    if not (root / "docs").is_dir():
        raise ValueError(f"root={args.root!r} is invalid: it has no docs/ folder (run from the repository's root)")
    if args.check:
        if stale := doc_blocks.stale_blocks(root):
            print(f"stale: {', '.join(stale)}; `python -m cem_core docs` rewrites them", file=sys.stderr)
            return 1
        print(f"all {len(doc_blocks.BLOCKS)} generated blocks match the records")
        return 0
    changed = doc_blocks.refresh(root)
    print(f"rewrote {', '.join(changed)}" if changed else f"all {len(doc_blocks.BLOCKS)} generated blocks were "
          "up to date")
    return 0
