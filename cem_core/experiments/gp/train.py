"""Gaussian-process in-context regression, the training: fresh functions every step (AdamW, warm-up and
cosine, the trainers' shared step), the held-out evaluation, test-time scaling, a trained layer's step
diagnostics, and a run's configuration as results record it (``RunSpec``)."""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace

import torch
import torch.nn.functional as F

from cem_core.nn.model import recursion_depth
from cem_core.nn.validate import check_choice, check_int, fail

from ..integrity import json_hash
from ..schedule import OptimConfig, as_optim, descend, set_lr
from ..train_depths import TRAIN_DEPTHS, check_train_depth, depth_loss
from .model import GP_RECORD_NAMES, GPModelConfig, GPTransformer, make_tokens
from .task import (
    GPTaskConfig,
    gp_posterior_mean,
    gp_predictor,
    nearest_neighbour_predictor,
    predict_in_batches,
    rmse,
    rmse_by_position,
    sample_batch,
    zero_predictor,
)

# lr picked from {1e-3, 3e-3} on a probe where it was better for every model; a lighter weight decay than the LM's
GP_OPTIM = OptimConfig(lr=3e-3, weight_decay=0.01)


@dataclass(frozen=True, kw_only=True)
class GPTrainConfig:
    steps: int = 1500
    batch_size: int = 64
    optim: OptimConfig = GP_OPTIM  # AdamW and its schedule (a dict as a record holds it)
    seed: int = 0
    eval_size: int = 1024
    eval_seed: int = 12345
    eval_every: int = 0            # also record the held-out RMSE every this many steps (0: at the end only)
    train_depth: str = "fixed"     # the in-layer steps each training step trains at (train_depths.TRAIN_DEPTHS)

    def __post_init__(self) -> None:
        check_int("steps", self.steps, 1)
        check_int("batch_size", self.batch_size, 1)
        object.__setattr__(self, "optim", as_optim(self.optim))
        check_int("seed", self.seed, 0, 2 ** 63 - 1)   # torch.manual_seed's range
        check_int("eval_size", self.eval_size, 1)
        check_int("eval_seed", self.eval_seed, 0)
        check_int("eval_every", self.eval_every, 0)
        check_choice("train_depth", self.train_depth, tuple(TRAIN_DEPTHS))


def eval_set(task: GPTaskConfig, train: GPTrainConfig):
    """The fixed, seeded held-out set (the same for every model and run with these configs)."""
    return sample_batch(task, train.eval_size, torch.Generator().manual_seed(train.eval_seed))


@dataclass
class GPTrainResult:
    model: GPTransformer
    losses: list
    rmse: float
    rmse_by_position: list
    seconds: float
    diverged: bool
    rmse_curve: list = field(default_factory=list)   # [step, held-out RMSE] every eval_every steps


def _held_out(model: GPTransformer, held_out: tuple, device: str) -> torch.Tensor:
    """The model's predictions on the held-out set (xs, ys) of ``eval_set``, (eval_size, N)."""
    xs, ys = held_out
    was_training = model.training
    model.eval()
    pred = predict_in_batches(lambda a, b: model(a.to(device), b.to(device)).cpu(), xs, ys)
    model.train(was_training)
    return pred


def training_seconds(task: GPTaskConfig, config: GPModelConfig, train: GPTrainConfig, probe_steps: int = 10,
                     device: str = "cpu") -> float:
    """How long ``train_gp`` with these configs takes on this machine now: `probe_steps` steps of the same
    training are timed and scaled to `train.steps`, plus the held-out evaluation (a measurement: it
    reflects whatever else the machine is doing)."""
    check_int("probe_steps", probe_steps, 1)
    start = time.perf_counter()
    probe = train_gp(task, config, replace(train, steps=probe_steps, eval_every=0), device=device)
    evaluation = time.perf_counter() - start - probe.seconds
    return probe.seconds / probe_steps * train.steps + evaluation


def memory_needed(task: GPTaskConfig, config: GPModelConfig, train: GPTrainConfig) -> int:
    """About the bytes a run's largest step holds: the N x N kernel matrices of a batch of functions (the
    distances, K and its Cholesky factor, float64) for the training batch, the held-out set (drawn at once) and
    the exact GP's batches of 256, or the training step's attention scores (B x H x L x L, float32, kept for
    the backward pass at every layer and step)."""
    n, length = task.n_points, task.n_points * (2 if config.tokens == "interleaved" else 1)
    kernels = 3 * 8 * n * n * max(train.batch_size, train.eval_size, 256)
    steps = config.shape.n_layers * config.loops * (config.cem.T if config.attention == "cem" else 1)
    scores = 2 * 4 * train.batch_size * config.shape.n_heads * length * length * steps
    return max(kernels, scores)


def check_memory(task: GPTaskConfig, config: GPModelConfig, train: GPTrainConfig) -> None:
    """Refuse (ValueError naming n_points) a run that needs more memory than this machine has available, before
    any work: memory grows with the square of n_points, and the largest allowed would ask for about 400 GB."""
    import psutil

    needed, available = memory_needed(task, config, train), psutil.virtual_memory().available
    if needed > available:
        fail("n_points", task.n_points, f"needs about {needed / 2 ** 30:,.1f} GiB here (eval_size {train.eval_size}, "
             f"batch_size {train.batch_size}: the functions' N x N kernel matrices and the attention scores) and "
             f"{available / 2 ** 30:,.1f} GiB is available; lower n_points (memory grows with its square)")


def train_gp(task: GPTaskConfig, config: GPModelConfig, train: GPTrainConfig,
             progress=None, device: str = "cpu") -> GPTrainResult:
    """Train on fresh functions every step (AdamW, warm-up + cosine), evaluate on the held-out set.

    ``progress(step, loss)`` is called after every step. A non-finite loss stops training and
    marks the result as diverged (reported, never silently dropped). A run that would not fit in the
    memory available is refused first (`check_memory`).
    """
    check_memory(task, config, train)
    check_train_depth(train.train_depth, config.attention == "cem" or config.mlp == "cem",
                      config.cem.eta_mode == "per_step")
    depth = TRAIN_DEPTHS[train.train_depth]
    torch.manual_seed(train.seed)
    model = GPTransformer(task, config).to(device)
    opt = train.optim.optimizer(model)
    gen = torch.Generator().manual_seed(train.seed)
    held_out = eval_set(task, train)                                  # drawn once, read at every evaluation
    losses, curve, diverged, start = [], [], False, time.perf_counter()
    model.train()
    for step in range(train.steps):
        set_lr(opt, train.optim.lr_at(step, train.steps))
        xs, ys = sample_batch(task, train.batch_size, gen)
        xs, ys = xs.to(device), ys.to(device)
        loss = depth_loss(model, lambda: F.mse_loss(model(xs, ys), ys), depth.depths(config.cem.T, train.seed, step))
        if not torch.isfinite(loss):
            diverged = True
            break
        descend(opt, model, loss, train.optim.grad_clip)
        losses.append(loss.item())
        if progress is not None:
            progress(step, losses[-1])
        if train.eval_every and (step + 1) % train.eval_every == 0 and step + 1 < train.steps:
            curve.append([step + 1, rmse(_held_out(model, held_out, device), held_out[1])])
    seconds = time.perf_counter() - start
    model.eval()
    ys = held_out[1]
    pred = _held_out(model, held_out, device)
    final = rmse(pred, ys)
    if train.eval_every and not diverged:
        curve.append([train.steps, final])
    return GPTrainResult(model=model, losses=losses, rmse=final, rmse_by_position=rmse_by_position(pred, ys).tolist(),
                         seconds=seconds, diverged=diverged or not math.isfinite(final), rmse_curve=curve)


def baseline_rmses(task: GPTaskConfig, train: GPTrainConfig) -> dict[str, dict]:
    """RMSE overall and per position of the GP optimum, zero and nearest neighbour on the eval set."""
    xs, ys = eval_set(task, train)
    out = {}
    for name, predictor in (("gp", gp_predictor(task)), ("zero", zero_predictor),
                            ("nearest_neighbour", nearest_neighbour_predictor)):
        pred = predict_in_batches(predictor, xs, ys)
        out[name] = {"rmse": rmse(pred, ys), "rmse_by_position": rmse_by_position(pred, ys).tolist()}
    return out


@torch.no_grad()
def evaluate_at_T(model: GPTransformer, task: GPTaskConfig, train: GPTrainConfig, Ts) -> dict[int, float]:
    """Test-time scaling: the held-out RMSE of a trained model evaluated at other T."""
    xs, ys = eval_set(task, train)
    out = {}
    for T in Ts:
        with recursion_depth(model, T):
            out[int(T)] = rmse(predict_in_batches(model, xs, ys), ys)
    return out


# fields added after the first committed sweep, with their defaults: a run records them only when it
# differs from the default, so the hashes of earlier runs stay what they were
LATER_MODEL_FIELDS = {"tokens": "pairs", "loops": 1}
LATER_TRAIN_FIELDS = {"eval_every": 0, "train_depth": "fixed"}


def _recorded(fields: dict, later: dict) -> dict:
    return {k: v for k, v in fields.items() if not (k in later and v == later[k])}


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: task, model, training, and the part of the sweep it belongs to."""
    task: GPTaskConfig
    model: GPModelConfig
    train: GPTrainConfig
    group: str                     # which part of the sweep the run belongs to (for tables and plots)

    def config(self) -> dict:
        """The full configuration as results.json holds it (tuples become lists)."""
        return json.loads(json.dumps(config_dict(self.task, self.model, self.train)))

    @property
    def hash(self) -> str:
        return json_hash(self.config())


@torch.no_grad()
def step_diagnostics(model: GPTransformer, task: GPTaskConfig, train: GPTrainConfig, n_functions: int = 256) -> dict:
    """What the T steps of a trained depth-1 CEM attention layer (or joint block, whose energy is E_att + E_mlp)
    do, on the first ``n_functions`` of the
    held-out set: per step t = 0..T the mean energy E(x^(t) | c) relative to E(x^(0) | c), and the held-out
    RMSE (ratio to the GP optimum) when the prediction is read out after t steps (the rest of the model
    unchanged); per step t = 1..T the mean update norm |x^(t) - x^(t-1)|, the step size and the mean
    attention entropy (nats; log n_k for uniform weights)."""
    config = model.config
    if config.attention != "cem" or config.shape.n_layers != 1 or config.loops != 1:
        fail("model", config, "step diagnostics need one CEM attention block (depth 1, loops 1)")
    block = model.blocks[0]
    xs, ys = (t[:n_functions] for t in eval_set(task, train))
    h = model.in_proj(make_tokens(xs, ys, config.tokens))
    trace = (block.joint or block.attn).trace(h)
    optimum = rmse(gp_posterior_mean(task, xs, ys), ys)
    ratios = []
    for x in trace.iterates:
        out = h + (x - trace.iterates[0])                              # h + x^(t) - x^(0): the layer stopped at t
        out = out if block.mlp is None else block.mlp(out)             # (a joint block has no MLP after it)
        pred = model.head(model.norm(out)).squeeze(-1)
        pred = pred[:, 0::2] if config.tokens == "interleaved" else pred
        ratios.append(rmse(pred, ys) / optimum)
    a = trace.weights.clamp_min(1e-30)                                 # (T, B, H, n, n_k)
    entropy = -(a * a.log()).sum(-1)                                   # -sum_j a_ij log a_ij
    energy = trace.energies.double().mean(dim=(1, 2))
    return {"T": int(len(trace.step_sizes)), "rmse_ratio_after_step": ratios,
            "energy_change": (energy - energy[0]).tolist(),
            "update_norm": trace.update_norms.double().mean(dim=(1, 2)).tolist(),
            "step_size": trace.step_sizes.tolist(), "attention_entropy": entropy.double().mean(dim=(1, 2, 3)).tolist()}


def config_dict(task: GPTaskConfig, model: GPModelConfig, train: GPTrainConfig) -> dict:
    """The configuration of a run as results record it: the model's shape (under the GP's first names for d_model
    and n_layers) and CEM switches among its own fields, the optimizer's among training's (the form run hashes have
    always been computed from),
    later fields and switches only off their defaults (``ModelShape.recorded``, ``CEMOptions.recorded``)."""
    own = {k: v for k, v in asdict(model).items() if k not in ("cem", "shape")}
    shape = {GP_RECORD_NAMES.get(k, k): v for k, v in model.shape.recorded().items()}
    flat_model = _recorded(shape | own, LATER_MODEL_FIELDS) | model.cem.recorded()
    flat_train = {k: v for k, v in asdict(train).items() if k != "optim"} | asdict(train.optim)
    return {"task": asdict(task), "model": flat_model, "train": _recorded(flat_train, LATER_TRAIN_FIELDS)}
