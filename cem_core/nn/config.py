"""Frozen, validated configurations for every layer and for the CEM switches.

What a sublayer's config holds says what the layer is. ``SublayerConfig`` (the width and the
norm) is shared by all; ``HeadsConfig`` (heads, RoPE) by both attentions and ``GatedConfig``
(d_ff, phi) by both MLPs. The baselines add nothing to these (``LlamaAttentionConfig``,
``SwiGLUConfig``). The CEM layers add the descent, ``DescentConfig`` (T, eta, anchor,
preconditioner): ``AttentionConfig`` is the descent on heads plus the D+LR diagonal,
``MLPConfig`` the descent on a gated MLP. So a baseline cannot be given a CEM switch, and each
config counts its own parameters (and, for attention, its cache). ``BlockConfig`` is both at once:
one descent on the sum of the two energies (``CEMBlock``). ``CEMOptions`` holds the CEM switches
once for the models, the app and the command line.

Every invalid setting raises ``ValueError`` naming the field, the value and what is allowed,
at construction time, so nothing fails half-way through a forward pass or a training run.
Defaults that the paper leaves open (docs/paper-notes.md#choices-the-paper-leaves-open) are
listed in docs/choices.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from .activations import ACTIVATIONS
from .block_modes import BLOCK_MODES
from .diagonals import DIAGONAL_FORMS, DIAGONALS
from .precondition import PRECONDITIONERS
from .ties import ATTENTION_TIES, MLP_TIES, energy_view
from .validate import as_config, check_bool, check_choice, check_float, check_int, fail

ETA_MODES = ("fixed", "learned", "per_step")
KINDS = ("llama", "cem")
MLP_KINDS = (*KINDS, "none")   # "none": attention-only blocks


def check_diagonal_form(diagonal: str, diagonal_form: str) -> None:
    """A form that needs a diagonal (DiagonalForm.needs_diagonal) with none is refused."""
    if DIAGONAL_FORMS[diagonal_form].needs_diagonal and diagonal == "none":
        others = " or ".join(repr(name) for name in DIAGONALS if name != "none")
        fail("diagonal_form", diagonal_form, f"needs a diagonal (diagonal={others})")


def switch(default, kind: str, allowed, app, label: str, help: str, *, attention_only: bool = False,
           learned: bool = False, energy: bool = True):
    """A field of CEMOptions, with what every place that offers it needs: its kind ("int", "float"
    or "choice"), what is valid (int: (lo, hi); float: (lo, strictly above lo); choice: the
    options), what an interactive control offers (`app`: int (lo, hi); float (lo, hi, step);
    choice: the options), a short label and a help text, whether it concerns attention only,
    whether it only means something for a trained model (`learned`), and whether every setting keeps the layer
    a descent on an energy (`energy`: False for the ties, whose untied settings leave the energy view, so the
    pages that show energies do not offer it)."""
    return field(default=default, metadata=dict(kind=kind, allowed=allowed, app=app, label=label, help=help,
                                                 attention_only=attention_only, learned=learned, energy=energy))


@dataclass(frozen=True, kw_only=True)
class CEMOptions:
    """The switches of the CEM layers, in one place: the GP and LM models, the app's controls, the
    command line, the benchmark and the figures all set them through this object, and the command
    line flags and app controls are built from the fields' metadata (see `switch`). A new switch
    is a field here, its mapping in `descent_fields` / `attention_fields`, and its use in a layer."""

    T: int = switch(1, "int", (1, 64), (1, 16), "steps T", "in-layer steps (paper: T)")
    eta: float = switch(1.0, "float", (0.0, True), (0.05, 20.0, 0.05), "step size eta",
                        "step size (paper: eta); its initial value when learned")
    eta_mode: str = switch("fixed", "choice", ETA_MODES, ETA_MODES, "step size mode",
                           "fixed eta, one learned eta, or one learned eta per step", learned=True)
    anchor: float = switch(0.0, "float", (0.0, False), (0.0, 5.0, 0.1), "anchor lambda (our extension; 0 = the paper)",
                           "lambda of the anchor (lambda/2)|x - x0|^2, our extension; 0 = the paper")
    diagonal: str = switch("none", "choice", DIAGONALS, DIAGONALS, "diagonal (D+LR)",
                           "D+LR diagonal of attention: " + "; ".join(f"{name}: {diagonal.label}" for name, diagonal
                                                                      in DIAGONALS.items()),
                           attention_only=True)
    diagonal_form: str = switch("bilinear", "choice", DIAGONAL_FORMS, DIAGONAL_FORMS, "diagonal form",
                                "; ".join(form.label for form in DIAGONAL_FORMS.values()), attention_only=True)
    preconditioner: str = switch("none", "choice", PRECONDITIONERS, PRECONDITIONERS, "preconditioner",
                                 "; ".join(f"{name} ({kind.label})" for name, kind in PRECONDITIONERS.items()))
    rank: int = switch(4, "int", (1, None), (1, 8), "preconditioner rank", "rank of the preconditioner's low-rank part")
    block: str = switch("sequential", "choice", BLOCK_MODES, BLOCK_MODES, "block energy",
                        "; ".join(mode.label for mode in BLOCK_MODES.values()))
    attn_ties: str = switch("both", "choice", ATTENTION_TIES, ATTENTION_TIES, "attention ties",
                            "ties of CEM attention: " + "; ".join(tie.label for tie in ATTENTION_TIES.values()),
                            attention_only=True, energy=False)
    mlp_ties: str = switch("tied", "choice", MLP_TIES, MLP_TIES, "MLP tie",
                           "tie of the CEM MLP: " + "; ".join(tie.label for tie in MLP_TIES.values()), energy=False)

    def __post_init__(self) -> None:
        for f in fields(self):
            kind, allowed = f.metadata["kind"], f.metadata["allowed"]
            value = getattr(self, f.name)
            if kind == "int":
                check_int(f.name, value, *allowed)
            elif kind == "float":
                check_float(f.name, value, allowed[0], strict=allowed[1])
            else:
                check_choice(f.name, value, allowed)
        check_diagonal_form(self.diagonal, self.diagonal_form)
        check_ties(self.attn_ties, self.diagonal, self.mlp_ties, BLOCK_MODES[self.block].one_energy)

    def recorded(self) -> dict:
        """The switches as run records and hashes hold them: a switch added after the first committed
        results (LATER_SWITCHES) only when it is off its default, so earlier runs keep their hashes."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if not (f.name in LATER_SWITCHES and getattr(self, f.name) == LATER_SWITCHES[f.name])}

    def descent_fields(self) -> dict:
        """The fields of every CEM layer's config (DescentConfig)."""
        return dict(T=self.T, eta=self.eta, learn_eta=self.eta_mode != "fixed",
                    eta_per_step=self.eta_mode == "per_step", anchor=self.anchor,
                    preconditioner=self.preconditioner, rank=self.rank)

    def attention_fields(self) -> dict:
        """The fields of CEM attention's config (AttentionConfig)."""
        return self.descent_fields() | dict(diagonal=self.diagonal, diagonal_form=self.diagonal_form,
                                            attn_ties=self.attn_ties)

    def mlp_fields(self) -> dict:
        """The fields of the CEM MLP's config (MLPConfig)."""
        return self.descent_fields() | dict(mlp_ties=self.mlp_ties)

    @property
    def energy_view(self) -> bool:
        """Whether the CEM layers are gradient steps on an energy: every tie kept (docs/design.md#215-the-ties)."""
        return energy_view(self.attn_ties, self.mlp_ties)


# switches added after results were first committed, with their defaults (see CEMOptions.recorded)
LATER_SWITCHES = {"diagonal_form": "bilinear", "block": "sequential", "attn_ties": "both", "mlp_ties": "tied"}


def check_ties(attn_ties: str, diagonal: str, mlp_ties: str = "tied", one_energy: bool = False) -> None:
    """Free attention projections are refused with a D+LR diagonal: its fast paths read the values as the keys; and
    any free projection with a block that descends one energy (a joint block is its energy's gradient steps)."""
    if not ATTENTION_TIES[attn_ties].energy and diagonal != "none":
        fail("attn_ties", attn_ties, f"needs diagonal='none' (got {diagonal!r}): the D+LR paths use the keys as "
                                     "the values, so only the fully tied attention ('both') takes a diagonal")
    if one_energy and not energy_view(attn_ties, mlp_ties):
        fail("block", "joint", f"descends one energy, so it needs every tie (got attn_ties={attn_ties!r}, "
                             f"mlp_ties={mlp_ties!r}): an untied layer has no energy (docs/design.md#215-the-ties)")


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """A model's sizes and its MLP's nonlinearity, declared once: every ModelConfig is one, and the LM and GP
    training configs, the LM sweep's presets, the app's design controls and the benchmark each hold one (their
    ``shape``), so a new size or activation reaches all of them
    (docs/design.md#12-rules-that-keep-the-layers-honest)."""

    d_model: int = 128            # width d of the residual stream
    n_layers: int = 2             # blocks L
    n_heads: int = 4              # heads H of every attention
    d_ff: int = 344               # hidden width of every MLP (paper: d_ff)
    activation: str = "silu"      # phi of every MLP (a CEM energy uses its antiderivative Phi)

    def __post_init__(self) -> None:
        for name in ("d_model", "n_layers", "n_heads", "d_ff"):
            check_int(name, getattr(self, name), 1)
        if self.d_model % self.n_heads:                                # every block has an attention: d_h = d / H
            fail("d_model", self.d_model, f"must be divisible by n_heads={self.n_heads}")
        check_choice("activation", self.activation, tuple(ACTIVATIONS))

    def shape_fields(self) -> dict:
        """The shape's fields by name (of a ModelConfig too: only those ModelShape declares)."""
        return {name: getattr(self, name) for name in SHAPE_FIELDS}

    def recorded(self) -> dict:
        """The shape as run records and hashes hold it: the activation only off its default (it was added after
        the first committed results, so earlier runs keep their hashes)."""
        default = ModelShape.__dataclass_fields__["activation"].default
        return {k: v for k, v in self.shape_fields().items() if not (k == "activation" and v == default)}


SHAPE_FIELDS = tuple(f.name for f in fields(ModelShape))


def as_shape(value, name: str = "shape") -> ModelShape:
    """A ModelShape from a ModelShape (or the shape of a ModelConfig) or from its fields as JSON holds them
    (run.json, a record)."""
    value = as_config(value, ModelShape, name)
    return value if type(value) is ModelShape else ModelShape(**value.shape_fields())   # a ModelConfig's shape


def check_eval_T(values, trained_T: int, per_step: bool) -> tuple:
    """T values at which to evaluate a model trained with `trained_T` steps (test-time scaling): integers
    in CEMOptions' range of T, and only `trained_T` for one learned step size per step."""
    lo, hi = CEMOptions.__dataclass_fields__["T"].metadata["allowed"]
    if not isinstance(values, (tuple, list)):
        fail("eval_T", values, f"must be a tuple of integers in [{lo}, {hi}]")
    for T in values:
        check_int("eval_T", T, lo, hi)                       # 2.5 is refused, never truncated
        if per_step and T != trained_T:
            fail("eval_T", T, f"eta_mode='per_step' learned {trained_T} step sizes; it can only be evaluated at "
                              "the T it was trained with")
    return tuple(values)


def switches(*, learned: bool = True, untied: bool = True) -> tuple:
    """The fields of CEMOptions (without those that need training, for `learned=False`, and without those that can
    leave the energy view, the ties, for `untied=False`)."""
    return tuple(f for f in fields(CEMOptions) if (learned or not f.metadata["learned"])
                 and (untied or f.metadata["energy"]))


@dataclass(frozen=True, kw_only=True)
class SublayerConfig:
    """What every pre-norm sublayer has, CEM or baseline: the residual width and its RMSNorm."""

    d_model: int                  # width d of the residual stream h
    norm_eps: float = 1e-6        # RMSNorm epsilon of Norm(h)

    def __post_init__(self) -> None:
        check_int("d_model", self.d_model, 1)
        check_float("norm_eps", self.norm_eps, 0.0, strict=True)


@dataclass(frozen=True, kw_only=True)
class HeadsConfig(SublayerConfig):
    """What every multi-head attention sublayer has, CEM or Llama: heads and rotary embeddings."""

    n_heads: int = 1              # heads k = 1..H
    rope: bool = True             # rotary position embedding inside the score
    rope_base: float = 10000.0    # RoPE theta

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads                            # d_h = d / H

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("n_heads", self.n_heads, 1)
        if self.d_model % self.n_heads:
            fail("d_model", self.d_model, f"must be divisible by n_heads={self.n_heads}")
        check_bool("rope", self.rope)
        check_float("rope_base", self.rope_base, 1.0, strict=True)
        if self.rope and self.head_dim % 2:
            fail("n_heads", self.n_heads,
                 f"rope=True needs an even head dimension; d_model/n_heads = {self.head_dim}")


@dataclass(frozen=True, kw_only=True)
class GatedConfig(SublayerConfig):
    """What every gated MLP sublayer has, CEM or SwiGLU: the hidden width and the nonlinearity."""

    d_ff: int                     # hidden width (paper: d_ff)
    activation: str = "silu"      # phi (a CEM energy uses its antiderivative Phi)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("d_ff", self.d_ff, 1)
        check_choice("activation", self.activation, tuple(ACTIVATIONS))


@dataclass(frozen=True, kw_only=True)
class LlamaAttentionConfig(HeadsConfig):
    """The Llama attention baseline: free W_Q, W_K, W_V, W_O, one pre-norm step, nothing to descend."""

    def param_counts(self) -> dict[str, int]:
        """Closed-form parameter counts: W_Q, W_K, W_V, W_O (4d^2) and the norm."""
        return {"projections": 4 * self.d_model ** 2, "norm": self.d_model}

    def cache_floats_per_token(self) -> int:
        """Cached numbers per token and layer: keys and values, 2d."""
        return 2 * self.d_model


@dataclass(frozen=True, kw_only=True)
class SwiGLUConfig(GatedConfig):
    """The SwiGLU baseline (Hugging Face's LlamaMLP): free gate, up and down projections."""

    def param_counts(self) -> dict[str, int]:
        """Closed-form parameter counts: gate, up and down projections (3 d d_ff) and the norm."""
        return {"projections": 3 * self.d_model * self.d_ff, "norm": self.d_model}


@dataclass(frozen=True, kw_only=True)
class DescentConfig(SublayerConfig):
    """Options shared by every CEM layer: the recursion x <- x - eta P grad E, T times."""

    T: int = 1                    # number of in-layer steps (paper: T)
    eta: float = 1.0              # step size (paper: eta); its initial value when learned
    learn_eta: bool = False       # learn eta, kept positive through eta = exp(log_eta)
    eta_per_step: bool = False    # with learn_eta: one eta per step t (T scalars) instead of one
    anchor: float = 0.0           # lambda of our (lambda/2)|x - x0|^2 term; 0 = the paper
    preconditioner: str = "none"  # a name in PRECONDITIONERS: "none", "dlr" (the paper), "psd" (ours)
    rank: int = 4                 # rank r of the preconditioner's low-rank part

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("T", self.T, 1, 64)
        check_float("eta", self.eta, 0.0, strict=True)
        check_bool("learn_eta", self.learn_eta)
        check_bool("eta_per_step", self.eta_per_step)
        if self.eta_per_step and not self.learn_eta:
            fail("eta_per_step", True, "needs learn_eta=True (a fixed eta is the same at every step)")
        check_float("anchor", self.anchor, 0.0, strict=False)
        check_choice("preconditioner", self.preconditioner, tuple(PRECONDITIONERS))
        check_int("rank", self.rank, 1, self.d_model if self.preconditioner != "none" else None)

    def _descent_param_counts(self) -> dict[str, int]:
        d, r = self.d_model, self.rank
        return {
            "preconditioner": PRECONDITIONERS[self.preconditioner].param_count(d, r),
            "eta": (self.T if self.eta_per_step else 1) if self.learn_eta else 0,
            "norm": d,
        }


@dataclass(frozen=True, kw_only=True)
class AttentionConfig(DescentConfig, HeadsConfig):
    """CEM attention: T steps on the log-sum-exp interaction energy
    (docs/design.md#23-interaction-energy-and-attention)."""

    diagonal: str = "none"        # a name in DIAGONALS: D in A_k = diag(d_k) + W_Q,k^T W_K,k
    diagonal_form: str = "bilinear"   # "bilinear": x^T D c; "distance": -(1/2)(x - c)^T D (x - c), D = softplus > 0
    attn_ties: str = "both"       # a name in ATTENTION_TIES: W_V = W_K and W_O = W_Q^T, one of them, or none

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("diagonal", self.diagonal, tuple(DIAGONALS))
        check_choice("diagonal_form", self.diagonal_form, tuple(DIAGONAL_FORMS))
        check_diagonal_form(self.diagonal, self.diagonal_form)
        check_choice("attn_ties", self.attn_ties, tuple(ATTENTION_TIES))
        check_ties(self.attn_ties, self.diagonal)

    def param_counts(self) -> dict[str, int]:
        """Closed-form parameter counts: W_Q and W_K (2d^2; W_V = W_K and W_O = W_Q^T when tied, else their free
        d^2 each), the diagonal, the descent's extras."""
        return {"projections": self._attention_projections(), "diagonal": self._diagonal_count(),
                **self._descent_param_counts()}

    def _attention_projections(self) -> int:
        return 2 * self.d_model ** 2 + ATTENTION_TIES[self.attn_ties].params(self.d_model, 0)

    def _diagonal_count(self) -> int:
        return DIAGONALS[self.diagonal].params(self.d_model, self.n_heads)

    @property
    def query_space(self) -> bool:
        """Whether the T steps run in query space (q <- q + eta o W_Q P W_Q^T, one readout at the end;
        docs/design.md#213-the-attention-fast-paths): exact without a diagonal term, and with an anchor
        only when P = I (then W_Q (x - x0) = q - q0); worth it from T = 2 on."""
        return self.diagonal == "none" and self.T > 1 and (self.anchor == 0 or self.preconditioner == "none")

    def cache_floats_per_token(self) -> int:
        """Cached numbers per token and layer: the keys only (d; the values are the keys), + c_j for D+LR, + the
        values with a free W_V."""
        free_values = "v_proj" in ATTENTION_TIES[self.attn_ties].free
        return self.d_model * (1 + (self.diagonal != "none") + free_values)


@dataclass(frozen=True, kw_only=True)
class MLPConfig(DescentConfig, GatedConfig):
    """CEM gated MLP: T steps on the element-wise energy (docs/design.md#25-element-wise-energy-and-the-gated-mlp)."""

    mlp_ties: str = "tied"        # a name in MLP_TIES: the readout is U^T ("tied") or a free W_D ("untied")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("mlp_ties", self.mlp_ties, tuple(MLP_TIES))

    def param_counts(self) -> dict[str, int]:
        """Closed-form parameter counts: U and G (2 d d_ff; the readout is U^T when tied, else a free W_D, d d_ff
        more), the descent's extras."""
        return {"projections": self._mlp_projections(), **self._descent_param_counts()}

    def _mlp_projections(self) -> int:
        return 2 * self.d_model * self.d_ff + MLP_TIES[self.mlp_ties].params(self.d_model, self.d_ff)


@dataclass(frozen=True, kw_only=True)
class BlockConfig(AttentionConfig, MLPConfig):
    """A CEM block as one energy: T steps on E_att + E_mlp (docs/design.md#214-the-block-as-one-energy), with
    attention's heads and diagonal, the MLP's hidden width and phi, and one norm, step size, anchor and
    preconditioner for both terms. At T = 1 it is a parallel block, h + Attn(Norm h) + MLP(Norm h)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ties(self.attn_ties, self.diagonal, self.mlp_ties, one_energy=True)

    @property
    def query_space(self) -> bool:
        return False                                                   # the MLP term needs x at every step

    def param_counts(self) -> dict[str, int]:
        """Closed-form parameter counts: both terms' projections (2d^2 + 2 d d_ff), the diagonal, one descent's
        extras (one norm, one preconditioner, one set of step sizes)."""
        return {"attention.projections": self._attention_projections(), "attention.diagonal": self._diagonal_count(),
                "mlp.projections": self._mlp_projections(), **self._descent_param_counts()}
