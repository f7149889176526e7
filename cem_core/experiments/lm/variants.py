"""The LM sweeps' variants: each a model variant with its CEM switches, named as the tables name it.

``PAPER_VARIANTS`` are the nine the paper's claims compare, ``OUR_VARIANTS`` the two behind our own claims,
``STEP_SIZE_VARIANTS`` the two with learned per-step step sizes (is the preconditioner's gain step-size control?),
``TIE_VARIANTS`` the four with a tie dropped (docs/design.md#215-the-ties), ``LADDER_VARIANTS`` the four the width
ladders train and ``TIE_LADDER_VARIANTS`` the seven the tie ladder trains, each untied variant beside its tied
relative (``TIE_RELATIVES``), and ``TEST_TIME_VARIANTS`` CEM attention T = 2 in each regime of the test-time study
(``test_time.REGIMES``), each trained at its depth (``TRAIN_DEPTH_OF``).
"""
from __future__ import annotations

from dataclasses import replace

from cem_core.experiments.test_time import REGIMES
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
# which tie costs the perplexity: CEM attention at T = 1 with each tie dropped, cem-full with its MLP's
TIE_VARIANTS = {
    "attn T=1, K=V only": ("cem-attn", CEMOptions(attn_ties="kv")),
    "attn T=1, Q=O^T only": ("cem-attn", CEMOptions(attn_ties="qo")),
    "attn T=1, untied": ("cem-attn", CEMOptions(attn_ties="none")),
    "cem-full, MLP untied": ("cem-full", replace(VARIANT_OPTIONS["cem-full"], mlp_ties="untied")),
}
TIE_RELATIVES = {"attn T=1, K=V only": "attn T=1", "attn T=1, Q=O^T only": "attn T=1",
                 "attn T=1, untied": "attn T=1", "cem-full, MLP untied": "cem-full"}   # untied -> its tied relative
# can recursion scale at test time: CEM attention T = 2 trained in each regime of the test-time study (name -> regime)
TEST_TIME_VARIANTS = {("attn T=2" if name == "fixed T" else f"attn T=2, {name}"): name for name in REGIMES}
TRAIN_DEPTH_OF = {name: REGIMES[regime].train_depth for name, regime in TEST_TIME_VARIANTS.items()}
_TEST_TIME_OWN = {name: ("cem-attn", CEMOptions(T=2, anchor=REGIMES[regime].anchor))
                  for name, regime in TEST_TIME_VARIANTS.items() if name not in PAPER_VARIANTS}
# name -> (model variant, CEM switches), in the order the tables list them
SWEEP_VARIANTS = PAPER_VARIANTS | OUR_VARIANTS | STEP_SIZE_VARIANTS | TIE_VARIANTS | _TEST_TIME_OWN
SWEPT = (*PAPER_VARIANTS, *OUR_VARIANTS)                 # the claims sweep's eleven
RATED = (*PAPER_VARIANTS, *STEP_SIZE_VARIANTS)           # the eleven that have a rate of their own
LADDER_VARIANTS = ("llama", "attn T=1", "attn T=2", "cem-full")
TIE_LADDER_VARIANTS = ("llama", "attn T=1", "attn T=1, K=V only", "attn T=1, Q=O^T only", "attn T=1, untied",
                       "cem-full", "cem-full, MLP untied")
