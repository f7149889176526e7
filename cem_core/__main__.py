"""Command line: ``python -m cem_core info | gp train|sweep|report | lm train|compare|sweep | bench | figures``.

Every flag has a help text (``--help``); choices and defaults come from the configs and constants
they set, so the command line cannot disagree with them."""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

from cem_core.nn.config import KINDS, MLP_KINDS, CEMOptions, check_eval_T, switches
from cem_core.nn.model import VARIANT_OPTIONS, VARIANTS, ModelConfig
from cem_core.nn.validate import check_device

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}   # KV-cache formats


def _variant_configs(args) -> dict[str, ModelConfig]:
    """Every variant at the given sizes, with its own CEM switches changed by the flags given."""
    sizes = dict(vocab_size=args.vocab_size, d_model=args.d_model, n_layers=args.n_layers,
                 n_heads=args.n_heads, d_ff=args.d_ff, max_seq_len=args.max_seq_len)
    return {name: ModelConfig.variant(name, cem=cem_options(args, VARIANT_OPTIONS[name]), **sizes)
            for name in VARIANTS}


def _switches_text(cem: CEMOptions) -> str:
    """The switches that differ from their defaults ("defaults" when none does)."""
    changed = [f"{f.name}={getattr(cem, f.name)}" for f in switches() if getattr(cem, f.name) != f.default]
    return " ".join(changed) or "defaults"


def info_table(args) -> str:
    from cem_core.ui.figdata import variant_table

    configs = _variant_configs(args)
    rows = variant_table(configs, DTYPES[args.dtype])
    header = tuple(rows[0])
    cells = [header] + [tuple(f"{v:.3f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else v
                              for v in row.values()) for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in cells]
    lines.insert(1, "-" * len(lines[0]))
    notes = [
        "",
        f"d_model={args.d_model} n_layers={args.n_layers} n_heads={args.n_heads} d_ff={args.d_ff} "
        f"vocab={args.vocab_size} (tied embeddings); CEM switches: "
        + "; ".join(f"{name}: {_switches_text(config.cem)}" for name, config in configs.items() if name != "llama"),
        "attn/mlp proj: projection weights summed over layers (Llama 4d^2 and 3 d d_ff per layer; "
        "CEM 2d^2 and 2 d d_ff). Diagonal and preconditioner terms are listed separately and "
        "included in total (norms and embeddings too).",
        f"KV bytes/token: cached numbers per generated token over all layers in {args.dtype}; "
        "CEM caches keys only (values are the keys), plus the normalized inputs when D+LR is on.",
    ]
    return "\n".join(lines + notes)


def add_cem_arguments(parser: argparse.ArgumentParser, *, per_variant: bool = False) -> None:
    """A flag for every CEM switch (CEMOptions' fields: type, choices, default and help from there).
    With `per_variant`, a switch not given keeps each variant's own value (VARIANT_OPTIONS)."""
    group = parser.add_argument_group("CEM switches (of every CEM layer)")
    for f in switches():
        kind, allowed = f.metadata["kind"], f.metadata["allowed"]
        extra = {"choices": allowed} if kind == "choice" else {"type": int if kind == "int" else float}
        scope = " (attention only)" if f.metadata["attention_only"] else ""
        default = "each variant's own" if per_variant else f.default
        group.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name,
                           default=argparse.SUPPRESS if per_variant else f.default,
                           help=f"{f.metadata['help']}{scope} (default: {default})", **extra)


def cem_options(args, base: CEMOptions = CEMOptions()) -> CEMOptions:
    """`base` with the switches the flags of add_cem_arguments set."""
    return replace(base, **{f.name: getattr(args, f.name) for f in switches() if hasattr(args, f.name)})


def _default(cls, name: str):
    return cls.__dataclass_fields__[name].default


def build_parser() -> argparse.ArgumentParser:
    from cem_core.experiments import cluster, gp, gp_study, gp_sweep
    from cem_core.experiments.lm import data as lm_data
    from cem_core.experiments.lm.train import DTYPES as TRAIN_DTYPES
    from cem_core.experiments.lm.train import PRESETS as LM_PRESETS

    parser = argparse.ArgumentParser(prog="python -m cem_core", description="CEM Lab command line")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="parameter counts and KV-cache size: Llama vs CEM variants")
    info.add_argument("--d-model", type=int, default=768, help="residual width d (default 768)")
    info.add_argument("--n-layers", type=int, default=12, help="number of blocks (default 12)")
    info.add_argument("--n-heads", type=int, default=12, help="attention heads H (default 12)")
    info.add_argument("--d-ff", type=int, default=2048, help="MLP width d_ff (default 2048)")
    info.add_argument("--vocab-size", type=int, default=32000, help="vocabulary size (default 32000)")
    info.add_argument("--max-seq-len", type=int, default=2048, help="context length (default 2048)")
    info.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16",
                      help="number format of the KV cache (default bfloat16)")
    add_cem_arguments(info, per_variant=True)

    gp_parser = sub.add_parser("gp", help="Gaussian-process in-context regression").add_subparsers(
        dest="gp_command", required=True)
    train = gp_parser.add_parser("train", help="train one model and compare it with the GP optimum")
    model, task, training = gp.GPModelConfig, gp.GPTaskConfig, gp.GPTrainConfig
    train.add_argument("--attention", choices=KINDS, default=_default(model, "attention"),
                       help=f"attention kind (default {_default(model, 'attention')})")
    train.add_argument("--mlp", choices=MLP_KINDS, default=_default(model, "mlp"),
                       help=f"MLP kind (default {_default(model, 'mlp')}: SwiGLU, so runs differ in attention only; "
                            "none: attention-only blocks)")
    train.add_argument("--tokens", choices=gp.TOKEN_FORMATS, default=_default(model, "tokens"),
                       help="token format: pairs = [x_j, x_{j-1}, y_{j-1}, first]; interleaved = a query token "
                            f"[x_j, 0, 1] then [x_j, y_j, 0] (default {_default(model, 'tokens')})")
    for name, what in (("width", "residual width"), ("depth", "number of blocks"), ("n_heads", "attention heads"),
                       ("d_ff", "MLP width"), ("loops", "times the blocks run over, weights shared")):
        train.add_argument(f"--{name.replace('_', '-')}", type=int, default=_default(model, name),
                           help=f"{what} (default {_default(model, name)})")
    add_cem_arguments(train)
    train.add_argument("--kernel", choices=gp.KERNELS, default=_default(task, "kernel"),
                       help=f"GP kernel of the task (default {_default(task, 'kernel')})")
    for name, kind, what in (("lengthscale", float, "kernel lengthscale"), ("noise_var", float, "noise variance"),
                             ("d_x", int, "input dimension"), ("n_points", int, "points per function")):
        train.add_argument(f"--{name.replace('_', '-')}", type=kind, default=_default(task, name),
                           help=f"{what} (default {_default(task, name)})")
    for name, kind, what in (("steps", int, "training steps"), ("batch_size", int, "functions per step"),
                             ("lr", float, "peak learning rate"), ("seed", int, "training seed")):
        train.add_argument(f"--{name.replace('_', '-')}", type=kind, default=_default(training, name),
                           help=f"{what} (default {_default(training, name)})")
    train.add_argument("--eval-T", type=int, nargs="*", default=[],
                       help="also evaluate the trained model at these T (test-time scaling)")
    train.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    train.add_argument("--out", help="write the run record (JSON) to this new file")
    sweep = gp_parser.add_parser("sweep", help="run a preset sweep (resumable) into DIR/results.json and .csv")
    sweep.add_argument("--out", required=True, help="the sweep's folder (one preset per folder)")
    sweep.add_argument("--preset", choices=gp_sweep.PRESETS, default="default",
                       help="quick (one seed, minutes), default (the committed sweep), gpu (larger, for an "
                            "accelerator), plateau (CEM T = 1 and Llama trained long: where T = 1 stops improving), "
                            "study (the factor study: where recursion helps) (default: default)")
    sweep.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                       help="parallel worker processes, one thread each (default: min(2, cores))")
    sweep.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    sweep.add_argument("--reuse", help="another sweep's folder or results.json: its runs of the same configuration "
                                       "(same hash) are taken instead of trained again, provenance kept")
    cluster.add_arguments(sweep)
    report = gp_parser.add_parser("report", help="print the summary table of a sweep")
    report.add_argument("results", nargs="?", default=str(gp_sweep.COMMITTED_SWEEP),
                        help="a sweep folder or its results.json (default: the committed sweep, from the repository "
                             "root)")

    lm = sub.add_parser("lm", help="language models on SlimPajama (or the offline demo corpus)").add_subparsers(
        dest="lm_command", required=True)
    lm_train = lm.add_parser("train", help="train one variant (resumes from --out when it holds a checkpoint)")
    lm_train.add_argument("--variant", choices=tuple(VARIANTS), default="cem-full",
                          help="llama, cem-attn, cem-mlp or cem-full (default cem-full)")
    lm_cmp = lm.add_parser("compare", help="train every variant on the same data and print one table")
    lm_cmp.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), default=list(VARIANTS),
                        help="the variants to train (default: all)")
    lm_cmp.add_argument("--json", help="also write the table as JSON records here")
    from cem_core.experiments.lm import sweep as lm_sweep
    lm_sw = lm.add_parser("sweep", help="the paper's LM claims in miniature: nine variants x three seeds on the same "
                                        "tokens (resumable), and the claims table")
    lm_sw.add_argument("--preset", choices=lm_sweep.PRESETS, default="default",
                       help="; ".join(lm_sweep.preset_summary(p) for p in lm_sweep.PRESETS) + " (default: default)")
    lm_sw.add_argument("--out", default=None, help="the sweep's folder (default: results/lm-<preset>)")
    lm_sw.add_argument("--data", default="demo",
                       help="demo (offline, NOT SlimPajama; the whole demo corpus) | slimpajama | PATH (local "
                            "SlimPajama-format .jsonl/.jsonl.zst shards) (default demo)")
    lm_sw.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                       help="parallel worker processes, one thread each (default: min(2, cores))")
    cluster.add_arguments(lm_sw)
    for p in (lm_train, lm_cmp, lm_sw):
        p.add_argument("--dataset-id", default=lm_data.DEFAULT_DATASET_ID,
                       help=f"the Hub dataset of --data slimpajama (default {lm_data.DEFAULT_DATASET_ID})")
        p.add_argument("--source-filter", nargs="+", metavar="NAME",
                       help="keep only records whose meta.redpajama_set_name is one of these")
        p.add_argument("--max-document-bytes", type=int, default=lm_data.DEFAULT_MAX_DOCUMENT_BYTES,
                       help="skip (and count) documents longer than this many bytes (default 16 MiB)")
    for p in (lm_train, lm_cmp):
        p.add_argument("--preset", choices=tuple(LM_PRESETS), default="cpu-tiny",
                       help="model size and training length (default cpu-tiny; the paper sizes need a GPU)")
        p.add_argument("--data", default="demo",
                       help="demo (offline, NOT SlimPajama) | slimpajama (Hugging Face streaming) | PATH "
                            "(a folder or file of SlimPajama-format .jsonl/.jsonl.zst shards) (default demo)")
        p.add_argument("--out", default=None, help="run folder (default runs/lm/<preset>/...)")
        p.add_argument("--steps", type=int, help="training steps (default: the preset's)")
        p.add_argument("--batch-size", type=int, help="sequences per step (default: the preset's)")
        p.add_argument("--seq-len", type=int, help="tokens per sequence (default: the preset's)")
        p.add_argument("--lr", type=float, help="peak learning rate (default: the preset's)")
        p.add_argument("--T", type=int, help="override the CEM layers' T (default: the variant's)")
        p.add_argument("--eval-T", type=int, nargs="*", default=None,
                       help="also report validation perplexity at these T (test-time scaling)")
        p.add_argument("--tokenizer", default=None, help="byte (default) or bpe:<vocab size>")
        p.add_argument("--dtype", choices=tuple(TRAIN_DTYPES),
                       help="parameter format; bfloat16 = float32 weights with bf16 autocast on GPU "
                            "(default: the preset's)")
        p.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
        p.add_argument("--seed", type=int, help="initialization and data seed (default 0)")
        p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: cuda when present)")

    bench = sub.add_parser("bench", help="side-by-side timings: measured time ratios beside FLOP ratios")
    from cem_core.experiments.bench import BenchConfig
    for name, what in (("d_model", "residual width"), ("n_heads", "attention heads"), ("seq_len", "sequence length"),
                       ("batch", "batch size"), ("d_ff", "MLP width"), ("repeats", "timed repeats per row")):
        bench.add_argument(f"--{name.replace('_', '-')}", type=int, default=_default(BenchConfig, name),
                           help=f"{what} (default {_default(BenchConfig, name)})")
    bench.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    bench.add_argument("--dtype", choices=("float32", "bfloat16", "float64"), default=None,
                       help="default: bfloat16 on GPU, float32 on CPU")
    bench.add_argument("--forward-only", action="store_true", help="time the forward pass only")
    bench.add_argument("--compile", action="store_true", help="torch.compile both sides of each row")
    bench.add_argument("--lm-preset", choices=tuple(LM_PRESETS), default=_default(BenchConfig, "lm_preset"),
                       help="the LM preset whose training step the LM rows time, every variant vs llama "
                            f"(default {_default(BenchConfig, 'lm_preset')})")
    bench.add_argument("--json", help="also write the records (name, time_ratio, flop_ratio, ...) here")

    figures = sub.add_parser("figures", help="write the static figures (PNG and SVG) into a folder")
    figures.add_argument("--out", default="figures", help="the folder (default figures)")
    figures.add_argument("--lm-results", default=str(lm_sweep.COMMITTED_SWEEP / "results.json"),
                         help="the LM sweep's results.json (default: the committed sweep, from the repository root)")
    figures.add_argument("--ladder-results", default=str(lm_sweep.COMMITTED_LADDER / "results.json"),
                         help="the LM width ladder's results.json (default: the committed ladder, from the repository "
                              "root)")
    figures.add_argument("--gp-results", default=str(gp_sweep.COMMITTED_SWEEP / "results.json"),
                         help="the GP sweep's results.json (default: the committed sweep, from the repository root)")
    figures.add_argument("--gp-study-results", default=str(gp_study.COMMITTED_STUDY / "results.json"),
                         help="the GP factor study's results.json (default: the committed study, from the repository "
                              "root)")
    return parser


def gp_train(args) -> int:
    import json

    from tqdm import tqdm

    from cem_core.experiments.gp import GPModelConfig, GPTaskConfig, GPTrainConfig
    from cem_core.experiments.gp_sweep import RunSpec, run_label, run_spec
    from cem_core.experiments.records import atomic_write_text, check_new_output

    cem = cem_options(args)
    spec = RunSpec(
        task=GPTaskConfig(kernel=args.kernel, lengthscale=args.lengthscale, noise_var=args.noise_var,
                          d_x=args.d_x, n_points=args.n_points),
        model=GPModelConfig(attention=args.attention, mlp=args.mlp, width=args.width, depth=args.depth,
                            n_heads=args.n_heads, d_ff=args.d_ff, cem=cem, tokens=args.tokens, loops=args.loops),
        train=GPTrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed),
        group="cli")
    eval_Ts = check_eval_T(args.eval_T, cem.T, cem.eta_mode == "per_step")
    if eval_Ts and args.attention != "cem" and args.mlp != "cem":
        raise ValueError("eval_T needs a CEM layer: attention='llama' and mlp='llama' have no T")
    if args.out:
        check_new_output("out", args.out)                         # before training: the record is never lost
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
    from cem_core.experiments.gp_sweep import GP_SWEEP, PRESETS, markdown_table, preset_runs, stale_hashes
    from cem_core.experiments.records import read_json
    path = Path(args.results)
    if path.is_dir():                                   # a sweep folder
        path = path / "results.json"
    records = GP_SWEEP.load(path)
    if not records:
        raise ValueError(f"results={str(path)!r} is invalid: no results there; run `python -m cem_core gp sweep` first")
    print(markdown_table(records))
    manifest = read_json(path.parent / "sweep.json") if (path.parent / "sweep.json").is_file() else {}
    preset = manifest.get("preset") if isinstance(manifest, dict) else None
    if preset in PRESETS:
        missing, _ = stale_hashes(records, preset)
        if missing:
            print(f"note: {len(missing)} of {len(preset_runs(preset))} runs of preset {preset} are missing (the sweep "
                  "has not finished: run the same gp sweep again to resume); the table shows what is there",
                  file=sys.stderr)
    return 0


def _lm_data(args, **demo):
    from cem_core.experiments.lm.data import DataConfig
    common = dict(source_filter=tuple(args.source_filter) if args.source_filter else None,
                  max_document_bytes=args.max_document_bytes)
    if args.data == "demo":
        return DataConfig(source="demo", dataset_id=args.dataset_id, **common, **demo)
    if args.data == "slimpajama":
        return DataConfig(source=args.data, dataset_id=args.dataset_id, **common)
    return DataConfig(source="path", path=args.data, **common)


def lm_sweep(args) -> int:
    from cem_core.experiments.lm import sweep
    data = _lm_data(args, demo_max_bytes=sweep.SWEEP_PRESETS[args.preset].demo_max_bytes)
    args.out = args.out or f"results/lm-{args.preset}"
    return sweep.main_sweep(args, data)


def _lm_overrides(args) -> dict:
    return {"steps": args.steps, "batch_size": args.batch_size, "seq_len": args.seq_len, "lr": args.lr,
            "T": args.T, "eval_T": tuple(args.eval_T) if args.eval_T is not None else None,
            "tokenizer": args.tokenizer, "dtype": args.dtype, "compile": args.compile, "seed": args.seed}


def lm_train(args) -> int:
    from cem_core.experiments.lm.compare import data_line
    from cem_core.experiments.lm.data import describe
    from cem_core.experiments.lm.train import LMTrainConfig, train
    data = _lm_data(args)
    cfg = LMTrainConfig.from_preset(args.preset, variant=args.variant, **_lm_overrides(args))
    out = args.out or f"runs/lm/{args.preset}/{args.variant}-{cfg.run_hash(data)[:8]}"
    print(f"training {args.variant} ({args.preset}) on {describe(data)} into {out}", flush=True)
    summary = train(cfg, data, out, device=args.device).summary
    if summary:
        print(data_line(summary["data_stats"]))
        print(f"{summary['variant']}: {summary['params']:,} parameters, {summary['tokens_per_s']:,.0f} tokens/s, "
              f"validation perplexity {summary['val_ppl']:.3f}"
              + (f", MFU {summary['mfu']:.1%}" if summary.get("mfu") else ""))
        print(f"trained on {summary['tokens']:,} tokens; the compute-optimal budget (20 tokens/parameter) "
              f"would be {summary['chinchilla_tokens']:,}")
        for T, ppl in summary["val_ppl_by_T"].items():
            print(f"  evaluated at T={T}: perplexity {ppl:.3f}")
        print(f"sample: {summary['sample']!r}")
    return 0


def lm_compare(args) -> int:
    from cem_core.experiments.lm.compare import compare, table, write_json
    from cem_core.experiments.records import check_new_output
    out = args.out or f"runs/lm/{args.preset}/compare"
    if args.json:                                                 # before any training; its own table may exist
        check_new_output("json", args.json, own=Path(out) / "compare.json", run_folder=out)
    data = _lm_data(args)
    records = compare(args.preset, data, out, variants=tuple(args.variants), device=args.device,
                      **_lm_overrides(args))
    print(table(records, data))
    if args.json:
        write_json(records, args.json)
        print(f"records written to {args.json}")
    return 0


def write_figures(args) -> int:
    from cem_core.ui.plots import write_all_figures
    out = Path(args.out)
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise ValueError(f"out={args.out!r} is invalid: it is a file (or a link to no folder), not a folder")
    for path in write_all_figures(args.out, gp_results=args.gp_results, lm_results=args.lm_results,
                                   gp_study_results=args.gp_study_results, ladder_results=args.ladder_results):
        print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "info":
            print(info_table(args))
        elif args.command == "gp":
            from cem_core.experiments.gp_sweep import main_sweep
            if args.gp_command != "report":
                check_device(args.device)
            return {"train": gp_train, "sweep": main_sweep, "report": gp_report}[args.gp_command](args)
        elif args.command == "lm":
            return {"train": lm_train, "compare": lm_compare, "sweep": lm_sweep}[args.lm_command](args)
        elif args.command == "bench":
            from cem_core.experiments.bench import main as bench_main
            if args.device is not None:
                check_device(args.device)
            return bench_main(args)
        elif args.command == "figures":
            return write_figures(args)
    except (ValueError, ConnectionError, FloatingPointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:                      # a file or folder the system refuses: no permission, disk full, ...
        print(f"error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: what was checkpointed or recorded is kept (none before the first checkpoint); run the "
              "same command again to resume from it", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    from cem_core.experiments.lm.train import exit_process
    exit_process(main())
