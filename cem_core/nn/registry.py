"""A registry of one design choice: its objects by name, in the order registered. Everything that offers, checks,
counts or shows the choice iterates it (nn/activations.py, nn/precondition.py, nn/diagonals.py, nn/block_modes.py)."""
from __future__ import annotations


class Registry(dict):
    """Named objects (each with a ``name``) of one kind; ``register`` adds one and refuses a name taken."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def register(self, item):
        if item.name in self:
            raise ValueError(f"{self.what} {item.name!r} is registered already")
        self[item.name] = item
        return item
