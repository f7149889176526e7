"""Gaussian-process in-context regression, beside the language model's `experiments/lm/`: the task and its
optimum (`task`), the transformer (`model`), training and evaluation (`train`), the sweep (`sweep`) and the
factor study (`study`)."""
