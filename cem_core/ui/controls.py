"""The app's controls as validated dataclasses: the single place where user input becomes
configs (docs/design.md#12-rules-that-keep-the-layers-honest: pages contain no logic of their own).

Every combination of control values either builds configs or raises ``ValueError`` with the
reason, including sizes too large for an interactive page. Each control class
round-trips through URL query parameters (``to_query`` / ``from_query``) so a copied link
restores the view.

Here: the ``Controls`` every page's controls build on, and the energy page's (``EnergyControls``); the other
pages' are in design_controls, gp_controls and inside_controls.
"""
from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass, field, replace

from cem_core.nn.activations import ACTIVATIONS
from cem_core.nn.config import AttentionConfig, BlockConfig, CEMOptions, MLPConfig, switches
from cem_core.nn.diagonals import DIAGONALS
from cem_core.nn.validate import check_bool, check_choice, check_float, check_int, fail

LAYERS = ("attention", "mlp", "block", "joint")
LAYER_LABELS = {"attention": "CEM attention", "mlp": "CEM gated MLP", "block": "Full block (attention, then MLP)",
                "joint": "Block as one energy (E_att + E_mlp)"}
LAYER_CAPTIONS = {   # what a layer of two terms runs, under the controls
    "block": "A block runs attention, then the MLP on the attention's output: two descents, shown in turn.",
    "joint": "The block as one energy: every step descends E_att + E_mlp together from one x⁽⁰⁾ = Norm(h), with one "
             "step size and preconditioner; at T = 1 it is a parallel block, h + Attn(Norm h) + MLP(Norm h)."}
COST_LIMIT = 1e9          # rough multiply-adds of one energy-page render; above it we refuse. Lowered from 3e9 so that
                          # the largest allowed page (a block, width and sequence 128, per-head D+LR, T 16: 9.97e8)
                          # settles in a browser within about 2 s on 2 cores (benchmarks/browser_latency.py)
LANDSCAPE_GRID = 41       # contour resolution of the energy landscape
TEXT_LIMIT = 1000         # a text control's characters at most (the page reads far fewer: lm.inspect says why)


class Controls:
    """Validation and URL round trip from SPECS: name -> ("int"|"float", (lo, hi)) | ("choice", options) |
    ("choices", options), a non-empty tuple written comma-separated in the URL | ("bool", None) |
    ("name", None), a file or folder name (no path) | ("text", None), any text of at most TEXT_LIMIT characters
    (the page says what it can read).

    A page's CEM switches live in its field `cem` (a CEMOptions); CEM names the ones the page offers,
    with the range of their interactive control from CEMOptions (or CEM_RANGES), so a new switch
    reaches every page that offers all of them. A page's model shape lives in its field `shape` (a
    ModelShape); SHAPE holds the specs of the shape fields the page offers. Values are flat everywhere
    else: ``values()``, ``from_values(**values)`` and the URL use one name per control."""

    SPECS: dict = {}
    CEM: tuple = ()              # the CEM switches the page offers
    CEM_RANGES: dict = {}        # narrower ranges than the switches' own, by name
    SHAPE: dict = {}             # the ModelShape fields the page offers, name -> spec as in SPECS
    LABELS: dict = {}            # the labels a person sees, where they are not the name (a CEM switch has its own)
    PREFIX = ""

    @classmethod
    def _groups(cls) -> dict:
        """The nested configs of the page's controls: field name -> the names of the controls in it."""
        return {name: names for name, names in (("cem", cls.CEM), ("shape", tuple(cls.SHAPE))) if names}

    def _owner(self, name: str):
        """The config that holds control `name`: the page's `cem`, its `shape` or the page itself."""
        return next((getattr(self, group) for group, names in self._groups().items() if name in names), self)

    @classmethod
    def specs(cls) -> dict:
        """Every control: the page's own, then its CEM switches."""
        cem = {}
        for f in switches():
            if f.name in cls.CEM:
                kind = f.metadata["kind"]
                cem[f.name] = (kind, cls.CEM_RANGES.get(f.name, f.metadata["app"]))
        return cls.SHAPE | cls.SPECS | cem

    @classmethod
    def from_values(cls, **values):
        """Controls from flat values (the page's widgets or a link); missing ones keep their defaults."""
        nested = {}
        for group, names in cls._groups().items():
            f = cls.__dataclass_fields__[group]
            default = f.default if f.default is not MISSING else f.default_factory()
            nested[group] = replace(default, **{name: values.pop(name) for name in names if name in values})
        return cls(**values, **nested)

    def values(self) -> dict:
        """Every control's value, by its flat name."""
        return {name: getattr(self._owner(name), name) for name in self.specs()}

    def changes(self, other) -> str:
        """The controls whose value differs from `other`'s, with this state's values ("T 16, anchor 1.0"); a
        legend names a state by them."""
        mine, theirs = self.values(), other.values()
        return ", ".join(f"{k} {v}" for k, v in mine.items() if theirs[k] != v) or "the same state"

    def _validate(self) -> None:
        for name, (kind, allowed) in self.specs().items():
            value = getattr(self._owner(name), name)
            if kind == "name":
                if not isinstance(value, str) or value in ("", ".", "..") or "/" in value or "\\" in value:
                    fail(name, value, "must be a name, not a path")
            elif kind == "choice":
                check_choice(name, value, allowed)
            elif kind == "choices":
                if not isinstance(value, tuple) or not value or any(v not in allowed for v in value):
                    fail(name, value, f"must be a non-empty selection of {', '.join(allowed)}")
            elif kind == "bool":
                check_bool(name, value)
            elif kind == "text":
                if not isinstance(value, str) or len(value) > TEXT_LIMIT:
                    fail(name, value if isinstance(value, str) and len(value) <= 40 else f"{str(value)[:40]}…",
                         f"must be a text of at most {TEXT_LIMIT} characters")
            elif kind == "int":
                check_int(name, value, *allowed)
            else:
                check_float(name, value, allowed[0], strict=False)
                if value > allowed[1]:
                    fail(name, value, f"must be in [{allowed[0]}, {allowed[1]}]")

    def to_query(self) -> dict[str, str]:
        def text(v):
            if isinstance(v, tuple):
                return ",".join(v)
            return str(v).lower() if isinstance(v, bool) else str(v)
        return {self.PREFIX + name: text(value) for name, value in self.values().items()}

    @classmethod
    def grid(cls, name: str) -> float | None:
        """The step of a number control's slider (None: whole numbers, or no slider)."""
        kind, allowed = cls.specs()[name]
        return allowed[2] if kind == "float" and len(allowed) > 2 else None

    @classmethod
    def from_link(cls, query: dict):
        """Controls from a link, as the page's sliders can show them: a number off its slider's grid
        (``anchor=3.65`` where the slider moves by 0.1) is snapped to the nearest grid value. Returns the
        controls and one sentence per snapped value (bad values raise ValueError, as in ``from_query``)."""
        query, notes = dict(query), []
        for name in cls.specs():
            step, raw = cls.grid(name), query.get(cls.PREFIX + name)
            if step is None or raw is None:
                continue
            try:
                value = float(raw)
            except ValueError:
                continue                                               # from_query says why
            if not math.isfinite(value):
                continue                                               # the validation says why (no grid point)
            lo = cls.specs()[name][1][0]
            snapped = round(lo + round((value - lo) / step) * step, 10)
            if abs(snapped - value) > 1e-9 * max(1.0, abs(value)):
                query[cls.PREFIX + name] = str(snapped)
                notes.append(f"{cls.label(name)} {raw} lies between the slider's steps of {step:g}: showing "
                             f"{snapped:g}")
        return cls.from_query(query), notes

    @classmethod
    def label(cls, name: str) -> str:
        """The name a person sees for control `name` (a CEM switch's label, or the page's own)."""
        if name in cls.CEM:
            return CEMOptions.__dataclass_fields__[name].metadata["label"]
        return cls.LABELS.get(name, name)

    @classmethod
    def settle(cls, values: dict) -> tuple[dict, list[str]]:
        """The values a page draws for these control values, and a sentence per change a person would not expect
        (a page whose controls depend on each other resets them together; by default nothing changes)."""
        return dict(values), []

    @classmethod
    def explain(cls, err: ValueError) -> str:
        """A refusal in the words the page shows: "width d 7: must be ..." for "width=7 is invalid: must be ..."."""
        match = re.fullmatch(r"(\w+)=(.+?) is invalid: (.*)", str(err), re.S)
        if match is None or match[1] not in cls.specs():
            return str(err)
        return f"{cls.label(match[1])} {match[2].strip(chr(39))}: {match[3]}"

    @classmethod
    def from_query(cls, query: dict):
        """Parse URL query parameters (strings); other keys are ignored, bad values raise ValueError."""
        values = {}
        for name, (kind, _) in cls.specs().items():
            raw = query.get(cls.PREFIX + name)
            if raw is None:
                continue
            try:
                if kind == "int":
                    values[name] = int(raw)
                elif kind == "float":
                    values[name] = float(raw)
                elif kind == "bool":
                    if str(raw).lower() not in ("true", "false", "1", "0"):
                        raise ValueError
                    values[name] = str(raw).lower() in ("true", "1")
                elif kind == "choices":
                    values[name] = tuple(v for v in str(raw).split(",") if v)
                else:
                    values[name] = str(raw)
            except ValueError:
                fail(name, raw, f"cannot be read as {'a number' if kind in ('int', 'float') else 'true/false'}")
        return cls.from_values(**values)


@dataclass(frozen=True, kw_only=True)
class EnergyControls(Controls):
    """The energy-descent page: one layer (or a block) on a random input."""

    SPECS = {"layer": ("choice", LAYERS), "p_scale": ("float", (0.0, 3.0, 0.1)),
             "heads": ("int", (1, 8)), "width": ("int", (2, 512)), "seq_len": ("int", (2, 256)),
             "seed": ("int", (0, 9999)), "rope": ("bool", None), "token": ("int", (0, 255)),
             "heat_head": ("int", (0, 7)), "activation": ("choice", ACTIVATIONS)}
    CEM = tuple(f.name for f in switches(learned=False, untied=False) if f.name != "block")   # every switch of an
    # untrained layer that keeps it a descent on an energy (the layer control says joint; the ties are not offered)
    LABELS = {"p_scale": "preconditioner scale", "width": "width d", "seq_len": "sequence length", "rope": "RoPE",
              "token": "followed token", "heat_head": "heatmap head", "activation": "activation φ"}
    GROUPS = {"Layer": ("layer", *CEM, "p_scale", "activation"),       # the sidebar's headers and their controls,
              "Sizes": ("heads", "width", "seq_len", "seed", "rope"),   # in the app and on the static site
              "View": ("token", "heat_head")}
    HELPS = {"p_scale": "U and V entries ~ N(0, scale²/d). Above about 1.1 the paper's form has negative eigenvalues.",
             "token": "The token whose landscape is drawn and whose line is bold. Click a line or a heatmap row to "
                      "choose it there.",
             "activation": "The MLP's nonlinearity φ; its energy uses the antiderivative Φ (Φ' = φ).",
             "heads": "Offered: the head counts that divide the width d (with RoPE, into even head widths).",
             "rope": "Rotary position embedding in the score; it rotates pairs of coordinates, so it needs an even "
                     "width d."}      # the help a control's widget gives, where it has one (a CEM switch: its own)

    layer: str = "attention"
    cem: CEMOptions = field(default_factory=lambda: CEMOptions(T=4, rank=2))
    p_scale: float = 0.3          # P's U, V entries ~ N(0, p_scale^2 / d); above ~1.1 dlr turns indefinite
    heads: int = 2
    width: int = 8
    seq_len: int = 8
    seed: int = 0
    rope: bool = False
    token: int = 255              # the token every view follows (the landscape's), shown as min(token, seq_len - 1)
    heat_head: int = 0            # the attention heatmap's head, shown as min(heat_head, heads - 1)
    activation: str = "silu"      # the MLP's phi

    ATTENTION_ONLY = ("heads", "rope", "heat_head")   # besides the switches marked attention_only
    PRECONDITIONER_ONLY = ("rank", "p_scale")                      # mean nothing with P = I
    DIAGONAL_ONLY = ("diagonal_form",)                             # means nothing without a diagonal
    MLP_ONLY = ("activation",)                                     # means nothing for attention alone

    @classmethod
    def shown(cls, layer: str, preconditioner: str, diagonal: str = "none") -> tuple[str, ...]:
        """The controls that apply to this layer, preconditioner and diagonal (the page hides the others)."""
        attention_only = {*cls.ATTENTION_ONLY, *(f.name for f in switches() if f.metadata["attention_only"])}
        return tuple(name for name in cls.specs()
                     if not (layer == "mlp" and name in attention_only)
                     and not (layer == "attention" and name in cls.MLP_ONLY)
                     and not (preconditioner == "none" and name in cls.PRECONDITIONER_ONLY)
                     and not (diagonal == "none" and name in cls.DIAGONAL_ONLY))

    @classmethod
    def heads_options(cls, width: int, rope: bool) -> tuple[int, ...]:
        """The head counts the page offers at this width: those that divide it (d_h = d / H), with RoPE only
        those that leave an even head width (RoPE rotates pairs of coordinates)."""
        lo, hi = cls.SPECS["heads"][1]
        return tuple(h for h in range(lo, hi + 1) if width % h == 0 and not (rope and (width // h) % 2))

    @classmethod
    def settle(cls, values: dict) -> tuple[dict, list[str]]:
        """The state the page draws for these control values: options that make no sense together are reset
        together, so every change of one control leads to a valid state. With no diagonal its form goes back
        to its default; RoPE turns off at an odd width (no head width would be even); the heads snap to the
        nearest count the width allows (``heads_options``), downwards. Returns the values and one sentence,
        in the page's labels, per change a person would not expect."""
        values, notes = dict(values), []
        if values["diagonal"] == "none":
            values["diagonal_form"] = CEMOptions.__dataclass_fields__["diagonal_form"].default
        if values["rope"] and values["width"] % 2:
            values["rope"] = False
            notes.append(f"RoPE is off: it rotates pairs of coordinates, so it needs an even width d "
                         f"(not {values['width']}).")
        options = cls.heads_options(values["width"], values["rope"])
        if values["heads"] not in options:
            heads = max((h for h in options if h <= values["heads"]), default=options[0])
            notes.append(f"heads {values['heads']} → {heads}: the heads must divide the width d = {values['width']}"
                         + (" into even head widths (RoPE)" if values["rope"] else "")
                         + f"; this width allows {', '.join(map(str, options))}.")
            values["heads"] = heads
        return values, notes

    def __post_init__(self) -> None:
        self._validate()
        if self.cost() > COST_LIMIT:
            fail("width", self.width,
                  f"with sequence length {self.seq_len}, steps T {self.cem.T}, heads {self.heads} and diagonal "
                  f"{self.cem.diagonal}, too large for an interactive page (seconds of CPU per change on a busy "
                  "2-core machine); lower the width, the sequence length or T")
        if self.cem.block != "sequential":
            fail("block", self.cem.block, "is set by the layer control here (layer='joint')")
        self.attention_config()   # raises ValueError for inconsistent combinations
        self.mlp_config()
        self.block_config()

    def followed(self) -> int:
        """The token the views follow: `token`, or the last one of a shorter sequence."""
        return min(self.token, self.seq_len - 1)

    @property
    def d_ff(self) -> int:
        return 2 * self.width                                          # the page's MLP width: d_ff = 2 d

    def cost(self) -> float:
        """Rough multiply-adds of one render: T+1 trace steps and the landscape grid, per phase."""
        n, d = self.seq_len, self.width
        widen = DIAGONALS[self.cem.diagonal].core_width(d, self.heads) / d   # the core's width over the plain one
        per_step, per_point = 0.0, 0.0
        if self.layer != "mlp":                                        # per head (H+1) x, shared 2 x (joint: both)
            per_step += 3 * n * n * d * widen + 4 * n * d * d
            per_point += n * d * widen + 2 * d * d
        if self.layer != "attention":
            per_step += 4 * n * d * self.d_ff
            per_point += 2 * d * self.d_ff
        return float((self.cem.T + 1) * per_step + LANDSCAPE_GRID ** 2 * per_point)

    def _switches(self) -> CEMOptions:
        return replace(self.cem, rank=min(self.cem.rank, self.width))   # a rank above the width means "full"

    def attention_config(self) -> AttentionConfig | None:
        if self.layer not in ("attention", "block"):
            return None
        return AttentionConfig(d_model=self.width, n_heads=self.heads, rope=self.rope,
                               **self._switches().attention_fields())

    def mlp_config(self) -> MLPConfig | None:
        if self.layer not in ("mlp", "block"):
            return None
        return MLPConfig(d_model=self.width, d_ff=self.d_ff, activation=self.activation,
                         **self._switches().mlp_fields())

    def block_config(self) -> BlockConfig | None:
        """The joint block's config (layer 'joint': one descent on E_att + E_mlp), else None."""
        if self.layer != "joint":
            return None
        return BlockConfig(d_model=self.width, n_heads=self.heads, rope=self.rope, d_ff=self.d_ff,
                           activation=self.activation,
                           **self._switches().attention_fields())
