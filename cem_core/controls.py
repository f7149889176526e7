"""The app's controls as one validated dataclass: the single place where user input becomes
layer configs (design.md §1: pages contain no logic of their own).

Every combination of control values either builds configs or raises ``ValueError`` with the
reason, including sizes that would take more than a few seconds of CPU.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from .config import DIAGONALS, PRECONDITIONERS, AttentionConfig, MLPConfig, _check_bool, _check_choice, _check_float, _check_int, _fail

LAYERS = ("attention", "mlp", "block")

# name: (kind, allowed) with kind int/float (min, max) or choice (options) or bool
CONTROL_SPECS = {
    "layer": ("choice", LAYERS),
    "T": ("int", (1, 16)),
    "eta": ("float", (0.05, 5.0)),
    "anchor": ("float", (0.0, 5.0)),
    "diagonal": ("choice", DIAGONALS),
    "preconditioner": ("choice", PRECONDITIONERS),
    "rank": ("int", (1, 8)),
    "heads": ("int", (1, 8)),
    "width": ("int", (2, 128)),
    "seq_len": ("int", (2, 64)),
    "seed": ("int", (0, 9999)),
    "rope": ("bool", None),
}

# A rough cost in multiply-adds of one page render (trace + landscape); above it we refuse.
COST_LIMIT = 4e8
LANDSCAPE_GRID = 41


@dataclass(frozen=True, kw_only=True)
class EnergyControls:
    layer: str = "attention"
    T: int = 4
    eta: float = 1.0
    anchor: float = 0.0
    diagonal: str = "none"
    preconditioner: str = "none"
    rank: int = 2
    heads: int = 2
    width: int = 8
    seq_len: int = 8
    seed: int = 0
    rope: bool = False

    def __post_init__(self) -> None:
        for name, (kind, allowed) in CONTROL_SPECS.items():
            value = getattr(self, name)
            if kind == "choice":
                _check_choice(name, value, allowed)
            elif kind == "bool":
                _check_bool(name, value)
            elif kind == "int":
                _check_int(name, value, *allowed)
            else:
                _check_float(name, value, allowed[0], strict=False)
                if value > allowed[1] or value < allowed[0]:
                    _fail(name, value, f"must be in [{allowed[0]}, {allowed[1]}]")
        if self.cost() > COST_LIMIT:
            _fail("width", self.width,
                  f"this combination (width {self.width}, sequence {self.seq_len}, T {self.T}, heads {self.heads}, "
                  f"diagonal {self.diagonal}) would take more than a few seconds of CPU; lower the width, "
                  "the sequence length or T")
        self.attention_config()   # raises ValueError for inconsistent combinations
        self.mlp_config()

    @property
    def d_ff(self) -> int:
        return 2 * self.width                                          # the app's MLP width: d_ff = 2 d

    def cost(self) -> float:
        widen = (self.heads + 1) if self.diagonal != "none" else 1     # D+LR core is (H+1) x wider
        trace = self.T * (self.seq_len ** 2 * self.width * widen + self.seq_len * self.width * self.d_ff * 3)
        landscape = LANDSCAPE_GRID ** 2 * (self.seq_len * self.width * widen + self.width * self.d_ff * 3)
        return float(trace + landscape)

    def attention_config(self) -> AttentionConfig:
        if self.layer == "mlp":
            return None
        return AttentionConfig(d_model=self.width, n_heads=self.heads, T=self.T, eta=self.eta, anchor=self.anchor,
                               diagonal=self.diagonal, preconditioner=self.preconditioner,
                               rank=min(self.rank, self.width), rope=self.rope)

    def mlp_config(self) -> MLPConfig:
        if self.layer == "attention":
            return None
        return MLPConfig(d_model=self.width, d_ff=self.d_ff, T=self.T, eta=self.eta, anchor=self.anchor,
                         preconditioner=self.preconditioner, rank=min(self.rank, self.width))

    # -- URL round trip ------------------------------------------------------------------------
    def to_query(self) -> dict[str, str]:
        return {f.name: str(getattr(self, f.name)).lower() if isinstance(getattr(self, f.name), bool)
                else str(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_query(cls, query: dict) -> "EnergyControls":
        """Parse URL query parameters (strings); unknown keys are ignored, bad values raise ValueError."""
        values = {}
        for name, (kind, _) in CONTROL_SPECS.items():
            if name not in query:
                continue
            raw = query[name]
            try:
                if kind == "int":
                    values[name] = int(raw)
                elif kind == "float":
                    values[name] = float(raw)
                elif kind == "bool":
                    if str(raw).lower() not in ("true", "false", "1", "0"):
                        raise ValueError
                    values[name] = str(raw).lower() in ("true", "1")
                else:
                    values[name] = str(raw)
            except ValueError:
                _fail(name, raw, f"cannot be read as {'a number' if kind in ('int', 'float') else 'true/false'}")
        return cls(**values)
