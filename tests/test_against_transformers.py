"""Our baselines equal Hugging Face transformers' Llama layers with copied weights, and one step of a
CEM layer is the HF layer with tied weights.

Everything runs in float64 and is compared to TOL = 1e-6 in the relative sense
max |ours - hf| / max |hf| (the measured gap of the float64-faithful comparisons is <= 4e-16).
The weights are copied here by hand, independently of ``cem_core.nn.hf`` (tested in test_hf.py).

What is compared (cem_core sublayers are pre-norm *with* their residual, so layer(h) - h is the
update that Hugging Face computes without the residual):

* ``LlamaAttention``: layer(h) - h  ==  HF LlamaAttention(RMSNorm(h)), RoPE off, theta = 1e4 and
  theta = 5e5, with HF's own causal mask (``create_causal_mask``) for the "sdpa" and "eager"
  attention functions, and with HF's sdpa ``is_causal`` path (mask None).
* ``CEMAttention`` (T = 1, RoPE off)  ==  HF LlamaAttention with v_proj = k_proj and o_proj = q_proj^T.
  (With RoPE the CEM step rotates its output back at the query position, which Llama does not.)
* ``SwiGLU``: layer(h) - h  ==  HF LlamaMLP(RMSNorm(h)), hidden_act="silu".
* ``CEMGatedMLP`` (T = 1)  ==  HF LlamaMLP with down_proj = (CEM up_proj)^T. CEMGatedMLP uses the
  paper's names, the opposite of HF's: HF gate_proj <- cem up_proj, HF up_proj <- cem gate_proj.
* ``Block`` (llama/llama)  ==  HF LlamaDecoderLayer.

Precision quirks of transformers 5.24.0 (modeling_llama.py) and what this file does about them:

* ``LlamaRMSNorm.forward`` computes in float32 (``hidden_states.to(torch.float32)``) even for float64
  input, which limits it to ~1e-7 relative. The float64 comparisons replace its forward (in the test
  only, through pytest's monkeypatch) with the *same formula* without the float32 round trip;
  ``test_decoder_layer_matches_stock_hf`` also compares against the unpatched, stock HF layer.
* ``LlamaRotaryEmbedding.forward`` computes inv_freq and the angles in float32. The float64
  comparisons build cos/sin with HF's formula in float64; ``test_rotary_embedding_matches_hf``
  checks those tables against HF's module to float32 precision.
* The "eager" attention function takes its softmax in float32 (``softmax(..., dtype=torch.float32)``),
  so the eager comparison is float32-limited (<= 7e-8 measured), still within TOL.
* A standalone HF attention module's config has ``_attn_implementation = None``, which dispatches to
  the *eager* function, and eager with ``attention_mask=None`` is NOT causal. A reference built that
  way would be silently bidirectional; so every attention comparison here sets the implementation
  explicitly and also asserts that the HF reference is causal (perturbing a future token leaves
  earlier outputs unchanged), and ``test_causality_probe_detects_a_bidirectional_reference`` shows
  that probe failing on a non-causal HF reference.
"""
from __future__ import annotations

import pytest
import torch
from llama_reference import (
    ATTN_IMPLS,
    DTYPE,
    EPS,
    ROPES,
    SHAPES,
    TOL,
    assert_causal,
    copy_weights,
    hf_config,
    hf_mask,
    hf_norm,
    inputs,
    position_ids,
    randomize,
    rel_err,
    rmsnorm_forward_fp64,
    rope_tables,
)
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama as hf_llama

from cem_core import (
    AttentionConfig,
    Block,
    CEMAttention,
    CEMGatedMLP,
    CEMOptions,
    LlamaAttention,
    LlamaAttentionConfig,
    MLPConfig,
    ModelConfig,
    SwiGLU,
    SwiGLUConfig,
)

pytestmark = pytest.mark.slow          # imports transformers (3 s)

# ---------------------------------------------------------------------------------------------
# builders: ours (random weights) and the HF reference with the same weights
# ---------------------------------------------------------------------------------------------
# HF LlamaAttention name <- our name. CEM attention has two projections: W_V = W_K, W_O = W_Q^T.
ATTN_MAPS = {
    LlamaAttention: {f"{p}_proj.weight": f"{p}_proj.weight" for p in "qkvo"},
    CEMAttention: {"q_proj.weight": "q_proj.weight", "k_proj.weight": "k_proj.weight",
                   "v_proj.weight": "k_proj.weight", "o_proj.weight": "q_proj.weight^T"},
}
ATTN_CONFIGS = {LlamaAttention: LlamaAttentionConfig, CEMAttention: AttentionConfig}


def make_attention(cls, d: int, H: int, rope_base: float | None, seed: int):
    cfg = ATTN_CONFIGS[cls](d_model=d, n_heads=H, rope=rope_base is not None, rope_base=rope_base or 10000.0)
    return randomize(cls(cfg).to(DTYPE), seed)


def projections(ours, mapping: dict[str, str]) -> nn.ModuleDict:
    """The projections of ours that the mapping reads (all of its parameters but the norm)."""
    names = {name.removesuffix(".weight^T").removesuffix(".weight") for name in mapping.values()}
    assert {name for name, _ in ours.named_parameters()} == {"norm.weight", *(f"{n}.weight" for n in names)}
    return nn.ModuleDict({name: getattr(ours, name) for name in names})


def hf_attention(ours, cfg: LlamaConfig):
    """HF LlamaAttention with our q/k/v/o weights (our norm goes to a separate HF LlamaRMSNorm)."""
    hf = hf_llama.LlamaAttention(cfg, layer_idx=0).to(DTYPE)
    mapping = ATTN_MAPS[type(ours)]
    return copy_weights(hf, projections(ours, mapping), mapping).eval()


def hf_attention_fn(hf, norm, cfg: LlamaConfig, rope: bool, materialize: bool):
    """h -> LlamaAttention(RMSNorm(h)) with HF's mask and (cos, sin)."""
    def fn(h):
        cos, sin = rope_tables(cfg, h.shape[1], rope)
        out, _ = hf(norm(h), position_embeddings=(cos, sin), attention_mask=hf_mask(cfg, h, materialize))
        return out
    return fn


# ---------------------------------------------------------------------------------------------
# 1. attention
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", ATTN_IMPLS)
@pytest.mark.parametrize("cls, rope_base", [pytest.param(LlamaAttention, *r.values, id=f"llama-{r.id}") for r in ROPES]
                         + [pytest.param(CEMAttention, None, id="cem-norope")])
@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_attention_matches_hf(shape, cls, rope_base, impl, hf_fp64_norm):
    d, H, n, B, f, seed = shape
    attn_impl, materialize = impl
    ours = make_attention(cls, d, H, rope_base, seed)
    cfg = hf_config(d, H, f, rope_base, attn_impl)
    ref_fn = hf_attention_fn(hf_attention(ours, cfg), hf_norm(ours.norm.weight), cfg, rope_base is not None,
                             materialize)
    h = inputs(B, n, d, seed)

    assert_causal(ref_fn, h)                     # the reference really is causal
    ref = ref_fn(h)
    err = rel_err(ours(h) - h, ref)
    assert err <= TOL, f"attention differs from HF by {err:.3e} (relative)"


# ---------------------------------------------------------------------------------------------
# 2. gated MLP
# ---------------------------------------------------------------------------------------------
# HF LlamaMLP name <- our name. SwiGLU uses HF's names; CEMGatedMLP the paper's (swapped), and it has no
# down projection: HF's down_proj is its up_proj transposed (U^T).
MLP_MAPS = {
    SwiGLU: {"gate_proj.weight": "gate_proj.weight", "up_proj.weight": "up_proj.weight",
             "down_proj.weight": "down_proj.weight"},
    CEMGatedMLP: {"gate_proj.weight": "up_proj.weight", "up_proj.weight": "gate_proj.weight",
                  "down_proj.weight": "up_proj.weight^T"},
}
# copying a CEM MLP by name, the trap its naming sets
SAME_NAMES = {"gate_proj.weight": "gate_proj.weight", "up_proj.weight": "up_proj.weight",
              "down_proj.weight": "up_proj.weight^T"}


def make_mlp(cls, d: int, f: int, seed: int):
    cfg = SwiGLUConfig(d_model=d, d_ff=f) if cls is SwiGLU else MLPConfig(d_model=d, d_ff=f)
    return randomize(cls(cfg).to(DTYPE), seed)


def hf_mlp(ours, cfg: LlamaConfig, mapping: dict[str, str]):
    hf = hf_llama.LlamaMLP(cfg).to(DTYPE)
    return copy_weights(hf, projections(ours, mapping), mapping).eval()


@pytest.mark.parametrize("cls", [SwiGLU, CEMGatedMLP])
@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_mlp_matches_hf(shape, cls, hf_fp64_norm):
    d, H, n, B, f, seed = shape
    ours = make_mlp(cls, d, f, seed)
    cfg = hf_config(d, H, f, None)
    hf = hf_mlp(ours, cfg, MLP_MAPS[cls])
    h = inputs(B, n, d, seed)
    ref = hf(hf_norm(ours.norm.weight)(h))
    err = rel_err(ours(h) - h, ref)
    assert err <= TOL, f"{cls.__name__} differs from HF LlamaMLP by {err:.3e} (relative)"


# ---------------------------------------------------------------------------------------------
# 3. decoder block
# ---------------------------------------------------------------------------------------------
BLOCK_MAP = {
    "input_layernorm.weight": "attn.norm.weight",
    "post_attention_layernorm.weight": "mlp.norm.weight",
    **{f"self_attn.{k}": f"attn.{v}" for k, v in ATTN_MAPS[LlamaAttention].items()},
    **{f"mlp.{k}": f"mlp.{v}" for k, v in MLP_MAPS[SwiGLU].items()},
}


def make_block(d: int, H: int, f: int, rope: bool, seed: int) -> Block:
    cfg = ModelConfig(d_model=d, n_heads=H, d_ff=f, attention="llama", mlp="llama", vocab_size=16,
                      n_layers=1, rope=rope)
    assert cfg.norm_eps == EPS
    block = Block(cfg)
    assert isinstance(block.attn, LlamaAttention) and isinstance(block.mlp, SwiGLU)
    return randomize(block.to(DTYPE), seed)


def hf_decoder_fn(block: Block, d: int, H: int, f: int, rope: bool, materialize: bool = True,
                  hf_rotary: bool = False):
    """h -> LlamaDecoderLayer(h), fed as LlamaModel.forward feeds it.

    hf_rotary=True takes (cos, sin) from HF's LlamaRotaryEmbedding module itself (float32 angles).
    """
    cfg = hf_config(d, H, f, 10000.0 if rope else None)
    layer = copy_weights(hf_llama.LlamaDecoderLayer(cfg, layer_idx=0).to(DTYPE), block, BLOCK_MAP).eval()
    rotary = hf_llama.LlamaRotaryEmbedding(cfg)

    def fn(h):
        pos = position_ids(h.shape[1])
        cos_sin = rotary(h, pos) if hf_rotary else rope_tables(cfg, h.shape[1], rope)
        return layer(h, attention_mask=hf_mask(cfg, h, materialize), position_ids=pos,
                     position_embeddings=cos_sin)
    return fn


@pytest.mark.parametrize("materialize", [True, False], ids=["mask", "is_causal"])
@pytest.mark.parametrize("rope", [True, False], ids=["rope", "norope"])
@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_decoder_layer_matches_hf(shape, rope, materialize, hf_fp64_norm):
    d, H, n, B, f, seed = shape
    block = make_block(d, H, f, rope, seed)
    ref_fn = hf_decoder_fn(block, d, H, f, rope, materialize)
    h = inputs(B, n, d, seed)
    assert_causal(ref_fn, h)
    err = rel_err(block(h), ref_fn(h))
    assert err <= TOL, f"Block differs from HF LlamaDecoderLayer by {err:.3e} (relative)"


@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_decoder_layer_matches_stock_hf(shape):
    """The unpatched HF layer (float32 RMSNorm inside, HF's own float32 RoPE tables): equal to
    float32 rounding (~1e-7 measured), so within TOL too."""
    d, H, n, B, f, seed = shape
    block = make_block(d, H, f, True, seed)
    ref_fn = hf_decoder_fn(block, d, H, f, True, materialize=False, hf_rotary=True)
    h = inputs(B, n, d, seed)
    err = rel_err(block(h), ref_fn(h))
    assert err <= TOL, f"Block differs from stock HF LlamaDecoderLayer by {err:.3e} (relative)"


@pytest.mark.parametrize("rope_base", [10000.0, 500000.0])
def test_rotary_embedding_matches_hf(rope_base):
    """The float64 (cos, sin) tables used above are HF's LlamaRotaryEmbedding, up to its float32."""
    cfg = hf_config(32, 4, 40, rope_base)
    n = 50
    cos, sin = hf_llama.LlamaRotaryEmbedding(cfg)(torch.zeros(1, n, 32, dtype=DTYPE), position_ids(n))
    cos64, sin64 = rope_tables(cfg, n, True)
    # float32 angles of size up to ~n rad: absolute error ~n * 6e-8
    torch.testing.assert_close(cos, cos64, rtol=0, atol=1e-5)
    torch.testing.assert_close(sin, sin64, rtol=0, atol=1e-5)


def test_hf_rmsnorm_patch_is_the_same_formula(monkeypatch):
    """The float64 patch changes precision only: stock and patched HF norms agree to float32 rounding,
    and the patched one equals torch.nn.RMSNorm (our norm) to float64 rounding."""
    g = torch.Generator().manual_seed(7)
    h = 3 * torch.randn(4, 5, 24, generator=g, dtype=DTYPE)
    weight = 1 + 0.1 * torch.randn(24, generator=g, dtype=DTYPE)
    ours = nn.RMSNorm(24, eps=EPS).to(DTYPE)
    with torch.no_grad():
        ours.weight.copy_(weight)
        stock = hf_norm(weight)(h)
        monkeypatch.setattr(hf_llama.LlamaRMSNorm, "forward", rmsnorm_forward_fp64)
        patched = hf_norm(weight)(h)
        assert rel_err(stock, patched) < 1e-6
        assert rel_err(ours(h), patched) < 1e-13


# ---------------------------------------------------------------------------------------------
# 4. the comparisons are sensitive
# ---------------------------------------------------------------------------------------------
PERTURBED = ["attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight", "attn.o_proj.weight",
             "attn.norm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
             "mlp.norm.weight"]


@pytest.mark.parametrize("name", PERTURBED)
@torch.no_grad()
def test_perturbing_one_weight_breaks_the_match(name, hf_fp64_norm):
    d, H, n, B, f, seed = SHAPES[0].values[0]
    block = make_block(d, H, f, True, seed)
    ref_fn = hf_decoder_fn(block, d, H, f, True)        # weights copied before the perturbation
    h = inputs(B, n, d, seed)
    assert rel_err(block(h), ref_fn(h)) <= TOL
    p = dict(block.named_parameters())[name]
    g = torch.Generator().manual_seed(99)
    p.add_(1e-3 * p.abs().mean() * torch.randn(p.shape, generator=g, dtype=p.dtype))
    err = rel_err(block(h), ref_fn(h))
    assert err > 10 * TOL, f"perturbing {name} moved the output by only {err:.3e}"


@torch.no_grad()
def test_perturbing_o_proj_breaks_attention_match(hf_fp64_norm):
    d, H, n, B, f, seed = SHAPES[1].values[0]
    ours = make_attention(LlamaAttention, d, H, 10000.0, seed)
    cfg = hf_config(d, H, f, 10000.0)
    ref_fn = hf_attention_fn(hf_attention(ours, cfg), hf_norm(ours.norm.weight), cfg, True, True)
    h = inputs(B, n, d, seed)
    assert rel_err(ours(h) - h, ref_fn(h)) <= TOL
    ours.o_proj.weight[0, 0] += 1e-3
    assert rel_err(ours(h) - h, ref_fn(h)) > 10 * TOL


@torch.no_grad()
def test_cem_mlp_with_hf_names_does_not_match(hf_fp64_norm):
    """Copying CEMGatedMLP by name (its up_proj into HF's up_proj) must fail: the naming swap matters."""
    d, H, n, B, f, seed = SHAPES[0].values[0]
    ours = make_mlp(CEMGatedMLP, d, f, seed)
    cfg = hf_config(d, H, f, None)
    h = inputs(B, n, d, seed)
    assert rel_err(ours(h) - h, hf_mlp(ours, cfg, MLP_MAPS[CEMGatedMLP])(hf_norm(ours.norm.weight)(h))) <= TOL
    hf = hf_mlp(ours, cfg, SAME_NAMES)                                # the wrong, same-name mapping
    h = inputs(B, n, d, seed)
    assert rel_err(ours(h) - h, hf(hf_norm(ours.norm.weight)(h))) > 1e-2


@pytest.mark.parametrize("our_base, hf_base", [(None, 10000.0), (10000.0, None), (500000.0, 10000.0)])
@torch.no_grad()
def test_rope_setting_matters(our_base, hf_base, hf_fp64_norm):
    """RoPE on vs off, and theta, each change the output beyond TOL, so the RoPE match is not vacuous."""
    d, H, n, B, f, seed = SHAPES[0].values[0]
    ours = make_attention(LlamaAttention, d, H, our_base, seed)
    cfg = hf_config(d, H, f, hf_base)
    ref_fn = hf_attention_fn(hf_attention(ours, cfg), hf_norm(ours.norm.weight), cfg, hf_base is not None, True)
    h = inputs(B, n, d, seed)
    assert rel_err(ours(h) - h, ref_fn(h)) > 1e-4


@torch.no_grad()
def test_causality_probe_detects_a_bidirectional_reference(hf_fp64_norm):
    """assert_causal must fail on a non-causal HF attention (an all-true sdpa mask)."""
    d, H, n, B, f, seed = SHAPES[0].values[0]
    ours = make_attention(LlamaAttention, d, H, 10000.0, seed)
    cfg = hf_config(d, H, f, 10000.0)
    hf, norm = hf_attention(ours, cfg), hf_norm(ours.norm.weight)

    def bidirectional(h):
        cos, sin = rope_tables(cfg, h.shape[1], True)
        full = torch.ones(h.shape[0], 1, h.shape[1], h.shape[1], dtype=torch.bool)
        return hf(norm(h), position_embeddings=(cos, sin), attention_mask=full)[0]

    h = inputs(B, n, d, seed)
    with pytest.raises(AssertionError, match="not causal"):
        assert_causal(bidirectional, h)
    assert rel_err(ours(h) - h, bidirectional(h)) > 1e-3


# ---------------------------------------------------------------------------------------------
# 5. the ties (docs/design.md#215-the-ties): a CEM layer at T = 1 with a tie dropped is HF's layer with that
#    projection free, so the tie ladder isolates the ties from the rest of the CEM form
# ---------------------------------------------------------------------------------------------
TIE_MAPS = {
    "kv": {"q_proj.weight": "q_proj.weight", "k_proj.weight": "k_proj.weight",
           "v_proj.weight": "k_proj.weight", "o_proj.weight": "o_proj.weight"},
    "qo": {"q_proj.weight": "q_proj.weight", "k_proj.weight": "k_proj.weight",
           "v_proj.weight": "v_proj.weight", "o_proj.weight": "q_proj.weight^T"},
    "none": ATTN_MAPS[LlamaAttention],
}
UNTIED_MLP_MAP = {"gate_proj.weight": "up_proj.weight", "up_proj.weight": "gate_proj.weight",
                  "down_proj.weight": "down_proj.weight"}


def make_tied_attention(ties: str, d: int, H: int, rope_base: float | None, seed: int) -> CEMAttention:
    cfg = AttentionConfig(d_model=d, n_heads=H, attn_ties=ties, rope=rope_base is not None,
                          rope_base=rope_base or 10000.0)
    return randomize(CEMAttention(cfg).to(DTYPE), seed)


# with RoPE, "kv" is not Llama's: its value W_K c_j is the key, rotated at the key's position, and rotated back at
# the query's by the energy's gradient; a free W_V's value is not rotated (Llama's), so "qo" and "none" are
@pytest.mark.parametrize("ties, rope_base", [pytest.param(t, None, id=f"{t}-norope") for t in TIE_MAPS]
                         + [pytest.param(t, r.values[0], id=f"{t}-{r.id}") for t in ("qo", "none") for r in ROPES[1:]])
@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_untied_cem_attention_matches_hf(shape, ties, rope_base, hf_fp64_norm):
    d, H, n, B, f, seed = shape
    ours = make_tied_attention(ties, d, H, rope_base, seed)
    cfg = hf_config(d, H, f, rope_base, "sdpa")
    hf = copy_weights(hf_llama.LlamaAttention(cfg, layer_idx=0).to(DTYPE), projections(ours, TIE_MAPS[ties]),
                      TIE_MAPS[ties]).eval()
    ref_fn = hf_attention_fn(hf, hf_norm(ours.norm.weight), cfg, rope_base is not None, True)
    h = inputs(B, n, d, seed)
    err = rel_err(ours(h) - h, ref_fn(h))
    assert err <= TOL, f"CEM attention with ties {ties!r} differs from HF by {err:.3e} (relative)"


@torch.no_grad()
def test_kv_tied_attention_with_rope_is_not_llamas(hf_fp64_norm):
    """The comment above, measured: with RoPE the kept W_V = W_K moves the output far from HF's layer."""
    d, H, n, B, f, seed = SHAPES[0].values[0]
    ties = "kv"
    ours = make_tied_attention(ties, d, H, 10000.0, seed)
    cfg = hf_config(d, H, f, 10000.0, "sdpa")
    hf = copy_weights(hf_llama.LlamaAttention(cfg, layer_idx=0).to(DTYPE), projections(ours, TIE_MAPS[ties]),
                      TIE_MAPS[ties]).eval()
    h = inputs(B, n, d, seed)
    assert rel_err(ours(h) - h, hf_attention_fn(hf, hf_norm(ours.norm.weight), cfg, True, True)(h)) > 1e-3


@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_untied_cem_mlp_matches_hf(shape, hf_fp64_norm):
    d, H, n, B, f, seed = shape
    ours = randomize(CEMGatedMLP(MLPConfig(d_model=d, d_ff=f, mlp_ties="untied")).to(DTYPE), seed)
    hf = copy_weights(hf_llama.LlamaMLP(hf_config(d, H, f, None)).to(DTYPE), projections(ours, UNTIED_MLP_MAP),
                      UNTIED_MLP_MAP).eval()
    h = inputs(B, n, d, seed)
    err = rel_err(ours(h) - h, hf(hf_norm(ours.norm.weight)(h)))
    assert err <= TOL, f"the untied CEM MLP differs from HF LlamaMLP by {err:.3e} (relative)"


@pytest.mark.parametrize("rope", [True, False], ids=["rope", "norope"])
@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_untied_cem_block_at_t1_is_hfs_decoder_layer(shape, rope, hf_fp64_norm):
    """cem-full at T = 1 with every tie dropped (no diagonal, no preconditioner) is LlamaDecoderLayer."""
    d, H, n, B, f, seed = shape
    cfg = ModelConfig.variant("cem-full", CEMOptions(T=1, attn_ties="none", mlp_ties="untied"),
                              d_model=d, n_heads=H, d_ff=f, vocab_size=16, n_layers=1, rope=rope)
    block = randomize(Block(cfg).to(DTYPE), seed)
    mapping = {"input_layernorm.weight": "attn.norm.weight", "post_attention_layernorm.weight": "mlp.norm.weight",
               **{f"self_attn.{k}": f"attn.{v}" for k, v in TIE_MAPS["none"].items()},
               **{f"mlp.{k}": f"mlp.{v}" for k, v in UNTIED_MLP_MAP.items()}}
    hf_cfg = hf_config(d, H, f, 10000.0 if rope else None)
    layer = copy_weights(hf_llama.LlamaDecoderLayer(hf_cfg, layer_idx=0).to(DTYPE), block, mapping).eval()
    h = inputs(B, n, d, seed)
    ref = layer(h, attention_mask=hf_mask(hf_cfg, h, True), position_ids=position_ids(n),
                position_embeddings=rope_tables(hf_cfg, n, rope))
    err = rel_err(block(h), ref)
    assert err <= TOL, f"the untied CEM block differs from HF LlamaDecoderLayer by {err:.3e} (relative)"
