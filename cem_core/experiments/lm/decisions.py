"""A sweep folder's decisions table, DIR/decisions.json: the learning rates its preset trains at that were decided
from the results of an earlier sweep, kept beside the results they produced. It holds what the preset trains by
(``presets.SweepPreset.decided``):

- "own_rates": {variant: rate}: each variant's own learning rate, as a finished rates sweep chose it under
  ``rules.RATE_RULE`` (``rates.own_rates``): ``own`` trains at it, ``ladder`` on a grid around it at each width;
- "extensions": [[width, variant, rate], ...]: the ladder's grid extensions under ``rules.LADDER_RULE``, each a rate
  a factor of 2 beyond the edge of a grid whose best lay at that edge (``ladder.unfinished`` names those cells), in
  the order they were added; a fresh ladder has none. The quarter ladder is not staged, so its sweep does not add
  them: when ``ladder.unfinished`` names a cell whose best rate lies at an edge of its grid, its row (the rate the
  rule fixes) is added to the table by hand, and the same ``lm sweep`` trains it;
- "base_rates": [[width, variant, rate], ...]: the centre of a staged grid at each width: for the budget ladder the
  quarter-budget ladder's best rate there (``ladder.best_rates``); for the tie ladder a tied variant's base rate in
  the budget ladder (its runs are then the budget ladder's, reused) and an untied variant's the rate its tied
  relative chose in the budget ladder (``variants.TIE_RELATIVES``).

A fresh sweep of such a preset writes its table from the finished sweep its rates are decided from (``lm sweep
--rates-from DIR``: ``runner.adopt_decisions``, ``derive_decisions``); a sweep without its table is refused.
"""
from __future__ import annotations

import json
from pathlib import Path

from cem_core.experiments.records import atomic_write_text, read_json

from . import ladder, rates
from .presets import PRESETS, SWEEP_PRESETS
from .variants import SWEEP_VARIANTS, TIE_RELATIVES

DECISIONS_FILE = "decisions.json"
DECISION_KEYS = ("own_rates", "extensions", "base_rates")


def read_decisions(folder) -> dict | None:
    """The folder's decisions table, checked (None when it has none)."""
    path = Path(folder) / DECISIONS_FILE
    if not path.exists():
        return None
    table = read_json(path)
    if problem := decisions_problem(table):
        raise ValueError(f"{path} is not a decisions table: {problem}")
    return table


def _is_rate(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1


def decisions_problem(table) -> str:
    """What is wrong with a decisions table ('' when nothing is): its keys, variants, widths and rates."""
    if not isinstance(table, dict):
        return "not a JSON object"
    if unknown := sorted(set(table) - set(DECISION_KEYS)):
        return f"unknown keys {', '.join(unknown)} (it holds {', '.join(DECISION_KEYS)})"
    own = table.get("own_rates", {})
    if not isinstance(own, dict) or not all(name in SWEEP_VARIANTS and _is_rate(lr) for name, lr in own.items()):
        return "own_rates must map variants of the sweep to learning rates"
    for key in ("extensions", "base_rates"):
        rows = table.get(key, [])
        if not isinstance(rows, list) or not all(
                isinstance(row, list) and len(row) == 3 and isinstance(row[0], int) and row[0] > 0
                and row[1] in SWEEP_VARIANTS and _is_rate(row[2]) for row in rows):
            return f"{key} must be a list of [width, variant, rate]"
    return ""


def folder_decisions(out, preset: str) -> dict | None:
    """The decisions table of the folder `out` that a sweep of the preset trains by (None for a preset that trains
    by none); refused with what to do when the preset needs one and the folder has none."""
    table = read_decisions(out)
    p = SWEEP_PRESETS[preset]
    if p.decided and table is None:
        raise ValueError(f"{Path(out) / DECISIONS_FILE} is missing: the {preset} preset trains at rates decided "
                         f"from a finished {p.decided_from} sweep; write it from that sweep's folder with `lm sweep "
                         f"--preset {preset} --out {out} --rates-from DIR` (the repository's is "
                         f"results/lm-{p.decided_from})")
    return table


def derive_decisions(preset: str, source_preset: str | None, records: list[dict],
                     source_decisions: dict | None = None) -> dict:
    """The decisions table a fresh sweep of the preset starts from, derived from the records of the finished sweep
    (of the preset `source_preset`) its rates are decided from, and that sweep's own decisions table (for a staged
    sweep decided from a staged sweep); refused when that sweep is of another preset or has not decided every rate
    yet."""
    p = SWEEP_PRESETS[preset]
    if not p.decided:
        takers = ", ".join(name for name in PRESETS if SWEEP_PRESETS[name].decided)
        raise ValueError(f"the {preset} preset trains at no decided rates; --rates-from is for {takers}")
    if source_preset != p.decided_from:
        raise ValueError(f"the {preset} preset's rates are decided from a {p.decided_from} sweep, not from "
                         f"{'a ' + source_preset + ' sweep' if source_preset else 'a folder without a sweep'}")
    table = {}
    if "own_rates" in p.decided:
        found = rates.own_rates(records)
        if missing := [name for name in p.variants if name not in found or not found[name]["inside"]]:
            raise ValueError(f"the {p.decided_from} sweep has no rate strictly inside its grid for "
                             f"{', '.join(missing)} yet")
        table["own_rates"] = {name: found[name]["lr"] for name in p.variants}
    if "extensions" in p.decided:
        table["extensions"] = []
    if "base_rates" in p.decided:
        if left := ladder.unfinished(records, p.decided_from):
            raise ValueError(f"the {p.decided_from} sweep has not chosen a rate inside its grid with every seed for "
                             f"{len(left)} of its widths and variants yet")
        best = ladder.best_rates(records, p.decided_from)
        if not SWEEP_PRESETS[p.decided_from].rate_steps:
            table["base_rates"] = [[width, name, b["lr"]] for (width, name), b in best.items()]
        else:
            table["base_rates"] = _relative_bases(p, best, source_decisions)
    return table


def _relative_bases(p, best: dict, source_decisions: dict | None) -> list:
    """A staged sweep's base rates from a staged sweep's: a variant the source trained at the source's base rate
    (the same grid, so the same runs), an untied one at the rate its tied relative chose there (TIE_RELATIVES)."""
    if not source_decisions or "base_rates" not in source_decisions:
        raise ValueError(f"the {p.decided_from} sweep's folder has no decisions table with its base rates")
    source = {(w, name): lr for w, name, lr in source_decisions["base_rates"]}
    rows = []
    for width in p.widths:
        for name in p.variants:
            relative = TIE_RELATIVES.get(name)
            lr = source.get((width, name)) if relative is None else best.get((width, relative), {}).get("lr")
            if lr is None:
                raise ValueError(f"the {p.decided_from} sweep has no rate for {relative or name} at d = {width}")
            rows.append([width, name, lr])
    return rows


def write_decisions(folder, table: dict) -> None:
    """Write the folder's decisions table (checked first)."""
    if problem := decisions_problem(table):
        raise ValueError(f"not a decisions table: {problem}")
    Path(folder).mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(folder) / DECISIONS_FILE, _table_text(table))


def _table_text(table: dict) -> str:
    """The table as JSON with one variant or one row a line, for a reader and a diff."""
    parts = []
    for key, value in table.items():
        items = ([f"{json.dumps(k, ensure_ascii=False)}: {json.dumps(v)}" for k, v in value.items()]
                 if isinstance(value, dict) else [json.dumps(row, ensure_ascii=False) for row in value])
        ends = "{}" if isinstance(value, dict) else "[]"
        body = "".join(f"\n  {item}," for item in items).rstrip(",")
        parts.append(f' {json.dumps(key)}: {ends[0]}{body}' + ("\n " if items else "") + ends[1])
    return "{\n" + ",\n".join(parts) + "\n}\n"
