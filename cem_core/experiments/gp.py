"""Gaussian-process in-context regression: the task, the Bayes-optimal predictor, baselines,
and a causal transformer trained on fresh functions every step.

Task. A function f ~ GP(0, k) is drawn per sequence, N inputs x_j ~ U(box)^d_x, and noisy
targets y_j = f(x_j) + eps_j, eps_j ~ N(0, noise_var). At position j a predictor sees x_{<=j}
and y_{<j} and predicts y_j. Under the true prior the best any predictor can do (in mean
squared error) is the exact GP posterior mean E[y_j | x_{<=j}, y_{<j}]; every model's RMSE is
reported as a ratio to it (docs/design.md#invariant-7-the-gp-optimum-is-the-yardstick).

Token formats (``GPModelConfig.tokens``). "pairs" (the default): token j is
[x_j, x_{j-1}, y_{j-1}, first_j], the query input together with the previous (input, target) pair,
and a flag that is 1 only at j = 0 (where the previous pair is zero padding). "interleaved" (Garg
et al.'s layout): a query token [x_j, 0, 1] and then a pair token [x_j, y_j, 0] for every j, 2N
tokens, the prediction of y_j read at its query token. Either way, through causal attention the
prediction of y_j reaches every pair before j and its own query, and nothing else. No positional
encoding (RoPE off): the points are exchangeable, their order carries no information.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn

from cem_core.nn.config import CEMOptions, ModelShape, as_shape
from cem_core.nn.descent import EnergyDescentLayer
from cem_core.nn.model import Block, ModelConfig, cem_layers, recursion_depth
from cem_core.nn.validate import check_choice, check_float, check_int, fail

from .integrity import json_hash
from .schedule import adamw, descend, set_lr, warmup_cosine

KERNELS = ("rbf", "matern52", "periodic")
TOKEN_FORMATS = ("pairs", "interleaved")


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


# -- the transformer -------------------------------------------------------------------------


GP_SHAPE = ModelShape(d_model=64, n_layers=1, n_heads=4, d_ff=128)   # the committed sweep's model
# the names the GP's run records and hashes give two shape fields (from before the shape was shared with the LM)
GP_RECORD_NAMES = {"d_model": "width", "n_layers": "depth"}


@dataclass(frozen=True, kw_only=True)
class GPModelConfig:
    attention: str = "cem"         # "llama" | "cem"
    mlp: str = "llama"             # SwiGLU by default, so only the attention differs between runs; "none": no MLP
    shape: ModelShape = GP_SHAPE   # sizes and activation (recorded as width, depth, n_heads, d_ff: GP_RECORD_NAMES)
    cem: CEMOptions = field(default_factory=CEMOptions)   # the switches of every CEM layer
    tokens: str = "pairs"          # the token format (module docstring)
    loops: int = 1                 # the blocks run this many times over, with shared weights

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", as_shape(self.shape))
        check_choice("tokens", self.tokens, TOKEN_FORMATS)
        check_int("loops", self.loops, 1, 64)
        self.model_config(n_points=2)   # validates every field through the model and layer configs

    def model_config(self, n_points: int) -> ModelConfig:
        length = n_points * (2 if self.tokens == "interleaved" else 1)
        return ModelConfig(**self.shape.shape_fields(), vocab_size=1, max_seq_len=length, attention=self.attention,
                           mlp=self.mlp, cem=self.cem, rope=False)

    def with_cem(self, **switches) -> "GPModelConfig":
        """This model with some CEM switches changed."""
        return replace(self, cem=replace(self.cem, **switches))

    def with_shape(self, **sizes) -> "GPModelConfig":
        """This model with some of its shape's fields changed."""
        return replace(self, shape=replace(self.shape, **sizes))


def token_width(d_x: int, tokens: str = "pairs") -> int:
    return 2 * d_x + 2 if tokens == "pairs" else d_x + 2


def make_tokens(xs: torch.Tensor, ys: torch.Tensor, tokens: str = "pairs") -> torch.Tensor:
    """"pairs": token j = [x_j, x_{j-1}, y_{j-1}, 1{j = 0}], shape (B, N, 2 d_x + 2). "interleaved": the
    query token [x_j, 0, 1] then the pair token [x_j, y_j, 0] for each j, shape (B, 2N, d_x + 2)."""
    if tokens == "interleaved":
        B, N, _ = xs.shape
        zero, one = torch.zeros(B, N, 1, dtype=xs.dtype), torch.ones(B, N, 1, dtype=xs.dtype)
        query = torch.cat((xs, zero, one), dim=-1)                     # [x_j, 0, 1]
        pair = torch.cat((xs, ys[..., None], zero), dim=-1)            # [x_j, y_j, 0]
        return torch.stack((query, pair), dim=2).reshape(B, 2 * N, -1)
    prev_x = F.pad(xs, (0, 0, 1, 0))[:, :-1]
    prev_y = F.pad(ys, (1, 0))[:, :-1, None]
    first = torch.zeros_like(prev_y)
    first[:, 0] = 1.0
    return torch.cat((xs, prev_x, prev_y, first), dim=-1)


class GPTransformer(nn.Module):
    """in_proj -> blocks (cem_core.nn.model.Block), ``loops`` times over -> RMSNorm -> scalar head;
    predicts y_j (read at the query tokens with the interleaved format)."""

    def __init__(self, task: GPTaskConfig, config: GPModelConfig):
        super().__init__()
        self.task, self.config = task, config
        mc = config.model_config(task.n_points)
        self.in_proj = nn.Linear(token_width(task.d_x, config.tokens), mc.d_model)
        self.blocks = nn.ModuleList(Block(mc) for _ in range(mc.n_layers))
        self.norm = nn.RMSNorm(mc.d_model, eps=mc.norm_eps)
        self.head = nn.Linear(mc.d_model, 1)
        for block in self.blocks:
            block.skip_input_checks()

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        h = self.in_proj(make_tokens(xs, ys, self.config.tokens))
        for _ in range(self.config.loops):
            for block in self.blocks:
                h = block(h)
        out = self.head(self.norm(h)).squeeze(-1)
        return out[:, 0::2] if self.config.tokens == "interleaved" else out   # at the query tokens

    @torch.no_grad()
    def predict_at(self, xs: torch.Tensor, ys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """Predictions at each query given the whole context: xs (k, d_x), ys (k,), queries (G, d_x) -> (G,).

        One sequence per query: the k context points followed by the query token."""
        G, k = queries.shape[0], xs.shape[0]
        seq_x = torch.cat((xs.expand(G, k, -1), queries[:, None]), dim=1)
        seq_y = torch.cat((ys.expand(G, k), torch.zeros(G, 1, dtype=ys.dtype)), dim=1)  # y at the query is unseen
        return self(seq_x, seq_y)[:, -1]

    def cem_layers(self) -> list[EnergyDescentLayer]:
        return cem_layers(self)



# -- training and evaluation -----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class GPTrainConfig:
    steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3               # picked from {1e-3, 3e-3} on a probe where it was better for every model
    weight_decay: float = 0.01
    warmup: float = 0.05           # fraction of steps with linear warm-up
    min_lr_ratio: float = 0.1      # cosine decay to lr * min_lr_ratio
    grad_clip: float = 1.0
    seed: int = 0
    eval_size: int = 1024
    eval_seed: int = 12345
    eval_every: int = 0            # also record the held-out RMSE every this many steps (0: at the end only)

    def __post_init__(self) -> None:
        check_int("steps", self.steps, 1)
        check_int("batch_size", self.batch_size, 1)
        check_float("lr", self.lr, 0.0, strict=True)
        check_float("weight_decay", self.weight_decay, 0.0, strict=False)
        check_float("warmup", self.warmup, 0.0, strict=False)
        if self.warmup >= 1:
            fail("warmup", self.warmup, "must be a fraction in [0, 1)")
        check_float("min_lr_ratio", self.min_lr_ratio, 0.0, strict=False)
        check_float("grad_clip", self.grad_clip, 0.0, strict=True)
        check_int("seed", self.seed, 0, 2 ** 63 - 1)   # torch.manual_seed's range
        check_int("eval_size", self.eval_size, 1)
        check_int("eval_seed", self.eval_seed, 0)
        check_int("eval_every", self.eval_every, 0)


def lr_at(train: GPTrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to lr * min_lr_ratio."""
    return warmup_cosine(step, train.steps, train.lr, train.warmup, train.min_lr_ratio)


def eval_set(task: GPTaskConfig, train: GPTrainConfig):
    """The fixed, seeded held-out set (the same for every model and run with these configs)."""
    return sample_batch(task, train.eval_size, torch.Generator().manual_seed(train.eval_seed))


def rmse_by_position(pred: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """RMSE at each context length j (over functions), shape (N,)."""
    return ((pred.double() - ys.double()) ** 2).mean(0).sqrt()


def rmse(pred: torch.Tensor, ys: torch.Tensor) -> float:
    return float(((pred.double() - ys.double()) ** 2).mean().sqrt())


@torch.no_grad()
def predict_in_batches(predictor, xs, ys, batch: int = 256) -> torch.Tensor:
    return torch.cat([predictor(xs[i:i + batch], ys[i:i + batch]) for i in range(0, xs.shape[0], batch)])


@dataclass
class GPTrainResult:
    model: GPTransformer
    losses: list
    rmse: float
    rmse_by_position: list
    seconds: float
    diverged: bool
    rmse_curve: list = field(default_factory=list)   # [step, held-out RMSE] every eval_every steps


def _held_out(model: GPTransformer, held_out: tuple, device: str) -> torch.Tensor:
    """The model's predictions on the held-out set (xs, ys) of ``eval_set``, (eval_size, N)."""
    xs, ys = held_out
    was_training = model.training
    model.eval()
    pred = predict_in_batches(lambda a, b: model(a.to(device), b.to(device)).cpu(), xs, ys)
    model.train(was_training)
    return pred


def training_seconds(task: GPTaskConfig, config: GPModelConfig, train: GPTrainConfig, probe_steps: int = 10,
                     device: str = "cpu") -> float:
    """How long ``train_gp`` with these configs takes on this machine now: `probe_steps` steps of the same
    training are timed and scaled to `train.steps`, plus the held-out evaluation (a measurement: it
    reflects whatever else the machine is doing)."""
    check_int("probe_steps", probe_steps, 1)
    start = time.perf_counter()
    probe = train_gp(task, config, replace(train, steps=probe_steps, eval_every=0), device=device)
    evaluation = time.perf_counter() - start - probe.seconds
    return probe.seconds / probe_steps * train.steps + evaluation


def memory_needed(task: GPTaskConfig, config: GPModelConfig, train: GPTrainConfig) -> int:
    """About the bytes a run's largest step holds: the N x N kernel matrices of a batch of functions (the
    distances, K and its Cholesky factor, float64) for the training batch, the held-out set (drawn at once) and
    the exact GP's batches of 256, or the training step's attention scores (B x H x L x L, float32, kept for
    the backward pass at every layer and step)."""
    n, length = task.n_points, task.n_points * (2 if config.tokens == "interleaved" else 1)
    kernels = 3 * 8 * n * n * max(train.batch_size, train.eval_size, 256)
    steps = config.shape.n_layers * config.loops * (config.cem.T if config.attention == "cem" else 1)
    scores = 2 * 4 * train.batch_size * config.shape.n_heads * length * length * steps
    return max(kernels, scores)


def check_memory(task: GPTaskConfig, config: GPModelConfig, train: GPTrainConfig) -> None:
    """Refuse (ValueError naming n_points) a run that needs more memory than this machine has available, before
    any work: memory grows with the square of n_points, and the largest allowed would ask for about 400 GB."""
    import psutil

    needed, available = memory_needed(task, config, train), psutil.virtual_memory().available
    if needed > available:
        fail("n_points", task.n_points, f"needs about {needed / 2 ** 30:,.1f} GiB here (eval_size {train.eval_size}, "
             f"batch_size {train.batch_size}: the functions' N x N kernel matrices and the attention scores) and "
             f"{available / 2 ** 30:,.1f} GiB is available; lower n_points (memory grows with its square)")


def train_gp(task: GPTaskConfig, config: GPModelConfig, train: GPTrainConfig,
             progress=None, device: str = "cpu") -> GPTrainResult:
    """Train on fresh functions every step (AdamW, warm-up + cosine), evaluate on the held-out set.

    ``progress(step, loss)`` is called after every step. A non-finite loss stops training and
    marks the result as diverged (reported, never silently dropped). A run that would not fit in the
    memory available is refused first (`check_memory`).
    """
    check_memory(task, config, train)
    torch.manual_seed(train.seed)
    model = GPTransformer(task, config).to(device)
    opt = adamw(model, train.lr, train.weight_decay)
    gen = torch.Generator().manual_seed(train.seed)
    held_out = eval_set(task, train)                                  # drawn once, read at every evaluation
    losses, curve, diverged, start = [], [], False, time.perf_counter()
    model.train()
    for step in range(train.steps):
        set_lr(opt, lr_at(train, step))
        xs, ys = sample_batch(task, train.batch_size, gen)
        xs, ys = xs.to(device), ys.to(device)
        loss = F.mse_loss(model(xs, ys), ys)
        if not torch.isfinite(loss):
            diverged = True
            break
        descend(opt, model, loss, train.grad_clip)
        losses.append(loss.item())
        if progress is not None:
            progress(step, losses[-1])
        if train.eval_every and (step + 1) % train.eval_every == 0 and step + 1 < train.steps:
            curve.append([step + 1, rmse(_held_out(model, held_out, device), held_out[1])])
    seconds = time.perf_counter() - start
    model.eval()
    ys = held_out[1]
    pred = _held_out(model, held_out, device)
    final = rmse(pred, ys)
    if train.eval_every and not diverged:
        curve.append([train.steps, final])
    return GPTrainResult(model=model, losses=losses, rmse=final, rmse_by_position=rmse_by_position(pred, ys).tolist(),
                         seconds=seconds, diverged=diverged or not math.isfinite(final), rmse_curve=curve)


def baseline_rmses(task: GPTaskConfig, train: GPTrainConfig) -> dict[str, dict]:
    """RMSE overall and per position of the GP optimum, zero and nearest neighbour on the eval set."""
    xs, ys = eval_set(task, train)
    out = {}
    for name, predictor in (("gp", gp_predictor(task)), ("zero", zero_predictor),
                            ("nearest_neighbour", nearest_neighbour_predictor)):
        pred = predict_in_batches(predictor, xs, ys)
        out[name] = {"rmse": rmse(pred, ys), "rmse_by_position": rmse_by_position(pred, ys).tolist()}
    return out


@torch.no_grad()
def evaluate_at_T(model: GPTransformer, task: GPTaskConfig, train: GPTrainConfig, Ts) -> dict[int, float]:
    """Test-time scaling: the held-out RMSE of a trained model evaluated at other T."""
    xs, ys = eval_set(task, train)
    out = {}
    for T in Ts:
        with recursion_depth(model, T):
            out[int(T)] = rmse(predict_in_batches(model, xs, ys), ys)
    return out


# fields added after the first committed sweep, with their defaults: a run records them only when it
# differs from the default, so the hashes of earlier runs stay what they were
LATER_MODEL_FIELDS = {"tokens": "pairs", "loops": 1}
LATER_TRAIN_FIELDS = {"eval_every": 0}


def _recorded(fields: dict, later: dict) -> dict:
    return {k: v for k, v in fields.items() if not (k in later and v == later[k])}


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: task, model, training, and the part of the sweep it belongs to."""
    task: GPTaskConfig
    model: GPModelConfig
    train: GPTrainConfig
    group: str                     # which part of the sweep the run belongs to (for tables and plots)

    def config(self) -> dict:
        """The full configuration as results.json holds it (tuples become lists)."""
        return json.loads(json.dumps(config_dict(self.task, self.model, self.train)))

    @property
    def hash(self) -> str:
        return json_hash(self.config())


@torch.no_grad()
def step_diagnostics(model: GPTransformer, task: GPTaskConfig, train: GPTrainConfig, n_functions: int = 256) -> dict:
    """What the T steps of a trained depth-1 CEM attention layer (or joint block, whose energy is E_att + E_mlp)
    do, on the first ``n_functions`` of the
    held-out set: per step t = 0..T the mean energy E(x^(t) | c) relative to E(x^(0) | c), and the held-out
    RMSE (ratio to the GP optimum) when the prediction is read out after t steps (the rest of the model
    unchanged); per step t = 1..T the mean update norm |x^(t) - x^(t-1)|, the step size and the mean
    attention entropy (nats; log n_k for uniform weights)."""
    config = model.config
    if config.attention != "cem" or config.shape.n_layers != 1 or config.loops != 1:
        fail("model", config, "step diagnostics need one CEM attention block (depth 1, loops 1)")
    block = model.blocks[0]
    xs, ys = (t[:n_functions] for t in eval_set(task, train))
    h = model.in_proj(make_tokens(xs, ys, config.tokens))
    trace = (block.joint or block.attn).trace(h)
    optimum = rmse(gp_posterior_mean(task, xs, ys), ys)
    ratios = []
    for x in trace.iterates:
        out = h + (x - trace.iterates[0])                              # h + x^(t) - x^(0): the layer stopped at t
        out = out if block.mlp is None else block.mlp(out)             # (a joint block has no MLP after it)
        pred = model.head(model.norm(out)).squeeze(-1)
        pred = pred[:, 0::2] if config.tokens == "interleaved" else pred
        ratios.append(rmse(pred, ys) / optimum)
    a = trace.weights.clamp_min(1e-30)                                 # (T, B, H, n, n_k)
    entropy = -(a * a.log()).sum(-1)                                   # -sum_j a_ij log a_ij
    energy = trace.energies.double().mean(dim=(1, 2))
    return {"T": int(len(trace.step_sizes)), "rmse_ratio_after_step": ratios,
            "energy_change": (energy - energy[0]).tolist(),
            "update_norm": trace.update_norms.double().mean(dim=(1, 2)).tolist(),
            "step_size": trace.step_sizes.tolist(), "attention_entropy": entropy.double().mean(dim=(1, 2, 3)).tolist()}


def config_dict(task: GPTaskConfig, model: GPModelConfig, train: GPTrainConfig) -> dict:
    """The configuration of a run as results record it: the model's shape (under the GP's first names for d_model
    and n_layers) and CEM switches among its own fields (the form run hashes have always been computed from),
    later fields and switches only off their defaults (``ModelShape.recorded``, ``CEMOptions.recorded``)."""
    own = {k: v for k, v in asdict(model).items() if k not in ("cem", "shape")}
    shape = {GP_RECORD_NAMES.get(k, k): v for k, v in model.shape.recorded().items()}
    flat_model = _recorded(shape | own, LATER_MODEL_FIELDS) | model.cem.recorded()
    return {"task": asdict(task), "model": flat_model, "train": _recorded(asdict(train), LATER_TRAIN_FIELDS)}
