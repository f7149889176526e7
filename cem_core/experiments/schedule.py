"""Optimizer, learning-rate schedule and optimizer step shared by the GP and language-model trainers."""
from __future__ import annotations

import math

import torch


def adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW (0.9, 0.95) with weight decay on the matrices only (not on norms, eta, diagonals)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": other, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def warmup_cosine(step: int, steps: int, lr: float, warmup: float, min_lr_ratio: float) -> float:
    """Linear warm-up over a fraction ``warmup`` of the steps, then cosine decay to lr * min_lr_ratio."""
    warm = max(1, int(warmup * steps))
    if step < warm:
        return lr * (step + 1) / warm
    progress = (step - warm) / max(1, steps - warm)
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


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
