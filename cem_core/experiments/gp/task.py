"""Gaussian-process in-context regression, the task: functions drawn from a GP prior, the Bayes-optimal
predictor (the exact GP posterior mean), the baselines, and the RMSE every model is read by.

A function f ~ GP(0, k) is drawn per sequence, N inputs x_j ~ U(box)^d_x, and noisy
targets y_j = f(x_j) + eps_j, eps_j ~ N(0, noise_var). At position j a predictor sees x_{<=j}
and y_{<j} and predicts y_j. Under the true prior the best any predictor can do (in mean
squared error) is the exact GP posterior mean E[y_j | x_{<=j}, y_{<j}]; every model's RMSE is
reported as a ratio to it (docs/design.md#invariant-7-the-gp-optimum-is-the-yardstick).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from cem_core.nn.validate import check_choice, check_float, check_int, fail

KERNELS = ("rbf", "matern52", "periodic")

@dataclass(frozen=True, kw_only=True)
class GPTaskConfig:
    kernel: str = "rbf"
    lengthscale: float = 0.3
    signal_var: float = 1.0
    noise_var: float = 0.01
    period: float = 1.0            # periodic kernel only
    d_x: int = 1
    n_points: int = 32
    box: tuple = (-1.0, 1.0)       # inputs uniform in box^d_x

    def __post_init__(self) -> None:
        check_choice("kernel", self.kernel, KERNELS)
        check_float("lengthscale", self.lengthscale, 0.0, strict=True)
        check_float("signal_var", self.signal_var, 0.0, strict=True)
        check_float("noise_var", self.noise_var, 0.0, strict=True)
        check_float("period", self.period, 0.0, strict=True)
        check_int("d_x", self.d_x, 1, 16)
        check_int("n_points", self.n_points, 2, 4096)
        box = tuple(self.box) if isinstance(self.box, (tuple, list)) else self.box
        if (not isinstance(box, tuple) or len(box) != 2
                or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in box) or box[0] >= box[1]):
            fail("box", self.box, "must be a pair (low, high) of finite numbers with low < high")
        object.__setattr__(self, "box", (float(box[0]), float(box[1])))


# -- the Gaussian process ------------------------------------------------------------------


def kernel_matrix(config: GPTaskConfig, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """k(a_i, b_j) for a (B, N, d_x) and b (B, M, d_x), in float64."""
    a, b = a.double(), b.double()
    r = torch.cdist(a, b)                                              # |x - x'|
    s2, ell = config.signal_var, config.lengthscale
    if config.kernel == "rbf":
        return s2 * torch.exp(-0.5 * (r / ell) ** 2)                   # s^2 exp(-r^2 / 2 l^2)
    if config.kernel == "matern52":
        u = math.sqrt(5.0) * r / ell
        return s2 * (1 + u + u * u / 3) * torch.exp(-u)               # s^2 (1 + sqrt5 r/l + 5r^2/3l^2) e^(-sqrt5 r/l)
    return s2 * torch.exp(-2 * torch.sin(math.pi * r / config.period) ** 2 / ell ** 2)  # periodic


def _observation_cholesky(config: GPTaskConfig, xs: torch.Tensor) -> torch.Tensor:
    n = xs.shape[1]
    C = kernel_matrix(config, xs, xs) + config.noise_var * torch.eye(n, dtype=torch.float64)  # K + sigma^2 I
    return torch.linalg.cholesky(C)


def sample_batch(config: GPTaskConfig, batch_size: int, generator: torch.Generator | None = None):
    """xs (B, N, d_x) uniform in the box and ys (B, N) ~ N(0, K + noise_var I), default dtype."""
    check_int("batch_size", batch_size, 1)
    lo, hi = config.box
    xs = lo + (hi - lo) * torch.rand(batch_size, config.n_points, config.d_x, generator=generator,
                                     dtype=torch.float64)
    L = _observation_cholesky(config, xs)
    z = torch.randn(batch_size, config.n_points, 1, generator=generator, dtype=torch.float64)
    ys = (L @ z).squeeze(-1)                                           # y = L z: covariance L L^T = K + sigma^2 I
    dtype = torch.get_default_dtype()
    return xs.to(dtype), ys.to(dtype)


def gp_predictive(config: GPTaskConfig, xs: torch.Tensor, ys: torch.Tensor):
    """Mean and variance of y_j given (x_{<=j}, y_{<j}) at every j, shapes (B, N), float64.

    With C = K + sigma^2 I = L L^T and y = L z, z_j is independent of y_{<j}, so
    E[y_j | y_{<j}] = sum_{k<j} L_jk z_k and Var[y_j | y_{<j}] = L_jj^2: one Cholesky for all j.
    """
    L = _observation_cholesky(config, xs)
    z = torch.linalg.solve_triangular(L, ys.double().unsqueeze(-1), upper=False)  # z = L^-1 y
    strictly_lower = L - torch.diag_embed(torch.diagonal(L, dim1=-2, dim2=-1))
    mean = (strictly_lower @ z).squeeze(-1)                            # sum_{k<j} L_jk z_k
    var = torch.diagonal(L, dim1=-2, dim2=-1) ** 2                     # L_jj^2
    return mean, var


def gp_posterior_mean(config: GPTaskConfig, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """The exact posterior mean of y_j given the points before j (0 at j = 0), (B, N) float64."""
    return gp_predictive(config, xs, ys)[0]


def gp_posterior_on_grid(config: GPTaskConfig, xs: torch.Tensor, ys: torch.Tensor, grid: torch.Tensor):
    """Posterior mean and standard deviation of f at grid points given all context points.

    xs (B, k, d_x), ys (B, k), grid (B, G, d_x); returns two (B, G) float64 tensors (f, not y:
    add noise_var to the variance for a predictive band of y).
    """
    if xs.shape[1] == 0:
        prior = torch.full(grid.shape[:2], config.signal_var, dtype=torch.float64).sqrt()
        return torch.zeros(grid.shape[:2], dtype=torch.float64), prior
    L = _observation_cholesky(config, xs)
    Ks = kernel_matrix(config, xs, grid)                               # k(x_ctx, x_*)
    alpha = torch.cholesky_solve(ys.double().unsqueeze(-1), L)         # (K + sigma^2 I)^-1 y
    mean = (Ks.transpose(-1, -2) @ alpha).squeeze(-1)                  # k_*^T (K + sigma^2 I)^-1 y
    v = torch.linalg.solve_triangular(L, Ks, upper=False)
    var = config.signal_var - (v * v).sum(-2)                          # k(x_*, x_*) - k_*^T (K + sigma^2 I)^-1 k_*
    return mean, var.clamp_min(0).sqrt()


def sample_function_on_grid(config: GPTaskConfig, seed: int, grid_size: int = 200):
    """One function for plots (d_x = 1): f drawn jointly at N inputs and a dense grid, and the
    noisy targets at the inputs. Returns float64 tensors xs (N,), ys (N,), grid (G,), f_grid (G,)."""
    if config.d_x != 1:
        fail("d_x", config.d_x, "plots of a sampled function need d_x = 1")
    gen = torch.Generator().manual_seed(seed)
    lo, hi = config.box
    xs = lo + (hi - lo) * torch.rand(config.n_points, 1, generator=gen, dtype=torch.float64)
    grid = torch.linspace(lo, hi, grid_size, dtype=torch.float64)[:, None]
    both = torch.cat((xs, grid))[None]
    evals, evecs = torch.linalg.eigh(kernel_matrix(config, both, both)[0])  # K is numerically singular here
    z = torch.randn(len(both), generator=gen, dtype=torch.float64)
    f = evecs @ (evals.clamp_min(0).sqrt() * z)                        # f ~ N(0, K)
    ys = f[:config.n_points] + config.noise_var ** 0.5 * torch.randn(config.n_points, generator=gen,
                                                                      dtype=torch.float64)
    return xs[:, 0], ys, grid[:, 0], f[config.n_points:]


# -- baselines with one call signature: predictor(xs, ys) -> (B, N) -------------------------


def zero_predictor(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """The prior mean, 0 everywhere."""
    return torch.zeros_like(ys)


def nearest_neighbour_predictor(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """y of the nearest earlier input (0 at j = 0)."""
    n = xs.shape[1]
    d = torch.cdist(xs.double(), xs.double())
    d = d.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(-1), float("inf"))  # only k < j
    nearest = d.argmin(-1)
    pred = torch.gather(ys, 1, nearest)
    pred[:, 0] = 0.0
    return pred


def gp_predictor(config: GPTaskConfig):
    """The Bayes-optimal predictor for the task's own prior."""
    def predict(xs, ys):
        return gp_posterior_mean(config, xs, ys).to(ys.dtype)
    return predict


def rmse_by_position(pred: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """RMSE at each context length j (over functions), shape (N,)."""
    return ((pred.double() - ys.double()) ** 2).mean(0).sqrt()


def rmse(pred: torch.Tensor, ys: torch.Tensor) -> float:
    return float(((pred.double() - ys.double()) ** 2).mean().sqrt())


@torch.no_grad()
def predict_in_batches(predictor, xs, ys, batch: int = 256) -> torch.Tensor:
    return torch.cat([predictor(xs[i:i + batch], ys[i:i + batch]) for i in range(0, xs.shape[0], batch)])

