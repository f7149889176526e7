"""Gaussian-process in-context regression, the model: a causal transformer of cem_core.nn blocks over the
task's tokens, predicting y_j.

Token formats (``GPModelConfig.tokens``). "pairs" (the default): token j is
[x_j, x_{j-1}, y_{j-1}, first_j], the query input together with the previous (input, target) pair,
and a flag that is 1 only at j = 0 (where the previous pair is zero padding). "interleaved" (Garg
et al.'s layout): a query token [x_j, 0, 1] and then a pair token [x_j, y_j, 0] for every j, 2N
tokens, the prediction of y_j read at its query token. Either way, through causal attention the
prediction of y_j reaches every pair before j and its own query, and nothing else. No positional
encoding (RoPE off): the points are exchangeable, their order carries no information.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn

from cem_core.nn.config import CEMOptions, ModelShape, as_shape
from cem_core.nn.descent import EnergyDescentLayer
from cem_core.nn.model import Block, ModelConfig, blocks_sublayers, cem_layers
from cem_core.nn.validate import check_choice, check_int

from .task import GPTaskConfig

TOKEN_FORMATS = ("pairs", "interleaved")

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
        h = self.embed_inputs(xs, ys)
        for _ in range(self.config.loops):
            for block in self.blocks:
                h = block(h)
        return self.read_out(h)

    def embed_inputs(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """The residual stream entering the first block: the tokens (``make_tokens``) projected to d."""
        return self.in_proj(make_tokens(xs, ys, self.config.tokens))

    def sublayers(self) -> list:
        """[(name, sublayer), ...] in the order they run, each h -> h' (cem_core.nn.readout)."""
        looped = self.config.loops > 1
        return [(f"{'loop ' + str(k + 1) + ' · ' if looped else ''}{name}", layer)
                for k in range(self.config.loops) for name, layer in blocks_sublayers(self.blocks)]

    def read_out(self, h: torch.Tensor) -> torch.Tensor:
        """The predictions y_j from the last residual stream: (B, N)."""
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
