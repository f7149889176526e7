"""cem_core.nn.hf: Hugging Face Llama weights load into our layers by the mapping, and back.

Real ``transformers`` layers (tiny LlamaConfig, random float64 weights, no downloads) are mapped
through ``from_hf`` / ``to_hf`` and ``cem_mlp_from_hf`` / ``cem_mlp_to_hf``, loaded with
``load_state_dict`` (strict), and both sides are run on the same input: equal to TOL = 1e-10
relative (max |ours - hf| / max |hf|; measured <= 1e-15). HF runs with the "sdpa" attention, its
RMSNorm without the float32 round trip and float64 RoPE tables (see test_against_transformers.py,
whose helpers are used here), so the comparison is float64 throughout.
"""
from __future__ import annotations

import pytest
import torch
from llama_reference import (
    SHAPES,
    hf_config,
    hf_mask,
    hf_norm,
    inputs,
    position_ids,
    randomize,
    rel_err,
    rope_tables,
)
from transformers.models.llama import modeling_llama as hf_llama

from cem_core import (
    Block,
    CEMGatedMLP,
    LlamaAttention,
    LlamaAttentionConfig,
    MLPConfig,
    ModelConfig,
    SwiGLU,
    SwiGLUConfig,
)
from cem_core.nn.hf import KEY_MAPS, cem_mlp_from_hf, cem_mlp_to_hf, from_hf, to_hf

TOL = 1e-10
DTYPE = torch.float64


pytestmark = [pytest.mark.slow,                                   # imports transformers (3 s)
              pytest.mark.usefixtures("hf_fp64_norm")]      # HF's RMSNorm without its float32 round trip


def hf_layer(d: int, H: int, f: int, rope: bool, seed: int):
    cfg = hf_config(d, H, f, 10000.0 if rope else None)
    return cfg, randomize(hf_llama.LlamaDecoderLayer(cfg, layer_idx=0).to(DTYPE), seed).eval()


def run_hf_layer(layer, cfg, h: torch.Tensor, rope: bool) -> torch.Tensor:
    return layer(h, attention_mask=hf_mask(cfg, h, True), position_ids=position_ids(h.shape[1]),
                 position_embeddings=rope_tables(cfg, h.shape[1], rope))


def our_block(d: int, H: int, f: int, rope: bool) -> Block:
    cfg = ModelConfig(d_model=d, n_heads=H, d_ff=f, vocab_size=16, n_layers=1, rope=rope)
    return Block(cfg).to(DTYPE).eval()


def hf_mlp(d: int, H: int, f: int, seed: int, tied: bool):
    """An HF LlamaMLP with random weights; `tied`: its down_proj is its gate_proj transposed."""
    mlp = randomize(hf_llama.LlamaMLP(hf_config(d, H, f, None)).to(DTYPE), seed)
    if tied:
        with torch.no_grad():
            mlp.down_proj.weight.copy_(mlp.gate_proj.weight.T)
    return mlp


def norm_weight(d: int, seed: int) -> torch.Tensor:
    return 1 + 0.1 * torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


# -- the decoder layer --------------------------------------------------------------------------


@pytest.mark.parametrize("rope", [True, False], ids=["rope", "norope"])
@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_hf_decoder_layer_loads_into_a_block(shape, rope):
    d, H, n, B, f, seed = shape
    cfg, layer = hf_layer(d, H, f, rope, seed)
    block = our_block(d, H, f, rope)
    block.load_state_dict(from_hf(layer.state_dict()))
    h = inputs(B, n, d, seed)
    err = rel_err(block(h), run_hf_layer(layer, cfg, h, rope))
    assert err <= TOL, f"Block loaded from HF differs from the HF layer by {err:.3e}"


@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_a_block_loads_into_an_hf_decoder_layer(shape):
    d, H, n, B, f, seed = shape
    block = randomize(our_block(d, H, f, True), seed)
    cfg, layer = hf_layer(d, H, f, True, seed + 1)                    # other weights, overwritten now
    layer.load_state_dict(to_hf(block.state_dict()))
    h = inputs(B, n, d, seed)
    assert rel_err(block(h), run_hf_layer(layer, cfg, h, True)) <= TOL


@pytest.mark.parametrize("part", list(KEY_MAPS))
def test_round_trips_are_the_identity(part):
    d, H, f, seed = 16, 2, 24, 3
    block = randomize(our_block(d, H, f, True), seed)
    ours = {"decoder_layer": block, "attention": block.attn, "mlp": block.mlp}[part].state_dict()
    back = from_hf(to_hf(ours, part), part)
    assert list(back) == list(ours) and all(torch.equal(back[k], ours[k]) for k in ours)
    hf = to_hf(ours, part)
    again = to_hf(from_hf(hf, part), part)
    assert list(again) == list(hf) and all(torch.equal(again[k], hf[k]) for k in hf)


def test_the_decoder_layer_map_is_the_two_parts():
    """Every key of an HF LlamaDecoderLayer, and of our llama/llama Block, is mapped exactly once."""
    _, layer = hf_layer(16, 2, 24, True, 0)
    block = our_block(16, 2, 24, True)
    mapping = KEY_MAPS["decoder_layer"]
    assert set(mapping) == set(layer.state_dict()) and set(mapping.values()) == set(block.state_dict())
    assert mapping["input_layernorm.weight"] == "attn.norm.weight"
    assert mapping["post_attention_layernorm.weight"] == "mlp.norm.weight"
    assert mapping["mlp.gate_proj.weight"] == "mlp.gate_proj.weight"          # SwiGLU keeps HF's names


# -- bare HF attention and MLP modules -------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_bare_hf_attention_and_mlp_load_with_their_norms(shape):
    d, H, n, B, f, seed = shape
    cfg = hf_config(d, H, f, 10000.0)
    attn = randomize(hf_llama.LlamaAttention(cfg, layer_idx=0).to(DTYPE), seed).eval()
    mlp = hf_mlp(d, H, f, seed, tied=False)
    w_attn, w_mlp = norm_weight(d, seed), norm_weight(d, seed + 1)
    ours_attn = LlamaAttention(LlamaAttentionConfig(d_model=d, n_heads=H)).to(DTYPE)
    ours_attn.load_state_dict(from_hf({**attn.state_dict(), "input_layernorm.weight": w_attn}, "attention"))
    ours_mlp = SwiGLU(SwiGLUConfig(d_model=d, d_ff=f)).to(DTYPE)
    ours_mlp.load_state_dict(from_hf({**mlp.state_dict(), "post_attention_layernorm.weight": w_mlp}, "mlp"))
    h = inputs(B, n, d, seed)
    cos, sin = rope_tables(cfg, n, True)
    ref, _ = attn(hf_norm(w_attn)(h), position_embeddings=(cos, sin), attention_mask=hf_mask(cfg, h, True))
    assert rel_err(ours_attn(h) - h, ref) <= TOL
    assert rel_err(ours_mlp(h) - h, mlp(hf_norm(w_mlp)(h))) <= TOL


# -- an HF MLP as a CEM gated MLP: the naming trap ----------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_hf_mlp_with_down_equal_to_gate_transposed_is_a_cem_mlp(shape):
    """HF gate_proj goes into CEM up_proj (U, inside phi), HF up_proj into CEM gate_proj (G); with HF
    down_proj = gate_proj^T the CEM MLP at T = 1 is the HF MLP."""
    d, H, n, B, f, seed = shape
    hf = hf_mlp(d, H, f, seed, tied=True)
    w = norm_weight(d, seed)
    cem = CEMGatedMLP(MLPConfig(d_model=d, d_ff=f, T=1)).to(DTYPE)
    cem.load_state_dict(cem_mlp_from_hf({**hf.state_dict(), "post_attention_layernorm.weight": w}))
    assert torch.equal(cem.up_proj.weight, hf.gate_proj.weight) and torch.equal(cem.gate_proj.weight, hf.up_proj.weight)
    h = inputs(B, n, d, seed)
    ref = hf(hf_norm(w)(h))
    assert rel_err(cem(h) - h, ref) <= TOL
    by_name = CEMGatedMLP(MLPConfig(d_model=d, d_ff=f)).to(DTYPE)             # the trap: copy by name
    by_name.load_state_dict({"norm.weight": w, "up_proj.weight": hf.up_proj.weight,
                             "gate_proj.weight": hf.gate_proj.weight})
    assert rel_err(by_name(h) - h, ref) > 1e-2


@pytest.mark.parametrize("shape", SHAPES)
@torch.no_grad()
def test_a_cem_mlp_exports_as_an_hf_mlp_with_down_equal_to_up_transposed(shape):
    d, H, n, B, f, seed = shape
    cem = randomize(CEMGatedMLP(MLPConfig(d_model=d, d_ff=f)).to(DTYPE), seed)
    exported = cem_mlp_to_hf(cem.state_dict())
    hf = hf_mlp(d, H, f, seed + 1, tied=False)
    hf.load_state_dict({k: v for k, v in exported.items() if k != "post_attention_layernorm.weight"})
    assert torch.equal(hf.down_proj.weight, cem.up_proj.weight.T)
    h = inputs(B, n, d, seed)
    assert rel_err(cem(h) - h, hf(hf_norm(exported["post_attention_layernorm.weight"])(h))) <= TOL
    back = cem_mlp_from_hf(exported)
    assert all(torch.equal(back[k], v) for k, v in cem.state_dict().items()) and set(back) == set(cem.state_dict())


def test_a_free_down_projection_is_refused():
    """A CEM MLP reads out through U^T; an HF MLP with its own down_proj cannot be one, so it is refused
    (dropping down_proj would silently change the function)."""
    hf = hf_mlp(16, 2, 24, 0, tied=False)
    state = {**hf.state_dict(), "post_attention_layernorm.weight": norm_weight(16, 0)}
    with pytest.raises(ValueError, match=r"^down_proj\.weight is invalid: .*gate_proj\^T"):
        cem_mlp_from_hf(state)
    state["down_proj.weight"] = state["down_proj.weight"].clone()
    state["down_proj.weight"].copy_(state["gate_proj.weight"].T)
    state["down_proj.weight"][0, 0] += 1e-12                                    # equal means equal
    with pytest.raises(ValueError, match="down_proj"):
        cem_mlp_from_hf(state)


# -- wrong keys ---------------------------------------------------------------------------------


def _hf_decoder_state() -> dict:
    return dict(hf_layer(16, 2, 24, True, 0)[1].state_dict())


@pytest.mark.parametrize("change,missing,unexpected", [
    (lambda s: s.pop("mlp.up_proj.weight"), ["mlp.up_proj.weight"], []),
    (lambda s: s.update({"self_attn.q_proj.bias": torch.zeros(16)}), [], ["self_attn.q_proj.bias"]),
    (lambda s: s.update({"model.layers.0.input_layernorm.weight": s.pop("input_layernorm.weight")}),
     ["input_layernorm.weight"], ["model.layers.0.input_layernorm.weight"]),
])
def test_wrong_hf_keys_are_named(change, missing, unexpected):
    state = _hf_decoder_state()
    change(state)
    with pytest.raises(ValueError) as err:
        from_hf(state)
    msg = str(err.value)
    assert msg.startswith("hf_state is invalid: it must hold the keys of a Hugging Face LlamaDecoderLayer")
    assert f"missing keys {missing}, unexpected keys {unexpected}" in msg


def test_wrong_keys_of_ours_are_named():
    cem_attn = Block(ModelConfig(d_model=16, n_heads=2, d_ff=24, attention="cem", vocab_size=16, n_layers=1))
    with pytest.raises(ValueError, match=r"^state is invalid: .*our Block \(llama/llama\); missing keys "
                                         r"\['attn.o_proj.weight', 'attn.v_proj.weight'\], unexpected keys \[\]"):
        to_hf(cem_attn.state_dict())
    with_p = CEMGatedMLP(MLPConfig(d_model=16, d_ff=24, preconditioner="psd", rank=2))
    with pytest.raises(ValueError, match=r"unexpected keys \['preconditioner.U', 'preconditioner.p'\]"):
        cem_mlp_to_hf(with_p.state_dict())
    with pytest.raises(ValueError, match=r"missing keys \['post_attention_layernorm.weight'\]"):
        cem_mlp_from_hf(dict(hf_mlp(16, 2, 24, 0, tied=True).state_dict()))
    with pytest.raises(ValueError, match=r"^part='block' is invalid: must be one of"):
        from_hf(_hf_decoder_state(), "block")


def test_grouped_query_attention_is_refused_when_loaded():
    """Keys alone cannot tell grouped-query attention (fewer key/value heads): the strict load refuses its
    smaller k_proj and v_proj."""
    cfg = hf_config(16, 4, 24, 10000.0)
    cfg.num_key_value_heads = 2
    layer = hf_llama.LlamaDecoderLayer(cfg, layer_idx=0)
    with pytest.raises(RuntimeError, match="size mismatch for attn.k_proj.weight"):
        Block(ModelConfig(d_model=16, n_heads=4, d_ff=24, vocab_size=16, n_layers=1)).load_state_dict(
            from_hf(layer.state_dict()))
