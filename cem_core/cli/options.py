"""The command line's shared flags: every CEM switch as a flag (from CEMOptions' fields), and a config field's
default for a flag's help."""
from __future__ import annotations

import argparse
from dataclasses import replace

from cem_core.nn.config import CEMOptions, switches


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


def default_of(cls, name: str):
    """A dataclass field's default (for a flag's default and its help)."""
    return cls.__dataclass_fields__[name].default


