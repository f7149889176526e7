"""One language-model optimizer step (`train_step`), and the validation loss and perplexity (`evaluate`,
`perplexity`)."""
from __future__ import annotations

import math
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from cem_core.experiments.schedule import descend
from cem_core.experiments.train_depths import depth_loss
from cem_core.nn.model import full_precision


@torch.no_grad()
def evaluate(model, val: torch.Tensor, batch_size: int, device, autocast) -> float:
    """Mean validation cross-entropy (nats per token)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(val), batch_size):
        batch = val[i:i + batch_size].to(device)
        with autocast():
            logits = model(batch[:, :-1])
        total += F.cross_entropy(full_precision(logits).flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
        count += batch[:, 1:].numel()
    model.train()
    return total / count


def train_step(net, model, optimizer, batch: torch.Tensor, grad_clip: float, autocast=nullcontext,
               depths: tuple | None = None) -> torch.Tensor:
    """One optimizer step on token blocks (B, seq_len + 1): next-token cross-entropy of `net` (the model,
    or its DDP or compiled wrapper), averaged over the in-layer depths `depths` (None: the trained T;
    ``train_depths.depth_loss``), backward, clipping of the model's gradient norm, the optimizer's
    step. Returns the loss; a loss that is not finite raises FloatingPointError before any update, and so do
    weights the step made not finite (a rate far too large), so that no checkpoint ever holds them."""
    def loss_at():
        with autocast():
            logits = net(batch[:, :-1])
        return F.cross_entropy(full_precision(logits).flatten(0, 1), batch[:, 1:].flatten())
    loss = loss_at() if depths is None else depth_loss(model, loss_at, depths)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss became {loss.item()}")
    descend(optimizer, model, loss, grad_clip)
    if not torch.stack([p.isfinite().all() for p in model.parameters()]).all():
        raise FloatingPointError("the weights became non-finite")
    return loss


def perplexity(loss: float, where: str) -> float:
    """exp(loss) of a validation loss; a loss that is not finite is divergence (FloatingPointError), and a finite
    one too large for exp an infinite perplexity, never an OverflowError."""
    if not math.isfinite(loss):
        raise FloatingPointError(f"the validation loss became {loss} {where}")
    return math.exp(loss) if loss < 700 else math.inf
