"""Solutions to the notebooks' exercises. Try each exercise first!

Each exercise cell (tagged ``exercise-<name>``) starts as ``answer = None``; the cell after it (tagged
``check-<name>``) checks the answer. ``solution`` is a correct answer cell, ``wrong`` a plausible wrong
one: the tests put each in place of the exercise cell and check that the first passes and the second
fails (tests/test_notebooks.py).
"""

EXERCISES = {
    "first-token": {
        "notebook": "01_attention_from_energy",
        # a single key gets weight a_11 = 1: the update is W_Q^T W_K c_1, whatever x is
        "solution": "answer = W_Q.T * W_K * c[0]",
        "wrong": "answer = -W_Q.T * W_K * c[0]",
    },
    "gelu-antiderivative": {
        "notebook": "02_gated_mlp_from_energy",
        # by parts twice with n'(z) = -z n(z): Phi(z) = ((z^2 - 1) N(z) + z n(z)) / 2 (up to a constant)
        "solution": "answer = ((z ** 2 - 1) * N + z * n) / 2",
        "wrong": "answer = (z ** 2 * N + z * n) / 2",
    },
    "anchor-at-start": {
        "notebook": "03_design_space",
        # lambda (x - x^(0)) vanishes at x = x^(0)
        "solution": "answer = sp.zeros(d, 1)",
        "wrong": "answer = lam * x_init",
    },
    "variance-at-0": {
        "notebook": "04_gp_recursion",
        # y_0 = f(x_0) + eps with nothing seen: k(x, x) + sigma^2
        "solution": "answer = task.signal_var + task.noise_var",
        "wrong": "answer = task.signal_var",
    },
}
