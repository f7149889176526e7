"""CEM Lab compute core: Causal Energy Minimization layers, baselines and models.

A CEM layer is T steps of (preconditioned) gradient descent on a causal conditional energy
(arXiv 2605.07588). Importable without Streamlit or Jupyter.
"""
from cem_core.experiments.records import package_version
from cem_core.nn.attention import AttentionCache, CEMAttention
from cem_core.nn.baselines import LlamaAttention, LlamaAttentionConfig, SwiGLU, SwiGLUConfig  # with their configs
from cem_core.nn.block import CEMBlock
from cem_core.nn.config import AttentionConfig, BlockConfig, CEMOptions, MLPConfig, ModelShape
from cem_core.nn.descent import Trace, assert_exact, exactness_error, gradient_exactness_error, reference_forward
from cem_core.nn.mlp import CEMGatedMLP
from cem_core.nn.model import VARIANTS, Block, Generation, LanguageModel, ModelConfig, param_breakdown
from cem_core.nn.precondition import Preconditioner

__version__ = package_version()          # from the installed metadata (pyproject.toml)

__all__ = [
    "AttentionCache", "AttentionConfig", "Block", "BlockConfig", "CEMBlock", "CEMOptions", "CEMAttention",
    "CEMGatedMLP", "Generation", "LanguageModel", "LlamaAttention", "LlamaAttentionConfig", "MLPConfig", "ModelConfig",
    "ModelShape", "Preconditioner", "SwiGLU", "SwiGLUConfig", "Trace", "VARIANTS", "assert_exact", "exactness_error",
    "gradient_exactness_error", "param_breakdown", "reference_forward",
]
