"""Side-by-side benchmarks that print ratios measured in one run (docs/design.md#42-layer-targets).

Each row times two sides, interleaved (A, B, A, B, ...) after a warm-up, and prints the medians,
the measured time ratio B/A and the FLOP ratio beside it (cem_core.nn.flops, whose counting
convention is printed with the table). Backward passes start from a fixed random upstream
gradient, so no loss is timed. Rows: the kernels attention is made of (a d x d projection, the
causal core, the shared diagonal's core), whose measured speeds give attention rows a second ideal;
CEM attention at T = 1, 2, 4 vs LlamaAttention; D+LR per head and shared vs no diagonal; CEM gated
MLP at T = 1, 2 vs SwiGLU at equal d_ff; a full block and a 2-layer model of the LM's cem-full vs
llama (tokens/s, forward and forward+backward); the LM's training step at an LM preset's sizes for
every variant vs llama (tokens/s); the fast path vs the autograd reference; activation memory
(bytes saved for backward) and KV-cache bytes per token.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from cem_core.nn.attention import CEMAttention, causal_attention, query_blocks, shared_diagonal_attention
from cem_core.nn.baselines import LlamaAttention, SwiGLU
from cem_core.nn.config import AttentionConfig, LlamaAttentionConfig, MLPConfig, ModelShape, SwiGLUConfig, as_shape
from cem_core.nn.descent import reference_forward
from cem_core.nn.flops import CONVENTION, attention_flops, mlp_flops, model_flops
from cem_core.nn.mlp import CEMGatedMLP
from cem_core.nn.model import VARIANT_OPTIONS, VARIANTS, Block, LanguageModel, ModelConfig
from cem_core.nn.validate import check_choice, check_int

from .lm.step import train_step
from .lm.train_config import TRAIN_PRESETS, LMTrainConfig


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    # d_ff about 8/3 d, Llama's SwiGLU width, rounded to 32; the model rows have n_layers blocks
    shape: ModelShape = ModelShape(d_model=512, n_layers=2, n_heads=8, d_ff=1376)
    seq_len: int = 512
    batch: int = 4
    repeats: int = 7
    warmup: int = 2
    device: str = "cpu"
    dtype: str = "float32"             # "bfloat16" on GPU
    backward: bool = True              # time forward+backward (the targets) or forward only
    compile: bool = False              # torch.compile both sides of every layer, block and model row
    lm_preset: str = "cpu-tiny"        # the LM preset whose training step the LM rows time

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", as_shape(self.shape))
        for name in ("seq_len", "batch", "repeats"):
            check_int(name, getattr(self, name), 1)
        check_int("warmup", self.warmup, 0)
        check_choice("lm_preset", self.lm_preset, tuple(TRAIN_PRESETS))

    @property
    def heads(self) -> dict:
        """The sizes every benchmarked attention takes (d_model, n_heads), from the shape."""
        return dict(d_model=self.shape.d_model, n_heads=self.shape.n_heads)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _runner(module, make_input, backward: bool, device: str):
    """One timed call: forward, and backward from a fixed random upstream gradient (no loss is
    computed, so only the module's own work is timed)."""
    upstream = {}

    def run():
        out = module(make_input())
        if backward:
            if "grad" not in upstream:
                upstream["grad"] = torch.randn_like(out)
            out.backward(upstream["grad"])
        _sync(device)
    return run


def interleaved(a, b, repeats: int, warmup: int) -> tuple[list[float], list[float]]:
    """Times of a and b, alternating so that drift in machine speed hits both sides alike."""
    for _ in range(warmup):
        a()
        b()
    ta, tb = [], []
    for _ in range(repeats):
        for fn, times in ((a, ta), (b, tb)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return ta, tb


def saved_bytes(module, x) -> int:
    """Bytes autograd holds for backward after one forward pass (activation memory): each storage
    once, however many ops save it or views of it (the input and parameters included)."""
    storages = {}

    def pack(t):
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    return sum(storages.values())


def _prepared(module: nn.Module, c: BenchConfig) -> nn.Module:
    """On the benchmark's device and dtype, compiled when asked (``eager`` reaches the module itself)."""
    module = module.to(device=c.device, dtype=getattr(torch, c.dtype))
    return torch.compile(module) if c.compile else module


def eager(module: nn.Module) -> nn.Module:
    return getattr(module, "_orig_mod", module)


def _layer(cls, cfg, c: BenchConfig):
    """A layer as a model runs it: input validation off (the model validates token ids instead)."""
    torch.manual_seed(0)
    layer = cls(cfg)
    layer.check_inputs = False
    return _prepared(layer, c)


def _row(name, a_name, b_name, ta, tb, flop_ratio, extra=None) -> dict:
    ma, mb = statistics.median(ta), statistics.median(tb)
    record = {"name": name, "a": a_name, "b": b_name, "time_a_ms": 1000 * ma, "time_b_ms": 1000 * mb,
              "time_ratio": mb / ma, "flop_ratio": flop_ratio,
              "vs_flops": (mb / ma) / flop_ratio if flop_ratio else None}
    return record | (extra or {})


PROJECTION = "attention core (causal) vs one d x d projection"
SHARED_CORE = "shared-diagonal core vs causal core"


def kernel_rows(c: BenchConfig) -> list[dict]:
    """The kernels an attention layer is made of, timed at the layer's sizes: one d x d projection
    (nn.Linear over batch x n tokens), the causal attention core (the layers' own ``causal_attention``
    call), the same core without the mask, and the shared diagonal's core (``shared_diagonal_attention``
    with its bias and head-summed readout, in the blocks the layer uses). How fast they run here, per
    FLOP, decides how close a layer can come to its FLOP ratio (see ``kernel_time``)."""
    dtype, d, n, H = getattr(torch, c.dtype), c.shape.d_model, c.seq_len, c.shape.n_heads
    torch.manual_seed(0)
    projection = nn.Linear(d, d, bias=False).to(device=c.device, dtype=dtype)
    x = torch.randn(c.batch, n, d, device=c.device, dtype=dtype)
    qkv = [torch.randn(c.batch, n, H, d // H, device=c.device, dtype=dtype).transpose(1, 2) for _ in range(3)]
    scale = (d // H) ** -0.5
    blocks = query_blocks(n, n, H, d // H, d)

    def make_x():
        return x.detach().requires_grad_(c.backward)

    def make_qkv():
        return [t.detach().requires_grad_(c.backward) for t in qkv]

    def causal(t):
        return causal_attention(*t, scale)[0]

    def no_mask(t):
        return F.scaled_dot_product_attention(*t, scale=scale)

    def make_shared():
        return make_qkv()[:2] + [make_x(), make_x()]                   # q, keys, d * x, c

    def shared(t):
        o, summed, _ = shared_diagonal_attention(*t, scale, *blocks)
        return torch.cat((o.flatten(), summed.flatten()))

    def timed(a, make_a, b, make_b):
        return interleaved(_runner(a, make_a, c.backward, c.device), _runner(b, make_b, c.backward, c.device),
                           c.repeats, c.warmup)

    tp, tc = timed(projection, make_x, causal, make_qkv)
    tf, tc2 = timed(no_mask, make_qkv, causal, make_qkv)
    tc3, ts = timed(causal, make_qkv, shared, make_shared)
    projection_flops, core_flops = 2 * n * d * d, 2 * (2 * n * n * d) / 2             # W x; q k^T and a v, causal half
    return [_row(PROJECTION, "projection", "core", tp, tc, core_flops / projection_flops),
            _row("attention core: causal vs no mask", "no mask", "causal", tf, tc2, 0.5),
            _row(SHARED_CORE, "causal core", "shared core", tc3, ts, 2.0)]


def kernel_time(kernels: list[dict], cfg: AttentionConfig | LlamaAttentionConfig, c: BenchConfig) -> float:
    """Milliseconds an attention layer would take if it cost only its projections and attention cores,
    each at the speed measured for it here: its d x d projections (``attention_flops``, query space and
    the batch-shared M included) at the projection's time, and its cores at the causal core's time (the
    shared diagonal's at that core's own). Llama: 4 p + c; CEM at T steps: (1 + 2T) p + T c in x space,
    (T + 2) p + T c in query space."""
    diagonal = getattr(cfg, "diagonal", "none")
    if diagonal == "per_head":
        raise ValueError("no kernel row times the per-head diagonal's core (flash at head width d_h + d)")
    rows = {r["name"]: r for r in kernels}
    projection = rows[PROJECTION]["time_a_ms"]
    core = rows[SHARED_CORE if diagonal == "shared" else PROJECTION]["time_b_ms"]
    n, d = c.seq_len, c.shape.d_model
    projections = attention_flops(cfg, n, c.batch)["projections"] / (2 * n * d * d)
    return projections * projection + getattr(cfg, "T", 1) * core


def layer_rows(c: BenchConfig, kernels: list[dict]) -> list[dict]:
    """CEM attention at T = 1, 2, 4 vs Llama, D+LR vs none, the distance form vs the bilinear, CEM MLP at
    T = 1, 2 vs SwiGLU. Attention rows
    built from measured kernels carry the ratio of their ``kernel_time``s (the per-head diagonal's wide
    flash core has no kernel row, so no such ideal)."""
    dtype = getattr(torch, c.dtype)
    h = torch.randn(c.batch, c.seq_len, c.shape.d_model, device=c.device, dtype=dtype)
    make = (lambda: h.detach().requires_grad_(True)) if c.backward else (lambda: h)
    rows = []

    def compare(name, a_cls, a_cfg, b_cls, b_cfg, flops_fn, kernel_ideal=False):
        a, b = _layer(a_cls, a_cfg, c), _layer(b_cls, b_cfg, c)
        ta, tb = interleaved(_runner(a, make, c.backward, c.device), _runner(b, make, c.backward, c.device),
                             c.repeats, c.warmup)
        fa, fb = (flops_fn(cfg, c.seq_len, c.batch)["total"] for cfg in (a_cfg, b_cfg))
        extra = {"saved_bytes_a": saved_bytes(eager(a), make()), "saved_bytes_b": saved_bytes(eager(b), make())}
        if kernel_ideal:
            extra["kernel_ratio"] = kernel_time(kernels, b_cfg, c) / kernel_time(kernels, a_cfg, c)
        rows.append(_row(name, a_cls.__name__, b_cls.__name__, ta, tb, fb / fa, extra))

    llama = LlamaAttentionConfig(**c.heads)
    for T in (1, 2, 4):
        cfg = AttentionConfig(**c.heads, T=T)
        space = ", query space" if cfg.query_space else ""
        compare(f"CEM attention T={T}{space} vs Llama attention", LlamaAttention, llama, CEMAttention, cfg,
                attention_flops, kernel_ideal=True)
    plain = AttentionConfig(**c.heads)
    for diagonal in ("per_head", "shared"):
        compare(f"D+LR {diagonal} vs no diagonal (CEM attention, T=1)", CEMAttention, plain, CEMAttention,
                AttentionConfig(**c.heads, diagonal=diagonal), attention_flops,
                kernel_ideal=diagonal == "shared")
    shared = AttentionConfig(**c.heads, diagonal="shared")
    compare("D+LR shared: distance vs bilinear form (CEM attention, T=1)", CEMAttention, shared, CEMAttention,
            replace(shared, diagonal_form="distance"), attention_flops)
    gated = dict(d_model=c.shape.d_model, d_ff=c.shape.d_ff, activation=c.shape.activation)
    swiglu, cem_mlp = SwiGLUConfig(**gated), MLPConfig(**gated)
    for T in (1, 2):
        compare(f"CEM gated MLP T={T} vs SwiGLU", SwiGLU, swiglu, CEMGatedMLP,
                replace(cem_mlp, T=T), lambda cfg, n, batch: mlp_flops(cfg, n))
    return rows


_full = VARIANT_OPTIONS["cem-full"]
FULL = f"cem-full (T={_full.T}, {_full.diagonal} diag, {_full.preconditioner} P)"   # the LM's variant, as it trains


def model_rows(c: BenchConfig) -> list[dict]:
    """A full block and a full model: llama vs the paper's fully CEM transformer (the LM's cem-full), and
    cem-full's block as one energy (joint descent on E_att + E_mlp) vs as it is, tokens/s forward and
    forward+backward."""
    dtype = getattr(torch, c.dtype)
    sizes = dict(shape=c.shape, vocab_size=257, max_seq_len=c.seq_len)
    configs = (ModelConfig.variant("llama", **sizes), ModelConfig.variant("cem-full", **sizes))   # the paper's
    joint = ModelConfig.variant("cem-full", cem=replace(_full, block="joint"), **sizes)
    rows = []

    def throughput(ta, tb):
        tokens = c.batch * c.seq_len
        return {"tokens_per_s_a": tokens / statistics.median(ta), "tokens_per_s_b": tokens / statistics.median(tb)}

    for backward in (False, True):
        mode = "forward+backward" if backward else "forward"
        torch.manual_seed(0)
        blocks = [Block(cfg) for cfg in configs]
        for block in blocks:                       # as in a model: the model validates its input once
            block.skip_input_checks()
        blocks = [_prepared(block, c) for block in blocks]
        h = torch.randn(c.batch, c.seq_len, c.shape.d_model, device=c.device, dtype=dtype)
        make = (lambda: h.detach().requires_grad_(True)) if backward else (lambda: h)
        ta, tb = interleaved(*(_runner(b, make, backward, c.device) for b in blocks), c.repeats, c.warmup)
        flops = [model_flops(cfg, c.seq_len, c.batch) for cfg in configs]
        rows.append(_row(f"block ({mode}), {FULL} vs llama", "llama", "cem-full", ta, tb,
                         flops[1]["block"] / flops[0]["block"], throughput(ta, tb)))
        torch.manual_seed(0)
        pair = [Block(configs[1]), Block(joint)]
        for block in pair:
            block.skip_input_checks()
        pair = [_prepared(block, c) for block in pair]
        tj, ts = interleaved(*(_runner(b, make, backward, c.device) for b in pair), c.repeats, c.warmup)
        rows.append(_row(f"block ({mode}), cem-full as one energy (joint) vs as it is", "cem-full", "joint", tj, ts,
                         model_flops(joint, c.seq_len, c.batch)["block"] / flops[1]["block"], throughput(tj, ts)))
        torch.manual_seed(0)
        models = [_prepared(LanguageModel(cfg), c) for cfg in configs]
        idx = torch.randint(0, 257, (c.batch, c.seq_len), device=c.device)
        ta, tb = interleaved(*(_runner(m, lambda: idx, backward, c.device) for m in models), c.repeats, c.warmup)
        rows.append(_row(f"model, 2 layers ({mode}), {FULL} vs llama", "llama", "cem-full", ta, tb,
                         flops[1]["total"] / flops[0]["total"], throughput(ta, tb)))
    return rows


def lm_rows(c: BenchConfig) -> list[dict]:
    """The language model's training step at the LM preset's sizes (``BenchConfig.lm_preset``, byte
    vocabulary): the trainer's own ``train_step`` (forward, cross-entropy, backward, clipping, AdamW) for
    every variant as it trains vs llama, in tokens/s."""
    preset = LMTrainConfig.from_preset(c.lm_preset)
    tokens, bf16 = preset.batch_size * preset.seq_len, c.dtype == "bfloat16"
    dtype = torch.float32 if bf16 else getattr(torch, c.dtype)         # as the trainer: bfloat16 by autocast
    autocast = partial(torch.autocast, torch.device(c.device).type, dtype=torch.bfloat16, enabled=bf16)
    batch = torch.randint(0, 257, (preset.batch_size, preset.seq_len + 1), device=c.device)
    steps, configs = {}, {}
    for variant in VARIANTS:
        configs[variant] = replace(preset, variant=variant).model_config(vocab_size=257)
        torch.manual_seed(0)
        model = LanguageModel(configs[variant]).to(device=c.device, dtype=dtype)
        optimizer = preset.optim.optimizer(model)
        net = torch.compile(model) if c.compile else model
        steps[variant] = partial(train_step, net, model, optimizer, batch, preset.optim.grad_clip, autocast)
    rows = []
    for variant in VARIANTS:
        if variant == "llama":
            continue
        ta, tb = interleaved(steps["llama"], steps[variant], c.repeats, c.warmup)
        flops = [model_flops(configs[v], preset.seq_len, preset.batch_size)["total"] for v in ("llama", variant)]
        label = FULL if variant == "cem-full" else variant
        rows.append(_row(f"LM train step at {c.lm_preset}, {label} vs llama", "llama", variant, ta, tb,
                         flops[1] / flops[0], {"tokens_per_s_a": tokens / statistics.median(ta),
                                               "tokens_per_s_b": tokens / statistics.median(tb)}))
    return rows


def reference_row(c: BenchConfig) -> dict:
    """The fast path vs T autograd steps on the energy (the reference), CEM attention T = 2."""
    cfg = AttentionConfig(**c.heads, T=2)
    layer = _layer(CEMAttention, cfg, c)
    reference_layer = eager(layer)
    h = torch.randn(c.batch, c.seq_len, c.shape.d_model, device=c.device, dtype=getattr(torch, c.dtype))

    def fast():
        with torch.no_grad():
            layer(h)
        _sync(c.device)

    def reference():
        reference_forward(reference_layer, h)
        _sync(c.device)

    ta, tb = interleaved(fast, reference, c.repeats, c.warmup)
    return _row("autograd reference vs fast path (CEM attention T=2, forward)", "fast", "reference", ta, tb, None)


def cache_rows(c: BenchConfig) -> list[dict]:
    bytes_ = {name: cfg.cache_floats_per_token() * torch.finfo(getattr(torch, c.dtype)).bits // 8 for name, cfg in (
        ("llama", LlamaAttentionConfig(**c.heads)),
        ("cem", AttentionConfig(**c.heads)),
        ("cem D+LR", AttentionConfig(**c.heads, diagonal="shared")))}
    return [{"name": f"KV cache bytes/token/layer, {name} vs llama", "kv_bytes_per_token": b,
             "time_ratio": None, "flop_ratio": None, "bytes_ratio": b / bytes_["llama"]} for name, b in bytes_.items()]


def run(c: BenchConfig) -> list[dict]:
    kernels = kernel_rows(c)
    return kernels + layer_rows(c, kernels) + model_rows(c) + lm_rows(c) + [reference_row(c)] + cache_rows(c)


def format_table(records: list[dict], c: BenchConfig) -> str:
    w = max(len(r["name"]) for r in records)                          # the row names' column
    lines = [f"device {c.device}, {c.dtype}, d_model {c.shape.d_model}, heads {c.shape.n_heads}, sequence {c.seq_len}, "
             f"batch {c.batch}, d_ff {c.shape.d_ff}{', torch.compile' if c.compile else ''}; "
             f"{'forward+backward' if c.backward else 'forward'} unless the row says; "
             f"medians of {c.repeats} interleaved repeats",
             f"FLOP convention: {CONVENTION}",
             f"{'row':<{w}} {'A ms':>9} {'B ms':>9} {'time B/A':>9} {'FLOPs B/A':>10} {'time/FLOPs':>10}",
             "-" * (w + 52)]
    for r in records:
        if r["time_ratio"] is None:
            lines.append(f"{r['name']:<{w}} {r['kv_bytes_per_token']:>9,} bytes  ({r['bytes_ratio']:.2f} x llama)")
            continue
        flop = f"{r['flop_ratio']:>10.3f}" if r["flop_ratio"] else f"{'-':>10}"
        vs = f"{r['vs_flops']:>10.3f}" if r["vs_flops"] else f"{'-':>10}"
        lines.append(f"{r['name']:<{w}} {r['time_a_ms']:>9.2f} {r['time_b_ms']:>9.2f} {r['time_ratio']:>9.3f} "
                     f"{flop} {vs}")
        if "kernel_ratio" in r:
            lines.append(f"{'':<{w}} ideal at the measured kernel speeds (projections and cores only): "
                         f"{r['kernel_ratio']:.3f}; time / that ideal {r['time_ratio'] / r['kernel_ratio']:.3f}")
        if "tokens_per_s_a" in r:
            lines.append(f"{'':<{w}} tokens/s: {r['a']} {r['tokens_per_s_a']:,.0f}, "
                         f"{r['b']} {r['tokens_per_s_b']:,.0f}")
        if "saved_bytes_a" in r:
            lines.append(f"{'':<{w}} activation memory: {r['saved_bytes_a'] / 2**20:.1f} MiB vs "
                         f"{r['saved_bytes_b'] / 2**20:.1f} MiB")
    return "\n".join(lines)
