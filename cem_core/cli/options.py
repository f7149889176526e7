"""The command line's shared flags: every CEM switch as a flag (from CEMOptions' fields), the model's shape
(ModelShape's fields, the activation's choices from the energies) and the optimizer (OptimConfig's fields), and a
config field's default for a flag's help."""
from __future__ import annotations

import argparse
from dataclasses import fields, replace

from cem_core.experiments.schedule import OptimConfig
from cem_core.nn.activations import ACTIVATIONS
from cem_core.nn.config import CEMOptions, ModelShape, switches

SHAPE_HELP = {"d_model": "residual width d", "n_layers": "number of blocks", "n_heads": "attention heads H",
              "d_ff": "MLP width d_ff", "activation": "the MLP's nonlinearity phi (its energy uses Phi, Phi' = phi)"}
OPTIM_HELP = {"lr": "peak learning rate", "min_lr_ratio": "the cosine decay's floor, as a fraction of lr",
              "warmup": "fraction of the steps with linear warm-up", "weight_decay": "AdamW's decay of the matrices",
              "grad_clip": "the gradient norm is clipped to this"}
# the configs another config holds whose every field is a flag: the flags' group title and help
FLAG_PARTS = {ModelShape: ("model shape", SHAPE_HELP), OptimConfig: ("optimizer and schedule", OPTIM_HELP)}
TYPES = {"int": int, "float": float}       # a field's type as a string annotation names it


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


def add_part_arguments(parser: argparse.ArgumentParser, kind: type, base=None, what: str = "") -> None:
    """A flag for every field of `kind` (a ModelShape or an OptimConfig), defaulting to `base`'s (None: `what`,
    such as "the preset's")."""
    title, helps = FLAG_PARTS[kind]
    group = parser.add_argument_group(title)
    for f in fields(kind):
        extra = {"choices": tuple(ACTIVATIONS)} if f.name == "activation" else {"type": TYPES.get(f.type, f.type)}
        default = getattr(base, f.name) if base is not None else None
        group.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=default,
                           help=f"{helps[f.name]} (default {default if base is not None else what})", **extra)


def part_overrides(args, kind: type) -> dict:
    """The fields of `kind` that add_part_arguments' flags set (those left at None aside)."""
    return {f.name: getattr(args, f.name) for f in fields(kind) if getattr(args, f.name, None) is not None}


def part_of(args, base):
    """`base` (a ModelShape or an OptimConfig) with the fields the flags set."""
    return replace(base, **part_overrides(args, type(base)))
