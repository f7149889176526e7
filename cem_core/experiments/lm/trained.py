"""The trained language models kept in ``models/`` (``checkpoints``): three variants of the ``default`` sweep,
seed 0, on English prose.

Each is the ``default`` sweep's run of its variant (``presets.preset_runs``: width 96, 2 layers, 4 heads, d_ff 256,
the byte tokenizer, 128 tokens a sequence, 16 a batch, 2,406 steps at lr 1e-3) with one change: the data is
the prose corpus (``stdlib_corpus.prose_corpus``: the Python documentation's topics and the standard library's
docstrings, about 2.2 MB, built from the Python installation without a download) instead of the demo corpus
of Python source, with 5% of its documents held out (1% would leave too few for the sweep's 512 validation
sequences). The run trains in ``runs/models/NAME`` (resumable, ``train``), then its final weights are saved.
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from cem_core.nn.model import LanguageModel

from .. import checkpoints
from ..checkpoints import MODELS
from .data_config import DataConfig
from .packing import validation_blocks
from .presets import SWEEP_PRESETS, preset_runs
from .run_folder import load_latest_checkpoint
from .sources import describe
from .step import evaluate
from .tokenizer import ByteTokenizer
from .train import train
from .train_config import LMTrainConfig

LM_METRIC = "validation perplexity"
PROSE = DataConfig(source="prose", demo_max_bytes=SWEEP_PRESETS["default"].demo_max_bytes, validation_fraction=0.05)
WORK = Path("runs") / "models"                # where the runs train (ignored by git, from the repository root)


@dataclass(frozen=True)
class TrainedLM:
    name: str
    title: str
    sweep_name: str            # the default sweep's variant name

    @property
    def config(self) -> LMTrainConfig:
        (spec,) = [s for s in preset_runs("default")
                   if s.name == self.sweep_name and s.config.seed == checkpoints.TRAINED_SEED]
        return replace(spec.config, sample_tokens=0)

    @property
    def hash(self) -> str:
        return self.config.run_hash(PROSE)


LM_MODELS = {m.name: m for m in (
    TrainedLM("lm-llama", "Llama", "llama"),
    TrainedLM("lm-cem-attn-T2", "CEM attention, T = 2", "attn T=2"),
    TrainedLM("lm-cem-full", "cem-full (CEM attention and MLP, T = 2, D+LR, preconditioners)", "cem-full"),
)}


def validation_sequences(cfg: LMTrainConfig, data: DataConfig = PROSE) -> torch.Tensor:
    """The validation sequences a run of `cfg` evaluates on (eval_batches x batch_size blocks of seq_len + 1)."""
    return validation_blocks(data, ByteTokenizer(), cfg.seq_len, cfg.eval_batches * cfg.batch_size)


def validation_ppl(model: LanguageModel, cfg: LMTrainConfig, data: DataConfig = PROSE) -> float:
    """The card's metric: perplexity on the validation sequences the run evaluated on."""
    val = validation_sequences(cfg, data)
    return math.exp(evaluate(model, val, cfg.batch_size, torch.device("cpu"), nullcontext))


def train_lm_model(name: str, root: Path = MODELS, threads: int | None = None, work: Path = WORK) -> dict:
    """Train (or resume) model ``name`` in ``work/name`` and save its final weights under ``root``."""
    if threads:
        torch.set_num_threads(threads)
    entry = LM_MODELS[name]
    cfg = entry.config
    summary = train(cfg, PROSE, work / name, progress=False).summary
    model = LanguageModel(cfg.model_config(ByteTokenizer.vocab_size))
    load_latest_checkpoint(work / name, model, cfg.optim.optimizer(model), entry.hash, announce=False)
    model.eval()
    ppl = validation_ppl(model, cfg)
    card = {"kind": "lm", "title": entry.title, "config": cfg.identity(PROSE), "config_hash": entry.hash,
            "data": describe(PROSE), "steps": cfg.steps, "seed": cfg.seed, "sweep_variant": entry.sweep_name,
            "tokens": cfg.steps * cfg.batch_size * cfg.seq_len,
            "metric": {"name": LM_METRIC, "value": ppl, "val_ppl_by_T": summary.get("val_ppl_by_T", {}),
                       "sequences": cfg.eval_batches * cfg.batch_size, "seq_len": cfg.seq_len},
            "train_seconds": float(summary["tokens"] / summary["tokens_per_s"])}
    return checkpoints.save(root, name, model, card)


def load_lm_model(name: str, root: Path = MODELS) -> tuple[LanguageModel, ByteTokenizer]:
    """The trained language model ``name`` (a key of LM_MODELS, a card's name) in evaluation mode, and its
    tokenizer; a ValueError names what is wrong (unknown, missing, damaged, another configuration)."""
    if name not in LM_MODELS:
        raise ValueError(f"model={name!r} is unknown; the trained language models are {', '.join(LM_MODELS)}")
    entry = LM_MODELS[name]
    trained = checkpoints.read(root, name, tuple(LM_MODELS), entry.hash)
    model = LanguageModel(entry.config.model_config(ByteTokenizer.vocab_size))
    return checkpoints.load_state(model, trained), ByteTokenizer()


def lm_card(name: str, root: Path = MODELS) -> dict:
    """The checked card of model ``name``."""
    return checkpoints.read_card(root, name, tuple(LM_MODELS), LM_MODELS[name].hash)
