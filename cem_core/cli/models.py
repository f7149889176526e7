"""``python -m cem_core models list | train``: the trained models kept in models/ (``experiments.models``)."""
from __future__ import annotations

import os
from pathlib import Path

from cem_core.experiments import checkpoints


def add_models(group) -> None:
    """The commands of ``models``, on its parser."""
    parser = group.add_subparsers(dest="models_command", required=True)
    listing = parser.add_parser("list", help="each model, its card's metric and whether it is current")
    train = parser.add_parser("train", help="train the models that are missing or stale (resumable, idempotent)")
    train.add_argument("--only", nargs="+", metavar="NAME", help="these models only (default: all)")
    train.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                       help="parallel worker processes, one thread each (default: min(2, cores))")
    for p in (listing, train):
        p.add_argument("--root", default=str(checkpoints.MODELS),
                       help="the models' folder (default: the repository's models/)")
    listing.set_defaults(run=models_list)
    train.set_defaults(run=models_train)


def models_list(args) -> int:
    from cem_core.experiments import models

    for name in models.ORDER:
        folder = Path(args.root) / name
        problem = checkpoints.card_problem(folder)
        if problem:
            print(f"{name}: not trained ({problem})")
            continue
        current = checkpoints.is_current(Path(args.root), name, models.config_hash(name))
        card = checkpoints.read_card(Path(args.root), name, models.ORDER)
        print(f"{name}: {card['title']}; {card['metric']['name']} {card['metric']['value']:.4f}; "
              f"{'current' if current else 'stale: retrain it'}")
    return 0


def models_train(args) -> int:
    from cem_core.experiments import models

    models.train_stale(Path(args.root), args.only, args.jobs, report=lambda line: print(line, flush=True))
    return 0
