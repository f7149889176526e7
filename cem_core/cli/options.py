"""The command line's shared flags: every CEM switch as a flag (from CEMOptions' fields), the model's shape
(ModelShape's fields, the activation's choices from the energies), and a config field's default for a flag's
help."""
from __future__ import annotations

import argparse
from dataclasses import replace

from cem_core.nn.config import ACTIVATIONS, SHAPE_FIELDS, CEMOptions, ModelShape, switches

SHAPE_HELP = {"d_model": "residual width d", "n_layers": "number of blocks", "n_heads": "attention heads H",
              "d_ff": "MLP width d_ff", "activation": "the MLP's nonlinearity phi (its energy uses Phi, Phi' = phi)"}


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




def add_shape_arguments(parser: argparse.ArgumentParser, base: ModelShape | None, what: str = "") -> None:
    """A flag for every field of ModelShape, defaulting to `base`'s (None: `what`, such as "the preset's")."""
    group = parser.add_argument_group("model shape")
    for name in SHAPE_FIELDS:
        extra = {"choices": ACTIVATIONS} if name == "activation" else {"type": int}
        default = getattr(base, name) if base is not None else None
        group.add_argument(f"--{name.replace('_', '-')}", dest=name, default=default,
                           help=f"{SHAPE_HELP[name]} (default {default if base is not None else what})", **extra)


def shape_overrides(args) -> dict:
    """The shape fields that add_shape_arguments' flags set (those left at None aside)."""
    return {name: getattr(args, name) for name in SHAPE_FIELDS if getattr(args, name, None) is not None}


def shape_of(args, base: ModelShape) -> ModelShape:
    """`base` with the shape fields the flags set."""
    return replace(base, **shape_overrides(args))
