"""Reading a model inside its layers: every CEM layer's iterate stopped after step t, and the model's output read
from there (a logit lens along the in-layer steps).

A CEM layer maps h to h + x^(T) - x^(0) (docs/design.md#22-conditional-causal-energy-and-the-update). Stopping
layer l after step t gives h + x^(t) - x^(0) instead; the layers after it then run as trained, and the model's
head reads the result. For t = T (the trained T) that is the model's forward pass; t may also run past T
(``T_test``: test-time recursion, the steps continued with the same energy and step size), which a layer with
one learned step size per step refuses.

A model read this way has three methods: ``embed_inputs(*inputs) -> h`` (the residual stream entering the first
block), ``sublayers() -> [(name, module), ...]`` (the residual sublayers in the order they run, each h -> h'),
and ``read_out(h) -> output`` (the head on the last residual stream). The GP transformer and the language
model both do.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .config import check_eval_T
from .descent import EnergyDescentLayer

TEST_T_FACTOR = 4               # a readout offers test-time T up to this many times the trained T


@dataclass
class LayerSteps:
    """What one CEM layer's steps do, read for a batch of inputs (B sequences of n tokens).

    energies: (T+1, B, n), E(x^(t) | c) of each token (the layer's own ``energy``); update_norms: (T, B, n),
    |x^(t) - x^(t-1)|; step_sizes: (T,); weights: (T, B, H, n, n), the attention weights a^k_ij of step t
    (None for the gated MLP); outputs: (T+1, B, ...), the model's output with this layer stopped after step t.
    """
    index: int                 # position among the model's sublayers
    name: str                  # e.g. "block 1 · attention"
    trained_T: int
    energies: torch.Tensor
    update_norms: torch.Tensor
    step_sizes: torch.Tensor
    weights: torch.Tensor | None
    outputs: torch.Tensor

    @property
    def T(self) -> int:
        """The steps read (T_test)."""
        return int(self.step_sizes.numel())


def _run(layers, h: torch.Tensor) -> torch.Tensor:
    for _, layer in layers:
        h = layer(h)
    return h


@torch.no_grad()
def read_steps(model, inputs: tuple, T_test: int | None = None) -> list[LayerSteps]:
    """For every CEM layer of ``model`` (``sublayers``), its T_test steps (the trained T when None) and the
    model's output after each step t = 0 .. T_test, the other layers as trained."""
    layers = list(model.sublayers())
    h = model.embed_inputs(*inputs)
    out = []
    for index, (name, layer) in enumerate(layers):
        if isinstance(layer, EnergyDescentLayer):
            out.append(_layer_steps(model, layers, index, h, T_test))
        h = layer(h)
    return out


def _layer_steps(model, layers, index: int, h: torch.Tensor, T_test: int | None) -> LayerSteps:
    name, layer = layers[index]
    trained = layer.config
    T = trained.T if T_test is None else T_test
    check_eval_T((T,), trained.T, getattr(trained, "eta_per_step", False))
    try:
        layer.config = replace(trained, T=T)
        trace = layer.trace(h)
    finally:
        layer.config = trained
    steps, B = trace.iterates.shape[:2]
    stopped = h + (trace.iterates - trace.iterates[0])               # h + x^(t) - x^(0): (T+1, B, n, d)
    rest = _run(layers[index + 1:], stopped.flatten(0, 1))           # the layers after l, as trained
    outputs = model.read_out(rest)
    return LayerSteps(index=index, name=name, trained_T=trained.T, energies=trace.energies,
                      update_norms=trace.update_norms, step_sizes=trace.step_sizes, weights=trace.weights,
                      outputs=outputs.reshape(steps, B, *outputs.shape[1:]))


@torch.no_grad()
def read_output(model, inputs: tuple) -> torch.Tensor:
    """The model's output through ``sublayers`` (its forward pass, for a model read without stopping)."""
    return model.read_out(_run(model.sublayers(), model.embed_inputs(*inputs)))
