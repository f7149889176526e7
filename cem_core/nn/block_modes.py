"""How a CEM block combines its two energies (docs/design.md#214-the-block-as-one-energy), one registered object
per mode, carrying what the configs, the counts and the command line need: which layers it needs, the sections a
block holds (each a config that counts its own parameters and FLOPs), and its label.

- "sequential": attention, then the MLP, each its own T steps on its own energy (h' = h + Delta_att(h), then
  h'' = h' + Delta_mlp(h')), as a transformer block is.
- "joint":      one descent of T steps on E_att + E_mlp (``CEMBlock``); at T = 1 a parallel block,
  h' = h + Attn(Norm h) + MLP(Norm h). Needs CEM attention and the CEM MLP.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .registry import Registry


@dataclass(frozen=True)
class BlockMode:
    name: str                                   # the configuration's value: CEMOptions.block
    label: str                                  # "attention, then the MLP, each its own T steps"
    one_energy: bool                            # one CEMBlock descends E_att + E_mlp
    needs: tuple[str, str] | None               # the (attention, mlp) kinds it needs; None: any
    sections: Callable[..., tuple]              # a ModelConfig's block as ((name, sublayer config or None), ...)

    def fits(self, attention: str, mlp: str) -> bool:
        """Whether a model with these attention and MLP kinds can have blocks of this mode."""
        return self.needs is None or (attention, mlp) == self.needs


BLOCK_MODES: Registry = Registry("block mode")
register_block_mode = BLOCK_MODES.register            # add a BlockMode (a ValueError for a name taken)

register_block_mode(BlockMode("sequential", "sequential: attention, then the MLP, each its own T steps", False, None,
                              lambda cfg: (("attention", cfg.attention_config()), ("mlp", cfg.mlp_config()))))
register_block_mode(BlockMode("joint", "joint: T steps on E_att + E_mlp together (needs CEM attention and the "
                              "CEM MLP)", True, ("cem", "cem"), lambda cfg: (("block", cfg.block_config()),)))
