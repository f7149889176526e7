"""``python -m cem_core info``: parameter counts and KV-cache size, Llama vs the CEM variants."""
from __future__ import annotations

import torch

from cem_core.nn.config import CEMOptions, ModelShape, switches
from cem_core.nn.model import VARIANT_OPTIONS, VARIANTS, ModelConfig

from .options import add_cem_arguments, add_part_arguments, cem_options, part_of

INFO_SHAPE = ModelShape(d_model=768, n_layers=12, n_heads=12, d_ff=2048)   # GPT-2-small-like
KV_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}   # KV-cache formats


def add_info(info) -> None:
    """The flags of ``info``, on its parser."""
    add_part_arguments(info, ModelShape, INFO_SHAPE)
    info.add_argument("--vocab-size", type=int, default=32000, help="vocabulary size (default 32000)")
    info.add_argument("--max-seq-len", type=int, default=2048, help="context length (default 2048)")
    info.add_argument("--dtype", choices=tuple(KV_DTYPES), default="bfloat16",
                      help="number format of the KV cache (default bfloat16)")
    add_cem_arguments(info, per_variant=True)

    info.set_defaults(run=lambda args: print(info_table(args)))


def _variant_configs(args) -> dict[str, ModelConfig]:
    """Every variant at the given sizes, with its own CEM switches changed by the flags given."""
    sizes = dict(shape=part_of(args, INFO_SHAPE), vocab_size=args.vocab_size, max_seq_len=args.max_seq_len)
    return {name: ModelConfig.variant(name, cem=cem_options(args, VARIANT_OPTIONS[name]), **sizes)
            for name in VARIANTS}


def _switches_text(cem: CEMOptions) -> str:
    """The switches that differ from their defaults ("defaults" when none does)."""
    changed = [f"{f.name}={getattr(cem, f.name)}" for f in switches() if getattr(cem, f.name) != f.default]
    return " ".join(changed) or "defaults"


def info_table(args) -> str:
    from cem_core.ui.figdata import variant_table

    configs = _variant_configs(args)
    rows = variant_table(configs, KV_DTYPES[args.dtype])
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


