"""What a language-model run costs: tokens (the compute-optimal budget), seconds (timed steps on this machine,
for the app's estimates) and FLOPs per trained token (for MFU)."""
from __future__ import annotations

import time

import torch

from cem_core.nn.flops import model_flops
from cem_core.nn.model import LanguageModel, ModelConfig
from cem_core.nn.validate import check_int

from .step import train_step
from .tokenizer import ByteTokenizer
from .train_config import LMTrainConfig


def chinchilla_tokens(params: int) -> int:
    """The compute-optimal budget of about 20 training tokens per parameter (Hoffmann et al., 2022)."""
    return 20 * params


def seconds_per_step(cfg: LMTrainConfig, steps: int = 2, vocab_size: int = ByteTokenizer.vocab_size,
                     warmup: int = 1) -> float:
    """Seconds one optimizer step of `cfg` takes on this machine now, on the CPU: the median of `steps` timed
    steps on random tokens after `warmup` untimed ones (the app's time estimates). It is a measurement, so it
    reflects whatever else the machine is doing."""
    check_int("steps", steps, 1)
    check_int("warmup", warmup, 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = LanguageModel(cfg.model_config(vocab_size))
        batch = torch.randint(0, vocab_size, (cfg.batch_size, cfg.seq_len + 1))
        optimizer = cfg.optim.optimizer(model)
        times = []
        for _ in range(steps + warmup):
            start = time.perf_counter()
            train_step(model, model, optimizer, batch, cfg.optim.grad_clip)
            times.append(time.perf_counter() - start)
    timed = sorted(times[warmup:])
    return timed[len(timed) // 2]


def run_seconds(cfg: LMTrainConfig, step_seconds: float, steps: int | None = None) -> float:
    """The time the first `steps` steps of a run of `cfg` take (default: the whole run) at `step_seconds` a
    training step: the steps and the evaluations among them, every eval_every steps and at the last (each
    evaluation batch is a forward pass, about a third of a training step)."""
    steps = cfg.steps if steps is None else steps
    evaluations = steps // cfg.eval_every + (steps == cfg.steps and steps % cfg.eval_every != 0)
    return step_seconds * (steps + evaluations * cfg.eval_batches / 3)


def train_flops_per_token(model_cfg: ModelConfig, seq_len: int, batch: int) -> float:
    """Matmul FLOPs per trained token at `batch` sequences a step (forward + backward = 3 x forward), for MFU."""
    return 3 * model_flops(model_cfg, seq_len, batch)["total"] / seq_len
