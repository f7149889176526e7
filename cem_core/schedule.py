"""Learning-rate schedule shared by the GP and language-model trainers."""
from __future__ import annotations

import math


def warmup_cosine(step: int, steps: int, lr: float, warmup: float, min_lr_ratio: float) -> float:
    """Linear warm-up over a fraction ``warmup`` of the steps, then cosine decay to lr * min_lr_ratio."""
    warm = max(1, int(warmup * steps))
    if step < warm:
        return lr * (step + 1) / warm
    progress = (step - warm) / max(1, steps - warm)
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
