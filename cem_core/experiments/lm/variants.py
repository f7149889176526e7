"""The LM sweeps' variants: each a model variant with its CEM switches, named as the tables name it.

``PAPER_VARIANTS`` are the nine the paper's claims compare, ``OUR_VARIANTS`` the two behind our own claims,
``STEP_SIZE_VARIANTS`` the two with learned per-step step sizes (is the preconditioner's gain step-size control?),
and ``LADDER_VARIANTS`` the four the width ladders train.
"""
from __future__ import annotations

from dataclasses import replace

from cem_core.nn.config import CEMOptions
from cem_core.nn.model import VARIANT_OPTIONS

PAPER_VARIANTS = {
    "llama": ("llama", None),
    "attn T=1": ("cem-attn", CEMOptions(T=1)),
    "attn T=2": ("cem-attn", CEMOptions(T=2)),
    "attn T=2, diag per head": ("cem-attn", CEMOptions(T=2, diagonal="per_head")),
    "attn T=2, diag shared": ("cem-attn", CEMOptions(T=2, diagonal="shared")),
    "attn T=2, diag shared, P dlr": ("cem-attn", CEMOptions(T=2, diagonal="shared", preconditioner="dlr")),
    "mlp T=1": ("cem-mlp", CEMOptions(T=1)),
    "mlp T=2": ("cem-mlp", CEMOptions(T=2)),
    "cem-full": ("cem-full", VARIANT_OPTIONS["cem-full"]),
}
# ours (docs/design.md#214-the-block-as-one-energy): the distance-form diagonal, and cem-full as one energy
OUR_VARIANTS = {
    "attn T=2, diag shared, distance": ("cem-attn", CEMOptions(T=2, diagonal="shared", diagonal_form="distance")),
    "cem-full, joint": ("cem-full", replace(VARIANT_OPTIONS["cem-full"], block="joint")),
}
STEP_SIZE_VARIANTS = {
    "attn T=2, diag shared, eta per step": ("cem-attn", CEMOptions(T=2, diagonal="shared", eta_mode="per_step")),
    "attn T=2, diag shared, P dlr, eta per step": ("cem-attn", CEMOptions(T=2, diagonal="shared", preconditioner="dlr",
                                                                         eta_mode="per_step")),
}
# name -> (model variant, CEM switches), in the order the tables list them
SWEEP_VARIANTS = PAPER_VARIANTS | OUR_VARIANTS | STEP_SIZE_VARIANTS
SWEPT = (*PAPER_VARIANTS, *OUR_VARIANTS)                 # the claims sweep's eleven
RATED = (*PAPER_VARIANTS, *STEP_SIZE_VARIANTS)           # the eleven that have a rate of their own
LADDER_VARIANTS = ("llama", "attn T=1", "attn T=2", "cem-full")
