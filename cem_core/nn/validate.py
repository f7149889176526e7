"""Validation helpers shared by every config in the package: each failure is a ``ValueError``
of the form ``field=value is invalid: what is allowed``, raised at construction time."""
from __future__ import annotations

import dataclasses
import math


def fail(field: str, value, allowed: str) -> None:
    raise ValueError(f"{field}={value!r} is invalid: {allowed}")


def check_int(field: str, value, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(field, value, "must be an integer")
    if value < lo or (hi is not None and value > hi):
        fail(field, value, f"must be in [{lo}, {hi}]" if hi is not None else f"must be >= {lo}")


def check_float(field: str, value, lo: float, strict: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        fail(field, value, "must be a finite number")
    if value < lo or (strict and value == lo):
        fail(field, value, f"must be {'>' if strict else '>='} {lo}")


def check_choice(field: str, value, choices: tuple[str, ...]) -> None:
    if value not in choices:
        fail(field, value, f"must be one of {', '.join(map(repr, choices))}")


def check_bool(field: str, value) -> None:
    if not isinstance(value, bool):
        fail(field, value, "must be True or False")


def check_device(value):
    """A torch.device from 'cpu', 'cuda', 'cuda:N' or 'mps' that exists on this machine."""
    import torch

    try:
        device = torch.device(value)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        fail("device", value, "must be 'cpu', 'cuda', 'cuda:N' or 'mps'")
    if device.type == "mps" and not torch.backends.mps.is_available():
        fail("device", value, "MPS is not available here (use 'cpu')")
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            fail("device", value, "no CUDA device is available here (use 'cpu')")
        if device.index is not None and device.index >= count:
            fail("device", value, f"this machine has {count} CUDA device(s): cuda:0 to cuda:{count - 1}")
    return device


def check_config(config, kind: type) -> None:
    """A layer's config must be of the layer's own config class."""
    if not isinstance(config, kind):
        article = "an" if kind.__name__[0] in "AEIOU" else "a"
        raise ValueError(f"config must be {article} {kind.__name__}; got {type(config).__name__}")


def as_config(value, kind: type, name: str):
    """A `kind` (a config dataclass that another config holds) from itself or from its fields as JSON holds them
    (run.json, a record): a field `kind` has not is named."""
    if isinstance(value, dict):
        unknown = set(value) - {f.name for f in dataclasses.fields(kind)}
        if unknown:
            fail(name, value, f"has fields a {kind.__name__} has not: {', '.join(sorted(unknown))}")
        value = kind(**value)
    if not isinstance(value, kind):
        fail(name, value, f"must be a {kind.__name__}")
    return value
