"""Trained models kept with the repository (``models/``): one folder per model, its weights and a JSON card.

A card (``card.json``) holds the model's name and title, its configuration and that configuration's hash, the
data, steps and seed, the metric it reached on held-out data, its parameter count, the weights' sha256, the
commit and the command that trains it. The model sets themselves live with their experiments
(``gp.trained``, ``lm.trained``); this module only writes and reads the folders.

``save`` writes the weights, then the card, each atomically (``records.atomic_write``): a folder with a card
is a finished model, so an interrupted ``make models`` resumes by training what has no card (or a stale one).
``read`` refuses with a ValueError that names the model and what to do: an unknown name, a missing or
damaged file (the card's JSON, the weights' checksum), and a model trained under another configuration than
the current code's (the hash). Nothing here writes under ``models/`` except ``save``, which only
``make models`` calls.
"""
from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .integrity import file_sha256
from .records import atomic_write, atomic_write_text, provenance

MODELS_VARIABLE = "CEM_LAB_MODELS_DIR"                     # names another folder of trained models


def models_folder() -> Path:
    """Where the trained models are: the folder CEM_LAB_MODELS_DIR names, else the repository's models/ found from this
    package's own location (so a command run from any folder finds them, not only from the repository's root)."""
    return Path(os.environ.get(MODELS_VARIABLE) or Path(__file__).resolve().parents[2] / "models")


MODELS = models_folder()
WEIGHTS_FILE, CARD = "weights.pt", "card.json"
TRAINED_SEED = 0                                          # every trained model's seed
MAX_TOTAL_BYTES = 10 * 2 ** 20                            # every committed model together
CARD_FIELDS = {"name": str, "kind": str, "title": str, "config": dict, "config_hash": str, "data": str,
               "steps": int, "seed": int, "metric": dict, "params": int, "weights_sha256": str,
               "train_seconds": float, "command": str, "provenance": dict}


def command(name: str) -> str:
    """The command that trains (or retrains) one model."""
    return f"python -m cem_core models train --only {name}"


@dataclass(frozen=True)
class Trained:
    """A model read back: the card, and the state dict to load into a module built from the card's config."""
    card: dict
    state: dict


def save(root: Path, name: str, model: torch.nn.Module, card: dict) -> dict:
    """Write ``root/name/weights.pt`` and then ``card.json`` (the card gains the weights' sha256, the
    parameter count, the command and the provenance); returns the card."""
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, buffer)
    atomic_write(folder / WEIGHTS_FILE, lambda tmp: Path(tmp).write_bytes(buffer.getvalue()))
    card = card | {"name": name, "params": sum(p.numel() for p in model.parameters()),
                   "weights_sha256": file_sha256(folder / WEIGHTS_FILE), "command": command(name),
                   "provenance": provenance()}
    missing = sorted(set(CARD_FIELDS) - set(card))
    if missing:
        raise ValueError(f"the card of {name!r} lacks {', '.join(missing)}")
    atomic_write_text(folder / CARD, json.dumps(card, indent=1) + "\n")
    return card


def card_problem(folder: Path) -> str | None:
    """Why ``folder`` holds no usable card (None: it does)."""
    path = folder / CARD
    if not path.is_file():
        return f"{path} is missing"
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"{path} is damaged ({err})"
    if not isinstance(card, dict):
        return f"{path} is damaged (not a JSON object)"
    for key, kind in CARD_FIELDS.items():
        value = card.get(key)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)      # JSON's 3 for 3.0 too
        if not (number if kind is float else isinstance(value, kind) and not isinstance(value, bool)):
            return f"{path} is damaged (its field {key!r} is missing or not a {kind.__name__})"
    if card["name"] != folder.name:
        return f"{path} names {card['name']!r}, not {folder.name!r}"
    return None


def read_card(root: Path, name: str, names, config_hash: str | None = None) -> dict:
    """The card of model ``name`` among ``names`` (the set's names), checked: it exists, it parses, and its
    configuration hash equals ``config_hash`` (the current code's) when given."""
    if name not in names:
        raise ValueError(f"model={name!r} is unknown; the trained models are {', '.join(names)}")
    folder = Path(root) / name
    problem = card_problem(folder)
    if problem:
        raise ValueError(f"model {name!r} cannot be read: {problem}; retrain it with `{command(name)}` (or "
                         f"`make models`)")
    card = json.loads((folder / CARD).read_text(encoding="utf-8"))
    if config_hash is not None and card["config_hash"] != config_hash:
        raise ValueError(f"model {name!r} was trained under another configuration (hash {card['config_hash']}) than "
                         f"the current code's ({config_hash}); retrain it with `{command(name)}` (or `make models`)")
    return card


def read(root: Path, name: str, names, config_hash: str) -> Trained:
    """The card and the weights of model ``name``, both checked (``read_card``; the weights' sha256)."""
    card = read_card(root, name, names, config_hash)
    path = Path(root) / name / WEIGHTS_FILE
    if not path.is_file():
        raise ValueError(f"model {name!r} cannot be read: {path} is missing; retrain it with `{command(name)}`")
    if file_sha256(path) != card["weights_sha256"]:
        raise ValueError(f"model {name!r} cannot be read: {path} is damaged (its sha256 differs from the card's); "
                         f"retrain it with `{command(name)}` (or restore it with git)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:                     # a file with the right checksum that torch cannot read
        raise ValueError(f"model {name!r} cannot be read: {path} does not load ({err})") from None
    return Trained(card=card, state=state)


def load_state(module: torch.nn.Module, trained: Trained) -> torch.nn.Module:
    """``module`` with the trained weights, in evaluation mode (a mismatch is a ValueError naming the model)."""
    try:
        module.load_state_dict(trained.state, strict=True)
    except RuntimeError as err:
        raise ValueError(f"model {trained.card['name']!r}: its weights do not fit its configuration ({err}); "
                         f"retrain it with `{command(trained.card['name'])}`") from None
    return module.eval()


def is_current(root: Path, name: str, config_hash: str) -> bool:
    """Whether ``root/name`` holds a finished model of this configuration (``make models`` skips it)."""
    folder = Path(root) / name
    if card_problem(folder) or not (folder / WEIGHTS_FILE).is_file():
        return False
    card = json.loads((folder / CARD).read_text(encoding="utf-8"))
    return card["config_hash"] == config_hash and file_sha256(folder / WEIGHTS_FILE) == card["weights_sha256"]
