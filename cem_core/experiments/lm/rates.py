"""Choosing learning rates from a sweep's records: the probe's one rate for every variant (``choose_lr``), each
variant's own rate on a grid (``own_rates``, under ``rules.RATE_RULE``), and the staged grid that grows past an
edge until its best rate lies inside it (``staged_grid``). A diverged run counts as infinitely bad throughout."""
from __future__ import annotations

import math
import statistics


def choose_lr(records: list[dict]) -> float:
    """The probe's rule for the sweep's one learning rate: the lr whose worst perplexity relative to each
    probed variant's best (over the probed lrs, mean over seeds) is lowest, so it suits every variant
    alike; a diverged run counts as infinitely bad."""
    lrs = sorted({r["lr"] for r in records})
    names = sorted({r["name"] for r in records})

    def ppl(name, lr):
        return mean_ppl([r for r in records if r["name"] == name and r["lr"] == lr])

    best = {name: min(ppl(name, lr) for lr in lrs) for name in names}
    return min(lrs, key=lambda lr: max(ppl(name, lr) / best[name] for name in names))


def run_ppl(record: dict) -> float:
    """A run's validation perplexity for choosing rates: a diverged run counts as infinitely bad."""
    return math.inf if record["diverged"] or not math.isfinite(record["val_ppl"]) else record["val_ppl"]


def mean_ppl(runs: list[dict]) -> float:
    """The mean of run_ppl over runs (the seeds at one rate); no run at all counts as infinitely bad."""
    return statistics.fmean(run_ppl(r) for r in runs) if runs else math.inf


def best_rate(by_lr: dict[float, list[dict]]) -> dict:
    """The rate of a grid ({lr: its runs}) with the lowest mean perplexity (the lower rate on a tie): {"lr", "ppl"
    (that mean), "grid" (the rates with a run), "inside" (whether the best lies strictly inside them)}. The one
    choice behind rules.RATE_RULE (own_rates) and rules.LADDER_RULE (ladder.best_rates)."""
    mean = {lr: mean_ppl(runs) for lr, runs in by_lr.items()}
    grid = sorted(mean)
    lr = min(grid, key=lambda x: (mean[x], x))
    return {"lr": lr, "ppl": mean[lr], "grid": grid, "inside": grid[0] < lr < grid[-1]}


def own_rates(records: list[dict]) -> dict[str, dict]:
    """Each variant's own learning rate under rules.RATE_RULE, from a rates sweep's records: {name: best_rate of its
    grid}; a diverged run counts as infinitely bad."""
    grids: dict[str, dict[float, list[dict]]] = {}
    for r in records:
        grids.setdefault(r["name"], {}).setdefault(r["lr"], []).append(r)
    return {name: best_rate(by_lr) for name, by_lr in grids.items()}


def staged_grid(base: float, steps: tuple, seed0: dict[float, dict]) -> tuple[list[float], float | None]:
    """A staged rate choice on seed 0: (the grid, the rate chosen or None while the grid's runs are unfinished).
    The grid starts at `steps` x `base`; while its runs (`seed0`: {lr: record}) are all finished and the best is at
    an edge, it grows by a factor of 2 beyond that edge (``best_rate``: a diverged run is infinitely bad)."""
    grid = sorted(_rate(base * k) for k in steps)
    while all(lr in seed0 for lr in grid):
        best = best_rate({lr: [seed0[lr]] for lr in grid})
        if best["inside"]:
            return grid, best["lr"]
        grid = [_rate(grid[0] / 2), *grid] if best["lr"] == grid[0] else [*grid, _rate(grid[-1] * 2)]
    return grid, None


def _rate(lr: float) -> float:
    """A learning rate rounded to 6 significant digits, so that 2 x (lr / 2) is lr again."""
    return float(f"{lr:.6g}")
