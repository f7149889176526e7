"""Gaussian-process in-context regression, beside the language model's `experiments/lm/`: the task and its
optimum (`task`), the transformer (`model`), training and evaluation (`train`), the sweep (`sweep`) and the
factor study (`study`), the trained models
(`trained`; `load_trained(name) -> (model, task_config)`) and what they do inside (`inspect`)."""
from .trained import load_gp_model as load_trained

__all__ = ["load_trained"]
