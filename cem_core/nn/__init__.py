"""The mathematics: configs, energies, the descent loop, preconditioners, RoPE, the CEM layers and
their baselines, the language model and closed-form FLOP counts. Depends on torch and numpy only;
never imports `cem_core.experiments` or `cem_core.ui`."""
