"""``python -m cem_core gp train | sweep | report``: Gaussian-process in-context regression."""
from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from pathlib import Path

from cem_core.experiments import cluster
from cem_core.experiments.gp import model as gp_model
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.gp import task as gp_task
from cem_core.experiments.gp import train as gp_training
from cem_core.experiments.pool import SweepProgress
from cem_core.experiments.schedule import OptimConfig
from cem_core.experiments.train_depths import TRAIN_DEPTHS
from cem_core.nn.config import KINDS, MLP_KINDS, ModelShape, check_eval_T
from cem_core.nn.validate import check_device

from .options import add_cem_arguments, add_part_arguments, cem_options, default_of, part_of


def add_gp(group) -> None:
    """The commands of ``gp``, on its parser."""
    gp_parser = group.add_subparsers(dest="gp_command", required=True)
    _add_train(gp_parser.add_parser("train", help="train one model and compare it with the GP optimum"))
    sweep = gp_parser.add_parser("sweep", help="run a preset sweep (resumable) into DIR/results.json and .csv")
    sweep.add_argument("--out", required=True, help="the sweep's folder (one preset per folder)")
    sweep.add_argument("--preset", choices=gp_sweep.GP_PRESETS, default="default",
                       help="quick (one seed, minutes), default (the committed sweep), gpu (larger, for an "
                            "accelerator), plateau (CEM T = 1 and Llama trained long: where T = 1 stops improving), "
                            "study (the factor study: where recursion helps), rates (CEM attention at T = 1 and 8 at "
                            "three learning rates: does the study's rate suit both?), "
                            "test-time (CEM attention at T = 4 trained in four regimes, read at T' = 1..16: can "
                            "recursion scale at test time?) (default: default)")
    sweep.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                       help="parallel worker processes, one thread each (default: min(2, cores))")
    sweep.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    sweep.add_argument("--reuse", nargs="+", default=[],
                       help="other sweeps' folders or results.json files: their runs of the same configuration (same "
                            "hash) are taken instead of trained again, provenance kept")
    cluster.add_arguments(sweep)
    report = gp_parser.add_parser("report", help="print the summary table of a sweep")
    report.add_argument("results", nargs="?", default=str(gp_sweep.COMMITTED_GP_SWEEP),
                        help="a sweep folder or its results.json (default: the committed sweep, from the repository "
                             "root)")
    sweep.set_defaults(run=gp_sweep_command)
    report.set_defaults(run=gp_report)
    inspect = gp_parser.add_parser("inspect", help="a trained model (models/) on one function: its prediction after "
                                                   "every step of every CEM layer against the exact GP posterior")
    inspect.add_argument("--model", required=True, help="a trained GP model's name (python -m cem_core models list)")
    given = inspect.add_mutually_exclusive_group(required=True)
    given.add_argument("--seed", type=int, help="the function's seed (its first --context points are the context)")
    given.add_argument("--points", help="your own context points instead of a function: \"x1:y1,x2:y2,...\" (x in "
                                        "the box [-1, 1], at most 31 points; the link's in_points; write --points=... "
                                        "when the first x is negative)")
    inspect.add_argument("--context", type=int, default=8,
                         help="context points given to the model from the function of --seed (default 8)")
    inspect.add_argument("--T-test", type=int, help="steps per CEM layer (default: the trained T; up to 4x it)")
    inspect.add_argument("--json", required=True, help="write the readout as JSON to this new file")
    inspect.set_defaults(run=gp_inspect)


def _add_train(train) -> None:
    model, task, training = gp_model.GPModelConfig, gp_task.GPTaskConfig, gp_training.GPTrainConfig
    train.add_argument("--attention", choices=KINDS, default=default_of(model, "attention"),
                       help=f"attention kind (default {default_of(model, 'attention')})")
    train.add_argument("--mlp", choices=MLP_KINDS, default=default_of(model, "mlp"),
                       help=f"MLP kind (default {default_of(model, 'mlp')}: SwiGLU, so runs differ in attention only; "
                            "none: attention-only blocks)")
    train.add_argument("--tokens", choices=gp_model.TOKEN_FORMATS, default=default_of(model, "tokens"),
                       help="token format: pairs = [x_j, x_{j-1}, y_{j-1}, first]; interleaved = a query token "
                            f"[x_j, 0, 1] then [x_j, y_j, 0] (default {default_of(model, 'tokens')})")
    add_part_arguments(train, ModelShape, default_of(model, "shape"))
    train.add_argument("--loops", type=int, default=default_of(model, "loops"),
                       help=f"times the blocks run over, weights shared (default {default_of(model, 'loops')})")
    add_cem_arguments(train)
    train.add_argument("--kernel", choices=gp_task.KERNELS, default=default_of(task, "kernel"),
                       help=f"GP kernel of the task (default {default_of(task, 'kernel')})")
    for name, kind, what in (("lengthscale", float, "kernel lengthscale"), ("noise_var", float, "noise variance"),
                             ("d_x", int, "input dimension"), ("n_points", int, "points per function")):
        train.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default_of(task, name),
                           help=f"{what} (default {default_of(task, name)})")
    for name, kind, what in (("steps", int, "training steps"), ("batch_size", int, "functions per step"),
                             ("seed", int, "training seed")):
        train.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default_of(training, name),
                           help=f"{what} (default {default_of(training, name)})")
    add_part_arguments(train, OptimConfig, default_of(training, "optim"))
    train.add_argument("--eval-T", type=int, nargs="*", default=[],
                       help="also evaluate the trained model at these T (test-time scaling)")
    train.add_argument("--train-depth", choices=tuple(TRAIN_DEPTHS), default=default_of(training, "train_depth"),
                       help="in-layer steps each training step trains at: " + "; ".join(
                           f"{name}: {depth.label}" for name, depth in TRAIN_DEPTHS.items()) + " (default fixed)")
    train.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    train.add_argument("--out", help="write the run record (JSON) to this new file")
    train.set_defaults(run=gp_train)


def gp_train(args) -> int:
    check_device(args.device)
    from cem_core.experiments.gp.model import GPModelConfig
    from cem_core.experiments.gp.sweep import RunSpec
    from cem_core.experiments.gp.task import GPTaskConfig
    from cem_core.experiments.gp.train import GPTrainConfig
    from cem_core.experiments.records import claim_new_output

    cem = cem_options(args)
    spec = RunSpec(
        task=GPTaskConfig(kernel=args.kernel, lengthscale=args.lengthscale, noise_var=args.noise_var,
                          d_x=args.d_x, n_points=args.n_points),
        model=GPModelConfig(attention=args.attention, mlp=args.mlp, shape=part_of(args, gp_model.GP_SHAPE), cem=cem,
                            tokens=args.tokens, loops=args.loops),
        train=GPTrainConfig(steps=args.steps, batch_size=args.batch_size, optim=part_of(args, gp_training.GP_OPTIM),
                            seed=args.seed, train_depth=args.train_depth),
        group="cli")
    eval_Ts = check_eval_T(args.eval_T, cem.T, cem.eta_mode == "per_step")
    if eval_Ts and args.attention != "cem" and args.mlp != "cem":
        raise ValueError("eval_T needs a CEM layer: attention='llama' and mlp='llama' have no T")
    with claim_new_output("out", args.out) if args.out else nullcontext():   # before training: never lost
        return _gp_train(args, spec, cem, eval_Ts)


def _gp_train(args, spec, cem, eval_Ts) -> int:
    """Train the run of ``gp train`` and write its record (the output already claimed)."""
    import json

    from tqdm import tqdm

    from cem_core.experiments.gp.sweep import run_label, run_spec
    from cem_core.experiments.records import atomic_write_text

    bar = tqdm(total=spec.train.steps, unit="step", file=sys.stdout)

    def progress(step, loss):
        bar.update(1)
        if step % 25 == 0:
            bar.set_postfix(loss=f"{loss:.4f}")

    record = run_spec(spec, device=args.device, progress=progress, eval_Ts=eval_Ts)
    bar.close()
    print(f"{run_label(record)}: {record['params']:,} parameters, {record['train_seconds']:.1f} s")
    print(f"held-out RMSE {record['rmse']:.4f}  GP optimum {record['rmse_gp']:.4f}  ratio {record['rmse_ratio']:.3f}"
          f"  (zero {record['rmse_zero']:.4f}, nearest neighbour {record['rmse_nearest_neighbour']:.4f})"
          + ("  DIVERGED" if record["diverged"] else ""))
    if record.get("rmse_by_eval_T"):
        print(f"test-time scaling (trained at T={cem.T}):\n  T    RMSE    ratio")
        for T, value in record["rmse_by_eval_T"].items():
            print(f"  {int(T):<4d} {value:.4f}  {value / record['rmse_gp']:.3f}")
    if args.out:
        atomic_write_text(args.out, json.dumps(record, indent=1))
        print(f"record written to {args.out}")
    return 0


def gp_report(args) -> int:
    from cem_core.experiments.gp.sweep import GP_PRESETS, GP_SWEEP, gp_preset_runs, results_markdown, stale_hashes
    from cem_core.experiments.records import read_json
    path = Path(args.results)
    if path.is_dir():                                   # a sweep folder
        path = path / "results.json"
    records = GP_SWEEP.load(path)
    if not records:
        raise ValueError(f"results={str(path)!r} is invalid: no results there; run `python -m cem_core gp sweep` first")
    print(results_markdown(records))
    manifest = read_json(path.parent / "sweep.json") if (path.parent / "sweep.json").is_file() else {}
    preset = manifest.get("preset") if isinstance(manifest, dict) else None
    if preset in GP_PRESETS:
        missing, _ = stale_hashes(records, preset)
        if missing:
            print(f"note: {len(missing)} of {len(gp_preset_runs(preset))} runs of preset {preset} are missing (the "
                  "sweep has not finished: run the same gp sweep again to resume); the table shows what is there",
                  file=sys.stderr)
    return 0


def _results_path(path) -> Path:
    """A sweep folder or its results.json."""
    path = Path(path)
    return path / "results.json" if path.is_dir() else path


def gp_sweep_command(args) -> int:
    check_device(args.device)
    specs = gp_sweep.gp_preset_runs(args.preset)
    out = Path(args.out)
    for path in args.reuse:
        if not _results_path(path).is_file():
            raise ValueError(f"reuse={path!r} is invalid: no sweep folder with a results.json, nor a results.json, "
                             "is there")
    try:
        with SweepProgress(f"preset {args.preset} on {args.device}", len(specs), out, args.jobs,
                           lambda r: f"{gp_sweep.run_label(r)}: {r['rmse_ratio']:.3f}") as progress:
            reuse = [r for path in args.reuse for r in gp_sweep.GP_SWEEP.load(_results_path(path))]
            records = gp_sweep.run_gp_sweep(out, specs, jobs=args.jobs, device=args.device, preset=args.preset,
                                on_start=progress.start, on_done=progress.done, reuse=reuse,
                                executor=cluster.from_arguments(args, out))
    except KeyboardInterrupt:
        kept = {r["hash"] for r in gp_sweep.GP_SWEEP.load(out / "results.json")} & {s.hash for s in specs}
        print(f"interrupted: {len(kept)} of {len(specs)} runs finished and kept in {out}; run the same command "
              "again to resume", file=sys.stderr)
        return 130
    print(gp_sweep.results_markdown(records))
    print(f"\nresults: {out / 'results.json'} and {out / 'results.csv'}")
    return 0


def gp_inspect(args) -> int:
    import json

    from cem_core.experiments.gp import inspect, trained
    from cem_core.experiments.records import atomic_write_text, claim_new_output

    with claim_new_output("--json", args.json):
        model, task = trained.load_gp_model(args.model)
        points = None if args.points is None else inspect.parse_points(args.points, task)
        out = {"model": args.model, "title": trained.GP_MODELS[args.model].title} | inspect.inspect_function(
            model, task, args.seed, args.context, args.T_test, points=points)
        atomic_write_text(args.json, json.dumps(out))
    steps = "; ".join(f"{layer['name']} stopped after step t: {layer['rmse_to_posterior'][0]:.4f} at t = 0, "
                      f"{layer['rmse_to_posterior'][-1]:.4f} at t = {layer['T']}" for layer in out["layers"])
    given = (f"function {args.seed} with {args.context} context points" if points is None
             else f"your {len(points)} points")
    print(f"{args.model} on {given}: the model's prediction (at its "
          f"trained T = {out['trained_T']}) is {out['rmse_to_posterior']:.4f} RMSE from the posterior mean"
          f"{'; read along the steps up to T_test = ' + str(out['T_test']) + ', ' + steps if steps else ''}; "
          f"written to {args.json}")
    return 0
