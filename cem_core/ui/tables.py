"""Tables of results as a class reads them, the same in the app (st.table) and on the static site."""
from __future__ import annotations

FIRST = ("verdict", "t-based reading (95%)", "condition", "#", "claim")   # the columns read first, in this order
LABELS = {"#": "no."}                                                    # a bare "#" reads as a Markdown heading


def verdict_first(rows: list[dict]) -> list[dict]:
    """A claims table's rows with the verdict first, then the claim, then the numbers (the rows' own order)."""
    first = [k for k in FIRST if rows and k in rows[0]]
    return [{LABELS.get(k, k): r[k] for k in first} | {k: v for k, v in r.items() if k not in first} for r in rows]
