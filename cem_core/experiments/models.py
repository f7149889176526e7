"""The whole set of trained models (``models/``): the GP ones (``gp.trained``) and the language models
(``lm.trained``), and ``make models``: train what is missing or stale, resumable and idempotent.

Beside each card, ``test_time.json`` holds what test-time recursion depth does to the model, measured once
after training (``measure_test_time``) so that the app and the notebook read it instead of recomputing it: for
a GP model the RMSE ratio to the GP optimum over 256 held-out functions by test-time T and by step
(``gp.inspect.scaling``), for a language model the validation perplexity by test-time T and, per CEM layer, the
validation loss read after each step and the share of steps where a token's energy rose (``lm.inspect``). It
names the weights it was measured on (their sha256); ``test_time`` refuses one that does not match the card.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import checkpoints, pool
from .gp import trained as gp_trained
from .lm import trained as lm_trained
from .records import atomic_write_text

# name -> (module, entry), longest training first so that two workers finish together
ALL = {**{name: (lm_trained, m) for name, m in lm_trained.LM_MODELS.items()},
       **{name: (gp_trained, m) for name, m in gp_trained.GP_MODELS.items()}}
ORDER = ("gp-block-T8", "lm-cem-full", "lm-cem-attn-T2", "lm-llama", "gp-block-T1", "gp-cem-T8", "gp-cem-T1",
         "gp-llama")


def config_hash(name: str) -> str:
    module, entry = ALL[name]
    return entry.spec.hash if module is gp_trained else entry.hash


def stale_models(root: Path = checkpoints.MODELS, only=None) -> list[str]:
    """The models (of ``only``, else all) with no finished folder of the current configuration under ``root``."""
    names = tuple(ALL) if not only else only
    for name in names:
        if name not in ALL:
            raise ValueError(f"model={name!r} is unknown; the trained models are {', '.join(ORDER)}")
    return [name for name in ORDER if name in names and not checkpoints.is_current(root, name, config_hash(name))]


TEST_TIME = "test_time.json"
LM_TEST_TS = (1, 2, 4, 8)


def _train_model(item: tuple) -> dict:
    name, root = item
    if name in gp_trained.GP_MODELS:
        return gp_trained.train_gp_model(name, root, threads=1)
    return lm_trained.train_lm_model(name, root, threads=1)


def measure_test_time(name: str, root: Path = checkpoints.MODELS) -> dict:
    """What test-time T does to model ``name`` (module docstring), tied to its weights."""
    module, entry = ALL[name]
    card = checkpoints.read_card(root, name, tuple(ALL), config_hash(name))
    if module is gp_trained:
        from .gp.inspect import scaling

        model, task = gp_trained.load_gp_model(name, root)
        measured = scaling(model, task, entry.spec.train)
    else:
        from .lm.inspect import loss_by_step, validation_ppl_by_T

        model, _ = lm_trained.load_lm_model(name, root)
        cfg = entry.config
        val = lm_trained.validation_sequences(cfg)
        Ts = LM_TEST_TS if model.cem_layers() else (1,)
        by_T = validation_ppl_by_T(model, val, Ts, cfg.batch_size)
        measured = {"T": list(by_T), "val_ppl": list(by_T.values()), "trained_T": cfg.cem_options().T,
                    "sequences": len(val), "by_step": loss_by_step(model, val, cfg.batch_size)}
    return {"name": name, "weights_sha256": card["weights_sha256"], "config_hash": card["config_hash"]} | measured


def _measure(item: tuple) -> dict:
    name, root = item
    import torch

    torch.set_num_threads(1)
    measured = measure_test_time(name, root)
    atomic_write_text(Path(root) / name / TEST_TIME, json.dumps(measured, indent=1) + "\n")
    return measured


def test_time(name: str, root: Path = checkpoints.MODELS) -> dict:
    """The measured test_time.json of model ``name``, checked against its card (a ValueError says to rerun
    ``make models`` when it is missing, damaged or of other weights)."""
    card = checkpoints.read_card(root, name, tuple(ALL), config_hash(name))
    path = Path(root) / name / TEST_TIME
    try:
        measured = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"model {name!r}: {path} cannot be read ({err}); run `make models` to measure it") from None
    if not isinstance(measured, dict) or measured.get("weights_sha256") != card["weights_sha256"]:
        raise ValueError(f"model {name!r}: {path} was measured on other weights than the card's; run `make models` "
                         "to measure it again")
    return measured


def unmeasured(root: Path = checkpoints.MODELS) -> list[str]:
    """The current models whose test_time.json is missing or measured on other weights."""
    out = []
    for name in ORDER:
        if checkpoints.is_current(root, name, config_hash(name)):
            try:
                test_time(name, root)
            except ValueError:
                out.append(name)
    return out


def train_stale(root: Path = checkpoints.MODELS, only=None, jobs: int = 2, report=print) -> list[dict]:
    """Train every stale model (``stale_models``) into ``root``, ``jobs`` at a time; the cards come back."""
    todo = stale_models(root, only)
    report(f"{len(todo)} of {len(only or ALL)} models to train" + (f": {', '.join(todo)}" if todo else ""))
    cards = []
    for card in pool.finished(_train_model, [(name, Path(root)) for name in todo], jobs):
        report(f"{card['name']}: {card['metric']['name']} {card['metric']['value']:.4f} "
               f"({card['train_seconds']:.0f} s of training)")
        cards.append(card)
    todo = unmeasured(root)
    if todo:
        report(f"measuring test-time T of {', '.join(todo)}")
    for measured in pool.finished(_measure, [(name, Path(root)) for name in todo], jobs):
        report(f"{measured['name']}: test-time T measured")
    return cards
