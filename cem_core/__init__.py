"""CEM Lab compute core: Causal Energy Minimization layers, baselines and models.

A CEM layer is T steps of (preconditioned) gradient descent on a causal conditional energy
(arXiv 2605.07588). Importable without Streamlit or Jupyter.
"""
from .attention import AttentionCache, CEMAttention, LlamaAttention
from .config import AttentionConfig, MLPConfig
from .descent import Trace, assert_exact, exactness_error, reference_forward
from .mlp import CEMGatedMLP, SwiGLU
from .model import VARIANTS, Block, Generation, LanguageModel, ModelConfig, param_breakdown
from .precondition import Preconditioner

__version__ = "0.1.0"

__all__ = [
    "AttentionCache", "AttentionConfig", "Block", "CEMAttention", "CEMGatedMLP", "Generation",
    "LanguageModel", "LlamaAttention", "MLPConfig", "ModelConfig", "Preconditioner", "SwiGLU",
    "Trace", "VARIANTS", "assert_exact", "exactness_error", "param_breakdown", "reference_forward",
]
