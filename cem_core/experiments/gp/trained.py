"""The trained GP models kept in ``models/`` (``checkpoints``): five runs of the factor study, seed 0.

Each is the study's own run (``study.study_runs``), so its configuration hash is the hash of a committed record
in ``results/gp-study``: the committed sweep's task and shape (RBF, 32 points, d_x = 1; width 64, depth 1, 4
heads), Llama attention and CEM attention at T = 1 and T = 8 from the ``base`` condition (2,000 steps), and
the block as one energy (attention + MLP descended together) at T = 1 and T = 8 from ``joint long`` (12,000
steps), the condition where the study found that recursion helps.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import checkpoints
from .model import GPTransformer
from .study import study_runs
from .task import GPTaskConfig, predict_in_batches, rmse
from .train import RunSpec, baseline_rmses, eval_set, train_gp

GP_METRIC = "held-out RMSE / GP optimum"


@dataclass(frozen=True)
class TrainedGP:
    name: str
    title: str                 # how the app and the notebook name it
    group: str                 # the study condition it comes from
    attention: str
    T: int

    @property
    def spec(self) -> RunSpec:
        (spec,) = [s for s in study_runs() if s.group == self.group and s.model.attention == self.attention
                   and s.model.cem.T == self.T and s.train.seed == checkpoints.TRAINED_SEED]
        return spec


GP_MODELS = {m.name: m for m in (
    TrainedGP("gp-llama", "Llama attention", "base", "llama", 1),
    TrainedGP("gp-cem-T1", "CEM attention, T = 1", "base", "cem", 1),
    TrainedGP("gp-cem-T8", "CEM attention, T = 8", "base", "cem", 8),
    TrainedGP("gp-block-T1", "the block as one energy, T = 1 (trained long)", "joint long", "cem", 1),
    TrainedGP("gp-block-T8", "the block as one energy, T = 8 (trained long)", "joint long", "cem", 8),
)}


def held_out_ratio(model: GPTransformer, spec: RunSpec) -> dict:
    """The card's metric: the model's RMSE on the held-out functions (``eval_set``) over the GP optimum's."""
    xs, ys = eval_set(spec.task, spec.train)
    model_rmse = rmse(predict_in_batches(model, xs, ys), ys)
    optimum = baseline_rmses(spec.task, spec.train)["gp"]["rmse"]
    return {"name": GP_METRIC, "value": model_rmse / optimum, "rmse": model_rmse, "rmse_gp": optimum,
            "functions": spec.train.eval_size, "eval_seed": spec.train.eval_seed}


def train_gp_model(name: str, root: Path = checkpoints.MODELS, threads: int | None = None) -> dict:
    """Train model ``name`` and save it under ``root`` (its card comes back)."""
    if threads:
        torch.set_num_threads(threads)
    entry = GP_MODELS[name]
    spec = entry.spec
    start = time.perf_counter()
    result = train_gp(spec.task, spec.model, spec.train)
    if result.diverged:
        raise FloatingPointError(f"model {name!r} diverged in training; nothing was saved")
    card = {"kind": "gp", "title": entry.title, "config": spec.config(), "config_hash": spec.hash,
            "data": (f"fresh functions from the GP prior every step ({spec.task.kernel} kernel, lengthscale "
                     f"{spec.task.lengthscale}, noise variance {spec.task.noise_var}, {spec.task.n_points} points, "
                     f"d_x = {spec.task.d_x}); the metric on {spec.train.eval_size} held-out functions"),
            "steps": spec.train.steps, "seed": spec.train.seed, "group": spec.group,
            "metric": held_out_ratio(result.model, spec), "train_seconds": time.perf_counter() - start}
    return checkpoints.save(root, name, result.model, card)


def load_gp_model(name: str, root: Path = checkpoints.MODELS) -> tuple[GPTransformer, GPTaskConfig]:
    """The trained model ``name`` (a key of GP_MODELS, a card's name) in evaluation mode, and its task; a
    ValueError names what is wrong (unknown, missing, damaged, trained under another configuration)."""
    if name not in GP_MODELS:
        raise ValueError(f"model={name!r} is unknown; the trained GP models are {', '.join(GP_MODELS)}")
    spec = GP_MODELS[name].spec
    trained = checkpoints.read(root, name, tuple(GP_MODELS), spec.hash)
    return checkpoints.load_state(GPTransformer(spec.task, spec.model), trained), spec.task


def gp_card(name: str, root: Path = checkpoints.MODELS) -> dict:
    """The checked card of model ``name``."""
    return checkpoints.read_card(root, name, tuple(GP_MODELS), GP_MODELS[name].spec.hash)
