"""The trained GP models and the drawn functions, exported for the static site at build time (cem_core/web/gp.js
computes with them in the browser; docs/site.md).

``models_script`` writes every checkpoint of ``models/`` that the GP side reads (``GP_MODELS``) as a classic script,
``globalThis.CEMSiteModels``: per model its card's name, title, group, trained T, metric and weights' sha256, the task,
and its layers in the order they run (``GPTransformer.sublayers``), each with its kind, its weights as float32
little-endian base64 (exactly the checkpoint's values) and what the layer's config says (heads, beta = d_h^-1/2,
the step sizes eta_t, the activation, the norm's epsilon), so JavaScript re-derives no config. Loading a model
checks its weights' sha256 against its card (``load_gp_model``): a damaged checkpoint is refused, not exported.

``functions_script(first)`` writes the functions the app draws for seeds ``first .. first + FUNCTION_CHUNK - 1``
(``sample_function_on_grid``, torch's generator and eigendecomposition, which the browser cannot reproduce): per
seed the N inputs, the noisy targets and the truth on the inspect grid, float64 for the points the model reads and
float32 for the drawn truth. The site carries seeds 0 to SITE_SEEDS - 1 (1.2 MB and 4 s of build; the app's 10,000
would take 12 MB and 40 s); the page loads the chunk of the seed it shows, ``functions/<first>.js``.
"""
from __future__ import annotations

import base64
import functools
import json

import numpy as np
import torch

from cem_core.experiments import checkpoints
from cem_core.experiments.gp.inspect import GRID
from cem_core.experiments.gp.model import GPTransformer
from cem_core.experiments.gp.task import GPTaskConfig, sample_function_on_grid
from cem_core.experiments.gp.trained import GP_MODELS, gp_card, load_gp_model
from cem_core.nn.baselines import LlamaAttention, SwiGLU
from cem_core.nn.block import CEMBlock
from cem_core.nn.descent import EnergyDescentLayer

from .inside_controls import InsideControls

FUNCTION_CHUNK = 500                         # seeds per functions/<first>.js
SITE_SEEDS = 1000                            # the site's function seeds: 0 .. SITE_SEEDS - 1


def _floats(tensor: torch.Tensor, dtype: str = "<f4") -> str:
    """A tensor's values, row-major, as little-endian base64 (float32 by default: a checkpoint's own values)."""
    return base64.b64encode(np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype=dtype).tobytes()).decode()


def _weight(linear) -> dict:
    return {"shape": list(linear.weight.shape), "data": _floats(linear.weight)}


def _sublayer(name: str, layer) -> dict:
    """One residual sublayer as gp.js reads it (its kind, weights and config)."""
    out = {"name": name, "norm": _floats(layer.norm.weight), "eps": layer.norm.eps}
    if isinstance(layer, LlamaAttention):
        return {**out, "kind": "llama-attention", "heads": layer.n_heads, "beta": layer.scale,
                **{key: _weight(getattr(layer, f"{key}_proj")) for key in ("q", "k", "v", "o")}}
    if isinstance(layer, SwiGLU):
        return {**out, "kind": "swiglu", "activation": layer.config.activation,
                **{key: _weight(getattr(layer, f"{key}_proj")) for key in ("gate", "up", "down")}}
    if not isinstance(layer, EnergyDescentLayer) or layer.config.learn_eta or layer.config.preconditioner != "none" \
            or layer.config.diagonal != "none" or layer.config.anchor or getattr(layer.config, "rope", False):
        raise ValueError(f"{name}: the site's forward reads CEM layers with a fixed eta, no preconditioner, no "
                         f"diagonal, no anchor and no RoPE; this one is {layer.config}")
    cem = {**out, "kind": "cem-block" if isinstance(layer, CEMBlock) else "cem-attention", "T": layer.config.T,
           "eta": layer.step_size_values()[0], "heads": layer.config.n_heads, "beta": layer.scale,
           "q": _weight(layer.q_proj), "k": _weight(layer.k_proj)}
    if isinstance(layer, CEMBlock):
        cem |= {"activation": layer.config.activation, "up": _weight(layer.up_proj), "gate": _weight(layer.gate_proj)}
    return cem


def _task(task: GPTaskConfig) -> dict:
    return {"kernel": task.kernel, "lengthscale": task.lengthscale, "signal_var": task.signal_var,
            "noise_var": task.noise_var, "n_points": task.n_points, "box": list(task.box)}


def model_entry(name: str, model: GPTransformer, task: GPTaskConfig, card: dict) -> dict:
    """One trained GP model as the site reads it."""
    if model.config.tokens != "pairs" or model.config.loops != 1 or task.kernel != "rbf" or task.d_x != 1:
        raise ValueError(f"{name}: the site's forward reads pairs tokens, one loop and the RBF kernel at d_x = 1")
    return {"name": name, "title": card["title"], "group": card["group"], "metric": card["metric"],
            "steps": card["steps"], "seed": card["seed"], "command": card["command"],
            "weights_sha256": card["weights_sha256"], "params": card["params"], "task": _task(task),
            "trained_T": GP_MODELS[name].T,
            "most_T": InsideControls.gp_most_T(name),
            "in_proj": {**_weight(model.in_proj), "bias": _floats(model.in_proj.bias)},
            "layers": [_sublayer(n, layer) for n, layer in model.sublayers()],
            "norm": _floats(model.norm.weight), "eps": model.norm.eps,
            "head": {**_weight(model.head), "bias": _floats(model.head.bias)}}


def models_script() -> str:
    """site-models.js: every trained GP model, the inspect grid and the function chunks' size."""
    models, root = {}, checkpoints.models_folder()           # (CEM_LAB_MODELS_DIR read now, not at import)
    for name in GP_MODELS:
        model, task = load_gp_model(name, root)
        models[name] = model_entry(name, model, task, gp_card(name, root))
    controls = {"specs": {k: list(v) for k, v in InsideControls.SPECS.items()}, "labels": InsideControls.LABELS,
                "defaults": InsideControls().values()}
    data = {"models": models, "grid": GRID, "chunk": FUNCTION_CHUNK, "seeds": SITE_SEEDS, "controls": controls}
    return "globalThis.CEMSiteModels = " + json.dumps(data, separators=(",", ":")) + ";\n"


def function_chunks() -> range:
    """The first seed of every chunk of drawn functions the site carries."""
    return range(0, SITE_SEEDS, FUNCTION_CHUNK)


@functools.cache
def functions_script(first: int) -> str:
    """functions/<first>.js: the drawn functions of seeds first .. first + FUNCTION_CHUNK - 1 (module docstring), on
    the trained models' task (one for all of them); kept once computed (a site is built more than once a process)."""
    (task,) = {entry.spec.task for entry in GP_MODELS.values()}
    xs, ys, truth = [], [], []
    for seed in range(first, first + FUNCTION_CHUNK):
        x, y, _, f = sample_function_on_grid(task, seed, GRID)
        xs.append(x)
        ys.append(y)
        truth.append(f)
    data = {"first": first, "count": FUNCTION_CHUNK, "xs": _floats(torch.stack(xs), "<f8"),
            "ys": _floats(torch.stack(ys), "<f8"), "truth": _floats(torch.stack(truth))}
    return "globalThis.CEMFunctions.add(" + json.dumps(data, separators=(",", ":")) + ");\n"
