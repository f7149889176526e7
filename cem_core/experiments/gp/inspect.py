"""Inside a trained GP model: its prediction on one function after every in-layer step, against the exact GP
posterior, and what test-time recursion depth does over many functions (``cem_core.nn.readout``).

``inspect_function`` draws one function (``task.sample_function_on_grid``), gives the model its first K points as
context and asks for the value at every point of a grid (one sequence per grid point: the K context tokens,
then the query token, as ``GPTransformer.predict_at``), and reads every CEM layer stopped after each step t =
0 .. T_test. ``scaling`` measures, on the held-out functions, the RMSE ratio to the GP optimum by test-time T
and by step, with standard errors over functions, and the paired difference of each T to the trained T with a
95% t-interval (``verdicts.t_interval``); ``extra_steps`` reads one function: whether steps past the trained T
help, stall or hurt.
"""
from __future__ import annotations

import math
import statistics

import torch

from cem_core.nn.model import recursion_depth
from cem_core.nn.readout import TEST_T_FACTOR, read_output, read_steps
from cem_core.nn.validate import check_int

from ..verdicts import t_interval
from .model import GPTransformer
from .task import GPTaskConfig, gp_posterior_mean, gp_posterior_on_grid, sample_function_on_grid
from .train import GPTrainConfig, eval_set

GRID = 101                      # query points across the box
SCALING_FUNCTIONS = 256         # held-out functions of the test-time study
HELP_TOLERANCE = 0.02           # a change of the RMSE to the posterior within 2% "stalls" (one function)


def trained_T(model: GPTransformer) -> int:
    """The trained T of the model's CEM layers (1 for a model without any)."""
    layers = model.cem_layers()
    return layers[0].config.T if layers else 1


def test_Ts(model: GPTransformer) -> tuple:
    """The test-time T a page offers: 1 .. TEST_T_FACTOR x the trained T (only the trained T without CEM layers)."""
    T = trained_T(model)
    return tuple(range(1, TEST_T_FACTOR * T + 1)) if model.cem_layers() else (1,)


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a.double() - b.double()) ** 2).mean().sqrt())


def parse_points(text: str, task: GPTaskConfig) -> list[tuple[float, float]]:
    """A learner's own context points, "x1:y1,x2:y2,..." (the form of a link's ``in_points`` and of ``gp inspect
    --points``): at most n_points - 1 of them, each a pair of finite numbers with x inside the task's box; a
    ValueError naming ``points`` and what is wrong otherwise. An empty text is no points."""
    low, high = task.box
    limit = task.n_points - 1
    items = [item for item in text.split(",") if item.strip()] if text.strip() else []
    if len(items) > limit:
        raise ValueError(f"points={text!r} is invalid: {len(items)} points, and the model reads at most {limit} "
                         f"(its {task.n_points} tokens less the query)")
    out = []
    for item in items:
        parts = item.split(":")
        try:
            x, y = (float(v) for v in parts) if len(parts) == 2 else (math.nan, math.nan)
        except ValueError:
            x = y = math.nan
        if not (math.isfinite(x) and math.isfinite(y)):
            raise ValueError(f"points={text!r} is invalid: {item.strip()!r} is not a point x:y of two numbers")
        if not low <= x <= high:
            raise ValueError(f"points={text!r} is invalid: x = {x:g} of {item.strip()!r} is outside the box "
                             f"[{low:g}, {high:g}]")
        out.append((x, y))
    return out


def _context(task: GPTaskConfig, seed: int | None, context: int, grid_size: int, points) -> tuple:
    """The context (x, y), the grid and the truth on it: a drawn function's first points, or a learner's own
    (then seed and truth are None)."""
    if points is None:
        check_int("seed", seed, 0, 2 ** 63 - 1)
        check_int("context", context, 0, task.n_points - 1)
        xs, ys, grid, truth = sample_function_on_grid(task, seed, grid_size)
        return seed, xs[:context], ys[:context], grid, truth
    if len(points) > task.n_points - 1:
        raise ValueError(f"points is invalid: {len(points)} points, at most {task.n_points - 1}")
    cx = torch.tensor([x for x, _ in points], dtype=torch.float64)
    cy = torch.tensor([y for _, y in points], dtype=torch.float64)
    return None, cx, cy, torch.linspace(*task.box, grid_size, dtype=torch.float64), None


def _layer_reading(steps, mean: torch.Tensor, truth: torch.Tensor | None, middle: int) -> dict:
    """One CEM layer's steps (``read_steps``) at the query token: its prediction and RMSEs after every step, and
    the energies, update norms and attention of the sequence the page shows (``middle``)."""
    prediction = steps.outputs[:, :, -1]                               # (T+1, G): at the query token
    return {
        "name": steps.name, "trained_T": steps.trained_T, "T": steps.T,
        "prediction": prediction.tolist(),
        "rmse_to_posterior": [_rmse(p, mean) for p in prediction],
        "rmse_to_truth": None if truth is None else [_rmse(p, truth) for p in prediction],
        "energies": steps.energies[:, middle].tolist(),                # (T+1, K+1): context tokens, then the query
        "update_norms": steps.update_norms[:, middle].tolist(),
        "step_sizes": steps.step_sizes.tolist(),
        "attention": (None if steps.weights is None else
                      [[[[round(v, 5) for v in row] for row in head] for head in step]
                       for step in steps.weights[:, middle].tolist()]),   # (T, H, K+1, K+1)
    }


@torch.no_grad()
def inspect_function(model: GPTransformer, task: GPTaskConfig, seed: int | None, context: int = 8,
                     T_test: int | None = None, grid_size: int = GRID, points=None) -> dict:
    """One function, its posterior on a grid, and the model's prediction on the grid after every step of every
    CEM layer (JSON-ready; ``python -m cem_core gp inspect`` writes it). With ``points`` (a learner's own context,
    ``parse_points``) there is no function: the context is those points, seed and truth are None and the RMSE to the
    truth is left out."""
    check_int("grid_size", grid_size, 2, 1001)
    if task.d_x != 1:
        raise ValueError(f"d_x={task.d_x} is invalid: inspecting a model plots functions of one input (d_x = 1)")
    T = trained_T(model) if T_test is None else T_test
    if T_test is not None:
        check_int("T_test", T_test, 1, max(test_Ts(model)))
    seed, cx, cy, grid, truth = _context(task, seed, context, grid_size, points)
    context = len(cx)
    mean, sd = gp_posterior_on_grid(task, cx[None, :, None], cy[None], grid[None, :, None])
    mean, sd = mean[0], sd[0]
    dtype = next(model.parameters()).dtype
    seq_x = torch.cat((cx.expand(grid_size, context), grid[:, None]), dim=1)[..., None].to(dtype)
    seq_y = torch.cat((cy.expand(grid_size, context), torch.zeros(grid_size, 1, dtype=cy.dtype)), dim=1).to(dtype)
    middle = grid_size // 2                                            # the sequence whose tokens the page shows
    layers = [_layer_reading(steps, mean, truth, middle)
              for steps in read_steps(model, (seq_x, seq_y), T_test=T if model.cem_layers() else None)]
    final = read_output(model, (seq_x, seq_y))[:, -1]
    return {"seed": seed, "context": context, "trained_T": trained_T(model), "T_test": T,
            "kernel": task.kernel, "lengthscale": task.lengthscale, "noise_var": task.noise_var,
            "context_x": cx.tolist(), "context_y": cy.tolist(), "grid": grid.tolist(),
            "truth": None if truth is None else truth.tolist(),
            "posterior_mean": mean.tolist(), "posterior_sd": sd.tolist(), "shown_query": middle,
            "prediction": final.tolist(), "rmse_to_posterior": _rmse(final, mean),
            "rmse_to_truth": None if truth is None else _rmse(final, truth),
            "layers": layers}


def extra_steps(rmse_trained: float, rmse_test: float) -> str:
    """One function: whether steps beyond the trained T "help", "stall" or "hurt", read off the RMSE to the
    posterior mean at test-time T against the trained T (within HELP_TOLERANCE: stall); a prediction that
    overflowed (a RMSE that is not finite) is hurt."""
    if not math.isfinite(rmse_test):
        return "hurt"
    change = rmse_test / max(rmse_trained, 1e-12) - 1
    return "help" if change < -HELP_TOLERANCE else "hurt" if change > HELP_TOLERANCE else "stall"


@torch.no_grad()
def per_function_ratio(model: GPTransformer, task: GPTaskConfig, xs: torch.Tensor, ys: torch.Tensor,
                       optimum: torch.Tensor) -> torch.Tensor:
    """RMSE / the GP optimum's RMSE of each function (over its positions), (F,)."""
    pred = model(xs, ys).double()
    mine = ((pred - ys.double()) ** 2).mean(-1).sqrt()
    return mine / optimum


def _over_functions(values: torch.Tensor) -> dict:
    """Mean and standard error over functions of one ratio each; where a prediction overflowed (not finite, as the
    iterates of an energy without a minimum run off at a large test-time T), mean and se are nan and
    ``overflowed`` counts those functions (a mean over the others would be one over the survivors)."""
    v = values.tolist()
    overflowed = sum(not math.isfinite(x) for x in v)
    if overflowed:
        return {"mean": math.nan, "se": math.nan, "overflowed": overflowed}
    return {"mean": statistics.fmean(v), "se": statistics.stdev(v) / math.sqrt(len(v)), "overflowed": 0}


def _paired_interval(differences: torch.Tensor) -> dict:
    """``verdicts.t_interval`` of the paired differences, nan (with ``overflowed``) where one is not finite."""
    overflowed = int((~torch.isfinite(differences)).sum())
    if overflowed:
        return {"n": len(differences), "mean": math.nan, "se": math.nan, "low": math.nan, "high": math.nan,
                "overflowed": overflowed}
    return t_interval(differences.tolist()) | {"overflowed": 0}


@torch.no_grad()
def scaling(model: GPTransformer, task: GPTaskConfig, train: GPTrainConfig = GPTrainConfig(),
            n_functions: int = SCALING_FUNCTIONS, Ts=None) -> dict:
    """On the first ``n_functions`` held-out functions: the RMSE ratio to the GP optimum (per function, then
    mean and standard error over functions) at each test-time T (every CEM layer run with T steps), and, for a
    model with one CEM layer read at the largest T, after each step t = 0 .. T; and at each T the paired
    difference to the trained T with its 95% t-interval (functions - 1 degrees of freedom)."""
    check_int("n_functions", n_functions, 2, train.eval_size)
    Ts = tuple(test_Ts(model) if Ts is None else Ts)
    xs, ys = (t[:n_functions] for t in eval_set(task, train))
    optimum = ((gp_posterior_mean(task, xs, ys) - ys.double()) ** 2).mean(-1).sqrt()
    ratios = {}
    for T in Ts:
        if model.cem_layers():
            with recursion_depth(model, T):
                ratios[T] = per_function_ratio(model, task, xs, ys, optimum)
        else:
            ratios[T] = per_function_ratio(model, task, xs, ys, optimum)
    base = ratios.get(trained_T(model), ratios[Ts[0]])
    out = {"functions": n_functions, "trained_T": trained_T(model), "T": list(Ts),
           "by_T": [_over_functions(ratios[T]) for T in Ts],
           "vs_trained": [_paired_interval(ratios[T] - base) for T in Ts]}
    layers = model.cem_layers()
    if len(layers) == 1:
        (steps,) = read_steps(model, (xs, ys), T_test=max(Ts))
        by_step = [((p.double() - ys.double()) ** 2).mean(-1).sqrt() / optimum for p in steps.outputs]
        out["by_step"] = [_over_functions(r) for r in by_step]
        energy = steps.energies.double()                               # (T+1, F, n)
        out["energy_falls"] = {"trained": bool((energy[1:steps.trained_T + 1] <= energy[:steps.trained_T]).all()),
                               "all": bool((energy[1:] <= energy[:-1]).all()),
                               "share_of_rises": float((energy[1:] > energy[:-1]).double().mean())}
    return out


def scaling_reading(study: dict, T: int) -> str:
    """The 256-function reading of test-time T against the trained T, from ``scaling``'s t-interval."""
    i = study["T"].index(T)
    iv = study["vs_trained"][i]
    if T == study["trained_T"]:
        return f"T = {T} is the trained T."
    if iv.get("overflowed"):
        return (f"At T = {T} the prediction overflows (is not finite) on {iv['overflowed']} of {study['functions']} "
                "held-out functions: the iterates run off, and there is no RMSE ratio to compare.")
    if not all(math.isfinite(iv[k]) for k in ("mean", "low", "high")):
        return f"At T = {T} the interval cannot be computed (fewer than two functions, or values that are not finite)."
    where = ("lower" if iv["high"] < 0 else "higher" if iv["low"] > 0 else None)
    words = (f"{where} than at the trained T = {study['trained_T']}" if where else
             f"no different from the trained T = {study['trained_T']} (the interval holds 0)")
    return (f"Over {study['functions']} held-out functions, the RMSE ratio at T = {T} is {words}: difference "
            f"{iv['mean']:+.4f}, 95% t-interval [{iv['low']:+.4f}, {iv['high']:+.4f}].")
