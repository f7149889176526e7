"""The Gaussian-process sweep: presets, how one run trains, its record's schema, summaries.

The folder (manifest, results, lock, resume) is ``cem_core.experiments.sweep``'s, the one runner of every
sweep: DIR/sweep.json records the preset and the task configurations, so runs of another preset or task, and
records that are not runs of the sweep, are refused; each record is identified by the hash of its full
configuration (task, model, training) and checked on load (``GP_SWEEP``). Runs go to worker processes of one
thread each (``pool``), or to a cluster engine (``cluster``); on Ctrl-C or an error the sweep stops its
workers at once, every finished run is already saved, and the same command resumes.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from cem_core.experiments import sweep, test_time
from cem_core.experiments.integrity import describe_differences, identity_differences, seal, short_repr
from cem_core.experiments.pool import finished
from cem_core.experiments.records import provenance, read_json
from cem_core.experiments.sweep import MANIFEST_FORMAT, Experiment, Plan, is_kind, not_finite
from cem_core.nn.block_modes import BLOCK_MODES
from cem_core.nn.config import ModelShape
from cem_core.nn.diagonals import DIAGONAL_FORMS
from cem_core.nn.validate import check_choice, check_int

from . import study as gp_study
from .model import GPModelConfig
from .task import GPTaskConfig
from .train import GPTrainConfig, RunSpec, baseline_rmses, evaluate_at_T, step_diagnostics, train_gp

GP_PRESETS = ("quick", "default", "gpu", "plateau", "study", "rates", "test-time")
GP_EVAL_TS = (1, 2, 3, 4, 6, 8, 12, 16)          # test-time scaling grid
COMMITTED_GP_SWEEP = Path("results") / "gp-default"   # where the repository keeps its sweep, from its root


def gp_preset_runs(preset: str) -> list[RunSpec]:
    """The runs of a preset (docs/results-gp.md says what each one answers)."""
    check_choice("preset", preset, GP_PRESETS)
    if preset in ("plateau", "study", "rates", "test-time"):   # the factor study, its rate check, the test-time study
        return {"plateau": gp_study.plateau_runs, "study": gp_study.study_runs,
                "rates": gp_study.rate_check_runs, "test-time": test_time.gp_runs}[preset]()
    # sized so that `default` finishes within 30 minutes on 2 CPU cores (2 workers, 1 thread each)
    width, steps, batch, seeds, tasks = {
        "quick": (64, 400, 32, (0,), [GPTaskConfig()]),
        "default": (64, 2000, 32, (0, 1, 2), [GPTaskConfig()]),
        "gpu": (128, 6000, 128, (0, 1, 2), [GPTaskConfig(), GPTaskConfig(d_x=2, n_points=64, lengthscale=0.5),
                                            GPTaskConfig(n_points=128)]),
    }[preset]
    base = GPModelConfig(shape=ModelShape(d_model=width, n_layers=1, n_heads=4, d_ff=2 * width))
    groups: list[tuple[str, GPModelConfig]] = []
    # depth 1: recursion is the only source of iterative depth
    groups.append(("depth1", replace(base, attention="llama")))
    for diagonal in ("none", "shared"):
        for T in (1, 2, 4, 8):
            groups.append(("depth1", base.with_cem(T=T, diagonal=diagonal)))
    # depth 2
    groups.append(("depth2", replace(base, attention="llama").with_shape(n_layers=2)))
    for T in (1, 4):
        groups.append(("depth2", base.with_cem(T=T).with_shape(n_layers=2)))
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
             eval_Ts: tuple = GP_EVAL_TS) -> dict:
    """Train and evaluate one run; return its record for results.json, sealed with its checksums.

    CEM runs are also evaluated at each T in ``eval_Ts`` (test-time scaling), except per-step
    eta, which has exactly T learned step sizes."""
    if threads:
        torch.set_num_threads(threads)
    result = train_gp(spec.task, spec.model, spec.train, progress=progress, device=device)
    baselines = baseline_rmses(spec.task, spec.train)
    m, cem = spec.model, spec.model.cem
    record = {
        "hash": spec.hash, "group": spec.group,
        "attention": m.attention, "mlp": m.mlp, "depth": m.shape.n_layers, "width": m.shape.d_model, "T": cem.T,
        "tokens": m.tokens, "loops": m.loops,
        "diagonal": cem.diagonal, "preconditioner": cem.preconditioner, "eta_mode": cem.eta_mode, "eta": cem.eta,
        "anchor": cem.anchor, "diagonal_form": cem.diagonal_form, "block": cem.block,
        "seed": spec.train.seed, "steps": spec.train.steps, "train_depth": spec.train.train_depth,
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
    if m.attention == "cem" and m.shape.n_layers == 1 and m.loops == 1 and not result.diverged:
        record["step_diagnostics"] = step_diagnostics(result.model, spec.task, spec.train)
    if result.model.cem_layers() and eval_Ts and cem.eta_mode != "per_step" and not result.diverged:
        record["rmse_by_eval_T"] = {str(T): v for T, v in
                                    evaluate_at_T(result.model, spec.task, spec.train, eval_Ts).items()}
    return seal(record)


def _learned_etas(model) -> list | None:
    etas = [layer.step_size_values() for layer in model.cem_layers() if layer.config.learn_eta]
    return etas or None


# -- results and the folder's identity -------------------------------------------------------

# what each field of a run record must be: those results.csv (the scalars) and the summaries read
GP_RECORD_FIELDS = {
    "hash": str, "group": str, "attention": str, "mlp": str, "depth": int, "width": int, "T": int,
    "diagonal": str, "preconditioner": str, "eta_mode": str, "eta": float, "anchor": float, "seed": int,
    "steps": int, "kernel": str, "d_x": int, "n_points": int, "params": int, "rmse": float, "rmse_gp": float,
    "rmse_ratio": float, "rmse_zero": float, "rmse_nearest_neighbour": float, "diverged": bool,
    "train_seconds": float, "config": dict, "rmse_by_position": list, "rmse_gp_by_position": list}


def _gp_record_problem(record: dict) -> str:
    """A GP record's own checks: its config holds task, model and train; its curves
    are numbers, and finite (with its other numbers) unless the run diverged (a diverged run's RMSE may be nan);
    its errors are not negative."""
    if not all(isinstance(record["config"].get(k), dict) for k in ("task", "model", "train")):
        return f"config={short_repr(record['config'])} is invalid: must be an object with task, model and train objects"
    for name in ("rmse_by_position", "rmse_gp_by_position"):
        if not all(is_kind(v, float) for v in record[name]):
            return f"{name}={short_repr(record[name])} is invalid: must be a list of numbers"
    if record["diverged"]:
        return ""
    if problem := not_finite(record, GP_RECORD_FIELDS):
        return problem
    errors = [name for name in ("rmse", "rmse_gp", "rmse_zero", "rmse_nearest_neighbour") if record[name] < 0]
    return f"{errors[0]}={record[errors[0]]!r} is invalid: an error is at least 0" if errors else ""


def sweep_identity(preset: str | None, specs: list[RunSpec]) -> dict:
    """What sweep.json records: the preset (None for a list of runs of the caller's), its tasks, and for
    the study the verdict rule fixed before it ran."""
    tasks = []
    for spec in specs:
        if (task := spec.config()["task"]) not in tasks:
            tasks.append(task)
    rule = ({"verdict_rule": gp_study.STUDY_RULE, "tolerance": gp_study.STUDY_TOLERANCE} if preset == "study" else
            {"verdict_rule": gp_study.RATE_CHECK_RULE} if preset == "rates" else
            {"verdict_rule": test_time.TEST_TIME_RULE} if preset == "test-time" else {})
    return {"format": MANIFEST_FORMAT, "preset": preset, "tasks": tasks} | rule


def _is_manifest(manifest) -> bool:
    return (isinstance(manifest, dict) and manifest.get("format") == MANIFEST_FORMAT and "preset" in manifest
            and isinstance(manifest["preset"], (str, type(None))) and isinstance(manifest.get("tasks"), list)
            and all(isinstance(task, dict) for task in manifest["tasks"]))


def read_manifest(path: Path) -> dict:
    manifest = read_json(path)
    if not _is_manifest(manifest):
        raise ValueError(f"{path} is not a sweep manifest of format {MANIFEST_FORMAT} (an object with format, "
                         "preset and tasks); move its folder away to start a sweep afresh")
    return manifest


def _by_field(identity: dict) -> dict:
    """The identity with its tasks by position, so that differences name the field ('tasks.0.n_points')."""
    return {**identity, "tasks": {str(i): task for i, task in enumerate(identity["tasks"])}}


def _gp_manifest_differences(recorded: dict, wanted: dict) -> str:
    if not _is_manifest(recorded):
        return f"no sweep manifest of format {MANIFEST_FORMAT} (an object with format, preset and tasks)"
    return describe_differences(_by_field(recorded), _by_field(wanted))


def _strangers(strangers: list[dict], plan: Plan) -> str:
    """Which runs the records that are not runs of the requested sweep are."""
    preset = plan.manifest["preset"]
    text = f"{len(strangers)} of its runs are not in {f'preset {preset!r}' if preset else 'the requested runs'}"
    hashes = {r["hash"] for r in strangers}
    owners = [p for p in GP_PRESETS if hashes <= {s.hash for s in gp_preset_runs(p)}]
    if owners:
        text += f": they are runs of preset {owners[0]!r}"
    if plan.specs:
        config = strangers[0]["config"]
        nearest = min(plan.specs, key=lambda s: len(identity_differences(config, s.config())))
        text += (f"; run {strangers[0]['hash']} differs from the nearest requested run in "
                 f"{describe_differences(config, nearest.config(), limit=3)}")
    return text


GP_SWEEP = Experiment(label="GP sweep", fields=GP_RECORD_FIELDS, identity="config", compare=_gp_manifest_differences,
                      csv_fields=tuple(name for name, kind in GP_RECORD_FIELDS.items() if kind not in (dict, list)),
                      check=_gp_record_problem, strangers=_strangers)


# -- running a sweep -------------------------------------------------------------------------


def run_gp_sweep(out_dir, specs: list[RunSpec], jobs: int = 1, device: str = "cpu", preset: str | None = None,
              on_start=None, on_done=None, reuse: list[dict] = (), executor=finished) -> list[dict]:
    """Run every spec not yet in out_dir/results.json (``sweep.run_plan``); return all records, in spec order.

    ``preset`` names the sweep in its manifest. Records in ``reuse`` (other sweeps', checked; the first of each
    hash) whose hash is one of the specs' are the same configuration already trained: they are taken as they are,
    provenance and all, under this sweep's group (sealed anew with it). Runs go to ``jobs`` worker processes of one
    thread each, or to ``executor``."""
    check_int("jobs", jobs, 1, 64)
    groups = {s.hash: s.group for s in specs}
    plan = Plan(specs=specs, key=lambda s: s.hash, manifest=sweep_identity(preset, specs),
                run=partial(run_spec, device=device, threads=None if jobs == 1 else 1),
                reuse=[seal(r | {"group": groups[r["hash"]]}) for r in _first_of_each(reuse) if r["hash"] in groups])
    return sweep.run_plan(GP_SWEEP, out_dir, plan, jobs=jobs, executor=executor, on_start=on_start, on_done=on_done)


def _first_of_each(records: list[dict]) -> list[dict]:
    """The records with one per hash, the first (the same configuration reused from two sweeps is one run)."""
    seen: set[str] = set()
    return [r for r in records if not (r["hash"] in seen or seen.add(r["hash"]))]


# -- summaries -------------------------------------------------------------------------------


def run_label(r: dict) -> str:
    extras = "".join(f", {text}" for text, on in (("attention only", r["mlp"] == "none"),
                                                   ("interleaved tokens", r.get("tokens", "pairs") != "pairs"),
                                                   (f"looped x{r.get('loops', 1)}", r.get("loops", 1) != 1)) if on)
    if r["attention"] == "llama":
        return f"Llama attention{extras} (depth {r['depth']})"
    parts = [f"CEM{'-full' if r['mlp'] == 'cem' else ''} T={r['T']}{extras}"]
    if BLOCK_MODES[r.get("block", "sequential")].one_energy:
        parts.append("joint block")
    if r["diagonal"] != "none":
        parts.append(f"diag {r['diagonal']}" + (" (distance)" if DIAGONAL_FORMS[r.get("diagonal_form", "bilinear")]
                                                .centred else ""))
    if r["preconditioner"] != "none":
        parts.append(f"P {r['preconditioner']}")
    if r["eta_mode"] != "fixed":
        parts.append(f"eta {r['eta_mode']}")
    elif r["eta"] != 1.0:
        parts.append(f"eta={r['eta']:g}")
    if r["anchor"]:
        parts.append(f"anchor {r['anchor']:g}")
    return ", ".join(parts) + f" (depth {r['depth']})"


def configuration_rows(records: list[dict]) -> list[dict]:
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


def results_markdown(records: list[dict]) -> str:
    """The sweep's summary table (per configuration, mean ± std over seeds) and its baselines, in Markdown."""
    lines = ["| model | group | params | RMSE | RMSE / GP optimum (mean ± std over seeds) | seeds |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for row in configuration_rows(records):
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
    return sweep.stale(records, (s.hash for s in gp_preset_runs(preset)))


# -- figure data (plotted by the app with plotly, cem_core.ui.gp_figures; figures/ derives its static form) -


def _depth1_cem(records, diagonal="none"):
    return [r for r in records if r["group"] == "depth1" and r["attention"] == "cem" and r["diagonal"] == diagonal]


def live_comparison(records: list[dict], task: GPTaskConfig, model: GPModelConfig, train: GPTrainConfig,
                    preset: str = "default") -> str:
    """A sentence to put beside a model trained live (the app's GP page): the committed sweep's depth-1 CEM runs at
    the same T and diagonal (their mean RMSE ratio over seeds), and every setting in which the two differ, read
    from the live configs and the preset's own (``gp_preset_runs``), so that a different ratio is explained."""
    specs = [s for s in gp_preset_runs(preset) if s.group == "depth1" and s.model.attention == "cem"]
    same = [s for s in specs if (s.model.cem.T, s.model.cem.diagonal) == (model.cem.T, model.cem.diagonal)]
    ref = (same or specs)[0]
    runs = [r["rmse_ratio"] for r in _depth1_cem(records, model.cem.diagonal) if r["T"] == model.cem.T]
    seeds = len({s.train.seed for s in specs})
    pairs = [("width", model.shape.d_model, ref.model.shape.d_model), ("d_ff", model.shape.d_ff, ref.model.shape.d_ff),
             ("layers", model.shape.n_layers, ref.model.shape.n_layers),
             ("heads", model.shape.n_heads, ref.model.shape.n_heads),
             ("φ", model.shape.activation, ref.model.shape.activation),
             ("training steps", train.steps, ref.train.steps), ("batch", train.batch_size, ref.train.batch_size),
             ("held-out functions", train.eval_size, ref.train.eval_size), ("kernel", task.kernel, ref.task.kernel)]
    differ = [f"{name} {_n(live)} vs {_n(theirs)}" for name, live, theirs in pairs if live != theirs]
    differ.append(f"1 seed vs {seeds}")
    where = (f"The committed sweep's depth-1 CEM at T = {model.cem.T}, diagonal {model.cem.diagonal} reaches "
             f"{np.mean(runs):.2f} (mean of {len(runs)} seeds)" if runs else
             f"The committed sweep has no depth-1 CEM run at T = {model.cem.T}, diagonal {model.cem.diagonal} "
             f"(its T: {', '.join(str(T) for T in sorted({s.model.cem.T for s in specs}))})")
    smaller = model.shape.d_model < ref.model.shape.d_model and train.steps < ref.train.steps
    return (where + "; this model differs from it in " + ", ".join(differ) + ", so its ratio is not the sweep's"
            + (" (a smaller model trained for fewer steps usually lands further from the optimum)." if smaller
               else "."))


def _n(value) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


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
