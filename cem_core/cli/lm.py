"""``python -m cem_core lm train | compare | sweep``: language models on SlimPajama (or the offline demo corpus)."""
from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from pathlib import Path

from cem_core.experiments import cluster
from cem_core.experiments.lm import decisions as lm_decisions
from cem_core.experiments.lm import presets as lm_presets
from cem_core.experiments.lm import report as lm_report
from cem_core.experiments.lm import rules as lm_rules
from cem_core.experiments.lm import runner as lm_runner
from cem_core.experiments.lm.data_config import DEFAULT_DATASET_ID, DEFAULT_MAX_DOCUMENT_BYTES
from cem_core.experiments.lm.sources import describe
from cem_core.experiments.lm.train_config import DTYPES as TRAIN_DTYPES
from cem_core.experiments.lm.train_config import TRAIN_PRESETS as LM_PRESETS
from cem_core.experiments.pool import SweepProgress
from cem_core.experiments.schedule import OptimConfig
from cem_core.experiments.train_depths import TRAIN_DEPTHS
from cem_core.nn.config import ModelShape, switches
from cem_core.nn.model import VARIANTS

from .options import add_cem_arguments, add_part_arguments, part_overrides


def add_lm(group) -> None:
    """The commands of ``lm``, on its parser."""
    lm = group.add_subparsers(dest="lm_command", required=True)
    lm_train = lm.add_parser("train", help="train one variant (resumes from --out when it holds a checkpoint)")
    lm_train.add_argument("--variant", choices=tuple(VARIANTS), default="cem-full",
                          help="llama, cem-attn, cem-mlp or cem-full (default cem-full)")
    lm_cmp = lm.add_parser("compare", help="train every variant on the same data and print one table")
    lm_cmp.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), default=list(VARIANTS),
                        help="the variants to train (default: all)")
    lm_cmp.add_argument("--json", help="also write the table as JSON records here")
    lm_sw = lm.add_parser("sweep", help="the paper's LM claims in miniature: a preset's variants x seeds on the same "
                                        "tokens (resumable), and the claims table")
    lm_sw.add_argument("--preset", choices=lm_presets.PRESETS, default="default",
                       help="; ".join(lm_presets.preset_summary(p) for p in lm_presets.PRESETS) + " (default: default)")
    lm_sw.add_argument("--out", default=None, help="the sweep's folder (default: results/lm-<preset>)")
    lm_sw.add_argument("--rates-from", metavar="DIR",
                       help="for the presets that train at rates decided from an earlier sweep (own and ladder: a "
                            "finished rates sweep; budget-ladder: a finished ladder sweep): that sweep's folder, from "
                            "whose records the rates are written to the --out folder's decisions.json before any run "
                            "(not needed once that table is there)")
    lm_sw.add_argument("--reuse", metavar="DIR",
                       help="another LM sweep's folder: its runs of the same configuration on the same data are taken "
                            "as they are instead of trained again (the tie ladder reuses the budget ladder's)")
    lm_sw.add_argument("--data", default="demo",
                       help="demo (offline Python source, NOT SlimPajama; the whole demo corpus) | prose (offline "
                            "English prose: Python's documentation and docstrings, NOT SlimPajama) | slimpajama | "
                            "PATH (local SlimPajama-format .jsonl/.jsonl.zst shards) (default demo)")
    lm_sw.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                       help="parallel worker processes, one thread each (default: min(2, cores))")
    cluster.add_arguments(lm_sw)
    for p in (lm_train, lm_cmp, lm_sw):
        _add_data_flags(p)
    for p in (lm_train, lm_cmp):
        _add_training_flags(p)
    lm_train.set_defaults(run=lm_train_command)
    lm_cmp.set_defaults(run=lm_compare)
    lm_sw.set_defaults(run=lm_sweep_command)
    lm_in = lm.add_parser("inspect", help="a trained model (models/) reads a text: the next-token prediction after "
                                          "every step of every CEM layer (a logit lens), energies, attention")
    lm_in.add_argument("--model", required=True, help="a trained language model's name (python -m cem_core models "
                                                      "list)")
    lm_in.add_argument("--text", required=True, help="the text to read (at most 129 bytes of UTF-8)")
    lm_in.add_argument("--T-test", type=int, help="steps per CEM layer (default: the trained T; up to 4x it)")
    lm_in.add_argument("--json", required=True, help="write the readout as JSON to this new file")
    lm_in.set_defaults(run=lm_inspect)


def _add_data_flags(p) -> None:
    """The data flags of every lm command."""
    p.add_argument("--dataset-id", default=DEFAULT_DATASET_ID,
                   help=f"the Hub dataset of --data slimpajama (default {DEFAULT_DATASET_ID})")
    p.add_argument("--source-filter", nargs="+", metavar="NAME",
                   help="keep only records whose meta.redpajama_set_name is one of these")
    p.add_argument("--max-document-bytes", type=int, default=DEFAULT_MAX_DOCUMENT_BYTES,
                   help="skip (and count) documents longer than this many bytes (default 16 MiB)")


def _add_training_flags(p) -> None:
    """The flags of one training run (lm train, lm compare): a preset and what to change in it."""
    p.add_argument("--preset", choices=tuple(LM_PRESETS), default="cpu-tiny",
                   help="model size and training length (default cpu-tiny; the paper sizes need a GPU)")
    p.add_argument("--data", default="demo",
                   help="demo (offline Python source, NOT SlimPajama) | prose (offline English prose, NOT "
                        "SlimPajama) | slimpajama (Hugging Face streaming) | PATH (a folder or file of "
                        "SlimPajama-format .jsonl/.jsonl.zst shards) (default demo)")
    p.add_argument("--out", default=None, help="run folder (default runs/lm/<preset>/...)")
    add_part_arguments(p, ModelShape, None, "the preset's")
    add_part_arguments(p, OptimConfig, None, "the preset's")
    p.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    p.add_argument("--batch-size", type=int, help="sequences per step (default: the preset's)")
    p.add_argument("--seq-len", type=int, help="tokens per sequence (default: the preset's)")
    p.add_argument("--eval-T", type=int, nargs="*", default=None,
                   help="also report validation perplexity at these T (test-time scaling)")
    p.add_argument("--train-depth", choices=tuple(TRAIN_DEPTHS), default=None,
                   help="in-layer steps each training step trains at: " + "; ".join(
                       f"{name}: {depth.label}" for name, depth in TRAIN_DEPTHS.items()) + " (default fixed)")
    p.add_argument("--tokenizer", default=None, help="byte (default) or bpe:<vocab size>")
    p.add_argument("--dtype", choices=tuple(TRAIN_DTYPES),
                   help="parameter format; bfloat16 = float32 weights with bf16 autocast on GPU "
                        "(default: the preset's)")
    p.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    p.add_argument("--seed", type=int, help="initialization and data seed (default 0)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: cuda when present)")
    add_cem_arguments(p, per_variant=True)


def _lm_data(args, **demo):
    from cem_core.experiments.lm.data_config import DataConfig
    common = dict(source_filter=tuple(args.source_filter) if args.source_filter else None,
                  max_document_bytes=args.max_document_bytes)
    if args.data in ("demo", "prose"):
        validation = {"validation_fraction": 0.05} if args.data == "prose" else {}   # as the trained models hold out
        return DataConfig(source=args.data, dataset_id=args.dataset_id, **common, **demo, **validation)
    if args.data == "slimpajama":
        return DataConfig(source=args.data, dataset_id=args.dataset_id, **common)
    return DataConfig(source="path", path=args.data, **common)


def lm_sweep_command(args) -> int:
    data = _lm_data(args, demo_max_bytes=lm_presets.SWEEP_PRESETS[args.preset].demo_max_bytes)
    out = Path(args.out or f"results/lm-{args.preset}")
    if args.rates_from:
        lm_runner.adopt_decisions(out, args.preset, args.rates_from)
    decided = lm_decisions.folder_decisions(out, args.preset)          # refused here when the folder lacks its table
    if args.reuse and not (Path(args.reuse) / "results.json").is_file():
        raise ValueError(f"reuse={args.reuse!r} is invalid: no LM sweep folder with a results.json")
    reuse = lm_runner.LM_SWEEP.load(Path(args.reuse) / "results.json") if args.reuse else []
    staged = bool(lm_presets.SWEEP_PRESETS[args.preset].rate_steps)     # its runs grow stage by stage
    n_runs = (len(lm_runner.LM_SWEEP.load(out / "results.json")) if staged
              else len(lm_presets.preset_runs(args.preset, decisions=decided)))
    try:
        with SweepProgress(f"lm sweep {args.preset}", n_runs, out, args.jobs,
                           lambda r: f"{r['name']} seed {r['seed']}: ppl {r['val_ppl']:.3f}", staged) as progress:
            records = lm_runner.run_sweep(out, args.preset, data, jobs=args.jobs, on_start=progress.start,
                                         on_done=progress.done, executor=cluster.from_arguments(args, out),
                                         reuse=reuse)
    except KeyboardInterrupt:
        print(f"interrupted: finished runs are kept in {out}; run the same command again to resume", file=sys.stderr)
        return 130
    print(f"data: {describe(data)}")
    print(lm_report.markdown_tables(records))
    print(f"\nverdict rule: {lm_rules.RULES.get(args.preset, lm_rules.VERDICT_RULE)}\nresults: {out / 'results.json'}")
    return 0


def _cem_switches(args) -> dict:
    """The CEM switches given as flags, T aside (T keeps its own field of a run's configuration, as it always
    had): each CEM variant applies them over its own (VARIANT_OPTIONS)."""
    return {f.name: getattr(args, f.name) for f in switches() if f.name != "T" and hasattr(args, f.name)}


def _lm_overrides(args) -> dict:
    return {"steps": args.steps, "batch_size": args.batch_size, "seq_len": args.seq_len,
            "T": getattr(args, "T", None), "eval_T": tuple(args.eval_T) if args.eval_T is not None else None,
            "tokenizer": args.tokenizer, "dtype": args.dtype, "compile": args.compile, "seed": args.seed,
            "train_depth": args.train_depth,
            **part_overrides(args, ModelShape), **part_overrides(args, OptimConfig)}


def lm_train_command(args) -> int:
    from cem_core.experiments.lm.compare import data_line
    from cem_core.experiments.lm.train import train
    from cem_core.experiments.lm.train_config import LMTrainConfig
    data = _lm_data(args)
    cfg = LMTrainConfig.from_preset(args.preset, variant=args.variant, cem_switches=_cem_switches(args),
                                    **_lm_overrides(args))
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
    from cem_core.experiments.records import claim_new_output
    out = args.out or f"runs/lm/{args.preset}/compare"
    own = dict(own=Path(out) / "compare.json", run_folder=out)   # before any training; its own table may exist
    with claim_new_output("json", args.json, **own) if args.json else nullcontext():
        data = _lm_data(args)
        records = compare(args.preset, data, out, variants=tuple(args.variants), device=args.device,
                          cem_switches=_cem_switches(args), **_lm_overrides(args))
        print(table(records, data))
        if args.json:
            write_json(records, args.json)
            print(f"records written to {args.json}")
    return 0




def lm_inspect(args) -> int:
    import json

    from cem_core.experiments.lm import inspect, trained
    from cem_core.experiments.records import atomic_write_text, claim_new_output

    with claim_new_output("--json", args.json):
        model, tokenizer = trained.load_lm_model(args.model)
        out = {"model": args.model, "title": trained.LM_MODELS[args.model].title} | inspect.inspect_text(
            model, tokenizer, args.text, args.T_test)
        atomic_write_text(args.json, json.dumps(out))
    final = out["final"]["mean_loss"]
    print(f"{args.model} read {len(out['tokens'])} tokens: mean next-token loss {final:.3f} nats; "
          + "; ".join(f"{layer['name']}: {layer['mean_loss'][0]:.3f} at step 0, {layer['mean_loss'][-1]:.3f} at step "
                      f"{layer['T']}" for layer in out["layers"]) + f"; written to {args.json}")
    return 0
