"""The Gaussian-process sweep: presets, resumable results, provenance and summaries.

Each run is identified by a hash of its full configuration (task, model, training). Results
live in DIR/results.json (a list of run records, rewritten atomically after every finished
run) and DIR/results.csv. A run whose hash is already in results.json is never retrained.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

from .config import _check_choice, _check_int
from .records import atomic_write_text, provenance
from .gp import (GPModelConfig, GPTaskConfig, GPTrainConfig, baseline_rmses, config_dict, evaluate_at_T,
                 train_gp)

PRESETS = ("quick", "default", "gpu")
EVAL_TS = (1, 2, 3, 4, 6, 8, 12, 16)          # test-time scaling grid
RESULTS_DIR = Path(__file__).resolve().parents[1] / "results" / "gp-default"   # the committed sweep


@dataclass(frozen=True)
class RunSpec:
    task: GPTaskConfig
    model: GPModelConfig
    train: GPTrainConfig
    group: str                     # which part of the sweep the run belongs to (for tables and plots)

    def config(self) -> dict:
        return config_dict(self.task, self.model, self.train)

    @property
    def hash(self) -> str:
        text = json.dumps(self.config(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def preset_runs(preset: str) -> list[RunSpec]:
    """The runs of a preset (see the README's GP section for what each one answers)."""
    _check_choice("preset", preset, PRESETS)
    # sized so that `default` finishes within 30 minutes on 2 CPU cores (2 workers, 1 thread each)
    width, steps, batch, seeds, tasks = {
        "quick": (64, 400, 32, (0,), [GPTaskConfig()]),
        "default": (64, 2000, 32, (0, 1, 2), [GPTaskConfig()]),
        "gpu": (128, 6000, 128, (0, 1, 2), [GPTaskConfig(), GPTaskConfig(d_x=2, n_points=64, lengthscale=0.5),
                                            GPTaskConfig(n_points=128)]),
    }[preset]
    base = GPModelConfig(width=width, d_ff=2 * width, n_heads=4)
    groups: list[tuple[str, GPModelConfig]] = []
    # depth 1: recursion is the only source of iterative depth
    groups.append(("depth1", replace(base, attention="llama")))
    for diagonal in ("none", "shared"):
        for T in (1, 2, 4, 8):
            groups.append(("depth1", replace(base, T=T, diagonal=diagonal)))
    # depth 2
    groups.append(("depth2", replace(base, attention="llama", depth=2)))
    for T in (1, 4):
        groups.append(("depth2", replace(base, T=T, depth=2)))
    # a fully CEM model: T = 2 with the shared diagonal and D+LR (psd) preconditioners
    groups.append(("cem-full", replace(base, mlp="cem", T=2, diagonal="shared", preconditioner="psd")))
    # how the step size behaves across steps (depth 1, T = 4)
    for name, changes in (("eta=1/T", dict(eta=0.25)), ("learned", dict(eta_mode="learned")),
                          ("per_step", dict(eta_mode="per_step")), ("anchor", dict(anchor=1.0))):
        groups.append(("eta:" + name, replace(base, T=4, **changes)))
    train = GPTrainConfig(steps=steps, batch_size=batch)
    return [RunSpec(task=task, model=model, train=replace(train, seed=seed), group=group)
            for task in tasks for group, model in groups for seed in seeds]


# -- running ---------------------------------------------------------------------------------


def run_spec(spec: RunSpec, device: str = "cpu", threads: int | None = None, progress=None,
             eval_Ts: tuple = EVAL_TS) -> dict:
    """Train and evaluate one run; return its record for results.json.

    CEM runs are also evaluated at each T in ``eval_Ts`` (test-time scaling), except per-step
    eta, which has exactly T learned step sizes."""
    if threads:
        torch.set_num_threads(threads)
    result = train_gp(spec.task, spec.model, spec.train, progress=progress, device=device)
    baselines = baseline_rmses(spec.task, spec.train)
    m = spec.model
    record = {
        "hash": spec.hash, "group": spec.group,
        "attention": m.attention, "mlp": m.mlp, "depth": m.depth, "width": m.width, "T": m.T,
        "diagonal": m.diagonal, "preconditioner": m.preconditioner, "eta_mode": m.eta_mode, "eta": m.eta,
        "anchor": m.anchor, "seed": spec.train.seed, "steps": spec.train.steps,
        "kernel": spec.task.kernel, "d_x": spec.task.d_x, "n_points": spec.task.n_points,
        "params": sum(p.numel() for p in result.model.parameters()),
        "rmse": result.rmse, "rmse_gp": baselines["gp"]["rmse"],
        "rmse_ratio": result.rmse / baselines["gp"]["rmse"],
        "rmse_zero": baselines["zero"]["rmse"], "rmse_nearest_neighbour": baselines["nearest_neighbour"]["rmse"],
        "rmse_by_position": result.rmse_by_position, "rmse_gp_by_position": baselines["gp"]["rmse_by_position"],
        "final_train_loss": result.losses[-1] if result.losses else None,
        "learned_eta": _learned_etas(result.model),
        "diverged": result.diverged, "train_seconds": result.seconds, "device": device,
        "config": spec.config(), "provenance": provenance(),
    }
    if result.model.cem_layers() and eval_Ts and m.eta_mode != "per_step" and not result.diverged:
        record["rmse_by_eval_T"] = {str(T): v for T, v in
                                    evaluate_at_T(result.model, spec.task, spec.train, eval_Ts).items()}
    return record


def _learned_etas(model) -> list | None:
    etas = [layer.step_size_values() for layer in model.cem_layers() if layer.config.learn_eta]
    return etas or None


def _worker(spec: RunSpec, device: str) -> dict:
    return run_spec(spec, device=device, threads=1)


def load_results(path: Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    try:
        records = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); move it away to start a fresh sweep") from None
    if not isinstance(records, list):
        raise ValueError(f"{path} must hold a list of run records")
    return records


CSV_FIELDS = ("hash", "group", "attention", "mlp", "depth", "width", "T", "diagonal", "preconditioner",
              "eta_mode", "eta", "anchor", "seed", "steps", "kernel", "d_x", "n_points", "params", "rmse",
              "rmse_gp", "rmse_ratio", "rmse_zero", "rmse_nearest_neighbour", "diverged", "train_seconds")


def save_results(out_dir: Path, records: list[dict]) -> None:
    """Write results.json and results.csv atomically (write to a temporary file, then rename)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "results.json", json.dumps(records, indent=1))
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(records)
    atomic_write_text(out_dir / "results.csv", table.getvalue())


def _finished_runs(todo: list[RunSpec], jobs: int, device: str):
    """Records of the runs as they finish: in this process, or in ``jobs`` worker processes."""
    if jobs == 1 or len(todo) <= 1:
        yield from (run_spec(spec, device=device) for spec in todo)
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_worker, spec, device) for spec in todo]
        yield from (future.result() for future in as_completed(futures))


def run_sweep(out_dir, specs: list[RunSpec], jobs: int = 1, device: str = "cpu", on_done=None) -> list[dict]:
    """Run every spec not yet in out_dir/results.json; return all records. Resumable."""
    _check_int("jobs", jobs, 1, 64)
    out_dir = Path(out_dir)
    records = load_results(out_dir / "results.json")
    done = {r["hash"] for r in records}
    todo = [s for s in specs if s.hash not in done]
    for record in _finished_runs(todo, jobs, device):
        records.append(record)
        save_results(out_dir, records)
        if on_done:
            on_done(record)
    order = {s.hash: i for i, s in enumerate(specs)}
    records.sort(key=lambda r: order.get(r["hash"], len(order)))
    save_results(out_dir, records)
    return records


# -- summaries -------------------------------------------------------------------------------


def run_label(r: dict) -> str:
    if r["attention"] == "llama":
        return f"Llama attention (depth {r['depth']})"
    parts = [f"CEM{'-full' if r['mlp'] == 'cem' else ''} T={r['T']}"]
    if r["diagonal"] != "none":
        parts.append(f"diag {r['diagonal']}")
    if r["preconditioner"] != "none":
        parts.append(f"P {r['preconditioner']}")
    if r["eta_mode"] != "fixed":
        parts.append(f"eta {r['eta_mode']}")
    elif r["eta"] != 1.0:
        parts.append(f"eta={r['eta']:g}")
    if r["anchor"]:
        parts.append(f"anchor {r['anchor']:g}")
    return ", ".join(parts) + f" (depth {r['depth']})"


def summarize(records: list[dict]) -> list[dict]:
    """Mean and spread (sample std) over seeds of the RMSE ratio, per configuration, in sweep order."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        key = json.dumps({k: v for k, v in r["config"].items() if k != "train"} |
                         {"train": {k: v for k, v in r["config"]["train"].items() if k != "seed"}}, sort_keys=True)
        groups.setdefault(key, []).append(r)
    rows = []
    for runs in groups.values():
        ok = [r for r in runs if not r["diverged"]]
        ratios = [r["rmse_ratio"] for r in ok]
        rows.append({"label": run_label(runs[0]), "group": runs[0]["group"], "T": runs[0]["T"],
                     "attention": runs[0]["attention"], "depth": runs[0]["depth"],
                     "diagonal": runs[0]["diagonal"], "eta_mode": runs[0]["eta_mode"],
                     "params": runs[0]["params"], "seeds": len(runs), "diverged": len(runs) - len(ok),
                     "ratio_mean": statistics.fmean(ratios) if ratios else math.nan,
                     "ratio_std": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
                     "rmse_mean": statistics.fmean(r["rmse"] for r in ok) if ok else math.nan,
                     "rmse_gp": runs[0]["rmse_gp"], "runs": runs})
    return rows


def markdown_table(records: list[dict]) -> str:
    lines = ["| model | group | params | RMSE | RMSE / GP optimum (mean ± std over seeds) | seeds |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for row in summarize(records):
        div = f" ({row['diverged']} diverged)" if row["diverged"] else ""
        lines.append(f"| {row['label']} | {row['group']} | {row['params']:,} | {row['rmse_mean']:.4f} | "
                     f"{row['ratio_mean']:.3f} ± {row['ratio_std']:.3f} | {row['seeds']}{div} |")
    if records:
        r = records[0]
        lines.append("")
        lines.append(f"GP optimum RMSE {r['rmse_gp']:.4f}; zero predictor {r['rmse_zero']:.4f}; nearest "
                     f"neighbour {r['rmse_nearest_neighbour']:.4f} (held-out set of {r['config']['train']['eval_size']} "
                     f"functions, {r['kernel']} kernel, N = {r['n_points']}, d_x = {r['d_x']}).")
    return "\n".join(lines)


def stale_hashes(records: list[dict], preset: str) -> tuple[set, set]:
    """(hashes the preset needs but the records lack, hashes in the records the preset no longer has)."""
    want = {s.hash for s in preset_runs(preset)}
    have = {r["hash"] for r in records}
    return want - have, have - want


def main_sweep(args) -> int:
    from tqdm import tqdm
    specs = preset_runs(args.preset)
    out = Path(args.out)
    done = {r["hash"] for r in load_results(out / "results.json")}
    todo = sum(s.hash not in done for s in specs)
    print(f"preset {args.preset}: {len(specs)} runs, {len(specs) - todo} already finished in {out}, {todo} to run "
          f"with {args.jobs} worker(s) on {args.device}", flush=True)
    bar = tqdm(total=todo, unit="run", file=sys.stdout)
    records = run_sweep(out, specs, jobs=args.jobs, device=args.device,
                        on_done=lambda r: (bar.update(1), bar.set_postfix_str(f"{run_label(r)}: {r['rmse_ratio']:.3f}")))
    bar.close()
    print(markdown_table([r for r in records if r["hash"] in {s.hash for s in specs}]))
    print(f"\nresults: {out / 'results.json'} and {out / 'results.csv'}")
    return 0


# -- figure data (plotted by cem_core.plots with matplotlib, and by the app with plotly) -----


def _depth1_cem(records, diagonal="none"):
    return [r for r in records if r["group"] == "depth1" and r["attention"] == "cem" and r["diagonal"] == diagonal]


def context_curves(records: list[dict]) -> dict:
    """RMSE vs context length j (mean over seeds): depth-1 Llama and CEM at each T, and the GP optimum."""
    curves = {}
    llama = [r for r in records if r["group"] == "depth1" and r["attention"] == "llama"]
    if llama:
        curves["Llama attention"] = np.mean([r["rmse_by_position"] for r in llama], axis=0).tolist()
    for T in sorted({r["T"] for r in _depth1_cem(records)}):
        runs = [r for r in _depth1_cem(records) if r["T"] == T]
        curves[f"CEM T={T}"] = np.mean([r["rmse_by_position"] for r in runs], axis=0).tolist()
    gp = np.mean([r["rmse_gp_by_position"] for r in records], axis=0).tolist() if records else []
    return {"curves": curves, "gp": gp}


def ratio_vs_T(records: list[dict]) -> dict:
    """RMSE ratio to the GP optimum vs T (mean, std over seeds) for depth-1 CEM with/without the
    shared diagonal, and the depth-1 Llama baseline (mean, std)."""
    out = {}
    for diagonal in ("none", "shared"):
        runs = _depth1_cem(records, diagonal)
        Ts = sorted({r["T"] for r in runs})
        stats = [[r["rmse_ratio"] for r in runs if r["T"] == T and not r["diverged"]] for T in Ts]
        out[f"CEM, diagonal {diagonal}"] = {"T": Ts, "mean": [float(np.mean(s)) for s in stats],
                                            "std": [float(np.std(s, ddof=1)) if len(s) > 1 else 0.0 for s in stats]}
    llama = [r["rmse_ratio"] for r in records if r["group"] == "depth1" and r["attention"] == "llama"]
    out["Llama"] = {"mean": float(np.mean(llama)) if llama else math.nan,
                    "std": float(np.std(llama, ddof=1)) if len(llama) > 1 else 0.0}
    return out


def eval_T_curves(records: list[dict]) -> dict:
    """Ratio to the GP optimum when a depth-1 CEM model trained at T is evaluated at T' (mean over seeds)."""
    out = {}
    runs = [r for r in _depth1_cem(records) if "rmse_by_eval_T" in r]
    for T in sorted({r["T"] for r in runs}):
        mine = [r for r in runs if r["T"] == T]
        evals = sorted({int(t) for r in mine for t in r["rmse_by_eval_T"]})
        out[T] = {"eval_T": evals,
                  "ratio": [float(np.mean([r["rmse_by_eval_T"][str(t)] / r["rmse_gp"] for r in mine])) for t in evals]}
    return out
