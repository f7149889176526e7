"""The LM sweeps' presets: what each trains (sizes, budget, seeds, variants, learning rates) and its runs.

A preset's budget is a fraction of 20 tokens per parameter of the Llama model (1 for ``default``); every variant
trains on the same tokens (the data stream does not depend on the seed, unless a preset gives each seed its own
order of the training documents). Three presets train at rates decided from an earlier sweep's results, recorded
in their folder's decisions table (``decisions``; ``SweepPreset.decided``): ``own`` (each variant at its own rate,
from ``rates``), ``ladder`` (a grid around it at each width, with its extensions) and ``budget-ladder`` (a staged
grid around the quarter-budget ladder's best rates) and ``tie-ladder`` (the budget ladder's rule at d = 64 and 128, each
untied variant's grid around the rate its tied relative chose there, the tied variants' runs reused); ``test-time``
trains CEM attention T = 2 at d = 64 in each regime of the test-time study (``test_time``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from cem_core.experiments.schedule import OptimConfig
from cem_core.experiments.test_time import read_Ts
from cem_core.nn.config import CEMOptions, ModelShape
from cem_core.nn.model import ModelConfig
from cem_core.nn.validate import check_choice

from . import rates
from .data_config import DataConfig
from .train_config import LMTrainConfig
from .variants import (
    LADDER_VARIANTS,
    RATED,
    SWEEP_VARIANTS,
    SWEPT,
    TEST_TIME_VARIANTS,
    TIE_LADDER_VARIANTS,
    TRAIN_DEPTH_OF,
)

PRESETS = ("quick", "probe", "default", "gpu", "rates", "own", "ladder", "budget-ladder", "tie-ladder", "test-time")
COMMITTED_SWEEP = Path("results") / "lm-default"   # where the repository keeps its sweep, from its root
COMMITTED_PROBE = Path("results") / "lm-probe"     # and the learning-rate probe that chose its lr
COMMITTED_RATES = Path("results") / "lm-rates"     # each variant's own rate ...
COMMITTED_OWN = Path("results") / "lm-own"         # ... the variants trained at it
COMMITTED_LADDER = Path("results") / "lm-ladder"   # and the width ladder at a quarter of the budget
COMMITTED_BUDGET_LADDER = Path("results") / "lm-budget-ladder"   # and at the paper's budget
COMMITTED_TIE_LADDER = Path("results") / "lm-tie-ladder"   # which tie costs the perplexity, at the same budget
EVAL_TS = (1, 2, 4)                    # test-time scaling of the T = 2 models


@dataclass(frozen=True)
class SweepPreset:
    shape: ModelShape                  # every run's sizes and activation
    seq_len: int
    batch_size: int
    budget: float                      # fraction of 20 tokens per Llama parameter
    lrs: tuple                         # one learning rate for every run (the probe tries several)
    seeds: tuple
    variants: tuple
    eval_batches: int
    evals: int = 6                     # validation points along each run
    demo_max_bytes: int = 11_000_000   # the whole demo corpus (10.7 MB), so the budget is under one epoch
    own_lrs: tuple = ()                # (variant, its rates) pairs that replace lrs for those variants
    widths: tuple = ()                 # a width ladder: one part per d_model, at a fixed head width
    head_width: int = 0
    extra_lrs: tuple = ()              # (d_model, variant, rate): a ladder grid extended at one width
    rate_steps: tuple = ()             # a staged rate choice: the seed-0 grid is these multiples of a base rate ...
    base_lrs: tuple = ()               # ... (d_model, variant, base rate), and the other seeds train at its best
    data_orders: bool = False          # each seed also draws its own order of the training documents
    decided: tuple = ()                # the keys of its folder's decisions table it trains by (``decisions``) ...
    decided_from: str = ""             # ... decided from the records of a finished sweep of this preset
    own_steps: tuple = (1.0,)          # each variant's grid: these multiples of its own rate ("own_rates")
    eval_Ts: tuple = ()                # the test-time T each CEM run is read at (() : EVAL_TS for T = 2 models)

    def lrs_of(self, name: str) -> tuple:
        return dict(self.own_lrs).get(name, self.lrs)

    def parts(self) -> tuple:
        """The preset itself, or one preset per width of its ladder (n_heads = d_model / head_width, d_ff = 8/3
        d_model rounded to a multiple of 8, as the CPU sweep's 256 at 96), each with its grids' extensions."""
        def part(w: int) -> SweepPreset:
            own = {name: self.lrs_of(name) for name in self.variants}
            for width, name, lr in self.extra_lrs:
                if width == w:
                    own[name] = tuple(dict.fromkeys((*own[name], lr)))
            shape = replace(self.shape, d_model=w, n_heads=w // self.head_width, d_ff=round(w / 3) * 8)
            return replace(self, shape=shape, widths=(), own_lrs=tuple(own.items()), extra_lrs=())
        return tuple(part(w) for w in self.widths) or (self,)

    def decide(self, decisions: dict) -> SweepPreset:
        """The preset at the rates a decisions table holds: each variant's grid around its own rate ("own_rates"),
        a ladder's grid extensions ("extensions": [width, variant, rate]) and a staged preset's base rates
        ("base_rates": [width, variant, rate])."""
        changes = {}
        if "own_rates" in self.decided:
            own = decisions["own_rates"]
            if missing := [name for name in self.variants if name not in own]:
                raise ValueError(f"the decisions table has no own rate for {', '.join(missing)}")
            changes["own_lrs"] = tuple((name, tuple(own[name] * k for k in self.own_steps)) for name in self.variants)
        for key, field_ in (("extensions", "extra_lrs"), ("base_rates", "base_lrs")):
            if key in self.decided:
                self._check_rows(key, decisions[key])
                changes[field_] = tuple(tuple(row) for row in decisions[key])
        return replace(self, **changes)

    def _check_rows(self, key: str, rows: list) -> None:
        """A decisions table's [width, variant, rate] rows name this preset's widths and variants, and its base
        rates name every pair once."""
        if strangers := [row for row in rows if row[0] not in self.widths or row[1] not in self.variants]:
            raise ValueError(f"the decisions table's {key} row {strangers[0]} is not one of this preset's widths "
                             f"({', '.join(map(str, self.widths))}) and variants ({', '.join(self.variants)})")
        pairs = [(row[0], row[1]) for row in rows]
        everyone = [(w, name) for w in self.widths for name in self.variants]
        if key == "base_rates" and sorted(pairs) != sorted(everyone):
            missing = [pair for pair in everyone if pair not in pairs] or ["one twice"]
            raise ValueError(f"the decisions table's base_rates must give one rate to every width and variant; "
                             f"it lacks {missing[0]}")


# The learning rate of `default` was chosen by `--preset probe` (results/lm-probe): the one whose worst
# perplexity relative to each probed variant's best was lowest (``rates.choose_lr``; see docs/results-lm.md).
DEFAULT_LR = 1e-3
RATE_GRID = (3e-4, 6e-4, 1e-3, 2e-3, 4e-3, 8e-3)     # the rates sweep's grid, under rules.RATE_RULE
# The width ladder: four variants at three widths spanning 4x, a fixed head width of 16, two layers,
# each at the same fraction of 20 tokens per Llama parameter of its width, on a grid around its own d = 96 rate
LADDER_WIDTHS, LADDER_HEAD_WIDTH, LADDER_BUDGET = (32, 64, 128), 16, 0.25
LADDER_STEPS = (0.5, 1.0, 2.0)                 # the grid: these multiples of each variant's own d = 96 rate
TIE_LADDER_WIDTHS = (64, 128)                  # the tie ladder's widths, two of the budget ladder's
TEST_TIME_LR = 0.004                           # the budget ladder's rate for attention T = 2 at d = 64 (a test checks)
_CPU_SIZES = dict(shape=ModelShape(d_model=96, n_layers=2, n_heads=4, d_ff=256), seq_len=128, batch_size=16,
                  eval_batches=32)
SWEEP_PRESETS = {
    # sized so that `default` finishes within 100 minutes on 2 CPU cores (2 workers, 1 thread each)
    "default": SweepPreset(**_CPU_SIZES, budget=1.0, lrs=(DEFAULT_LR,), seeds=(0, 1, 2), variants=SWEPT),
    # each variant's own learning rate: a grid at a quarter of the budget, under rules.RATE_RULE
    "rates": SweepPreset(**_CPU_SIZES, budget=0.25, lrs=RATE_GRID, seeds=(0,), variants=RATED),
    "probe": SweepPreset(**_CPU_SIZES, budget=0.25, lrs=(1e-3, 3e-3, 1e-2), seeds=(0,),
                         variants=("llama", "attn T=2", "cem-full")),
    "quick": SweepPreset(shape=ModelShape(d_model=16, n_layers=1, n_heads=2, d_ff=32), seq_len=16, batch_size=4,
                         budget=0.002,
                         lrs=(DEFAULT_LR,), seeds=(0, 1), variants=SWEPT, eval_batches=2, evals=2,
                         demo_max_bytes=200_000),
    # each variant at its own rate (the rates sweep's, in the folder's decisions table) at the full budget, read
    # with the t-based rule (verdicts.t_rule)
    "own": SweepPreset(**_CPU_SIZES, budget=1.0, lrs=(), seeds=(0, 1, 2), variants=RATED,
                       decided=("own_rates",), decided_from="rates"),
    # a grid around each variant's own rate at each width, extended at an edge (the table's "extensions")
    "ladder": SweepPreset(**_CPU_SIZES, budget=LADDER_BUDGET, lrs=(), seeds=(0, 1), variants=LADDER_VARIANTS,
                          widths=LADDER_WIDTHS, head_width=LADDER_HEAD_WIDTH, evals=2, own_steps=LADDER_STEPS,
                          decided=("own_rates", "extensions"), decided_from="rates"),
    # a staged grid around the quarter-budget ladder's best rate at each width (the table's "base_rates")
    "budget-ladder": SweepPreset(**_CPU_SIZES, budget=1.0, lrs=(), seeds=(0, 1, 2), variants=LADDER_VARIANTS,
                                 widths=LADDER_WIDTHS, head_width=LADDER_HEAD_WIDTH, evals=4,
                                 rate_steps=LADDER_STEPS, data_orders=True, decided=("base_rates",),
                                 decided_from="ladder"),
    # the budget ladder at d = 64 and 128 with each tie dropped: its tied variants' base rates (and so their runs,
    # reused), each untied variant's grid around the rate its tied relative chose there (decisions.derive_decisions)
    "tie-ladder": SweepPreset(**_CPU_SIZES, budget=1.0, lrs=(), seeds=(0, 1, 2), variants=TIE_LADDER_VARIANTS,
                              widths=TIE_LADDER_WIDTHS, head_width=LADDER_HEAD_WIDTH, evals=4,
                              rate_steps=LADDER_STEPS, data_orders=True, decided=("base_rates",),
                              decided_from="budget-ladder"),
    # CEM attention T = 2 at d = 64 in each training regime of the test-time study, read at T' = 1..8
    "test-time": SweepPreset(**_CPU_SIZES, budget=1.0, lrs=(TEST_TIME_LR,), seeds=(0, 1, 2),
                             variants=tuple(TEST_TIME_VARIANTS), widths=(64,), head_width=LADDER_HEAD_WIDTH, evals=4,
                             data_orders=True, eval_Ts=read_Ts("lm")),
    "gpu": SweepPreset(shape=ModelShape(d_model=384, n_layers=6, n_heads=6, d_ff=1024), seq_len=512, batch_size=64,
                       budget=1.0,
                       lrs=(1e-3,), seeds=(0, 1, 2), variants=SWEPT, eval_batches=64),
}


@dataclass(frozen=True)
class SweepRun:
    name: str                          # a key of SWEEP_VARIANTS
    config: LMTrainConfig
    ladder: bool = False               # a run of a width ladder: its folder names its width

    @property
    def folder(self) -> str:
        slug = "".join(ch if ch.isalnum() else "-" for ch in self.name.lower()).strip("-")
        while "--" in slug:
            slug = slug.replace("--", "-")
        width = f"-d{self.config.shape.d_model}" if self.ladder else ""
        return f"{slug}{width}-lr{self.config.optim.lr:g}-seed{self.config.seed}"


def llama_params(p: SweepPreset, vocab_size: int = 257) -> int:
    cfg = ModelConfig.variant("llama", shape=p.shape, vocab_size=vocab_size, max_seq_len=p.seq_len)
    return cfg.param_counts()["total"]


def steps_for(p: SweepPreset) -> int:
    """Steps for the preset's fraction of 20 tokens per Llama parameter, at batch x seq_len tokens a step."""
    return max(2, math.ceil(p.budget * 20 * llama_params(p) / (p.batch_size * p.seq_len)))


def decided(preset: str, decisions: dict | None) -> SweepPreset:
    """The preset as it trains: at the rates of its folder's decisions table when it trains by one (``own``,
    ``ladder``, ``budget-ladder``: ``SweepPreset.decided``), else as it is."""
    check_choice("preset", preset, PRESETS)
    p = SWEEP_PRESETS[preset]
    if not p.decided:
        return p
    if decisions is None:
        raise ValueError(f"the {preset} preset trains at rates decided from a finished {p.decided_from} sweep, and "
                         f"no decisions table was given (its folder's: decisions.read_decisions)")
    if missing := [key for key in p.decided if key not in decisions]:
        raise ValueError(f"the decisions table of the {preset} preset lacks {', '.join(missing)}")
    return p.decide(decisions)


def preset_runs(preset: str, records: list[dict] = (), decisions: dict | None = None) -> list[SweepRun]:
    """The preset's runs, at the rates of its folder's `decisions` when it trains by them (``decided``). A staged
    preset (``rate_steps``) has as many as its `records` so far determine: each variant's seed-0 grid at each width,
    extended at an edge (``rates.staged_grid``), then its other seeds at the rate chosen."""
    preset_ = decided(preset, decisions)
    specs = []
    ladder = bool(preset_.widths)
    for p in preset_.parts():
        if p.rate_steps:
            specs += _staged_runs(p, records, ladder)
            continue
        for lr in dict.fromkeys(lr for name in p.variants for lr in p.lrs_of(name)):    # in the preset's order
            specs += [_sweep_run(p, name, lr, seed, ladder) for name in p.variants if lr in p.lrs_of(name)
                      for seed in p.seeds]
    return specs


def _sweep_run(p: SweepPreset, name: str, lr: float, seed: int, ladder: bool) -> SweepRun:
    variant, cem = SWEEP_VARIANTS[name]
    depth = (cem or CEMOptions()).T
    steps = steps_for(p)
    every = max(1, steps // p.evals)
    cfg = LMTrainConfig(preset=None, variant=variant, cem=cem, shape=p.shape, seq_len=p.seq_len,
                        batch_size=p.batch_size, steps=steps, optim=OptimConfig(lr=lr), seed=seed,
                        eval_every=every, eval_batches=p.eval_batches, ckpt_every=every, sample_tokens=0,
                        eval_T=p.eval_Ts or (EVAL_TS if variant != "llama" and depth == 2
                                             and cem.eta_mode != "per_step" else ()),   # per-step etas: their T only
                        data_order=seed if p.data_orders else None, train_depth=TRAIN_DEPTH_OF.get(name, "fixed"))
    return SweepRun(name=name, config=cfg, ladder=ladder)


def _staged_runs(p: SweepPreset, records, ladder: bool) -> list[SweepRun]:
    width, first = p.shape.d_model, p.seeds[0]
    base = {name: lr for w, name, lr in p.base_lrs if w == width}
    specs = []
    for name in p.variants:
        seed0 = {r["lr"]: r for r in records if r["name"] == name and r["seed"] == first
                 and r["identity"]["config"]["d_model"] == width}
        grid, chosen = rates.staged_grid(base[name], p.rate_steps, seed0)
        specs += [_sweep_run(p, name, lr, first, ladder) for lr in grid]
        if chosen is not None:
            specs += [_sweep_run(p, name, chosen, seed, ladder) for seed in p.seeds[1:]]
    return specs


def default_data(preset: str) -> DataConfig:
    """The data a preset trains on unless told otherwise: the demo corpus, as much of it as the preset reads."""
    return DataConfig(source="demo", demo_max_bytes=SWEEP_PRESETS[preset].demo_max_bytes)


def preset_summary(preset: str) -> str:
    """One line on what a preset trains (for --help and docs/results-lm.md)."""
    p = SWEEP_PRESETS[preset]
    sizes = "; ".join(f"d_model {q.shape.d_model}, {q.shape.n_layers} layers, {q.shape.n_heads} heads, d_ff "
                      f"{q.shape.d_ff}, {steps_for(q):,} "
                      f"steps (Llama {llama_params(q):,} parameters)" for q in p.parts())
    lrs = ", ".join(f"{lr:g}" for lr in p.lrs) if p.lrs else "each variant's own"
    if p.rate_steps:
        steps = ", ".join(f"{k:g}" for k in p.rate_steps)
        lrs = f"each variant's at each width, chosen on seed {p.seeds[0]} from {steps} x its quarter-budget ladder best"
    order = " (each its own order of the training documents)" if p.data_orders else ""
    return (f"{preset}: {sizes}; sequence {p.seq_len} x batch {p.batch_size}, {p.budget:g} x 20 tokens per Llama "
            f"parameter, lr {lrs}, seeds {len(p.seeds)}{order}, {len(p.variants)} variants")
