"""Running an LM sweep into its folder, resumable, and the records it keeps.

A sweep folder DIR holds one sweep:

- DIR/sweep.json, its manifest: the preset, the data (and, for the demo corpus, the sha256 of its
  text, which depends on the Python installation), the runs and the verdict rule of the claims
  table, fixed before any run trains. A folder of another sweep or another data source is refused.
- DIR/results.json and DIR/results.csv: one record per finished run (rewritten atomically after each
  run), with its identity hash (configuration and data), validation curve, test-time scaling and
  provenance. A run whose hash is there is never trained again; each record is checked on load.
- DIR/decisions.json, for a preset that trains at rates decided from an earlier sweep's results (``own``,
  ``ladder``, ``budget-ladder``): those rates (``decisions``), written from that sweep by ``adopt_decisions``.
- DIR/runs/NAME-seedK/: each run's own LM run folder (checkpoints, metrics), so an interrupted run
  resumes from its last checkpoint. Not needed once the run's record is in results.json (the
  repository commits the records only).
"""
from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import torch

from cem_core.experiments import sweep as sweeps
from cem_core.experiments.integrity import describe_differences, json_hash, seal, short_repr
from cem_core.experiments.pool import finished
from cem_core.experiments.records import provenance
from cem_core.experiments.sweep import MANIFEST_FORMAT, Experiment, Plan
from cem_core.nn.validate import check_int

from . import run_folder
from .data_config import DataConfig
from .decisions import DECISIONS_FILE, derive_decisions, folder_decisions, read_decisions, write_decisions
from .presets import SWEEP_PRESETS, SweepRun, decided, default_data, preset_runs
from .rules import RATE_RULE, RULES, TOLERANCE, VERDICT_RULE
from .sources import content_sha256, describe
from .train import train
from .variants import SWEEP_VARIANTS


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
    if record["tokens"] < 1:
        return f"tokens={record['tokens']} is invalid: a run trains on at least one token"
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
    return sweeps.not_finite(record, {"val_ppl": float, "val_loss": float})


def manifest(preset: str, data: DataConfig, specs: list[SweepRun], decisions: dict | None = None) -> dict:
    """What sweep.json records, the verdict rule included (written before any run trains); a staged preset's base
    rates too (from its `decisions`)."""
    return {"format": MANIFEST_FORMAT, "preset": preset, "data": run_folder.data_identity(data),
            "data_label": describe(data), "data_sha256": content_sha256(data),
            "runs": [json_hash(s.config.identity(data)) for s in specs],
            "tolerance": TOLERANCE, "verdict_rule": RULES.get(preset, VERDICT_RULE),
            **({"rate_rule": RATE_RULE} if preset in ("rates", "own") else {}),
            **({"base_rates": [list(b) for b in decided(preset, decisions).base_lrs]}
               if SWEEP_PRESETS[preset].rate_steps else {})}


def _lm_manifest_differences(recorded: dict, wanted: dict) -> str:
    """The manifests' differences, the label aside; a sweep that has grown (new variants or rates added to its
    preset: its runs a superset of those recorded) is the same sweep."""
    grown = isinstance(recorded.get("runs"), list) and set(recorded["runs"]) <= set(wanted["runs"])
    kept = [k for k in {*recorded, *wanted} if k != "data_label" and not (k == "runs" and grown)]
    return describe_differences({k: recorded[k] for k in kept if k in recorded},
                                {k: wanted[k] for k in kept if k in wanted}, limit=4)


LM_SWEEP = Experiment(label="LM sweep", article="an", fields=LM_RECORD_FIELDS, identity="identity",
                      compare=_lm_manifest_differences, own_files=("runs", DECISIONS_FILE), check=_lm_record_problem,
                      csv_fields=CSV_FIELDS,
                      strangers=lambda records, plan: (
                          f"{len(records)} of its records are not runs of this sweep (first: {records[0]['name']}, "
                          f"seed {records[0]['seed']})"))


def run_sweep(out, preset: str, data: DataConfig | None = None, jobs: int = 1, on_start=None,
              on_done=None, executor=finished, reuse: list[dict] = ()) -> list[dict]:
    """Run every run of the preset not yet in out/results.json (``sweep.run_plan``), at the rates of the folder's
    decisions table when the preset trains by one (``decisions.folder_decisions``); return all records in sweep
    order. Runs go to ``jobs`` worker processes of one thread each, or to ``executor``. A staged preset runs width
    by width, stage after stage (its seed-0 grid, any extension, its other seeds), each stage's runs as the
    records so far determine them (``preset_runs``), until none is left to add. Records in `reuse` (another LM
    sweep's, checked) whose hash is a run of this sweep are taken as they are (the same configuration on the same
    data), not trained again."""
    check_int("jobs", jobs, 1, 64)
    out = Path(out)
    data = data or default_data(preset)
    table = folder_decisions(out, preset)
    key = partial(_run_key, data=data)
    run = partial(run_one, data=data, out=out, threads=None if jobs == 1 else 1)

    def plan(specs):
        return Plan(specs=specs, key=key, manifest=manifest(preset, data, specs, table), run=run, reuse=list(reuse))

    p = SWEEP_PRESETS[preset]
    if not p.rate_steps:
        return sweeps.run_plan(LM_SWEEP, out, plan(preset_runs(preset, decisions=table)), jobs=jobs,
                               executor=executor, on_start=on_start, on_done=on_done)
    records = LM_SWEEP.load(out / sweeps.RESULTS)
    planned = set(_recorded_runs(out))
    for width in p.widths or (p.shape.d_model,):
        while True:
            done = {r["hash"] for r in records}
            specs = [s for s in preset_runs(preset, records, table)
                     if s.config.shape.d_model <= width or key(s) in done | planned]
            if all(key(s) in done for s in specs):
                break
            records = sweeps.run_plan(LM_SWEEP, out, plan(specs), jobs=jobs, executor=executor,
                                      on_start=on_start, on_done=on_done)
    return records


def _run_key(spec: SweepRun, data: DataConfig) -> str:
    return json_hash(spec.config.identity(data))


def _recorded_runs(out: Path) -> list:
    """The runs a folder's manifest lists (a staged sweep's folder may list runs of a stage not yet finished)."""
    runs = (sweeps.recorded_manifest(out) or {}).get("runs")
    return runs if isinstance(runs, list) else []


def stale_runs(records: list[dict], preset: str, data: DataConfig | None = None,
               decisions: dict | None = None) -> tuple[set, set]:
    """(hashes the preset needs but the records lack, hashes in the records the preset no longer has), at the rates
    of the sweep folder's `decisions` when the preset trains by them."""
    data = data or default_data(preset)
    return sweeps.stale(records, (json_hash(s.config.identity(data)) for s in preset_runs(preset, records,
                                                                                           decisions)))


def adopt_decisions(out, preset: str, source) -> dict:
    """Write out/decisions.json from the finished sweep in the folder `source` its preset's rates are decided from
    (``decisions.derive_decisions``), unless the folder holds that table already; return the folder's table. A
    table that holds other rates than `source` decides is refused."""
    out, source = Path(out), Path(source)
    other = (sweeps.recorded_manifest(out) or {}).get("preset", preset)
    if other != preset:
        raise ValueError(f"{out} holds the {other} preset's sweep, not the {preset} preset's: give the {preset} sweep "
                         "a folder of its own (--out)")
    source_preset = (sweeps.recorded_manifest(source) or {}).get("preset")
    wanted = derive_decisions(preset, source_preset, LM_SWEEP.load(source / sweeps.RESULTS), read_decisions(source))
    held = read_decisions(out)
    if held is None:
        write_decisions(out, wanted)
        return wanted
    if differ := [key for key, value in wanted.items() if key != "extensions" and held.get(key) != value]:
        raise ValueError(f"{out / DECISIONS_FILE} holds other {' and '.join(differ)} than {source} decides: start "
                         f"afresh with another --out, or move {out} away")
    return held
