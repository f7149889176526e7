"""Figure data: the numbers behind the static figures and the app's plots (numpy, no drawing).

Each function takes plain arguments (sizes, seeds, step settings), so the app can cache it,
builds its layer in float64 from a seed without touching the global random state, and returns
numpy arrays in a dict. ``cem_core.ui.energy_plots`` and ``trained_plots`` draw these dicts with
matplotlib for figures/; the app draws the same dicts with Plotly.
"""
from __future__ import annotations

import numpy as np
import torch

from cem_core.experiments.checkpoints import MODELS
from cem_core.experiments.gp.inspect import inspect_function
from cem_core.experiments.gp.trained import GP_MODELS, load_gp_model
from cem_core.experiments.lm.trained import LM_MODELS
from cem_core.experiments.models import test_time
from cem_core.nn.attention import CEMAttention, InteractionTerm
from cem_core.nn.config import AttentionConfig, CEMOptions, MLPConfig, ModelShape, switches
from cem_core.nn.diagonals import DIAGONAL_FORMS
from cem_core.nn.flops import attention_flops, block_flops, mlp_flops, model_flops
from cem_core.nn.model import VARIANT_OPTIONS, ModelConfig
from cem_core.nn.precondition import PRECONDITIONERS, Preconditioner
from cem_core.nn.rope import unrotate


def attention_layer(d_model: int = 16, n_heads: int = 2, cem: CEMOptions = CEMOptions(T=8),
                    weight_scale: float = 1.0, seed: int = 0) -> CEMAttention:
    """A seeded float64 CEM attention layer with these switches, without RoPE; W_Q and W_K scaled by
    weight_scale."""
    config = AttentionConfig(d_model=d_model, n_heads=n_heads, rope=False, **cem.attention_fields())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = CEMAttention(config).double()
    with torch.no_grad():
        layer.q_proj.weight.mul_(weight_scale)
        layer.k_proj.weight.mul_(weight_scale)
    return layer


def descent_input(n_tokens: int, d_model: int, seed: int = 0) -> torch.Tensor:
    """A seeded residual stream h of shape (1, n_tokens, d_model), float64."""
    return torch.randn(1, n_tokens, d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# -- energy descent ------------------------------------------------------------------------------


def energy_descent(T: int = 16, eta: float = 0.5, anchors=(0.0, 1.0), d_model: int = 16, n_heads: int = 2,
                   n_tokens: int = 6, seed: int = 0) -> dict:
    """Per-token energy E(x_i^(t) | c_{1:i}) and radius |x_i^(t)| at t = 0..T, one run per anchor lambda.

    The layers share their weights (one seed); the anchored energy includes (lambda/2)|x - x^(0)|^2.
    Returns {"t": (T+1,), "runs": {lambda: {"energy": (T+1, n), "radius": (T+1, n),
    "update_norm": (T, n)}}}.
    """
    h = descent_input(n_tokens, d_model, seed)
    runs = {}
    for anchor in anchors:
        trace = attention_layer(d_model, n_heads, CEMOptions(T=T, eta=eta, anchor=float(anchor)), seed=seed).trace(h)
        runs[float(anchor)] = {"energy": trace.energies[:, 0].numpy(),
                               "radius": trace.iterates[:, 0].norm(dim=-1).numpy(),   # |x_i^(t)|
                               "update_norm": trace.update_norms[:, 0].numpy()}
    return {"t": np.arange(T + 1), "runs": runs}


# -- energy landscape ----------------------------------------------------------------------------


def _plane(path: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(origin, orthonormal basis (2, d)) of the plane the landscape is drawn on.

    Width 2: the true plane (origin 0, the coordinate axes). Otherwise the plane through x^(0)
    spanned by the first two update directions (Gram-Schmidt), falling back on coordinate axes
    where they are (nearly) parallel.
    """
    d = path.shape[1]
    if d == 2:
        return torch.zeros(2, dtype=path.dtype), torch.eye(2, dtype=path.dtype)
    candidates = torch.cat((path[1:3] - path[:2], torch.eye(d, dtype=path.dtype)))
    basis: list[torch.Tensor] = []
    for v in candidates:
        r = v - sum(((v @ e) * e for e in basis), torch.zeros_like(v))  # remove the components along the basis
        if r.norm() > 1e-6 * v.norm():
            basis.append(r / r.norm())
        if len(basis) == 2:
            break
    return path[0], torch.stack(basis)


def key_tips(layer: CEMAttention, h: torch.Tensor, token: int) -> torch.Tensor:
    """x^(0) + eta P v^k_j for every head k and key j <= token, shape (H, token+1, d).

    v^k_j is what the first step adds if head k puts all its weight on key j:
    W_Q,k^T R_i^T R_j W_K,k c_j (+ d_k * c_j with D+LR, + d_k * (c_j - x^(0)) in distance form), i.e. A_k c_j
    without RoPE. With one head the first step lands in the convex hull of these points. A joint block's
    tips show its attention term only (they leave its MLP term out)."""
    c = layer.norm(h)
    ctx = layer._interaction_context(c)                                # the keys (attention or a joint block)
    H, dh, d = layer.n_heads, layer.head_dim, layer.config.d_model
    keys = ctx.keys[0, :, : token + 1, :dh]                            # R_j W_K,k c_j
    if layer.config.rope:
        keys = unrotate(keys, ctx.cos[token], ctx.sin[token])          # R_i^T R_j W_K,k c_j
    v = torch.einsum("hjc,hcd->hjd", keys, layer.q_proj.weight.view(H, dh, d))  # W_Q,k^T (...)
    diag = layer.diagonal_matrix()
    if diag is not None:
        v = v + diag[:, None, :] * c[0, None, : token + 1]             # + d_k * c_j
    if DIAGONAL_FORMS[layer.config.diagonal_form].centred:
        v = v - diag[:, None, :] * c[0, token]                         # - d_k * x^(0): the pull of -(1/2)|x - c|_D^2
    return c[0, token] + layer.step_size_values()[0] * layer.preconditioner(v)   # x^(0) + eta P v


@torch.no_grad()
def landscape(layer, h: torch.Tensor, token: int, path: torch.Tensor, grid: int) -> dict:
    """One token's energy on the plane of its trajectory ``path`` (T+1, d) (see ``_plane``), with
    the key points for attention layers.

    Plane coordinates (a, b) stand for x = origin + a basis[0] + b basis[1]; ``energy[k, l]`` is the
    energy at (a[l], b[k]). ``trajectory`` holds x^(0..T) in plane coordinates and ``off_plane``
    each iterate's distance from the plane (0 for width 2). ``key_tips`` (H, i+1, 2) are the
    points of ``key_tips`` in plane coordinates (None for an MLP)."""
    origin, basis = _plane(path)
    trajectory = (path - origin) @ basis.T
    tips = (key_tips(layer, h, token) - origin) @ basis.T if isinstance(layer, InteractionTerm) else None
    everything = trajectory if tips is None else torch.cat((trajectory, tips.reshape(-1, 2)))
    lo, hi = everything.min(0).values, everything.max(0).values
    pad = 0.15 * float((hi - lo).max()) + 0.1
    a = torch.linspace(float(lo[0]) - pad, float(hi[0]) + pad, grid, dtype=torch.float64)
    b = torch.linspace(float(lo[1]) - pad, float(hi[1]) + pad, grid, dtype=torch.float64)
    B, A = torch.meshgrid(b, a, indexing="ij")
    points = origin + A.reshape(-1, 1) * basis[0] + B.reshape(-1, 1) * basis[1]   # x = origin + a e1 + b e2
    energy = layer.energy_at(points, h, token).reshape(grid, grid)
    return {"a": a.numpy(), "b": b.numpy(), "energy": energy.numpy(), "trajectory": trajectory.numpy(),
            "origin": origin.numpy(), "basis": basis.numpy(),
            "off_plane": (path - origin - trajectory @ basis).norm(dim=-1).numpy(),
            "key_tips": None if tips is None else tips.numpy(), "true_plane": path.shape[1] == 2}


def energy_landscape(d_model: int = 2, n_heads: int = 1, T: int = 6, eta: float = 0.5, anchor: float = 0.0,
                     n_tokens: int = 5, token: int = -1, weight_scale: float = 3.0, grid: int = 61,
                     seed: int = 0) -> dict:
    """The landscape (see ``landscape``) of one token of a seeded attention layer (P = I, no RoPE),
    with its descent trajectory and key tips x^(0) + eta A_k c_j."""
    layer = attention_layer(d_model, n_heads, CEMOptions(T=T, eta=eta, anchor=anchor), weight_scale=weight_scale,
                            seed=seed)
    h = descent_input(n_tokens, d_model, seed)
    i = token % n_tokens
    path = layer.trace(h).iterates[:, 0, i]                            # x_i^(t), (T+1, d)
    return landscape(layer, h, i, path, grid) | {"token": i, "d_model": d_model, "eta": eta}


# -- preconditioner spectra ----------------------------------------------------------------------


def preconditioner_spectra(d_model: int = 16, rank: int = 4, init_scale: float = 2.0, seed: int = 0) -> dict:
    """Sorted eigenvalues of P for every registered form but the identity (the paper's "dlr", ours "psd"), random
    factors.

    Each has softplus(p) = 1 (D = I) and factor entries N(0, init_scale / d): the paper's
    U V^T + V U^T has eigenvalues of both signs, so P can be indefinite; U U^T is psd, so ours
    has every eigenvalue >= 1.
    """
    spectra = {}
    for kind in (name for name, form in PRECONDITIONERS.items() if not form.identity):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            P = Preconditioner(d_model, kind, rank, init_scale).double()
        with torch.no_grad():
            spectra[kind] = np.linalg.eigvalsh(P.matrix().numpy())
    return spectra


# -- parameter counts ----------------------------------------------------------------------------

COUNT_VARIANTS = {                         # label: (variant, its switches; None = the variant's own)
    "llama": ("llama", None),
    "cem-attn": ("cem-attn", None),
    "cem-mlp": ("cem-mlp", None),
    "cem-full": ("cem-full", None),
    "cem-full, shared diag, psd P": ("cem-full", CEMOptions(T=2, diagonal="shared", preconditioner="psd")),
}
PART_GROUPS = ("embedding", "attention", "mlp", "other")


def _group(part: str) -> str:
    if part == "embedding":
        return part
    return part.split(".")[0] if "." in part else "other"


def parameter_counts(d_model: int = 768, n_layers: int = 12, n_heads: int = 12, d_ff: int = 2048,
                     vocab_size: int = 32000) -> dict:
    """Closed-form parameter counts per variant, grouped into embedding, attention, mlp and other
    (norms, and the LM head when it is not tied to the embedding). Returns {"variants": [...],
    "parts": {group: [...]}, "total": [...]}."""
    sizes = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=d_ff, vocab_size=vocab_size)
    parts = {g: [] for g in PART_GROUPS}
    totals = []
    for variant, cem in COUNT_VARIANTS.values():
        counts = ModelConfig.variant(variant, cem=cem, **sizes).param_counts()
        for g in PART_GROUPS:
            parts[g].append(sum(v for k, v in counts.items() if k != "total" and _group(k) == g))
        totals.append(counts["total"])
    return {"variants": list(COUNT_VARIANTS), "parts": {g: np.array(v) for g, v in parts.items()},
            "total": np.array(totals)}


def variant_table(configs: dict, cache_dtype: torch.dtype = torch.bfloat16) -> list[dict]:
    """One row per variant (configs: name -> ModelConfig, with "llama" among them): parameters by part,
    the ratios of the projections to Llama's, and the KV cache per generated token in `cache_dtype`.
    The command line's `info` and the app's design page both show this table."""
    base = configs["llama"].param_counts()
    base_cache = configs["llama"].cache_bytes_per_token(cache_dtype)
    rows = []
    for name, config in configs.items():
        c, cache = config.param_counts(), config.cache_bytes_per_token(cache_dtype)
        rows.append({"variant": name, "attn proj": c["attention.projections"],
                     "attn x llama": c["attention.projections"] / base["attention.projections"],
                     "attn diag": c["attention.diagonal"], "attn precond": c["attention.preconditioner"],
                     "mlp proj": c["mlp.projections"], "mlp x llama": c["mlp.projections"] / base["mlp.projections"],
                     "mlp precond": c["mlp.preconditioner"], "block precond": c["block.preconditioner"],
                     "total": c["total"], "KV bytes/token": cache, "KV x llama": cache / base_cache})
    return rows


PARAMETER_COLUMNS = ("variant", "attn proj", "attn diag", "attn precond", "mlp proj", "mlp precond", "block precond",
                     "total")
RATIO_COLUMNS = ("variant", "attn x llama", "mlp x llama", "KV bytes/token", "KV x llama")


def variant_tables(rows: list[dict], cache_dtype: str = "bf16") -> tuple[list[dict], list[dict]]:
    """`variant_table`'s rows as the design page shows them: two tables narrow enough to be whole in a 1280 px
    window (one of twelve columns was cut there), the parameters by part and their total, then the ratios to
    Llama and the KV cache; counts with thousands separators, ratios to three decimals."""
    def cell(value):
        return f"{value:.3f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else value

    kv = f"KV bytes/token ({cache_dtype})"
    return ([{k: cell(r[k]) for k in PARAMETER_COLUMNS} for r in rows],
            [{(kv if k == "KV bytes/token" else k): cell(r[k]) for k in RATIO_COLUMNS} for r in rows])


def switches_text(cem: CEMOptions) -> str:
    """The CEM switches that differ from CEMOptions' defaults, as "T = 2, diagonal shared" ("none" when none does)."""
    changed = [f"{f.name} {'= ' if f.name == 'T' else ''}{getattr(cem, f.name)}" for f in switches()
               if getattr(cem, f.name) != f.default or (f.name == "rank" and cem.preconditioner != "none")]
    return ", ".join(changed) or "none"


def info_comparison(configs: dict, cache_dtype: torch.dtype = torch.bfloat16) -> str:
    """How the design page's table at its defaults, `configs` (name -> ModelConfig, every variant with the page's
    CEM switches), relates to the command line's ``info`` table (``make info``) at the same sizes, where each
    variant has its own switches (VARIANT_OPTIONS): the sizes, both switch sets, and each total and KV cache that
    differs."""
    llama = configs["llama"]
    own = {name: ModelConfig.variant(name, shape=ModelShape(**llama.shape_fields()), vocab_size=llama.vocab_size,
                                     max_seq_len=llama.max_seq_len) for name in configs}
    here = {r["variant"]: r for r in variant_table(configs, cache_dtype)}
    there = {r["variant"]: r for r in variant_table(own, cache_dtype)}
    cem = [name for name in configs if name != "llama"]
    page_switches = {switches_text(configs[name].cem) for name in cem}
    differences = [f"{name} {here[name]['total']:,} here, {there[name]['total']:,} there"
                   for name in cem if here[name]["total"] != there[name]["total"]]
    caches = [f"{name}'s KV cache is {here[name]['KV x llama']:.2f}× Llama's here, {there[name]['KV x llama']:.2f}× "
              "there" for name in cem if here[name]["KV x llama"] != there[name]["KV x llama"]]
    return (f"The page's defaults: d_model {llama.d_model}, {llama.n_layers} layers, {llama.n_heads} heads, "
            f"d_ff {llama.d_ff}, vocabulary {llama.vocab_size:,}; `make info` (the parameter table of "
            "docs/parameters.md) uses the same sizes. "
            "Here every CEM variant takes the sidebar's CEM switches (by default "
            + "; ".join(sorted(page_switches)) + "); `make info` gives each variant its own ("
            + "; ".join(f"{name}: {switches_text(VARIANT_OPTIONS[name])}" for name in cem) + "). "
            + (("So at the defaults the totals differ: " + "; ".join(differences) + ". ") if differences else
               "The totals are the same. ")
            + ("And " + "; ".join(caches) + " (D+LR caches the normalized inputs too)." if caches else ""))


def flops_per_token(configs: dict, n: int) -> dict:
    """Forward matmul FLOPs per token at sequence length n, by part: {variant: {"attention", "MLP", "LM head"}}.
    A joint block's MLP part is its MLP term's projections; the rest (attention's, P on the summed gradient)
    counts as attention."""
    out = {}
    for name, config in configs.items():
        if config.joint:
            block = config.block_config()
            m = mlp_flops(MLPConfig(d_model=block.d_model, d_ff=block.d_ff, T=block.T), n)["total"]
            a = block_flops(block, n)["total"] - m
        else:
            a = attention_flops(config.attention_config(), n)["total"]
            m = mlp_flops(config.mlp_config(), n)["total"]
        out[name] = {"attention": config.n_layers * a / n, "MLP": config.n_layers * m / n,
                     "LM head": model_flops(config, n)["head"] / n}
    return out


# -- a worked example of one attention step ------------------------------------------------------


def worked_example(w_q, w_k, history, token: int = -1, beta: float | None = None) -> dict:
    """One head of one CEM attention step (T = 1, eta = 1, P = I, no RoPE), by hand in float64 numpy.

    ``w_q``, ``w_k``: W_Q, W_K (d_h, d); ``history``: the rows c_1..c_n (n, d). Token i = ``token`` has
    x = c_i and sees c_1..c_i; ``beta`` defaults to 1/sqrt(d_h). Returns the history c_j (i, d), x (d,),
    the keys kappa_j = W_K c_j (i, d_h), the query q = W_Q x (d_h,), the scores s_j (i,), the weights
    a_j (i,), the readouts v_j = W_Q^T kappa_j (i, d), what the step adds if a_j = 1, the update
    u = sum_j a_j v_j = -grad_x E (d,) and x + u (d,), with beta."""
    w_q, w_k = np.asarray(w_q, dtype=float), np.asarray(w_k, dtype=float)
    history = np.asarray(history, dtype=float)
    i = token % len(history)
    c = history[: i + 1]                                               # c_1..c_i
    x = c[i]                                                           # x = x^(0) = c_i
    beta = 1 / np.sqrt(w_q.shape[0]) if beta is None else float(beta)
    keys = c @ w_k.T                                                   # kappa_j = W_K c_j
    query = w_q @ x                                                    # q = W_Q x
    scores = keys @ query                                              # s_j = q^T kappa_j
    logits = beta * scores - (beta * scores).max()                     # beta s_j, shifted (softmax is unchanged)
    weights = np.exp(logits) / np.exp(logits).sum()                    # a_j = softmax_j(beta s_j)
    readouts = keys @ w_q                                              # v_j = W_Q^T kappa_j
    update = weights @ readouts                                        # u = sum_j a_j v_j = -grad_x E
    tips = x + readouts                                                # x + v_j: where the step lands if a_j = 1
    return {"history": c, "x": x, "keys": keys, "query": query, "scores": scores, "weights": weights,
            "readouts": readouts, "update": update, "x_new": x + update, "beta": beta, "tips": tips,
            "hull": _convex_hull(tips) if tips.shape[1] == 2 else None}


def _convex_hull(points: np.ndarray) -> np.ndarray:
    """The convex hull of 2-d points (n, 2) as its vertices in counter-clockwise order (monotone chain)."""
    def turn(o, a, b) -> float:                                        # > 0: o -> a -> b turns left
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    def half(ordered):
        chain: list = []
        for p in ordered:
            while len(chain) >= 2 and turn(chain[-2], chain[-1], p) <= 0:
                chain.pop()                                            # not a left turn: inside the hull
            chain.append(p)
        return chain[:-1]
    ordered = points[np.lexsort((points[:, 1], points[:, 0]))]        # by x, then y
    if len(ordered) < 3:
        return ordered                                                 # a point or a segment
    return np.array(half(ordered) + half(ordered[::-1]))


# -- inside the trained models (models/): figures/trained_*.png and notebook 06 ---------------------------------

STEP_MODELS = ("gp-block-T8", "gp-cem-T8")           # the GP models whose steps the figure plays, side by side
STEP_FUNCTION = dict(seed=7, context=8)              # the function and context it plays them on


def gp_steps_on_function(names=STEP_MODELS, seed: int = STEP_FUNCTION["seed"], context: int = STEP_FUNCTION["context"],
                         root=MODELS, points=None) -> dict:
    """One function of the GP prior, its posterior given the first ``context`` points, and each trained model's
    prediction on the grid after every in-layer step t = 0 .. its trained T (``gp.inspect.inspect_function``;
    a model with one CEM layer: the block or its attention). ``points``: a learner's own context [(x, y), ...]
    instead (no function: seed and truth None)."""
    out = {"models": {}}
    for name in names:
        model, task = load_gp_model(name, root)
        seen = inspect_function(model, task, seed, context, points=points)
        (layer,) = seen["layers"]
        out |= {k: None if seen[k] is None else np.array(seen[k])
                for k in ("grid", "truth", "posterior_mean", "posterior_sd", "context_x", "context_y")}
        seed, context = seen["seed"], seen["context"]
        out["models"][name] = {"title": GP_MODELS[name].title, "T": seen["trained_T"], "layer": layer["name"],
                               "prediction": np.array(layer["prediction"]),
                               "rmse_to_posterior": np.array(layer["rmse_to_posterior"])}
    return out | {"seed": seed, "context": context}


def gp_test_time_curves(names=tuple(GP_MODELS), root=MODELS) -> dict:
    """Each GP model's RMSE ratio to the GP optimum by test-time T (mean and standard error over the held-out
    functions, measured once after training: ``models.test_time``), with its trained T."""
    curves = {}
    for name in names:
        measured = test_time(name, root)
        curves[name] = {"title": GP_MODELS[name].title, "trained_T": measured["trained_T"],
                        "T": np.array(measured["T"]), "mean": np.array([s["mean"] for s in measured["by_T"]]),
                        "se": np.array([s["se"] for s in measured["by_T"]]), "functions": measured["functions"],
                        "overflowed": np.array([s.get("overflowed", 0) for s in measured["by_T"]])}
    return curves


def lm_test_time_curves(names=tuple(LM_MODELS), root=MODELS) -> dict:
    """The language models' test_time.json (``models.test_time``, measured on the prose corpus's validation
    sequences): per CEM layer, the true next token's mean loss with that layer stopped after step t = 0 .. the
    trained T (the others as trained), and each model's validation perplexity by test-time T."""
    out = {"steps": {}, "ppl": {}}
    for name in names:
        measured = test_time(name, root)
        out["steps"][name] = {layer["name"]: np.array(layer["loss"]) for layer in measured.get("by_step", [])}
        out["ppl"][name] = {"title": LM_MODELS[name].title, "trained_T": measured["trained_T"],
                            "T": np.array(measured["T"]), "ppl": np.array(measured["val_ppl"])}
        out["sequences"] = measured["sequences"]
    return out
