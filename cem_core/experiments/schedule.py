"""The optimizer and its learning-rate schedule, one config for the GP and language-model trainers, and the
optimizer step they share."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from cem_core.nn.validate import as_config, check_float, fail


@dataclass(frozen=True)
class OptimConfig:
    """AdamW (0.9, 0.95) with weight decay on the matrices only, a linear warm-up and a cosine decay, and
    gradient-norm clipping: what both trainers hold as their ``optim`` (their run records list these fields
    among their own, the form run hashes have always been computed from)."""

    lr: float = 3e-3               # peak learning rate
    min_lr_ratio: float = 0.1      # cosine decay to lr * min_lr_ratio
    warmup: float = 0.05           # fraction of the steps with linear warm-up
    weight_decay: float = 0.1      # on matrices only (not on norms, eta, diagonals)
    grad_clip: float = 1.0         # the model's gradient norm is clipped to this

    def __post_init__(self) -> None:
        for name in ("lr", "grad_clip"):
            check_float(name, getattr(self, name), 0.0, strict=True)
        for name in ("min_lr_ratio", "warmup", "weight_decay"):
            check_float(name, getattr(self, name), 0.0, strict=False)
        if self.warmup >= 1:
            fail("warmup", self.warmup, "must be a fraction in [0, 1)")

    def optimizer(self, model: torch.nn.Module) -> torch.optim.AdamW:
        """AdamW over the model's parameters, decaying its matrices only."""
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": self.weight_decay},
                                  {"params": other, "weight_decay": 0.0}], lr=self.lr, betas=(0.9, 0.95))

    def lr_at(self, step: int, steps: int) -> float:
        """Linear warm-up over a fraction ``warmup`` of the steps, then cosine decay to lr * min_lr_ratio."""
        warm = max(1, int(self.warmup * steps))
        if step < warm:
            return self.lr * (step + 1) / warm
        progress = (step - warm) / max(1, steps - warm)
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


OPTIM_FIELDS = tuple(f.name for f in fields(OptimConfig))


def as_optim(value) -> OptimConfig:
    """An OptimConfig from itself or from its fields as JSON holds them."""
    return as_config(value, OptimConfig, "optim")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The schedule's rate for the next step, in every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def descend(optimizer: torch.optim.Optimizer, model: torch.nn.Module, loss: torch.Tensor, grad_clip: float) -> None:
    """One optimizer step on a finite loss: fresh gradients, backward, the model's gradient norm clipped to
    `grad_clip`, the optimizer's step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
