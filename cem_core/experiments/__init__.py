"""The experiments: the Gaussian-process task and sweep, language-model data, training and
comparison (`lm`), benchmarks, result records and run integrity. Built on `cem_core.nn`; never
imports `cem_core.ui`."""
