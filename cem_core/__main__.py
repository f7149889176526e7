"""Command line: ``python -m cem_core info ...`` (more commands arrive with later features)."""
from __future__ import annotations

import argparse
import sys

import torch

from .config import DIAGONALS, PRECONDITIONERS
from .model import VARIANTS, ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _variant_configs(args) -> dict[str, ModelConfig]:
    sizes = dict(vocab_size=args.vocab_size, d_model=args.d_model, n_layers=args.n_layers,
                 n_heads=args.n_heads, d_ff=args.d_ff, max_seq_len=args.max_seq_len)
    attn = dict(T=args.T, diagonal=args.diagonal, preconditioner=args.preconditioner, rank=args.rank)
    mlp = dict(T=args.T, preconditioner=args.preconditioner, rank=args.rank)
    return {name: ModelConfig.variant(name, attention_options=attn, mlp_options=mlp, **sizes)
            for name in VARIANTS}


def info_table(args) -> str:
    configs = _variant_configs(args)
    base = configs["llama"].param_counts()
    dtype = DTYPES[args.dtype]
    base_cache = configs["llama"].cache_bytes_per_token(dtype)
    header = ("variant", "attn proj", "x llama", "attn diag", "attn precond", "mlp proj", "x llama",
              "mlp precond", "total", "KV bytes/token", "x llama")
    rows = [header]
    for name, cfg in configs.items():
        c = cfg.param_counts()
        cache = cfg.cache_bytes_per_token(dtype)
        rows.append((name, f"{c['attention.projections']:,}",
                     f"{c['attention.projections'] / base['attention.projections']:.3f}",
                     f"{c['attention.diagonal']:,}", f"{c['attention.preconditioner']:,}",
                     f"{c['mlp.projections']:,}", f"{c['mlp.projections'] / base['mlp.projections']:.3f}",
                     f"{c['mlp.preconditioner']:,}", f"{c['total']:,}", f"{cache:,}", f"{cache / base_cache:.3f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    notes = [
        "",
        f"d_model={args.d_model} n_layers={args.n_layers} n_heads={args.n_heads} d_ff={args.d_ff} "
        f"vocab={args.vocab_size} (tied embeddings); CEM options: T={args.T} diagonal={args.diagonal} "
        f"preconditioner={args.preconditioner} rank={args.rank}",
        "attn/mlp proj: projection weights summed over layers (Llama 4d^2 and 3 d d_ff per layer; "
        "CEM 2d^2 and 2 d d_ff). Diagonal and preconditioner terms are listed separately and "
        "included in total (norms and embeddings too).",
        f"KV bytes/token: cached numbers per generated token over all layers in {args.dtype}; "
        "CEM caches keys only (values are the keys), plus the normalized inputs when D+LR is on.",
    ]
    return "\n".join(lines + notes)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cem_core", description="CEM Lab command line")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="parameter counts and KV-cache size: Llama vs CEM variants")
    info.add_argument("--d-model", type=int, default=768)
    info.add_argument("--n-layers", type=int, default=12)
    info.add_argument("--n-heads", type=int, default=12)
    info.add_argument("--d-ff", type=int, default=2048)
    info.add_argument("--vocab-size", type=int, default=32000)
    info.add_argument("--max-seq-len", type=int, default=2048)
    info.add_argument("--T", type=int, default=1, help="in-layer steps of the CEM layers")
    info.add_argument("--diagonal", choices=DIAGONALS, default="none")
    info.add_argument("--preconditioner", choices=PRECONDITIONERS, default="none")
    info.add_argument("--rank", type=int, default=4)
    info.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "info":
            print(info_table(args))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
