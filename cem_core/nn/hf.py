"""Weight mapping between Hugging Face's Llama layers and ours, on state dicts (no transformers import).

Our sublayers are pre-norm and hold their own RMSNorm; Hugging Face keeps a sublayer's norm in the
``LlamaDecoderLayer``. So the Hugging Face side of a part is its module's own keys plus the key
its norm has in the decoder layer:

    part             Hugging Face                                  ours
    "attention"      input_layernorm.weight                  <->  LlamaAttention  norm.weight
                     LlamaAttention {q,k,v,o}_proj.weight    <->                  {q,k,v,o}_proj.weight
    "mlp"            post_attention_layernorm.weight         <->  SwiGLU          norm.weight
                     LlamaMLP {gate,up,down}_proj.weight     <->                  {gate,up,down}_proj.weight
    "decoder_layer"  LlamaDecoderLayer: the parts, modules   <->  Block (llama/llama): attn.*, mlp.*
                     under self_attn. and mlp.

A bare ``LlamaAttention`` loads as ``from_hf({**attn.state_dict(), "input_layernorm.weight": w},
"attention")``, w being the weight of the norm in front of it. Only the keys are mapped; shapes are
checked when the result is loaded (``load_state_dict``), so grouped-query attention (fewer key
and value heads) or biases are refused there or here, by name.

The CEM gated MLP names its weights after the paper, the opposite of Hugging Face
(docs/design.md#25-element-wise-energy-and-the-gated-mlp): ``cem_mlp_from_hf`` puts HF
``gate_proj`` (inside phi) into CEM ``up_proj`` = U and HF ``up_proj`` (linear) into CEM
``gate_proj`` = G. HF ``down_proj`` has no CEM counterpart, since a CEM MLP reads out through
U^T: the mapping refuses an HF MLP unless its ``down_proj`` equals ``gate_proj``^T exactly, because
dropping a free down projection would silently change the function. ``cem_mlp_to_hf`` writes
``down_proj`` = U^T, so the HF MLP computes the CEM MLP's step (T = 1, eta = 1, P = I, no anchor).
"""
from __future__ import annotations

import torch

from .validate import check_choice

ATTENTION_KEYS = {"input_layernorm.weight": "norm.weight",
                  **{f"{p}_proj.weight": f"{p}_proj.weight" for p in "qkvo"}}      # HF -> our LlamaAttention
MLP_KEYS = {"post_attention_layernorm.weight": "norm.weight",
            **{f"{p}_proj.weight": f"{p}_proj.weight" for p in ("gate", "up", "down")}}  # HF -> our SwiGLU
CEM_MLP_KEYS = {"norm.weight": "norm.weight",
                "gate_proj.weight": "up_proj.weight",                 # HF/SwiGLU gate_proj, inside phi = CEM U
                "up_proj.weight": "gate_proj.weight"}                 # HF/SwiGLU up_proj, linear = CEM G


def _in_layer(keys: dict[str, str], hf_module: str, ours: str) -> dict[str, str]:
    """A part's keys inside the decoder layer and the Block: HF's module keys under its attribute name
    (the norm's key is already the decoder layer's), ours under the sublayer's."""
    return {(k if k.endswith("layernorm.weight") else f"{hf_module}.{k}"): f"{ours}.{v}" for k, v in keys.items()}


KEY_MAPS = {"attention": ATTENTION_KEYS, "mlp": MLP_KEYS,
            "decoder_layer": _in_layer(ATTENTION_KEYS, "self_attn", "attn") | _in_layer(MLP_KEYS, "mlp", "mlp")}
HF_PARTS = {"attention": "a Hugging Face LlamaAttention and its input_layernorm",
            "mlp": "a Hugging Face LlamaMLP and its post_attention_layernorm",
            "decoder_layer": "a Hugging Face LlamaDecoderLayer"}
OUR_PARTS = {"attention": "our LlamaAttention", "mlp": "our SwiGLU", "decoder_layer": "our Block (llama/llama)"}


def _renamed(state, mapping: dict[str, str], name: str, what: str) -> dict[str, torch.Tensor]:
    """`state` with every key renamed by `mapping`; a ValueError naming the missing and unexpected keys
    unless the keys are exactly those of `mapping`."""
    missing, unexpected = sorted(set(mapping) - set(state)), sorted(set(state) - set(mapping))
    if missing or unexpected:
        raise ValueError(f"{name} is invalid: it must hold the keys of {what}; missing keys {missing}, "
                         f"unexpected keys {unexpected}")
    return {ours: state[theirs] for theirs, ours in mapping.items()}


def from_hf(hf_state, part: str = "decoder_layer") -> dict[str, torch.Tensor]:
    """A Hugging Face state dict (see the module docstring for each part's keys) as ours."""
    check_choice("part", part, tuple(KEY_MAPS))
    return _renamed(hf_state, KEY_MAPS[part], "hf_state", HF_PARTS[part])


def to_hf(state, part: str = "decoder_layer") -> dict[str, torch.Tensor]:
    """Our state dict as Hugging Face's, the inverse of ``from_hf``."""
    check_choice("part", part, tuple(KEY_MAPS))
    return _renamed(state, {ours: hf for hf, ours in KEY_MAPS[part].items()}, "state", OUR_PARTS[part])


def cem_mlp_from_hf(hf_state) -> dict[str, torch.Tensor]:
    """An HF LlamaMLP with its norm (the "mlp" part) as a CEM gated MLP: HF gate_proj -> CEM up_proj (U),
    HF up_proj -> CEM gate_proj (G). Refused unless HF down_proj equals gate_proj^T, the CEM readout U^T."""
    swiglu = from_hf(hf_state, "mlp")
    down, readout = swiglu["down_proj.weight"], swiglu["gate_proj.weight"].T   # W_down must be U^T
    if down.shape != readout.shape or not torch.equal(down, readout):
        raise ValueError("down_proj.weight is invalid: a CEM MLP reads out through U^T = gate_proj.weight^T and has "
                         "no free down projection, so only an HF MLP whose down_proj equals gate_proj^T maps onto it")
    return {cem: swiglu[name] for name, cem in CEM_MLP_KEYS.items()}


def cem_mlp_to_hf(state) -> dict[str, torch.Tensor]:
    """A CEM gated MLP's state dict (norm, U, G: no preconditioner, no learned eta) as an HF LlamaMLP with its
    norm and down_proj = U^T; the HF MLP then computes the CEM MLP's single plain step."""
    swiglu = _renamed(state, {cem: name for name, cem in CEM_MLP_KEYS.items()}, "state",
                      "a CEM gated MLP without preconditioner or learned eta")
    swiglu["down_proj.weight"] = swiglu["gate_proj.weight"].T.contiguous()   # W_down = U^T
    return to_hf(swiglu, "mlp")
