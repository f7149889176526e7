"""``python -m cem_core bench``: side-by-side timings, measured time ratios beside FLOP ratios."""
from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import asdict

import torch

from cem_core.experiments.bench import CONVENTION, BenchConfig, format_table, run
from cem_core.experiments.lm.train_config import TRAIN_PRESETS as LM_PRESETS
from cem_core.experiments.records import atomic_write_text, claim_new_output, provenance
from cem_core.nn.attention import AttentionConfig
from cem_core.nn.config import ModelShape
from cem_core.nn.validate import check_device

from .options import add_part_arguments, default_of, part_of


def add_bench(bench) -> None:
    """The flags of ``bench``, on its parser."""
    add_part_arguments(bench, ModelShape, default_of(BenchConfig, "shape"))
    for name, what in (("seq_len", "sequence length"), ("batch", "batch size"), ("repeats", "timed repeats per row")):
        bench.add_argument(f"--{name.replace('_', '-')}", type=int, default=default_of(BenchConfig, name),
                           help=f"{what} (default {default_of(BenchConfig, name)})")
    bench.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    bench.add_argument("--dtype", choices=("float32", "bfloat16", "float64"), default=None,
                       help="default: bfloat16 on GPU, float32 on CPU")
    bench.add_argument("--forward-only", action="store_true", help="time the forward pass only")
    bench.add_argument("--compile", action="store_true", help="torch.compile both sides of each row")
    bench.add_argument("--lm-preset", choices=tuple(LM_PRESETS), default=default_of(BenchConfig, "lm_preset"),
                       help="the LM preset whose training step the LM rows time, every variant vs llama "
                            f"(default {default_of(BenchConfig, 'lm_preset')})")
    bench.add_argument("--json", help="also write the records (name, time_ratio, flop_ratio, ...) here")

    bench.set_defaults(run=bench_command)


def bench_command(args) -> int:
    if args.device is not None:
        check_device(args.device)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    c = BenchConfig(shape=part_of(args, default_of(BenchConfig, "shape")), seq_len=args.seq_len, batch=args.batch,
                    repeats=args.repeats, device=device, dtype=dtype, backward=not args.forward_only,
                    compile=args.compile, lm_preset=args.lm_preset)
    AttentionConfig(**c.heads)   # a clear error for bad sizes
    with claim_new_output("json", args.json) if args.json else nullcontext():     # before the measurements
        records = run(c)
        print(format_table(records, c))
        if args.json:
            atomic_write_text(args.json, json.dumps({"config": asdict(c), "convention": CONVENTION,
                                                     "threads": torch.get_num_threads(), "provenance": provenance(),
                                                     "records": records}, indent=1))
            print(f"records written to {args.json}")
    return 0
