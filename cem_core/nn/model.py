"""Blocks and a decoder-only language model assembled from a ``ModelConfig``.

The attention kind and the MLP kind are chosen independently: "llama" builds the baseline
(``LlamaAttention``, ``SwiGLU`` from ``baselines``, configured by ``LlamaAttentionConfig`` /
``SwiGLUConfig``), "cem" the CEM layer (``CEMAttention``, ``CEMGatedMLP``, configured by
``AttentionConfig`` / ``MLPConfig`` with the model's ``cem`` switches); the four named variants
are llama, cem-attn, cem-mlp and cem-full. Each sublayer is pre-norm with its own residual
(h + delta), so a block is mlp(attn(h)), exactly as a Llama decoder layer; with both kinds "cem" and
the switch block="joint", a block is one ``CEMBlock`` instead, T steps on E_att + E_mlp.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn

from .attention import AttentionCache, CEMAttention
from .baselines import LlamaAttention, SwiGLU
from .block import CEMBlock
from .block_modes import BLOCK_MODES
from .config import (
    KINDS,
    MLP_KINDS,
    AttentionConfig,
    BlockConfig,
    CEMOptions,
    LlamaAttentionConfig,
    MLPConfig,
    ModelShape,
    SwiGLUConfig,
    check_eval_T,
)
from .descent import EnergyDescentLayer
from .mlp import CEMGatedMLP
from .validate import check_bool, check_choice, check_config, check_float, check_int, fail

VARIANTS = {"llama": ("llama", "llama"), "cem-attn": ("cem", "llama"),
            "cem-mlp": ("llama", "cem"), "cem-full": ("cem", "cem")}         # (attention kind, MLP kind)
# each variant's CEM switches; cem-full is the paper's fully CEM transformer (T = 2, D+LR, preconditioners)
VARIANT_OPTIONS = {"llama": CEMOptions(), "cem-attn": CEMOptions(), "cem-mlp": CEMOptions(),
                   "cem-full": CEMOptions(T=2, diagonal="shared", preconditioner="dlr")}

# the parts that ModelConfig.param_counts and param_breakdown count parameters by
PARTS = ("embedding", "head", "attention.projections", "attention.diagonal", "attention.preconditioner",
         "attention.eta", "mlp.projections", "mlp.preconditioner", "mlp.eta", "block.preconditioner", "block.eta",
         "norms")


@dataclass(frozen=True, kw_only=True)
class ModelConfig(ModelShape):
    """A language model: its shape (ModelShape: d_model, n_layers, n_heads, d_ff, activation), vocabulary,
    context, the kinds of its sublayers and their CEM switches."""

    vocab_size: int = 256
    max_seq_len: int = 256
    attention: str = "llama"                             # "llama" | "cem"
    mlp: str = "llama"                                   # "llama" | "cem" | "none" (attention-only blocks)
    cem: CEMOptions = field(default_factory=CEMOptions)  # the switches of the CEM layers (T, diagonal, ...)
    rope: bool = True
    tie_embeddings: bool = True
    norm_eps: float = 1e-6
    init_std: float = 0.02

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("vocab_size", "max_seq_len"):
            check_int(name, getattr(self, name), 1)
        check_choice("attention", self.attention, KINDS)
        check_choice("mlp", self.mlp, MLP_KINDS)
        if not isinstance(self.cem, CEMOptions):
            fail("cem", self.cem, "must be a CEMOptions")
        if self.attention == "llama" and self.cem.diagonal != "none":
            fail("diagonal", self.cem.diagonal, "applies to CEM attention only (attention='llama')")
        if self.attention == "llama" and self.mlp != "cem" and self.cem != CEMOptions():
            fail("cem", self.cem, f"applies to CEM layers only; attention is 'llama' and mlp {self.mlp!r}")
        default = CEMOptions()
        if self.attention == "llama" and self.cem.attn_ties != default.attn_ties:
            fail("attn_ties", self.cem.attn_ties, "applies to CEM attention only (attention='llama')")
        if self.mlp != "cem" and self.cem.mlp_ties != default.mlp_ties:
            fail("mlp_ties", self.cem.mlp_ties, f"applies to the CEM MLP only (mlp={self.mlp!r})")
        mode = BLOCK_MODES[self.cem.block]
        if not mode.fits(self.attention, self.mlp):
            fail("block", self.cem.block, f"needs attention={mode.needs[0]!r} and mlp={mode.needs[1]!r} "
                                          f"({mode.label}); got attention={self.attention!r}, mlp={self.mlp!r}")
        check_bool("rope", self.rope)
        check_bool("tie_embeddings", self.tie_embeddings)
        check_float("init_std", self.init_std, 0.0, strict=True)
        self.attention_config()   # validate the layer configs now, not at the first forward
        self.mlp_config()

    @classmethod
    def variant(cls, name: str, cem: CEMOptions | None = None, shape: ModelShape | None = None,
                **kwargs) -> "ModelConfig":
        """One of VARIANTS: llama, cem-attn, cem-mlp, cem-full, with its own CEM switches (VARIANT_OPTIONS)
        or `cem` (those that do not apply to the variant, such as a diagonal without CEM attention, dropped),
        of `shape` (ModelShape's defaults without one) and the other fields in `kwargs`."""
        check_choice("variant", name, tuple(VARIANTS))
        attention, mlp = VARIANTS[name]
        cem = VARIANT_OPTIONS[name] if cem is None else cem
        default = CEMOptions()
        if not BLOCK_MODES[cem.block].fits(attention, mlp):
            cem = replace(cem, block=default.block)
        if attention == "llama" and mlp == "cem":
            cem = replace(cem, diagonal=default.diagonal, diagonal_form=default.diagonal_form,
                          attn_ties=default.attn_ties)
        elif attention == "llama":
            cem = default
        if mlp != "cem":
            cem = replace(cem, mlp_ties=default.mlp_ties)
        return cls(attention=attention, mlp=mlp, cem=cem, **(shape.shape_fields() if shape else {}), **kwargs)

    @property
    def joint(self) -> bool:
        """Whether each block is one CEMBlock (T steps on E_att + E_mlp) rather than attention, then MLP."""
        return BLOCK_MODES[self.cem.block].one_energy

    def attention_config(self) -> AttentionConfig | LlamaAttentionConfig:
        """The config of every block's attention: Llama's, or CEM attention's with the model's switches."""
        shape = dict(d_model=self.d_model, n_heads=self.n_heads, rope=self.rope, norm_eps=self.norm_eps)
        if self.attention == "llama":
            return LlamaAttentionConfig(**shape)
        return AttentionConfig(**shape, **self.cem.attention_fields())

    def mlp_config(self) -> MLPConfig | SwiGLUConfig | None:
        """The config of every block's MLP: SwiGLU's, the CEM gated MLP's with the model's switches, or
        None for attention-only blocks."""
        shape = dict(d_model=self.d_model, d_ff=self.d_ff, activation=self.activation, norm_eps=self.norm_eps)
        if self.mlp == "none":
            return None
        if self.mlp == "llama":
            return SwiGLUConfig(**shape)
        return MLPConfig(**shape, **self.cem.mlp_fields())

    def block_config(self) -> BlockConfig:
        """The config of every joint block (block="joint"): attention's and the MLP's fields in one descent."""
        if not self.joint:
            fail("block", self.cem.block, "block_config is the config of a joint block (block='joint')")
        return BlockConfig(d_model=self.d_model, n_heads=self.n_heads, rope=self.rope, norm_eps=self.norm_eps,
                           d_ff=self.d_ff, activation=self.activation, **self.cem.attention_fields(),
                           mlp_ties=self.cem.mlp_ties)

    def sections(self) -> tuple:
        """Every block's sublayers as ((name, config), ...), as its block mode lays them out (``BlockMode``):
        ("attention", ...), ("mlp", ... or None), or ("block", BlockConfig) for one energy."""
        return BLOCK_MODES[self.cem.block].sections(self)

    def param_counts(self) -> dict[str, int]:
        """Closed-form parameter counts by part (the model's ``param_breakdown`` must equal these): each
        sublayer's config counts its own parts (a baseline has no diagonal, preconditioner or eta); a joint
        block counts both terms' projections and one descent's extras (block.preconditioner, block.eta)."""
        L, d = self.n_layers, self.d_model
        counts = dict.fromkeys(PARTS, 0)
        counts["embedding"] = self.vocab_size * d
        counts["head"] = 0 if self.tie_embeddings else self.vocab_size * d
        counts["norms"] = d                                            # the final norm; each sublayer adds its own
        for section, config in self.sections():
            for part, count in (config.param_counts() if config is not None else {}).items():
                key = "norms" if part == "norm" else part if "." in part else f"{section}.{part}"
                counts[key] += L * count
        counts["total"] = sum(counts.values())
        return counts

    def cache_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        """KV-cache bytes per generated token over all layers."""
        return self.n_layers * self.attention_config().cache_floats_per_token() * torch.finfo(dtype).bits // 8


def _part(name: str) -> str:
    """The param_counts key of a parameter name."""
    if name.startswith("embed"):
        return "embedding"
    if name.startswith("lm_head"):
        return "head"
    if ".norm." in name or name.startswith("norm."):
        return "norms"
    if ".joint." in name:                                              # a CEMBlock: each term's weights, one descent
        leaf = name.rsplit(".", 2)[-2] if name.endswith(".weight") else name.rsplit(".", 1)[-1]
        if leaf in ("q_proj", "k_proj", "v_proj", "o_proj"):
            return "attention.projections"
        if leaf in ("up_proj", "gate_proj", "down_proj"):
            return "mlp.projections"
        section = "block"
    else:
        section = "attention" if ".attn." in name else "mlp"
    if ".preconditioner." in name:
        return f"{section}.preconditioner"
    if name.endswith("log_eta"):
        return f"{section}.eta"
    if name.endswith(".diag"):
        return "attention.diagonal"
    return f"{section}.projections"


def param_breakdown(model: nn.Module) -> dict[str, int]:
    """Parameters counted by part from the module itself (tied weights counted once)."""
    counts = dict.fromkeys(PARTS, 0)
    for name, p in model.named_parameters():   # named_parameters skips tied duplicates
        counts[_part(name)] += p.numel()
    counts["total"] = sum(counts.values())
    return counts


def cem_layers(module: nn.Module) -> list:
    """The CEM layers (attention and MLP) inside a module."""
    return [m for m in module.modules() if isinstance(m, EnergyDescentLayer)]


def set_recursion_depth(module: nn.Module, T: int) -> None:
    """Run every CEM layer with T steps from now on (test-time scaling); no new parameters.

    Refused (ValueError) for layers that learned one step size per step."""
    layers = cem_layers(module)
    for layer in layers:
        check_eval_T((T,), layer.config.T, layer.config.eta_per_step)
    for layer in layers:
        layer.config = replace(layer.config, T=T)


@contextmanager
def recursion_depth(module: nn.Module, T: int):
    """Temporarily run every CEM layer with T steps; the trained depths come back afterwards."""
    saved = [(layer, layer.config) for layer in cem_layers(module)]
    try:
        set_recursion_depth(module, T)
        yield module
    finally:
        for layer, config in saved:
            layer.config = config


def full_precision(t: torch.Tensor) -> torch.Tensor:
    """float32 for half-precision logits (a stable softmax), float64 kept as it is."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


class Block(nn.Module):
    """attention sublayer, then MLP sublayer (none with mlp="none"); each h + delta with its own RMSNorm.
    With block="joint", one CEMBlock (``joint``) instead: T steps on E_att + E_mlp (attn and mlp are None)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.attn = self.mlp = self.joint = None
        if config.joint:
            self.joint = CEMBlock(config.block_config())
            return
        attn_cls = LlamaAttention if config.attention == "llama" else CEMAttention
        self.attn = attn_cls(config.attention_config())
        mlp_cls = {"llama": SwiGLU, "cem": CEMGatedMLP, "none": None}[config.mlp]
        self.mlp = mlp_cls(config.mlp_config()) if mlp_cls else None

    def skip_input_checks(self) -> None:
        """For a caller that validates its own input once: the sublayers stop checking theirs."""
        for layer in (self.attn, self.mlp, self.joint):
            if layer is not None:
                layer.check_inputs = False

    def sublayers(self) -> list:
        """[(name, sublayer), ...]: the joint block, or attention then the MLP, each h -> h'."""
        if self.joint is not None:
            return [("one energy", self.joint)]
        return [("attention", self.attn)] + ([("MLP", self.mlp)] if self.mlp is not None else [])

    def forward(self, h: torch.Tensor, cache: AttentionCache | None = None) -> torch.Tensor:
        if self.joint is not None:
            return self.joint(h, cache)
        h = self.attn(h, cache)
        return h if self.mlp is None else self.mlp(h)


def blocks_sublayers(blocks) -> list:
    """[("block i · name", sublayer), ...] of a sequence of Blocks, in the order they run (cem_core.nn.readout)."""
    return [(f"block {i + 1} · {name}", layer) for i, block in enumerate(blocks) for name, layer in block.sublayers()]


@dataclass
class Generation:
    tokens: torch.Tensor      # (B, prompt + new)
    cache_bytes: int          # bytes held by the KV cache at the end (0 without cache)


class LanguageModel(nn.Module):
    """Token embedding, n_layers blocks, final RMSNorm, LM head (tied to the embedding by default)."""

    def __init__(self, config: ModelConfig):
        check_config(config, ModelConfig)
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self.apply(self._init_weights)
        for block in self.blocks:   # the model validates token ids; layers skip their own check
            block.skip_input_checks()
        # The id range check reduces over the ids, a host sync per call on an accelerator; a trainer
        # whose ids come from the model's own tokenizer turns it off there.
        self.check_token_ids = True

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, self.config.init_std)

    def _check_ids(self, idx) -> None:
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"idx must be an integer tensor of shape (batch, seq); got "
                             f"{getattr(idx, 'dtype', type(idx).__name__)} {tuple(getattr(idx, 'shape', ()))}")
        if idx.shape[1] == 0 or idx.shape[1] > self.config.max_seq_len:
            raise ValueError(f"sequence length {idx.shape[1]} is invalid: must be in [1, max_seq_len="
                             f"{self.config.max_seq_len}]")
        if self.check_token_ids and idx.numel() and (idx.min() < 0 or idx.max() >= self.config.vocab_size):
            raise ValueError(f"token ids must be in [0, vocab_size={self.config.vocab_size}); got "
                             f"[{int(idx.min())}, {int(idx.max())}]")

    def embed_inputs(self, idx: torch.Tensor) -> torch.Tensor:
        """The residual stream entering the first block: the token embeddings (ids checked)."""
        self._check_ids(idx)
        return self.embed(idx)

    def sublayers(self) -> list:
        """[(name, sublayer), ...] in the order they run, each h -> h' (cem_core.nn.readout)."""
        return blocks_sublayers(self.blocks)

    def cem_layers(self) -> list:
        """The model's CEM layers (``cem_layers``), as ``GPTransformer.cem_layers``."""
        return cem_layers(self)

    def read_out(self, h: torch.Tensor) -> torch.Tensor:
        """Logits (B, n, V) from the last residual stream."""
        return self.lm_head(self.norm(h))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, caches=None):
        """Logits (B, n, V), and the mean cross-entropy when targets are given."""
        h = self.embed_inputs(idx)
        for i, block in enumerate(self.blocks):
            h = block(h, None if caches is None else caches[i])
        logits = self.read_out(h)
        if targets is None:
            return logits
        loss = F.cross_entropy(full_precision(logits).flatten(0, 1), targets.flatten(), ignore_index=-100)
        return logits, loss

    def param_breakdown(self) -> dict[str, int]:
        return param_breakdown(self)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, use_cache: bool = True,
                 generator: torch.Generator | None = None) -> Generation:
        """Sample max_new_tokens tokens (greedy when temperature == 0).

        With the cache, each new token runs its T steps against cached keys (CEM: keys only,
        values are the keys); without it the whole prefix is recomputed. Both give the same tokens.
        """
        self._check_ids(idx)
        check_int("max_new_tokens", max_new_tokens, 0)
        check_float("temperature", temperature, 0.0, strict=False)
        if top_k is not None:
            check_int("top_k", top_k, 1, self.config.vocab_size)
        if idx.shape[1] + max_new_tokens > self.config.max_seq_len:
            fail("max_new_tokens", max_new_tokens,
                  f"prompt {idx.shape[1]} + new tokens must fit max_seq_len={self.config.max_seq_len}")
        caches = [AttentionCache() for _ in self.blocks] if use_cache else None
        tokens, step_input = idx, idx
        for _ in range(max_new_tokens):
            logits = full_precision(self(step_input if use_cache else tokens, caches=caches)[:, -1])
            if temperature == 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, top_k).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
            tokens = torch.cat((tokens, nxt), dim=1)
            step_input = nxt
        return Generation(tokens=tokens, cache_bytes=sum(c.nbytes for c in caches) if caches else 0)
