"""The Gaussian-process sweep: presets, resumable results, provenance and summaries.

Each run is identified by a hash of its full configuration (task, model, training). A sweep
folder DIR holds one sweep:

- DIR/sweep.json, its manifest: the preset and the task configurations. Runs of another preset
  or task, and records that are not runs of the sweep (say, after its definition changed), are
  refused, so two sweeps never mix in one table. A folder made before manifests existed is
  adopted only when every run in it is one of the requested sweep's runs.
- DIR/results.json (a list of run records, rewritten atomically after every finished run) and
  DIR/results.csv. A run whose hash is already there is never retrained. `load_results` checks
  every record: its fields and their types, that its hash is the hash of its configuration, and
  that no run appears twice (a copy is never counted as another seed).
- DIR/.lock: one sweep writes to a folder at a time (`FolderLock`); a second is refused at once.

Worker processes (``jobs`` > 1, ``pool``) leave Ctrl-C to the sweep's process, and exit within a
second when it dies, however it dies (SIGKILL included). On Ctrl-C or an error the sweep terminates
its workers at once; every finished run is already saved, and the same command resumes.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from contextlib import closing
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from cem_core.nn.validate import check_choice, check_int

from . import gp, gp_study
from .gp import GPModelConfig, GPTaskConfig, GPTrainConfig, RunSpec, baseline_rmses, evaluate_at_T, train_gp
from .integrity import FolderLock, describe_differences, foreign_files, identity_differences, json_hash, short_repr
from .pool import SweepProgress, finished
from .records import atomic_write_text, load_records, provenance, read_json, save_records

PRESETS = ("quick", "default", "gpu", "plateau", "study")
EVAL_TS = (1, 2, 3, 4, 6, 8, 12, 16)          # test-time scaling grid
COMMITTED_SWEEP = Path("results") / "gp-default"   # where the repository keeps its sweep, from its root


def preset_runs(preset: str) -> list[RunSpec]:
    """The runs of a preset (see the README's GP section for what each one answers)."""
    check_choice("preset", preset, PRESETS)
    if preset in ("plateau", "study"):                # the factor study (gp_study)
        return gp_study.plateau_runs() if preset == "plateau" else gp_study.study_runs()
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
            groups.append(("depth1", base.with_cem(T=T, diagonal=diagonal)))
    # depth 2
    groups.append(("depth2", replace(base, attention="llama", depth=2)))
    for T in (1, 4):
        groups.append(("depth2", replace(base.with_cem(T=T), depth=2)))
    # a fully CEM model: T = 2 with the shared diagonal and D+LR (psd) preconditioners
    groups.append(("cem-full", replace(base.with_cem(T=2, diagonal="shared", preconditioner="psd"), mlp="cem")))
    # how the step size behaves across steps (depth 1, T = 4)
    for name, changes in (("eta=1/T", dict(eta=0.25)), ("learned", dict(eta_mode="learned")),
                          ("per_step", dict(eta_mode="per_step")), ("anchor", dict(anchor=1.0))):
        groups.append(("eta:" + name, base.with_cem(T=4, **changes)))
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
    m, cem = spec.model, spec.model.cem
    record = {
        "hash": spec.hash, "group": spec.group,
        "attention": m.attention, "mlp": m.mlp, "depth": m.depth, "width": m.width, "T": cem.T,
        "tokens": m.tokens, "loops": m.loops,
        "diagonal": cem.diagonal, "preconditioner": cem.preconditioner, "eta_mode": cem.eta_mode, "eta": cem.eta,
        "anchor": cem.anchor, "diagonal_form": cem.diagonal_form, "block": cem.block,
        "seed": spec.train.seed, "steps": spec.train.steps,
        "kernel": spec.task.kernel, "d_x": spec.task.d_x, "n_points": spec.task.n_points,
        "params": sum(p.numel() for p in result.model.parameters()),
        "rmse": result.rmse, "rmse_gp": baselines["gp"]["rmse"],
        "rmse_ratio": result.rmse / baselines["gp"]["rmse"],
        "rmse_zero": baselines["zero"]["rmse"], "rmse_nearest_neighbour": baselines["nearest_neighbour"]["rmse"],
        "rmse_by_position": result.rmse_by_position, "rmse_gp_by_position": baselines["gp"]["rmse_by_position"],
        "final_train_loss": result.losses[-1] if result.losses else None,
        "learned_eta": _learned_etas(result.model),
        "diverged": result.diverged, "train_seconds": result.seconds, "device": device,
        "rmse_curve": result.rmse_curve,
        "config": spec.config(), "provenance": provenance(),
    }
    if m.attention == "cem" and m.depth == 1 and m.loops == 1 and not result.diverged:
        record["step_diagnostics"] = gp.step_diagnostics(result.model, spec.task, spec.train)
    if result.model.cem_layers() and eval_Ts and cem.eta_mode != "per_step" and not result.diverged:
        record["rmse_by_eval_T"] = {str(T): v for T, v in
                                    evaluate_at_T(result.model, spec.task, spec.train, eval_Ts).items()}
    return record


def _learned_etas(model) -> list | None:
    etas = [layer.step_size_values() for layer in model.cem_layers() if layer.config.learn_eta]
    return etas or None


def _worker(spec: RunSpec, device: str) -> dict:
    return run_spec(spec, device=device, threads=1)


# -- results and the folder's identity -------------------------------------------------------

# what each field of a run record must be: those results.csv (the scalars) and the summaries read
RECORD_FIELDS = {
    "hash": str, "group": str, "attention": str, "mlp": str, "depth": int, "width": int, "T": int,
    "diagonal": str, "preconditioner": str, "eta_mode": str, "eta": float, "anchor": float, "seed": int,
    "steps": int, "kernel": str, "d_x": int, "n_points": int, "params": int, "rmse": float, "rmse_gp": float,
    "rmse_ratio": float, "rmse_zero": float, "rmse_nearest_neighbour": float, "diverged": bool,
    "train_seconds": float, "config": dict, "rmse_by_position": list, "rmse_gp_by_position": list}
CSV_FIELDS = tuple(name for name, kind in RECORD_FIELDS.items() if kind not in (dict, list))
KIND_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
              dict: "an object with task, model and train objects", list: "a list of numbers"}
MANIFEST = "sweep.json"
MANIFEST_FORMAT = 1


def _is_kind(value, kind) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is dict:
        return isinstance(value, dict) and all(isinstance(value.get(k), dict) for k in ("task", "model", "train"))
    if kind is list:
        return isinstance(value, list) and all(_is_kind(v, float) for v in value)
    return isinstance(value, kind)


def _record_problem(record) -> str:
    """What is wrong with one run record ('' when nothing)."""
    if not isinstance(record, dict):
        return f"{short_repr(record)} is not an object (a run record)"
    for name, kind in RECORD_FIELDS.items():
        if name not in record:
            return f"the field {name!r} is missing"
        if not _is_kind(record[name], kind):
            return f"{name}={short_repr(record[name])} is invalid: must be {KIND_NAMES[kind]}"
    if json_hash(record["config"]) != record["hash"]:
        return f"hash={record['hash']!r} is invalid: it is not the hash of the record's config (the record was edited)"
    if not record["diverged"]:                # a diverged run's RMSE may be nan; any other number is finite
        for name, kind in RECORD_FIELDS.items():
            values = record[name] if kind is list else [record[name]] if kind is float else []
            if not all(math.isfinite(v) for v in values):
                return f"{name}={short_repr(record[name])} is invalid: not finite in a run that did not diverge"
    return ""


def load_results(path: Path) -> list[dict]:
    """The run records in results.json ([] when there is none), each checked (``records.load_records``)."""
    return load_records(path, _record_problem)


def save_results(out_dir: Path, records: list[dict]) -> None:
    save_records(out_dir, records, CSV_FIELDS)


def sweep_identity(preset: str | None, specs: list[RunSpec]) -> dict:
    """What sweep.json records: the preset (None for a list of runs of the caller's), its tasks, and for
    the study the verdict rule fixed before it ran."""
    tasks = []
    for spec in specs:
        if (task := spec.config()["task"]) not in tasks:
            tasks.append(task)
    rule = {"verdict_rule": gp_study.VERDICT_RULE, "tolerance": gp_study.TOLERANCE} if preset == "study" else {}
    return {"format": MANIFEST_FORMAT, "preset": preset, "tasks": tasks} | rule


def read_manifest(path: Path) -> dict:
    manifest = read_json(path)
    if not (isinstance(manifest, dict) and manifest.get("format") == MANIFEST_FORMAT and "preset" in manifest
            and isinstance(manifest["preset"], (str, type(None))) and isinstance(manifest.get("tasks"), list)
            and all(isinstance(task, dict) for task in manifest["tasks"])):
        raise ValueError(f"{path} is not a sweep manifest of format {MANIFEST_FORMAT} (an object with format, "
                         "preset and tasks); move its folder away to start a sweep afresh")
    return manifest


def _by_field(identity: dict) -> dict:
    """The identity with its tasks by position, so that differences name the field ('tasks.0.n_points')."""
    return {**identity, "tasks": {str(i): task for i, task in enumerate(identity["tasks"])}}


def _strangers(records: list[dict], specs: list[RunSpec], preset: str | None) -> str:
    """What the records that are not runs of the requested sweep are ('' when there are none)."""
    wanted = {s.hash for s in specs}
    strangers = [r for r in records if r["hash"] not in wanted]
    if not strangers:
        return ""
    text = f"{len(strangers)} of its runs are not in {f'preset {preset!r}' if preset else 'the requested runs'}"
    hashes = {r["hash"] for r in strangers}
    owners = [p for p in PRESETS if hashes <= {s.hash for s in preset_runs(p)}]
    if owners:
        text += f": they are runs of preset {owners[0]!r}"
    if specs:
        config = strangers[0]["config"]
        nearest = min(specs, key=lambda s: len(identity_differences(config, s.config())))
        text += (f"; run {strangers[0]['hash']} differs from the nearest requested run in "
                 f"{describe_differences(config, nearest.config(), limit=3)}")
    return text


def _claim_folder(out: Path, preset: str | None, specs: list[RunSpec], records: list[dict]) -> None:
    """Refuse a folder that holds another sweep; adopt one that holds (part of) this one, writing its
    manifest when it has none."""
    wanted = sweep_identity(preset, specs)
    path = out / MANIFEST
    stray = foreign_files(out, (MANIFEST, "results.json", "results.csv"))
    if stray:
        raise ValueError(f"{out} holds files that are not a GP sweep's ({', '.join(stray[:6])}): choose a new or "
                         "empty folder with --out")
    if path.exists() and (differences := describe_differences(_by_field(read_manifest(path)), _by_field(wanted))):
        problem = f"its {MANIFEST} records {differences}"
    else:
        problem = _strangers(records, specs, preset)
    if problem:
        raise ValueError(f"{out} holds another sweep ({problem}); runs of two sweeps must not mix in one "
                         f"folder: start afresh with another --out, or move {out} away")
    if not path.exists():
        atomic_write_text(path, json.dumps(wanted, indent=1))


# -- running a sweep -------------------------------------------------------------------------


def _finished_runs(todo: list[RunSpec], jobs: int, device: str):
    """Records of the runs as they finish: in this process, or in ``jobs`` worker processes of one
    thread each (``pool.finished``: terminated at once when anything goes wrong)."""
    return finished(partial(run_spec if jobs == 1 else _worker, device=device), todo, jobs)


def run_sweep(out_dir, specs: list[RunSpec], jobs: int = 1, device: str = "cpu", preset: str | None = None,
              on_start=None, on_done=None, reuse: list[dict] = ()) -> list[dict]:
    """Run every spec not yet in out_dir/results.json; return all records, in spec order. Resumable.

    Holds the folder's lock throughout and refuses a folder of another sweep (``preset`` names the
    sweep in its manifest). Records in ``reuse`` (another sweep's, checked) whose hash is one of the
    specs' are the same configuration already trained: they are taken as they are, provenance and all,
    under this sweep's group. ``on_start(todo)`` is called with the runs to do once the folder is
    claimed, ``on_done(record)`` after each finished run (already saved)."""
    check_int("jobs", jobs, 1, 64)
    out_dir = Path(out_dir)
    with FolderLock(out_dir, "GP sweep"):
        records = load_results(out_dir / "results.json")
        _claim_folder(out_dir, preset, specs, records)
        done = {r["hash"] for r in records}
        groups = {s.hash: s.group for s in specs}
        adopted = [r | {"group": groups[r["hash"]]} for r in reuse if r["hash"] in groups and r["hash"] not in done]
        if adopted:
            records += adopted
            done |= {r["hash"] for r in adopted}
            save_results(out_dir, records)
        todo = [s for s in specs if s.hash not in done]
        if on_start:
            on_start(todo)
        with closing(_finished_runs(todo, jobs, device)) as runs:
            for record in runs:
                records.append(record)
                save_results(out_dir, records)
                if on_done:
                    on_done(record)
        order = {s.hash: i for i, s in enumerate(specs)}
        records.sort(key=lambda r: order[r["hash"]])
        save_results(out_dir, records)
    return records


# -- summaries -------------------------------------------------------------------------------


def run_label(r: dict) -> str:
    extras = "".join(f", {text}" for text, on in (("attention only", r["mlp"] == "none"),
                                                   ("interleaved tokens", r.get("tokens", "pairs") != "pairs"),
                                                   (f"looped x{r.get('loops', 1)}", r.get("loops", 1) != 1)) if on)
    if r["attention"] == "llama":
        return f"Llama attention{extras} (depth {r['depth']})"
    parts = [f"CEM{'-full' if r['mlp'] == 'cem' else ''} T={r['T']}{extras}"]
    if r.get("block", "sequential") == "joint":
        parts.append("joint block")
    if r["diagonal"] != "none":
        parts.append(f"diag {r['diagonal']}" + (" (distance)" if r.get("diagonal_form") == "distance" else ""))
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
                     f"neighbour {r['rmse_nearest_neighbour']:.4f} (held-out set of "
                     f"{r['config']['train']['eval_size']} "
                     f"functions, {r['kernel']} kernel, N = {r['n_points']}, d_x = {r['d_x']}).")
    return "\n".join(lines)


def stale_hashes(records: list[dict], preset: str) -> tuple[set, set]:
    """(hashes the preset needs but the records lack, hashes in the records the preset no longer has)."""
    want = {s.hash for s in preset_runs(preset)}
    have = {r["hash"] for r in records}
    return want - have, have - want


def _results_path(path) -> Path:
    """A sweep folder or its results.json."""
    path = Path(path)
    return path / "results.json" if path.is_dir() else path


def main_sweep(args) -> int:
    specs = preset_runs(args.preset)
    out = Path(args.out)
    if args.reuse and not _results_path(args.reuse).is_file():
        raise ValueError(f"reuse={args.reuse!r} is invalid: no sweep folder with a results.json, nor a results.json, "
                         "is there")
    try:
        with SweepProgress(f"preset {args.preset} on {args.device}", len(specs), out, args.jobs,
                           lambda r: f"{run_label(r)}: {r['rmse_ratio']:.3f}") as progress:
            reuse = load_results(_results_path(args.reuse)) if args.reuse else []
            records = run_sweep(out, specs, jobs=args.jobs, device=args.device, preset=args.preset,
                                on_start=progress.start, on_done=progress.done, reuse=reuse)
    except KeyboardInterrupt:
        kept = {r["hash"] for r in load_results(out / "results.json")} & {s.hash for s in specs}
        print(f"interrupted: {len(kept)} of {len(specs)} runs finished and kept in {out}; run the same command "
              "again to resume", file=sys.stderr)
        return 130
    print(markdown_table(records))
    print(f"\nresults: {out / 'results.json'} and {out / 'results.csv'}")
    return 0


# -- figure data (plotted by cem_core.ui.plots with matplotlib, and by the app with plotly) -----


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
