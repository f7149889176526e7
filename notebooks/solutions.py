"""Solutions to the notebooks' exercises. Try each exercise first!

Each exercise cell (tagged ``exercise-<name>``) starts as ``answer = None``; the cell after it (tagged
``check-<name>``) checks the answer. ``solution`` is a correct answer cell, ``wrong`` a plausible wrong
one: the tests put each in place of the exercise cell and check that the first passes and the second
fails (tests/test_notebooks.py).
"""

EXERCISES = {
    "lecture-first-token": {
        "notebook": "00_lecture",
        # one key: the softmax weight is 1, so -grad E_1 = W_Q^T W_K c_1 (the wrong one swaps query and key)
        "solution": "answer = W_Q.T * W_K * c[0]",
        "wrong": "answer = W_K.T * W_Q * c[0]",
    },
    "lecture-mlp-count": {
        "notebook": "00_lecture",
        # U and G, each 2048 x 768; the down projection is U^T (the wrong one counts SwiGLU's three matrices)
        "solution": "answer = 2 * 768 * 2048",
        "wrong": "answer = 3 * 768 * 2048",
    },
    "first-token": {
        "notebook": "01_attention_from_energy",
        # a single key gets weight a_11 = 1: the update is W_Q^T W_K c_1, whatever x is
        "solution": "answer = W_Q.T * W_K * c[0]",
        "wrong": "answer = -W_Q.T * W_K * c[0]",
    },
    "zero-temperature": {
        "notebook": "01_attention_from_energy",
        # beta -> infinity: all the weight on the top score s_3 = 2, so u = W_Q^T W_K c_3 (the wrong one is beta -> 0)
        "solution": "answer = Wq.T * Wk * hist[2]",
        "wrong": "answer = Wq.T * Wk * (hist[0] + hist[1] + hist[2]) / 3",
    },
    "gelu-antiderivative": {
        "notebook": "02_gated_mlp_from_energy",
        # by parts twice with n'(z) = -z n(z): Phi(z) = ((z^2 - 1) N(z) + z n(z)) / 2 (up to a constant)
        "solution": "answer = ((z ** 2 - 1) * N + z * n) / 2",
        "wrong": "answer = (z ** 2 * N + z * n) / 2",
    },
    "relu-antiderivative": {
        "notebook": "02_gated_mlp_from_energy",
        # Phi(z) = z^2/2 for z > 0, 0 below: slope max(z, 0) on both sides, continuous at 0
        "solution": "answer = sp.Piecewise((z ** 2 / 2, z > 0), (0, True))",
        "wrong": "answer = sp.Piecewise((z ** 2, z > 0), (0, True))",
    },
    "anchor-at-start": {
        "notebook": "03_design_space",
        # lambda (x - x^(0)) vanishes at x = x^(0)
        "solution": "answer = sp.zeros(d, 1)",
        "wrong": "answer = lam * x_init",
    },
    "anchor-step-limit": {
        "notebook": "03_design_space",
        # with P = s I the first token's error shrinks by 1 - eta s lambda per step: |.| < 1 iff eta < 2/(s lambda)
        "solution": "answer = 2 / (s_P * lam)",
        "wrong": "answer = 2 / lam",
    },
    "variance-at-0": {
        "notebook": "04_gp_recursion",
        # y_0 = f(x_0) + eps with nothing seen: k(x, x) + sigma^2
        "solution": "answer = task.signal_var + task.noise_var",
        "wrong": "answer = task.signal_var",
    },
    "one-point-mean": {
        "notebook": "04_gp_recursion",
        # C_{x,0} C_{00}^-1 y_0 with C = K + sigma^2 I: the noise enters the observed point's variance only
        "solution": "answer = k_x0 / (k_00 + noise) * y_0",
        "wrong": "answer = k_x0 / k_00 * y_0",
    },
    "verdict-by-hand": {
        "notebook": "05_what_the_evidence_says",
        # a 'comparable' claim: supported when m + 2 se <= t ref, contradicted when m - 2 se > t ref (t = 2%);
        # the wrong answer judges by the mean alone, without the 2 se margin
        "solution": "answer = ('supported' if m + 2 * se <= 0.02 * ref else 'contradicted' if m - 2 * se > 0.02 * ref "
                    "else 'inconclusive')",
        "wrong": "answer = 'supported' if m <= 0.02 * ref else 'contradicted'",
    },
    "distance-from-ratio": {
        "notebook": "06_inside_a_trained_model",
        # MSE = the optimum's + the mean squared distance to the posterior mean, so r^2 = 1 + d^2 (the wrong answer
        # reads the ratio's excess over 1 as the distance)
        "solution": "answer = math.sqrt(ratio ** 2 - 1)",
        "wrong": "answer = ratio - 1",
    },
}
