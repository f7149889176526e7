"""Frozen, validated configurations for every CEM layer and model.

Every invalid setting raises ``ValueError`` naming the field, the value and what is allowed,
at construction time, so nothing fails half-way through a forward pass or a training run.
Defaults that the paper leaves open (docs/paper-notes.md#choices-the-paper-leaves-open) are
listed in the README's choices table.
"""
from __future__ import annotations

from dataclasses import dataclass

from .validate import check_bool, check_choice, check_float, check_int, fail

DIAGONALS = ("none", "per_head", "shared")
PRECONDITIONERS = ("none", "dlr", "psd")
ACTIVATIONS = ("silu", "gelu", "relu")
KINDS = ("llama", "cem")


@dataclass(frozen=True, kw_only=True)
class DescentConfig:
    """Options shared by every CEM layer: the recursion x <- x - eta P grad E, T times."""

    d_model: int
    T: int = 1                    # number of in-layer steps (paper: T)
    eta: float = 1.0              # step size (paper: eta); its initial value when learned
    learn_eta: bool = False       # learn eta, kept positive through eta = exp(log_eta)
    eta_per_step: bool = False    # with learn_eta: one eta per step t (T scalars) instead of one
    anchor: float = 0.0           # lambda of our (lambda/2)|x - x0|^2 term; 0 = the paper
    preconditioner: str = "none"  # "none" | "dlr" (paper form) | "psd" (our positive definite form)
    rank: int = 4                 # rank r of the preconditioner's low-rank part
    untied: bool = False          # free baseline weights (T = 1, no diagonal/preconditioner only)
    norm_eps: float = 1e-6        # RMSNorm epsilon of the conditioning Norm(h)

    def __post_init__(self) -> None:
        check_int("d_model", self.d_model, 1)
        check_int("T", self.T, 1, 64)
        check_float("eta", self.eta, 0.0, strict=True)
        check_bool("learn_eta", self.learn_eta)
        check_bool("eta_per_step", self.eta_per_step)
        if self.eta_per_step and not self.learn_eta:
            fail("eta_per_step", True, "needs learn_eta=True (a fixed eta is the same at every step)")
        check_float("anchor", self.anchor, 0.0, strict=False)
        check_choice("preconditioner", self.preconditioner, PRECONDITIONERS)
        check_int("rank", self.rank, 1, self.d_model if self.preconditioner != "none" else None)
        check_bool("untied", self.untied)
        check_float("norm_eps", self.norm_eps, 0.0, strict=True)
        if self.untied:
            extras = {"T": self.T != 1, "preconditioner": self.preconditioner != "none",
                      "learn_eta": self.learn_eta, "anchor": self.anchor != 0.0,
                      "eta": self.eta != 1.0, **self._untied_extras()}
            bad = [k for k, v in extras.items() if v]
            if bad:
                fail(bad[0], getattr(self, bad[0]),
                      "untied=True is defined only for T=1, eta=1, no anchor, no diagonal and "
                      "no preconditioner (untied weights are not a gradient step on an energy)")

    def _untied_extras(self) -> dict[str, bool]:
        return {}

    def _descent_param_counts(self) -> dict[str, int]:
        d, r = self.d_model, self.rank
        return {
            "preconditioner": {"none": 0, "dlr": d + 2 * d * r, "psd": d + d * r}[self.preconditioner],
            "eta": (self.T if self.eta_per_step else 1) if self.learn_eta else 0,
            "norm": d,
        }


@dataclass(frozen=True, kw_only=True)
class AttentionConfig(DescentConfig):
    """CEM attention: T steps on the log-sum-exp interaction energy (docs/design.md#23-interaction-energy-and-attention)."""

    n_heads: int = 1              # heads k = 1..H
    diagonal: str = "none"        # "none" | "per_head" | "shared": D in A_k = diag(d_k) + W_Q,k^T W_K,k
    rope: bool = True             # rotary position embedding inside the score
    rope_base: float = 10000.0    # RoPE theta

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def __post_init__(self) -> None:
        check_int("d_model", self.d_model, 1)
        check_int("n_heads", self.n_heads, 1)
        if self.d_model % self.n_heads:
            fail("d_model", self.d_model, f"must be divisible by n_heads={self.n_heads}")
        check_choice("diagonal", self.diagonal, DIAGONALS)
        check_bool("rope", self.rope)
        check_float("rope_base", self.rope_base, 1.0, strict=True)
        if self.rope and self.head_dim % 2:
            fail("n_heads", self.n_heads,
                  f"rope=True needs an even head dimension; d_model/n_heads = {self.head_dim}")
        super().__post_init__()

    def _untied_extras(self) -> dict[str, bool]:
        return {"diagonal": self.diagonal != "none"}

    def param_counts(self) -> dict[str, int]:
        """Closed-form parameter counts: projections 4d^2 (Llama) or 2d^2 (CEM), plus extras."""
        d, H = self.d_model, self.n_heads
        return {"projections": (4 if self.untied else 2) * d * d,
                "diagonal": {"none": 0, "per_head": H * d, "shared": d}[self.diagonal],
                **self._descent_param_counts()}

    def cache_floats_per_token(self) -> int:
        """Cached numbers per token and layer: K and V (Llama, 2d), K only (CEM, d), + c for D+LR."""
        return (2 if self.untied else 1) * self.d_model + (self.d_model if self.diagonal != "none" else 0)


@dataclass(frozen=True, kw_only=True)
class MLPConfig(DescentConfig):
    """CEM gated MLP: T steps on the element-wise energy (docs/design.md#25-element-wise-energy-and-the-gated-mlp)."""

    d_ff: int                     # width of U and G (paper: d_ff)
    activation: str = "silu"      # phi; the energy uses its antiderivative Phi

    def __post_init__(self) -> None:
        check_int("d_model", self.d_model, 1)
        check_int("d_ff", self.d_ff, 1)
        check_choice("activation", self.activation, ACTIVATIONS)
        super().__post_init__()

    def param_counts(self) -> dict[str, int]:
        """Closed-form parameter counts: projections 3 d d_ff (SwiGLU) or 2 d d_ff (CEM), plus extras."""
        return {"projections": (3 if self.untied else 2) * self.d_model * self.d_ff,
                **self._descent_param_counts()}
