"""``lm sweep``: the paper's language-model claims in miniature, eleven variants (nine for the paper's claims, two
of ours) x three seeds, resumable; and each variant's own learning rate (``--preset rates``: the nine
and two with learned per-step step sizes, on a grid of rates under RATE_RULE, ``own_rates``).

Every variant is trained on the same tokens (the data stream does not depend on the seed), with one
learning rate and schedule, for a budget of 20 tokens per parameter of the Llama model (times the
preset's fraction, 1 for ``default``). A sweep folder DIR holds one sweep:

- DIR/sweep.json, its manifest: the preset, the data (and, for the demo corpus, the sha256 of its
  text, which depends on the Python installation), the runs and the verdict rule of the claims
  table, fixed before any run trains. A folder of another sweep or another data source is refused.
- DIR/results.json and DIR/results.csv: one record per finished run (rewritten atomically after each
  run), with its identity hash (configuration and data), validation curve, test-time scaling and
  provenance. A run whose hash is there is never trained again; each record is checked on load.
- DIR/runs/NAME-seedK/: each run's own LM run folder (checkpoints, metrics), so an interrupted run
  resumes from its last checkpoint. Not needed once the run's record is in results.json (the
  repository commits the records only).

The claims table (``claims``) compares pairs of variants by the mean over seeds of the paired
difference in validation perplexity and its standard error, under ``VERDICT_RULE``.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch

from cem_core.experiments import sweep as runner
from cem_core.experiments import verdicts
from cem_core.experiments.integrity import describe_differences, json_hash, seal, short_repr
from cem_core.experiments.pool import finished
from cem_core.experiments.records import and_list, markdown_table, provenance, read_json
from cem_core.experiments.schedule import OptimConfig
from cem_core.experiments.sweep import MANIFEST_FORMAT, Experiment, Plan
from cem_core.nn.config import CEMOptions, ModelShape
from cem_core.nn.model import VARIANT_OPTIONS, ModelConfig
from cem_core.nn.validate import check_choice, check_int

from . import run_folder
from .data_config import DataConfig
from .sources import content_sha256, describe
from .train import train
from .train_config import LMTrainConfig

PRESETS = ("quick", "probe", "default", "gpu", "rates", "own", "ladder", "budget-ladder")
COMMITTED_SWEEP = Path("results") / "lm-default"   # where the repository keeps its sweep, from its root
COMMITTED_PROBE = Path("results") / "lm-probe"     # and the learning-rate probe that chose its lr
COMMITTED_RATES = Path("results") / "lm-rates"     # each variant's own rate ...
COMMITTED_OWN = Path("results") / "lm-own"         # ... the variants trained at it
COMMITTED_LADDER = Path("results") / "lm-ladder"   # and the width ladder at a quarter of the budget
COMMITTED_BUDGET_LADDER = Path("results") / "lm-budget-ladder"   # and at the paper's budget

# name -> (model variant, CEM switches): the nine variants the paper's claims compare, and two of ours
SWEEP_VARIANTS = {
    "llama": ("llama", None),
    "attn T=1": ("cem-attn", CEMOptions(T=1)),
    "attn T=2": ("cem-attn", CEMOptions(T=2)),
    "attn T=2, diag per head": ("cem-attn", CEMOptions(T=2, diagonal="per_head")),
    "attn T=2, diag shared": ("cem-attn", CEMOptions(T=2, diagonal="shared")),
    "attn T=2, diag shared, P dlr": ("cem-attn", CEMOptions(T=2, diagonal="shared", preconditioner="dlr")),
    "mlp T=1": ("cem-mlp", CEMOptions(T=1)),
    "mlp T=2": ("cem-mlp", CEMOptions(T=2)),
    "cem-full": ("cem-full", VARIANT_OPTIONS["cem-full"]),
    # ours (docs/design.md#214-the-block-as-one-energy): the distance-form diagonal, and cem-full as one energy
    "attn T=2, diag shared, distance": ("cem-attn", CEMOptions(T=2, diagonal="shared", diagonal_form="distance")),
    "cem-full, joint": ("cem-full", replace(VARIANT_OPTIONS["cem-full"], block="joint")),
    # learned step sizes, one eta per step (is the preconditioner's gain step-size control?)
    "attn T=2, diag shared, eta per step": ("cem-attn", CEMOptions(T=2, diagonal="shared", eta_mode="per_step")),
    "attn T=2, diag shared, P dlr, eta per step": ("cem-attn", CEMOptions(T=2, diagonal="shared", preconditioner="dlr",
                                                                         eta_mode="per_step")),
}
PAPER_VARIANTS = tuple(SWEEP_VARIANTS)[:9]       # the nine variants the paper's claims compare
SWEPT = tuple(SWEEP_VARIANTS)[:11]               # the committed sweep's eleven (before the learned step sizes)
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
    extra_lrs: tuple = ()              # (d_model, variant, rates): a ladder grid extended at one width
    rate_steps: tuple = ()             # a staged rate choice: the seed-0 grid is these multiples of a base rate ...
    base_lrs: tuple = ()               # ... (d_model, variant, base rate), and the other seeds train at its best
    data_orders: bool = False          # each seed also draws its own order of the training documents

    def lrs_of(self, name: str) -> tuple:
        return dict(self.own_lrs).get(name, self.lrs)

    def parts(self) -> tuple:
        """The preset itself, or one preset per width of its ladder (n_heads = d_model / head_width, d_ff = 8/3
        d_model rounded to a multiple of 8, as the CPU sweep's 256 at 96), each with its grids' extensions."""
        def part(w: int) -> SweepPreset:
            own = {name: self.lrs_of(name) for name in self.variants}
            for width, name, rates in self.extra_lrs:
                if width == w:
                    own[name] = tuple(dict.fromkeys((*own[name], *rates)))
            shape = replace(self.shape, d_model=w, n_heads=w // self.head_width, d_ff=round(w / 3) * 8)
            return replace(self, shape=shape, widths=(), own_lrs=tuple(own.items()), extra_lrs=())
        return tuple(part(w) for w in self.widths) or (self,)


# The learning rate of `default` was chosen by `--preset probe` (results/lm-probe): the one whose worst
# perplexity relative to each probed variant's best was lowest (see the README).
DEFAULT_LR = 1e-3
# Each variant's own rate, fixed before its grid ran and recorded in the rates sweep's manifest
RATE_GRID = (3e-4, 6e-4, 1e-3, 2e-3, 4e-3, 8e-3)
RATE_RULE = ("Each variant's own learning rate is the rate of the grid with the lowest validation perplexity at a "
             "quarter of the budget (seed 0). It must lie strictly inside the grid: a best rate at an edge extends "
             "the grid by a factor of 2 beyond that edge for that variant, until it does not. The own-rate sweep "
             "then trains three seeds of each variant at the full budget at that rate.")
# ... as the rates sweep found them (results/lm-rates; a test checks them against its records)
OWN_RATES = {"llama": 2e-3, "attn T=1": 4e-3, "attn T=2": 4e-3, "attn T=2, diag per head": 2e-3,
             "attn T=2, diag shared": 4e-3, "attn T=2, diag shared, P dlr": 4e-3, "mlp T=1": 2e-3, "mlp T=2": 2e-3,
             "cem-full": 1e-3, "attn T=2, diag shared, eta per step": 4e-3,
             "attn T=2, diag shared, P dlr, eta per step": 4e-3}
# The width ladder: four variants at three widths spanning 4x, a fixed head width of 16, two layers,
# each at the same fraction of 20 tokens per Llama parameter of its width, on a grid around its own d = 96 rate
LADDER_WIDTHS, LADDER_HEAD_WIDTH, LADDER_BUDGET = (32, 64, 128), 16, 0.25
LADDER_VARIANTS = ("llama", "attn T=1", "attn T=2", "cem-full")
# LADDER_RULE's extensions, added as the ladder's grids ran: (width, variant, the rate beyond the edge it was best at)
LADDER_EXTENSIONS = ((32, "llama", (8e-3,)), (32, "attn T=1", (1.6e-2,)), (32, "attn T=2", (1.6e-2,)),
                     (32, "cem-full", (4e-3,)), (64, "attn T=1", (1e-3,)), (64, "cem-full", (4e-3,)),
                     (128, "llama", (5e-4,)), (128, "attn T=1", (1e-3,)), (128, "attn T=2", (1e-3,)),
                     (32, "attn T=1", (3.2e-2,)), (32, "attn T=2", (3.2e-2,)), (32, "cem-full", (8e-3,)),
                     (64, "cem-full", (8e-3,)), (32, "attn T=1", (6.4e-2,)))
LADDER_STEPS = (0.5, 1.0, 2.0)                 # the grid: these multiples of each variant's own d = 96 rate
LADDER_RULE = ("At each width each variant's rate is the rate of its grid (1/2, 1 and 2 x its own rate at d = 96) "
               "with the lowest mean validation perplexity over the two seeds (a diverged run counts as infinitely "
               "bad); a best at an edge extends that variant's grid at that width by a factor of 2, until it does "
               "not. The same two seeds then measure the gap, so the choice of rate favours each side a little, "
               "alike. The gap of a CEM variant to Llama at a width is the difference in validation loss, g = ln "
               "ppl(variant) - ln ppl(Llama), paired by seed, each side at its best rate, and is shown as the "
               "perplexity ratio minus 1, exp(g) - 1; a pair with a diverged run is left out of the fit and "
               "counted. The trend is the least-squares line g = a + b log10(N), N the Llama model's parameters at "
               "that width, through every seed at every width. The 95% t-interval of b (points - 2 degrees of "
               "freedom) decides, with the line's value at the smallest width saying on which side of 0 the gap "
               "starts: 'closing' when the interval of b lies wholly on the side that moves g towards 0 (b < 0 for "
               "a gap that starts above 0, b > 0 for one below), 'widening' when wholly on the other side, 'no "
               "trend shown' otherwise. The line's value at the paper's smallest scale (Llama 85.2M), with the "
               "95% confidence interval of the line there, is a projection, not a result: it holds only if the "
               "line stays straight that far.")
# The width ladder at the paper's budget: 20 tokens per Llama parameter of each width, three seeds that
# vary the data order as well as the initialisation, each variant's rate chosen on seed 0 from a grid around its
# best rate at that width in the quarter-budget ladder (results/lm-ladder, LADDER_RULE: ladder.best_rates)
BUDGET_LADDER_BASE = ((32, "llama", 4e-3), (32, "attn T=1", 3.2e-2), (32, "attn T=2", 1.6e-2), (32, "cem-full", 4e-3),
                      (64, "llama", 2e-3), (64, "attn T=1", 2e-3), (64, "attn T=2", 4e-3), (64, "cem-full", 4e-3),
                      (128, "llama", 1e-3), (128, "attn T=1", 2e-3), (128, "attn T=2", 2e-3), (128, "cem-full", 1e-3))
BUDGET_LADDER_RULE = (
    "Rates: at each width each variant's rate is the rate with the lowest validation perplexity on seed 0 of the grid "
    "1/2, 1 and 2 x its best rate at that width in the quarter-budget ladder (a diverged run counts as infinitely "
    "bad); a best at an edge extends the grid by a factor of 2 beyond that edge until it does not. Seeds 1 and 2 then "
    "train at that rate. Seeds differ in initialisation and in the order of the training documents. Gap: at each "
    "width, g = ln ppl(variant) - ln ppl(Llama), paired by seed, each side at its chosen rate, shown as the "
    "perplexity gap exp(g) - 1; per width the mean of g over the seeds, its standard error and its 95% t-interval "
    "(seeds - 1 degrees of freedom); a pair with a diverged run is left out and counted. Trend: the weighted least-"
    "squares line g = a + b log10(N) through the width means (N: the Llama model's parameters at that width; "
    "weights 1 / se^2), the 95% t-interval of b with the pooled within-width degrees of freedom (pairs - widths), "
    "and a lack-of-fit F test of the straight line against the width means (the seeds' scatter as pure error). "
    "Verdict, on the gap's size |g|, not its sign: 'no trend shown' when the interval of b includes 0; otherwise "
    "'narrowing' when the line's |g| at the largest width is smaller than at the smallest, 'growing' when it is "
    "larger. A lack-of-fit p below 0.05 is reported beside the verdict: the line then misdescribes the means. The "
    "line's value at the paper's smallest scale (Llama 85.2M) is where the line would reach if it stayed straight, "
    "an extrapolation printed without an interval.")
_CPU_SIZES = dict(shape=ModelShape(d_model=96, n_layers=2, n_heads=4, d_ff=256), seq_len=128, batch_size=16,
                  eval_batches=32)
SWEEP_PRESETS = {
    # sized so that `default` finishes within 100 minutes on 2 CPU cores (2 workers, 1 thread each)
    "default": SweepPreset(**_CPU_SIZES, budget=1.0, lrs=(DEFAULT_LR,), seeds=(0, 1, 2), variants=SWEPT),
    # each variant's own learning rate: a grid at a quarter of the budget, under RATE_RULE
    "rates": SweepPreset(**_CPU_SIZES, budget=0.25, lrs=RATE_GRID, seeds=(0,),
                         variants=(*PAPER_VARIANTS, *tuple(SWEEP_VARIANTS)[len(SWEPT):])),
    "probe": SweepPreset(**_CPU_SIZES, budget=0.25, lrs=(1e-3, 3e-3, 1e-2), seeds=(0,),
                         variants=("llama", "attn T=2", "cem-full")),
    "quick": SweepPreset(shape=ModelShape(d_model=16, n_layers=1, n_heads=2, d_ff=32), seq_len=16, batch_size=4,
                         budget=0.002,
                         lrs=(DEFAULT_LR,), seeds=(0, 1), variants=SWEPT, eval_batches=2, evals=2,
                         demo_max_bytes=200_000),
    # each variant at its own rate (OWN_RATES) at the full budget, read with the t-based rule (verdicts.t_rule)
    "own": SweepPreset(**_CPU_SIZES, budget=1.0, lrs=(), seeds=(0, 1, 2), variants=tuple(OWN_RATES),
                       own_lrs=tuple((name, (lr,)) for name, lr in OWN_RATES.items())),
    "ladder": SweepPreset(**_CPU_SIZES, budget=LADDER_BUDGET, lrs=(), seeds=(0, 1), variants=LADDER_VARIANTS,
                          own_lrs=tuple((name, tuple(OWN_RATES[name] * k for k in LADDER_STEPS))
                                        for name in LADDER_VARIANTS),
                          widths=LADDER_WIDTHS, head_width=LADDER_HEAD_WIDTH, evals=2, extra_lrs=LADDER_EXTENSIONS),
    "budget-ladder": SweepPreset(**_CPU_SIZES, budget=1.0, lrs=(), seeds=(0, 1, 2), variants=LADDER_VARIANTS,
                                 widths=LADDER_WIDTHS, head_width=LADDER_HEAD_WIDTH, evals=4,
                                 rate_steps=LADDER_STEPS, base_lrs=BUDGET_LADDER_BASE, data_orders=True),
    "gpu": SweepPreset(shape=ModelShape(d_model=384, n_layers=6, n_heads=6, d_ff=1024), seq_len=512, batch_size=64,
                       budget=1.0,
                       lrs=(1e-3,), seeds=(0, 1, 2), variants=SWEPT, eval_batches=64),
}

# The verdict rule, fixed before the sweep ran and recorded in its manifest; never moved afterwards.
TOLERANCE = 0.02                       # "comparable": within 2% of the reference's validation perplexity
VERDICT_RULE = verdicts.rule("ppl", "validation perplexity", TOLERANCE)
T_RULE = verdicts.t_rule("ppl", "validation perplexity", TOLERANCE)    # the rule fixed for the own-rate sweep
RULES = {"own": T_RULE, "ladder": LADDER_RULE, "budget-ladder": BUDGET_LADDER_RULE}  # where it is not VERDICT_RULE

# The paper's eight claims and two of ours: (text, [(kind, A, B), ...])
CLAIMS = [
    ("CEM attention costs little perplexity against Llama", [("comparable", "attn T=1", "llama")]),
    ("The CEM gated MLP stays competitive with SwiGLU", [("comparable", "mlp T=1", "llama")]),
    ("T = 2 improves CEM attention over T = 1", [("improves", "attn T=2", "attn T=1")]),
    ("T = 2 improves the CEM MLP over T = 1", [("improves", "mlp T=2", "mlp T=1")]),
    ("Recursive CEM attention (T = 2) beats Llama with fewer parameters", [("improves", "attn T=2", "llama")]),
    ("Learned preconditioners add only a marginal gain next to recursion",
     [("marginal", "attn T=2, diag shared, P dlr", "attn T=2, diag shared")]),
    ("The diagonal is essential (D+LR beats low rank) and the shared diagonal is best",
     [("improves", "attn T=2, diag shared", "attn T=2"),
      ("improves", "attn T=2, diag shared", "attn T=2, diag per head")]),
    ("The fully CEM transformer trains stably, with perplexity comparable to Llama's and fewer parameters",
     [("comparable", "cem-full", "llama")]),
    # ours, not the paper's (fixed before their runs trained)
    ("(ours) The distance-form diagonal improves on the bilinear one",
     [("improves", "attn T=2, diag shared, distance", "attn T=2, diag shared")]),
    ("(ours) One energy for the block (joint descent) improves the fully CEM transformer",
     [("improves", "cem-full, joint", "cem-full")]),
]


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


def preset_runs(preset: str, records: list[dict] = ()) -> list[SweepRun]:
    """The preset's runs. A staged preset (``rate_steps``) has as many as its `records` so far determine: each
    variant's seed-0 grid at each width, extended at an edge (``staged_grid``), then its other seeds at the rate
    chosen."""
    check_choice("preset", preset, PRESETS)
    specs = []
    ladder = bool(SWEEP_PRESETS[preset].widths)
    for p in SWEEP_PRESETS[preset].parts():
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
                        eval_T=EVAL_TS if variant != "llama" and depth == 2
                        and cem.eta_mode != "per_step" else (),     # per-step etas: only at their T
                        data_order=seed if p.data_orders else None)
    return SweepRun(name=name, config=cfg, ladder=ladder)


def _staged_runs(p: SweepPreset, records, ladder: bool) -> list[SweepRun]:
    width, first = p.shape.d_model, p.seeds[0]
    base = {name: lr for w, name, lr in p.base_lrs if w == width}
    specs = []
    for name in p.variants:
        seed0 = {r["lr"]: r for r in records if r["name"] == name and r["seed"] == first
                 and r["identity"]["config"]["d_model"] == width}
        grid, chosen = staged_grid(base[name], p.rate_steps, seed0)
        specs += [_sweep_run(p, name, lr, first, ladder) for lr in grid]
        if chosen is not None:
            specs += [_sweep_run(p, name, chosen, seed, ladder) for seed in p.seeds[1:]]
    return specs


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


def default_data(preset: str) -> DataConfig:
    return DataConfig(source="demo", demo_max_bytes=SWEEP_PRESETS[preset].demo_max_bytes)


# -- running -----------------------------------------------------------------------------------


def run_one(spec: SweepRun, data: DataConfig, out: Path, threads: int | None = None) -> dict:
    """Train (or resume) one run in out/runs/<folder>; return its record for results.json, sealed with its
    checksums."""
    if threads:
        torch.set_num_threads(threads)
    cfg = spec.config
    folder = out / "runs" / spec.folder
    diverged = False
    try:
        summary = train(cfg, data, folder, progress=False).summary
    except FloatingPointError:
        diverged, summary = True, {}
    metrics = run_folder.read_metrics(folder) if (folder / run_folder.METRICS).exists() else []
    curve = [[r["step"], r["val_ppl"]] for r in metrics if "val_ppl" in r]
    params = cfg.model_config(vocab_size=257).param_counts()["total"]
    identity = cfg.identity(data)
    return seal({"hash": json_hash(identity), "name": spec.name, "seed": cfg.seed, "lr": cfg.optim.lr,
            "variant": cfg.variant, "params": params, "steps": cfg.steps,
            "tokens": cfg.steps * cfg.batch_size * cfg.seq_len, "diverged": diverged,
            "val_ppl": summary.get("val_ppl", math.nan), "val_loss": summary.get("val_loss", math.nan),
            "val_ppl_by_T": summary.get("val_ppl_by_T", {}),
            "tokens_per_s": summary.get("tokens_per_s", math.nan), "val_curve": curve,
            "identity": identity, "provenance": provenance()})


LM_RECORD_FIELDS = {"hash": str, "name": str, "seed": int, "lr": float, "variant": str, "params": int, "steps": int,
                 "tokens": int, "diverged": bool, "val_ppl": float, "val_loss": float, "val_ppl_by_T": dict,
                 "tokens_per_s": float, "val_curve": list, "identity": dict}
CSV_FIELDS = ("name", "seed", "lr", "variant", "params", "steps", "tokens", "diverged", "val_ppl", "val_loss",
              "tokens_per_s", "hash")


def _lm_record_problem(record: dict) -> str:
    """An LM record's own checks: its seed, rate and variant are its identity's, and its name a variant's."""
    config = record["identity"].get("config", {})
    for name in ("seed", "lr", "variant"):
        if config.get(name) != record[name]:
            return f"{name}={short_repr(record[name])} does not match its identity ({short_repr(config.get(name))})"
    if record["name"] not in SWEEP_VARIANTS:
        return f"name={record['name']!r} is not one of the sweep's variants"
    if record["steps"] < 1 or record["tokens"] < 1:
        return f"steps={record['steps']} is invalid: a run trains at least one step"
    by_T = record["val_ppl_by_T"]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in by_T.values()):
        return f"val_ppl_by_T={short_repr(by_T)} is invalid: must map each T to a number"
    if record["diverged"]:
        return ""
    if any(v <= 0 for v in (record["val_ppl"], *by_T.values()) if math.isfinite(v)):
        return f"val_ppl={record['val_ppl']!r} is invalid: a perplexity is at least 1"
    points = [v for point in record["val_curve"] for v in (point if isinstance(point, list) else [point])]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in points):
        return f"val_curve={short_repr(record['val_curve'])} is invalid: not [step, perplexity] pairs of numbers"
    return runner.not_finite(record, {"val_ppl": float, "val_loss": float})


def manifest(preset: str, data: DataConfig, specs: list[SweepRun]) -> dict:
    """What sweep.json records, the verdict rule included (written before any run trains)."""
    return {"format": MANIFEST_FORMAT, "preset": preset, "data": run_folder.data_identity(data),
            "data_label": describe(data), "data_sha256": content_sha256(data),
            "runs": [json_hash(s.config.identity(data)) for s in specs],
            "tolerance": TOLERANCE, "verdict_rule": RULES.get(preset, VERDICT_RULE),
            **({"rate_rule": RATE_RULE} if preset in ("rates", "own") else {}),
            **({"base_rates": [list(b) for b in SWEEP_PRESETS[preset].base_lrs]} if SWEEP_PRESETS[preset].rate_steps
               else {})}


def _lm_manifest_differences(recorded: dict, wanted: dict) -> str:
    """The manifests' differences, the label aside; a sweep that has grown (new variants or rates added to its
    preset: its runs a superset of those recorded) is the same sweep."""
    grown = isinstance(recorded.get("runs"), list) and set(recorded["runs"]) <= set(wanted["runs"])
    kept = [k for k in {*recorded, *wanted} if k != "data_label" and not (k == "runs" and grown)]
    return describe_differences({k: recorded[k] for k in kept if k in recorded},
                                {k: wanted[k] for k in kept if k in wanted}, limit=4)


LM_SWEEP = Experiment(label="LM sweep", article="an", fields=LM_RECORD_FIELDS, identity="identity",
                      compare=_lm_manifest_differences, own_files=("runs",), check=_lm_record_problem,
                      csv_fields=CSV_FIELDS,
                      strangers=lambda records, plan: (
                          f"{len(records)} of its records are not runs of this sweep (first: {records[0]['name']}, "
                          f"seed {records[0]['seed']})"))


def run_sweep(out, preset: str, data: DataConfig | None = None, jobs: int = 1, on_start=None,
              on_done=None, executor=finished) -> list[dict]:
    """Run every run of the preset not yet in out/results.json (``sweep.run_plan``); return all records in sweep
    order. Runs go to ``jobs`` worker processes of one thread each, or to ``executor``. A staged preset runs width
    by width, stage after stage (its seed-0 grid, any extension, its other seeds), each stage's runs as the
    records so far determine them (``preset_runs``), until none is left to add."""
    check_int("jobs", jobs, 1, 64)
    out = Path(out)
    data = data or default_data(preset)
    key = partial(_run_key, data=data)
    run = partial(run_one, data=data, out=out, threads=None if jobs == 1 else 1)

    def plan(specs):
        return Plan(specs=specs, key=key, manifest=manifest(preset, data, specs), run=run)

    p = SWEEP_PRESETS[preset]
    if not p.rate_steps:
        return runner.run_plan(LM_SWEEP, out, plan(preset_runs(preset)), jobs=jobs, executor=executor,
                               on_start=on_start, on_done=on_done)
    records = LM_SWEEP.load(out / runner.RESULTS)
    planned = set(_recorded_runs(out))
    for width in p.widths or (p.shape.d_model,):
        while True:
            done = {r["hash"] for r in records}
            specs = [s for s in preset_runs(preset, records)
                     if s.config.shape.d_model <= width or key(s) in done | planned]
            if all(key(s) in done for s in specs):
                break
            records = runner.run_plan(LM_SWEEP, out, plan(specs), jobs=jobs, executor=executor,
                                      on_start=on_start, on_done=on_done)
    return records


def _run_key(spec: SweepRun, data: DataConfig) -> str:
    return json_hash(spec.config.identity(data))


def _recorded_runs(out: Path) -> list:
    """The runs a folder's manifest lists (a staged sweep's folder may list runs of a stage not yet finished)."""
    path = out / runner.SWEEP_MANIFEST
    recorded = read_json(path) if path.exists() else None
    return recorded.get("runs", []) if isinstance(recorded, dict) and isinstance(recorded.get("runs"), list) else []


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
    choice behind RATE_RULE (own_rates) and LADDER_RULE (ladder.best_rates)."""
    mean = {lr: mean_ppl(runs) for lr, runs in by_lr.items()}
    grid = sorted(mean)
    lr = min(grid, key=lambda x: (mean[x], x))
    return {"lr": lr, "ppl": mean[lr], "grid": grid, "inside": grid[0] < lr < grid[-1]}


def own_rates(records: list[dict]) -> dict[str, dict]:
    """Each variant's own learning rate under RATE_RULE, from a rates sweep's records: {name: best_rate of its
    grid}; a diverged run counts as infinitely bad."""
    grids: dict[str, dict[float, list[dict]]] = {}
    for r in records:
        grids.setdefault(r["name"], {}).setdefault(r["lr"], []).append(r)
    return {name: best_rate(by_lr) for name, by_lr in grids.items()}


def stale_runs(records: list[dict], preset: str, data: DataConfig | None = None) -> tuple[set, set]:
    """(hashes the preset needs but the records lack, hashes in the records the preset no longer has)."""
    data = data or default_data(preset)
    return runner.stale(records, (json_hash(s.config.identity(data)) for s in preset_runs(preset, records)))


# -- summaries and the claims table ----------------------------------------------------------------


def summarize(records: list[dict]) -> list[dict]:
    """Per variant (in sweep order): parameters, seeds, mean and standard error of validation perplexity,
    tokens/s, test-time scaling means."""
    rows = []
    for name in SWEEP_VARIANTS:
        runs = [r for r in records if r["name"] == name]
        if not runs:
            continue
        ok = [r for r in runs if not r["diverged"]]
        ppl = [r["val_ppl"] for r in ok]
        by_T = {}
        for T in EVAL_TS:
            values = [r["val_ppl_by_T"][str(T)] for r in ok if str(T) in r["val_ppl_by_T"]]
            if values:
                by_T[T] = statistics.fmean(values)
        rows.append({"name": name, "params": runs[0]["params"], "seeds": len(runs), "diverged": len(runs) - len(ok),
                     "ppl_mean": statistics.fmean(ppl) if ppl else math.nan,
                     "ppl_se": statistics.stdev(ppl) / math.sqrt(len(ppl)) if len(ppl) > 1 else math.nan,
                     "tokens_per_s": statistics.fmean(r["tokens_per_s"] for r in ok) if ok else math.nan,
                     "ppl_by_T": by_T})
    return rows


def validation_curves(records: list[dict]) -> dict:
    """Validation perplexity against tokens per variant: the mean over seeds and the band between the
    lowest and highest seed, {name: {"tokens", "mean", "low", "high"}} (diverged runs left out)."""
    curves = {}
    for name in SWEEP_VARIANTS:
        runs = [r for r in records if r["name"] == name and not r["diverged"] and r["val_curve"]]
        if not runs:
            continue
        steps = sorted(set.intersection(*({step for step, _ in r["val_curve"]} for r in runs)))
        per_step = [[dict(r["val_curve"])[step] for r in runs] for step in steps]
        tokens_per_step = runs[0]["tokens"] / runs[0]["steps"]
        curves[name] = {"tokens": [step * tokens_per_step for step in steps],
                        "mean": [statistics.fmean(v) for v in per_step],
                        "low": [min(v) for v in per_step], "high": [max(v) for v in per_step]}
    return curves


def variant_difference(records: list[dict], a: str, b: str) -> dict:
    """ppl(a) - ppl(b) paired by seed (``verdicts.paired_difference``), with the two names."""
    by_seed = {name: {r["seed"]: r for r in records if r["name"] == name} for name in (a, b)}
    seeds = set(by_seed[a]) & set(by_seed[b])
    diverged = any(by_seed[n][s]["diverged"] for n in (a, b) for s in seeds)
    values = [{s: r["val_ppl"] for s, r in by_seed[n].items()} for n in (a, b)]
    return {"a": a, "b": b} | verdicts.paired_difference(*values, diverged=diverged)


# the same records read with a t-based 95% interval (n - 1 degrees of freedom) beside the recorded rule, each
# verdict labelled with its direction relative to the paper (verdicts.t_reading); the recorded rule is unmoved
T_READING = "t-based reading (95%, n − 1 dof)"


def claims(records: list[dict]) -> list[dict]:
    """The claims, each with its pairs (difference, standard error, verdict under the recorded rule, t-based
    reading) and one verdict and one reading."""
    rows = []
    for i, (text, pairs) in enumerate(CLAIMS, 1):
        compared = []
        for kind, a, b in pairs:
            d = variant_difference(records, a, b)
            compared.append(d | {"kind": kind, "verdict": verdicts.verdict(kind, d, TOLERANCE),
                                 "reading": verdicts.t_reading(kind, d, TOLERANCE)})
        rows.append({"claim": i, "text": text, "pairs": compared,
                     "verdict": verdicts.overall([p["verdict"] for p in compared]),
                     "reading": verdicts.overall_reading([p["reading"] for p in compared])})
    return rows


def variant_rows(records: list[dict]) -> list[dict]:
    """The variants table as displayed (README, app, CLI): one row of strings per variant."""
    rows = summarize(records)
    llama = next((r for r in rows if r["name"] == "llama"), None)
    out = []
    for r in rows:
        div = f" ({r['diverged']} diverged)" if r["diverged"] else ""
        out.append({"variant": r["name"], "params": f"{r['params']:,}",
                    "× Llama": f"{r['params'] / llama['params']:.3f}" if llama else "–",
                    "val ppl (mean ± se)": f"{r['ppl_mean']:.3f} ± {r['ppl_se']:.3f}",
                    "seeds": f"{r['seeds']}{div}", "tokens/s": f"{r['tokens_per_s']:,.0f}",
                    "ppl at T=1 / 2 / 4": " / ".join(f"{r['ppl_by_T'][T]:.3f}" for T in EVAL_TS
                                                     if T in r["ppl_by_T"]) or "–"})
    return out


def claim_rows(records: list[dict]) -> list[dict]:
    """The claims table as displayed: one row of strings per claim."""
    return [{"#": str(c["claim"]), "claim": c["text"],
             "compared (A vs B)": "; ".join(f"{p['a']} vs {p['b']} ({p['kind']})" for p in c["pairs"]),
             "ppl(A) − ppl(B), mean ± se": "; ".join(f"{p['mean']:+.3f} ± {p['se']:.3f}" for p in c["pairs"]),
             "verdict": c["verdict"], T_READING: c["reading"]} for c in claims(records)]


def claims_multiplicity(records: list[dict], shown=None) -> str:
    """One sentence on multiplicity: the claims' paired comparisons (of the claims numbered in ``shown``, else all),
    and which differences from 0 survive Holm's correction (``verdicts.holm`` on two-sided paired t-tests)."""
    pairs = [(c["claim"], p) for c in claims(records) if shown is None or str(c["claim"]) in shown
             for p in c["pairs"]]
    kept = [pairs[i] for i in verdicts.holm([verdicts.paired_p(p) for _, p in pairs])]
    tested = sum(math.isfinite(verdicts.paired_p(p)) for _, p in pairs)
    named = and_list([f"claim {claim} ({p['a']} vs {p['b']}, {p['mean']:+.3f})" for claim, p in kept])
    return (f"Multiplicity: {tested} paired comparisons; under Holm's correction at {verdicts.HOLM_LEVEL:.0%} (two-"
            f"sided paired t-tests of a difference from 0), {len(kept)} remain" + (f": {named}." if kept else "."))


def reading_summary(records: list[dict]) -> str:
    """One sentence on what the t-based reading changes, computed from the records (README, app)."""
    rows = claims(records)
    seeds = min((p["seeds"] for c in rows for p in c["pairs"]), default=0)

    def recorded(reading: str) -> str:                    # the recorded rule's word for a reading
        return "contradicted" if reading in verdicts.DIRECTIONS[1:3] else reading

    def claim_list(chosen: list[dict]) -> str:
        return and_list([str(c["claim"]) for c in chosen]) if chosen else "none"

    moved = [c for c in rows if recorded(c["reading"]) != c["verdict"]]
    by = {label: [c for c in rows if c["reading"] == label] for label in verdicts.DIRECTIONS}
    return (f"Read with a t-based 95% interval ({seeds} seeds: {verdicts.t_multiplier(seeds):.2f} standard errors "
            f"where the recorded rule takes 2, which covers about {verdicts.coverage(2.0, seeds):.0%}), the verdicts "
            f"that change are claims {claim_list(moved)}. Against the paper: {claim_list(by[verdicts.DIRECTIONS[1]])}; "
            f"in CEM's favour beyond the paper's claim: {claim_list(by[verdicts.DIRECTIONS[2]])}; supported: "
            f"{claim_list(by[verdicts.DIRECTIONS[0]])}; inconclusive: {claim_list(by[verdicts.DIRECTIONS[3]])}. "
            + claims_multiplicity(records))


def side_by_side_rows(common: list[dict], own: list[dict]) -> list[dict]:
    """The paper's claims twice, as displayed: at the common rate (the committed sweep, its recorded verdicts
    unmoved, with their t-based reading) and with each variant at its own rate (the own-rate sweep, under the
    t-based rule fixed for it); claims whose variants the own-rate sweep does not train are left out."""
    trained = {r["name"] for r in own}
    at_own = {c["claim"]: c for c in claims(own)}
    out = []
    for c in claims(common):
        if not all({p["a"], p["b"]} <= trained for p in c["pairs"]):
            continue
        o = at_own[c["claim"]]
        out.append({"#": str(c["claim"]), "claim": c["text"],
                    f"common rate {DEFAULT_LR:g}: A − B": "; ".join(f"{p['mean']:+.3f} ± {p['se']:.3f}"
                                                                    for p in c["pairs"]),
                    "recorded verdict (± 2 se)": c["verdict"], "t-based reading": c["reading"],
                    "own rates: A − B": "; ".join(f"{p['mean']:+.3f} ± {p['se']:.3f}" for p in o["pairs"]),
                    "own rates: t-based verdict": o["reading"]})
    return out


def own_variant_rows(common: list[dict], own: list[dict]) -> list[dict]:
    """The own-rate sweep's variants as displayed: each one's rate and validation perplexity there, beside its
    perplexity at the common rate."""
    at_common = {r["name"]: r for r in summarize(common)}
    rate = {r["name"]: r["lr"] for r in own}
    out = []
    for r in summarize(own):
        c = at_common.get(r["name"])
        div = f" ({r['diverged']} diverged)" if r["diverged"] else ""
        out.append({"variant": r["name"], "own rate": f"{rate[r['name']]:g}",
                    f"val ppl at {DEFAULT_LR:g} (mean ± se)": f"{c['ppl_mean']:.3f} ± {c['ppl_se']:.3f}" if c else "–",
                    "val ppl at own rate (mean ± se)": f"{r['ppl_mean']:.3f} ± {r['ppl_se']:.3f}",
                    "seeds": f"{r['seeds']}{div}"})
    return out


def own_summary(common: list[dict], own: list[dict]) -> str:
    """One sentence on the claims with each variant at its own rate, computed from the records."""
    rows = side_by_side_rows(common, own)
    shown = {r["#"] for r in rows}
    seeds = min((p["seeds"] for c in claims(own) if str(c["claim"]) in shown for p in c["pairs"]), default=0)

    def listed(chosen: list[str]) -> str:
        return and_list(chosen) if chosen else "none"

    def claim_list(label: str) -> str:
        return listed([r["#"] for r in rows if r["own rates: t-based verdict"] == label])

    moved = listed([r["#"] for r in rows if r["own rates: t-based verdict"] != r["t-based reading"]])
    return (f"With each variant at its own rate ({seeds} seeds, read with the t-based rule fixed before these runs "
            f"trained), against the paper: claims {claim_list(verdicts.DIRECTIONS[1])}; in CEM's favour beyond the "
            f"paper's claim: {claim_list(verdicts.DIRECTIONS[2])}; supported: {claim_list(verdicts.DIRECTIONS[0])}; "
            f"inconclusive: {claim_list(verdicts.DIRECTIONS[3])}. Against the same reading at the common rate, the "
            f"claims whose reading changes are {moved}.")


def own_markdown(common: list[dict], own: list[dict]) -> str:
    """The own-rate evidence as the README shows it: the variants, the claims side by side, and two sentences."""
    return (markdown_table(own_variant_rows(common, own), ("own rate", f"val ppl at {DEFAULT_LR:g} (mean ± se)",
                                                          "val ppl at own rate (mean ± se)", "seeds"))
            + "\n\n" + markdown_table(side_by_side_rows(common, own), ("#", f"common rate {DEFAULT_LR:g}: A − B",
                                                                       "own rates: A − B"))
            + "\n\n" + own_summary(common, own) + " "
            + claims_multiplicity(own, {r["#"] for r in side_by_side_rows(common, own)})
            + "\n\n" + step_size_summary(own))


STEP_SIZE_PAIRS = (("attn T=2, diag shared, P dlr", "attn T=2, diag shared"),
                   ("attn T=2, diag shared, eta per step", "attn T=2, diag shared"),
                   ("attn T=2, diag shared, P dlr, eta per step", "attn T=2, diag shared, eta per step"))


def step_size_summary(records: list[dict]) -> str:
    """What the learned per-step step sizes say about claim 6 (is dlr's gain step-size control?), in words
    computed from the own-rate sweep's records: each pair better, worse or no measurable difference by the
    t-based interval (95%, seeds - 1 degrees of freedom)."""
    names = {r["name"] for r in records}
    if missing := [n for n in dict.fromkeys(n for pair in STEP_SIZE_PAIRS for n in pair) if n not in names]:
        return f"Claim 6 and learned step sizes: no runs yet of {and_list(missing)}."
    words = {"supported": "better", "contradicted": "worse", "inconclusive": "no measurable difference"}
    found = []
    for a, b in STEP_SIZE_PAIRS:
        d = variant_difference(records, a, b)
        found.append((d, "a run diverged" if d["diverged"] else
                      words[verdicts.verdict("improves", d, TOLERANCE, verdicts.t_multiplier(d["seeds"]))]))
    (p, p_word), (eta, eta_word), (both, both_word) = found

    def said(d: dict, word: str) -> str:
        return f"{d['mean']:+.3f} ± {d['se']:.3f} ({word}, {d['seeds']} seeds)"

    if "a run diverged" in (p_word, eta_word, both_word):
        reading = "a run diverged, and this cannot tell step-size control from curvature"
    elif p_word != "better":
        reading = (f"dlr shows no gain at its own rate ({p_word}): there is no gain here to attribute to "
                   "step-size control or to curvature")
    elif both_word == "better":
        reading = "dlr improves on top of learned step sizes, so its gain is not only step-size control"
    elif both_word == "worse":
        reading = "dlr is worse on top of learned step sizes than without it"
    elif eta_word == "better":
        reading = ("learned step sizes give a gain and dlr adds none measurable on top: consistent with reading "
                   "dlr's gain as step-size control")
    else:
        reading = (f"learned step sizes alone show {'a loss' if eta_word == 'worse' else 'no measurable gain'} and "
                   "dlr adds none measurable on top of them, so this cannot tell step-size control from curvature")
    return (f"Claim 6 and learned step sizes, each variant at its own rate, read with the t-based interval: "
            f"against the shared diagonal, the dlr preconditioner changes validation perplexity by {said(p, p_word)} "
            f"and learned per-step η by {said(eta, eta_word)}; dlr on top of learned η changes it by "
            f"{said(both, both_word)}. So {reading}.")


def markdown_tables(records: list[dict]) -> str:
    """The variants table and the claims table (verdicts in bold), as the README shows them."""
    claims_ = [r | {"verdict": f"**{r['verdict']}**"} for r in claim_rows(records)]
    return (markdown_table(variant_rows(records), ("params", "× Llama", "val ppl (mean ± se)", "seeds", "tokens/s"))
            + "\n\n" + markdown_table(claims_, ("#", "ppl(A) − ppl(B), mean ± se")))


def preset_summary(preset: str) -> str:
    """One line on what a preset trains (for --help and the README)."""
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
