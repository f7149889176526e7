"""CEM Lab compute core: Causal Energy Minimization layers, baselines and models.

A CEM layer is T steps of (preconditioned) gradient descent on a causal conditional energy
(arXiv 2605.07588). Importable without Streamlit or Jupyter.
"""
from importlib import import_module

# each public name and the module that defines it, imported on first use (PEP 562), so that importing a small
# part of the package (a sweep's worker starting up: cem_core.experiments.pool) does not import torch first
_DEFINED_IN = {
    "AttentionCache": "cem_core.nn.attention", "CEMAttention": "cem_core.nn.attention",
    "LlamaAttention": "cem_core.nn.baselines", "LlamaAttentionConfig": "cem_core.nn.baselines",
    "SwiGLU": "cem_core.nn.baselines", "SwiGLUConfig": "cem_core.nn.baselines",
    "CEMBlock": "cem_core.nn.block",
    "AttentionConfig": "cem_core.nn.config", "BlockConfig": "cem_core.nn.config", "CEMOptions": "cem_core.nn.config",
    "MLPConfig": "cem_core.nn.config", "ModelShape": "cem_core.nn.config",
    "Trace": "cem_core.nn.descent", "assert_exact": "cem_core.nn.descent", "exactness_error": "cem_core.nn.descent",
    "gradient_exactness_error": "cem_core.nn.descent", "reference_forward": "cem_core.nn.descent",
    "CEMGatedMLP": "cem_core.nn.mlp",
    "VARIANTS": "cem_core.nn.model", "Block": "cem_core.nn.model", "Generation": "cem_core.nn.model",
    "LanguageModel": "cem_core.nn.model", "ModelConfig": "cem_core.nn.model", "param_breakdown": "cem_core.nn.model",
    "Preconditioner": "cem_core.nn.precondition",
}
__all__ = sorted(_DEFINED_IN)


def __getattr__(name: str):
    """A public name (or ``__version__``, from the installed metadata), imported from its module on first use."""
    if name == "__version__":
        value = import_module("cem_core.experiments.records").package_version()
    elif name in _DEFINED_IN:
        value = getattr(import_module(_DEFINED_IN[name]), name)
    else:
        raise AttributeError(f"module 'cem_core' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*globals(), *_DEFINED_IN, "__version__"]
