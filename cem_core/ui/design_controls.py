"""The design-space page's controls: model sizes and the CEM options (see cem_core.ui.controls)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from cem_core.nn.block_modes import BLOCK_MODES
from cem_core.nn.config import CEMOptions, ModelShape
from cem_core.nn.model import VARIANTS, ModelConfig

from .controls import Controls


@dataclass(frozen=True, kw_only=True)
class DesignControls(Controls):
    """The design-space page: model sizes and the CEM options."""

    SHAPE = {"d_model": ("int", (8, 8192)), "n_layers": ("int", (1, 128)), "n_heads": ("int", (1, 128)),
             "d_ff": ("int", (8, 32768))}     # the activation changes no parameter count or FLOP count
    SPECS = {"vocab_size": ("int", (2, 300000)), "seq_len": ("int", (1, 131072)),
             "p_scale": ("float", (0.0, 3.0, 0.1)), "seed": ("int", (0, 9999))}
    CEM = ("T", "eta_mode", "diagonal", "preconditioner", "rank", "block", "attn_ties", "mlp_ties")  # change counts
    CEM_RANGES = {"rank": (1, 64)}
    LABELS = {"n_layers": "layers", "n_heads": "heads", "vocab_size": "vocabulary", "seq_len": "sequence length",
              "p_scale": "low-rank scale (spectrum demo)"}
    PREFIX = "ds_"

    shape: ModelShape = ModelShape(d_model=768, n_layers=12, n_heads=12, d_ff=2048)
    vocab_size: int = 32000
    seq_len: int = 1024
    cem: CEMOptions = field(default_factory=lambda: CEMOptions(preconditioner="psd"))
    p_scale: float = 1.0     # std of the preconditioner's low-rank factors, times 1/sqrt(d) (eigenvalue demo)
    seed: int = 0

    @classmethod
    def heads_options(cls, d_model: int) -> tuple[int, ...]:
        """The head counts the page offers: those that divide d_model into even head widths d_h = d / H (the
        models use RoPE, which rotates pairs of coordinates)."""
        lo, hi = cls.SHAPE["n_heads"][1]
        return tuple(h for h in range(lo, min(hi, d_model) + 1) if d_model % h == 0 and (d_model // h) % 2 == 0)

    @classmethod
    def settle(cls, values: dict) -> tuple[dict, list[str]]:
        """An odd d_model goes down to the even one below it (RoPE needs even head widths), and the heads snap to
        the nearest count that divides it, downwards (see EnergyControls.settle)."""
        values, notes = dict(values), []
        if values["d_model"] % 2:
            notes.append(f"d_model {values['d_model']} → {values['d_model'] - 1}: RoPE rotates pairs of "
                         "coordinates, so every head width, and d_model, is even.")
            values["d_model"] -= 1
        options = cls.heads_options(values["d_model"])
        if values["n_heads"] not in options:
            heads = max(h for h in options if h <= values["n_heads"]) if values["n_heads"] > 0 else 1
            notes.append(f"heads {values['n_heads']} → {heads}: the heads must divide d_model = {values['d_model']} "
                         "into even head widths.")
            values["n_heads"] = heads
        if values["diagonal"] != "none" and values["attn_ties"] != "both":
            notes.append(f"attention ties {values['attn_ties']} → both: the D+LR diagonal's paths use the keys as "
                         "the values, so a diagonal needs both ties.")
            values["attn_ties"] = "both"
        if BLOCK_MODES[values["block"]].one_energy:
            for name, tied in (("attn_ties", "both"), ("mlp_ties", "tied")):
                if values[name] != tied:
                    notes.append(f"{cls.label(name)} {values[name]} → {tied}: the block as one energy descends one "
                                 "energy, so it keeps every tie.")
                    values[name] = tied
        return values, notes

    def __post_init__(self) -> None:
        self._validate()
        for name in VARIANTS:
            self.model_config(name)

    def model_config(self, variant: str) -> ModelConfig:
        return ModelConfig.variant(variant, cem=replace(self.cem, rank=min(self.cem.rank, self.shape.d_model)),
                                   shape=self.shape, vocab_size=self.vocab_size, max_seq_len=self.seq_len)
