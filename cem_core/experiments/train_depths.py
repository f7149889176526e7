"""How many in-layer steps a training step trains at (``train_depth``): one registered choice of both trainers (GP
and LM), the test-time study's training regimes besides the anchor (docs/design.md#216-training-for-test-time-steps).

A CEM layer trained at T runs T steps at every training step (``fixed``, the paper's). ``random`` draws one depth
t uniformly from 1..T per batch, from the run's seed and the step alone (a resumed run draws the same depths);
``every step`` averages the loss of the prediction after each depth t = 1..T (every CEM layer of the model stopped
after t steps: for a model of one CEM layer, the prediction after each of its steps). The trained T stays the
model's T: test-time T' is counted from it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import torch

from cem_core.nn.model import cem_layers, recursion_depth
from cem_core.nn.registry import Registry
from cem_core.nn.validate import check_choice, fail


@dataclass(frozen=True)
class TrainDepth:
    name: str
    label: str
    equation: str                                   # the training loss, LaTeX (L: the task's loss, f_t: t steps)
    _depths: Callable[[int, int, int], tuple]       # (T, seed, step) -> the depths whose losses the step averages

    def depths(self, T: int, seed: int, step: int) -> tuple[int, ...]:
        """The depths the training step `step` of a run of `seed` trains the model of T steps at."""
        return self._depths(T, seed, step)

    def cost(self, T: int) -> float:
        """The in-layer steps a training step runs, on average, as a multiple of T (forward and backward)."""
        if self.name == "random":
            return (T + 1) / (2 * T)
        return sum(self.depths(T, 0, 0)) / T


TRAIN_DEPTHS = Registry("training depth")
TRAIN_DEPTHS.register(TrainDepth("fixed", "T steps at every training step (the paper's)",
                                 r"\mathcal{L}\big(f_T(x)\big)", lambda T, seed, step: (T,)))
TRAIN_DEPTHS.register(TrainDepth(
    "random", "t steps, t drawn uniformly from 1..T per batch",
    r"\mathcal{L}\big(f_t(x)\big),\ t \sim \mathcal{U}\{1, \dots, T\}",
    lambda T, seed, step: (random.Random(f"train depth {seed} {step}").randint(1, T),)))
TRAIN_DEPTHS.register(TrainDepth("every step", "the loss averaged over the prediction after every step t = 1..T",
                                 r"\frac{1}{T} \sum_{t=1}^{T} \mathcal{L}\big(f_t(x)\big)",
                                 lambda T, seed, step: tuple(range(1, T + 1))))


def depth_loss(model, loss_at: Callable[[], torch.Tensor], depths: tuple[int, ...]) -> torch.Tensor:
    """The mean over `depths` of `loss_at()` with every CEM layer of `model` running that many steps (the trained
    depths restored afterwards); `loss_at` alone at the trained depth (one forward, no context) when that is all."""
    T = next((layer.config.T for layer in cem_layers(model)), None)
    if T is None or depths == (T,):
        return loss_at()
    losses = []
    for t in depths:
        with recursion_depth(model, t):
            losses.append(loss_at())
    return torch.stack(losses).mean()


def check_train_depth(name: str, variant_has_cem: bool, eta_per_step: bool) -> None:
    """Refuse (ValueError naming train_depth) a training depth that is not registered, or other than fixed for a
    model without CEM layers or with one learned step size per step (it has exactly T of them)."""
    check_choice("train_depth", name, tuple(TRAIN_DEPTHS))
    if name != "fixed" and not variant_has_cem:
        fail("train_depth", name, "applies to CEM layers only; this model has none")
    if name != "fixed" and eta_per_step:
        fail("train_depth", name, "needs one step size for every depth; eta_mode='per_step' learns exactly T")
