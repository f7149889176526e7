"""The Hugging Face Llama reference that tests/test_against_transformers.py and tests/test_hf.py
compare our layers with: configs, HF's own causal masks, RoPE tables and RMSNorm in float64, random
weights, hand-written weight copies and a causality probe (see test_against_transformers.py for the
precision quirks of transformers these work around). The fixture that patches HF's RMSNorm,
``hf_fp64_norm``, is in conftest.py."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from transformers import LlamaConfig
from transformers.masking_utils import create_causal_mask
from transformers.models.llama import modeling_llama as hf_llama

TOL = 1e-6                      # max |ours - hf| / max |hf|
DTYPE = torch.float64
EPS = 1e-6                      # our default norm_eps; HF rms_norm_eps is set to the same

# (d_model, n_heads, seq len n, batch B, d_ff, seed)
SHAPES = [
    pytest.param((32, 4, 7, 2, 40, 0), id="d32-H4-n7-B2"),
    pytest.param((48, 3, 5, 3, 72, 1), id="d48-H3-n5-B3"),
    pytest.param((64, 8, 9, 1, 96, 2), id="d64-H8-n9-B1"),
]
ROPES = [pytest.param(None, id="norope"), pytest.param(10000.0, id="rope1e4"),
         pytest.param(500000.0, id="rope5e5")]
# (attention implementation, whether HF's causal mask is materialized); ("sdpa", False) is the
# path LlamaModel takes by default: create_causal_mask returns None and sdpa runs is_causal=True.
ATTN_IMPLS = [pytest.param(("sdpa", True), id="sdpa-mask"), pytest.param(("sdpa", False), id="sdpa-is_causal"),
              pytest.param(("eager", True), id="eager-mask")]


# -- helpers ------------------------------------------------------------------------------------
def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    """max |ours - ref| / max |ref|."""
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    return float((ours - ref).abs().max() / ref.abs().max())


def rmsnorm_forward_fp64(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """LlamaRMSNorm.forward of transformers 5.24.0 without its float32 round trip.

    The stock forward casts the input to float32 and back, which caps a float64 comparison at
    ~1e-7; this is the same formula, weight * x / sqrt(mean(x^2) + eps), in the input's dtype.
    """
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states


def hf_config(d: int, H: int, f: int, rope_base: float | None, attn_impl: str = "sdpa") -> LlamaConfig:
    cfg = LlamaConfig(hidden_size=d, num_attention_heads=H, num_key_value_heads=H, intermediate_size=f,
                      num_hidden_layers=1, vocab_size=16, hidden_act="silu", rms_norm_eps=EPS,
                      max_position_embeddings=64, attention_bias=False, mlp_bias=False,
                      rope_parameters={"rope_type": "default", "rope_theta": rope_base or 10000.0})
    cfg._attn_implementation = attn_impl          # a standalone module gets None = eager otherwise
    return cfg


def position_ids(n: int) -> torch.Tensor:
    return torch.arange(n)[None]


def rope_tables(cfg: LlamaConfig, n: int, rope: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of shape (1, n, head_dim) as HF's LlamaRotaryEmbedding builds them, in float64.

    Same formula as LlamaRotaryEmbedding.compute_default_rope_parameters / forward (angles
    i * theta^(-2m/d_h), the two halves duplicated), but in float64 instead of float32.
    Without RoPE: cos = 1, sin = 0, so apply_rotary_pos_emb is the identity.
    """
    dim = cfg.head_dim
    if not rope:
        return torch.ones(1, n, dim, dtype=DTYPE), torch.zeros(1, n, dim, dtype=DTYPE)
    base = cfg.rope_parameters["rope_theta"]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=DTYPE) / dim))
    freqs = position_ids(n)[..., None].to(DTYPE) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def hf_mask(cfg: LlamaConfig, h: torch.Tensor, materialize: bool):
    """HF's own causal mask, made exactly as LlamaModel.forward makes it (None = sdpa is_causal)."""
    mask = create_causal_mask(config=cfg, inputs_embeds=h, attention_mask=None, cache=None,
                              position_ids=position_ids(h.shape[1]), allow_is_causal_skip=not materialize)
    if materialize:
        assert mask is not None and mask.shape == (h.shape[0], 1, h.shape[1], h.shape[1])
    return mask


def randomize(module: nn.Module, seed: int) -> nn.Module:
    """Random float64 weights: projections ~ N(0, 1/fan_in), norm weights 1 + 0.1 N(0, 1)."""
    g = torch.Generator().manual_seed(1000 + seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
            else:
                assert p.dim() == 2, name
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) / math.sqrt(p.shape[1]))
    return module


def copy_weights(hf: nn.Module, ours: nn.Module, mapping: dict[str, str]) -> nn.Module:
    """hf.<key> <- ours.<value>, where a value "name^T" copies the transpose (a tied weight); the mapping
    must cover every parameter of both sides."""
    hf_params, our_params = dict(hf.named_parameters()), dict(ours.named_parameters())
    sources = {name.removesuffix("^T") for name in mapping.values()}
    assert set(mapping) == set(hf_params), sorted(set(mapping) ^ set(hf_params))
    assert sources == set(our_params), sorted(sources ^ set(our_params))
    with torch.no_grad():
        for hf_name, our_name in mapping.items():
            source = our_params[our_name.removesuffix("^T")]
            source = source.T if our_name.endswith("^T") else source
            assert hf_params[hf_name].shape == source.shape, (hf_name, our_name)
            hf_params[hf_name].copy_(source)
    return hf


def hf_norm(weight: torch.Tensor) -> hf_llama.LlamaRMSNorm:
    norm = hf_llama.LlamaRMSNorm(weight.shape[0], eps=EPS).to(DTYPE)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm


def inputs(B: int, n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 2.0 * torch.randn(B, n, d, generator=g, dtype=DTYPE)


def assert_causal(fn, h: torch.Tensor) -> None:
    """fn: (B, n, d) -> (B, n, d). Perturbing token k must leave outputs < k unchanged and change
    outputs >= k. Checked for the second, a middle and the last token, so a bidirectional
    reference (or one that leaks even one step ahead) cannot pass."""
    out = fn(h)
    g = torch.Generator().manual_seed(5)
    for k in sorted({1, h.shape[1] // 2, h.shape[1] - 1}):
        h2 = h.clone()
        h2[:, k] += 1.0 + torch.randn(h2[:, k].shape, generator=g, dtype=h.dtype)
        out2 = fn(h2)
        torch.testing.assert_close(out2[:, :k], out[:, :k], rtol=0, atol=1e-12,
                                   msg=f"reference is not causal: token {k} changed earlier outputs")
        assert (out2[:, k:] - out[:, k:]).abs().max() > 1e-3, f"perturbing token {k} changed nothing"
