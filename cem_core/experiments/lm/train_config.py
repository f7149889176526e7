"""A language-model run's configuration: `LMTrainConfig` (the variant, its sizes, the tokenizer and the
training settings, validated at construction), the presets it starts from (`TRAIN_PRESETS`) and the parameter
dtypes (`DTYPES`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import torch

from cem_core.experiments.schedule import OPTIM_FIELDS, OptimConfig, as_optim
from cem_core.nn.config import SHAPE_FIELDS, CEMOptions, ModelShape, as_shape, check_eval_T
from cem_core.nn.model import VARIANT_OPTIONS, VARIANTS, ModelConfig
from cem_core.nn.validate import check_bool, check_choice, check_int, fail

from ..train_depths import check_train_depth
from . import run_folder
from .data_config import DataConfig

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}

# Model sizes per preset. paper-86m / paper-162m are our choice (the paper's exact configurations
# are not public): Llama totals of 85.2M and 163.9M with the byte tokenizer, trained for about
# 20 tokens per Llama parameter (65,536 tokens a step).
TRAIN_PRESETS = {
    "cpu-tiny": dict(shape=ModelShape(d_model=128, n_layers=2, n_heads=4, d_ff=344),
                     train=dict(seq_len=128, batch_size=16, steps=300, optim=OptimConfig(lr=3e-3), eval_every=100,
                                eval_batches=8, ckpt_every=100)),
    "paper-86m": dict(shape=ModelShape(d_model=768, n_layers=12, n_heads=12, d_ff=2048),
                      train=dict(seq_len=1024, batch_size=64, steps=26000, optim=OptimConfig(lr=6e-4), eval_every=1000,
                                 eval_batches=32, ckpt_every=1000, dtype="bfloat16")),
    "paper-162m": dict(shape=ModelShape(d_model=1024, n_layers=12, n_heads=16, d_ff=3072),
                       train=dict(seq_len=1024, batch_size=64, steps=50000, optim=OptimConfig(lr=5e-4), eval_every=1000,
                                  eval_batches=32, ckpt_every=1000, dtype="bfloat16")),
}


@dataclass(frozen=True, kw_only=True)
class LMTrainConfig:
    preset: str | None = "cpu-tiny"  # the label of the sizes' origin; None: sizes set by the caller (lm sweep)
    variant: str = "llama"
    cem: CEMOptions | None = None    # the CEM layers' switches (None: the variant's own, VARIANT_OPTIONS)
    T: int | None = None             # override the CEM layers' T (None: as `cem` or the variant has it)
    shape: ModelShape = field(default_factory=ModelShape)   # sizes and activation (a dict as run.json holds it)
    tokenizer: str = "byte"          # "byte" or "bpe:<vocab size>" (trained on the first 8 MB of train)
    seq_len: int = 128
    batch_size: int = 16             # global batch (sequences), split evenly over the data shards
    steps: int = 300
    optim: OptimConfig = field(default_factory=OptimConfig)   # AdamW and its schedule (a dict as run.json holds it)
    seed: int = 0
    eval_every: int = 100
    eval_batches: int = 8
    ckpt_every: int = 100
    dtype: str = "float32"           # parameters; "bfloat16" means float32 weights with bf16 autocast (GPU)
    compile: bool = False
    data_shards: int = 1             # torchrun sets this to the world size
    eval_T: tuple = ()               # also report validation perplexity at these T (test-time scaling)
    sample_tokens: int = 200
    data_order: int | None = None    # None: the documents' own order; k: each pass shuffled by seed k (packing.batches)
    train_depth: str = "fixed"       # the in-layer steps each training step trains at (train_depths.TRAIN_DEPTHS)

    def __post_init__(self) -> None:
        if self.preset is not None:
            check_choice("preset", self.preset, tuple(TRAIN_PRESETS))
        check_choice("variant", self.variant, tuple(VARIANTS))
        if self.T is not None and self.variant == "llama":
            fail("T", self.T, "applies to CEM layers only; variant='llama' has none")
        if self.cem is not None:
            if isinstance(self.cem, dict):         # as run.json and the sweep's records hold it
                object.__setattr__(self, "cem", CEMOptions(**self.cem))
            if not isinstance(self.cem, CEMOptions):
                fail("cem", self.cem, "must be None or a CEMOptions")
            if self.variant == "llama":
                fail("cem", self.cem, "applies to CEM layers only; variant='llama' has none")
        object.__setattr__(self, "shape", as_shape(self.shape))
        object.__setattr__(self, "optim", as_optim(self.optim))
        for name in ("batch_size", "steps", "eval_every",
                     "eval_batches", "ckpt_every", "data_shards"):
            check_int(name, getattr(self, name), 1)
        check_int("seq_len", self.seq_len, 2)        # a sample needs a prompt token and room for one more
        check_int("seed", self.seed, 0, 2 ** 63 - 1)   # torch.manual_seed's range
        check_int("sample_tokens", self.sample_tokens, 0)
        if self.data_order is not None:
            check_int("data_order", self.data_order, 0)
        check_choice("dtype", self.dtype, tuple(DTYPES))
        check_bool("compile", self.compile)
        if self.batch_size % self.data_shards:
            fail("batch_size", self.batch_size, f"must be divisible by data_shards={self.data_shards} (the ranks)")
        if not (self.tokenizer == "byte" or (self.tokenizer.startswith("bpe:") and self.tokenizer[4:].isdigit()
                                             and 300 <= int(self.tokenizer[4:]) <= 200000)):
            fail("tokenizer", self.tokenizer, "must be 'byte' or 'bpe:<vocab size in [300, 200000]>'")
        cem = self.cem_options()                     # validates T
        object.__setattr__(self, "eval_T", check_eval_T(self.eval_T, cem.T, cem.eta_mode == "per_step"))
        if self.eval_T and self.variant == "llama":
            fail("eval_T", self.eval_T, "applies to CEM layers only; variant='llama' has none")
        check_train_depth(self.train_depth, self.variant != "llama", cem.eta_mode == "per_step")
        self.model_config(vocab_size=257)   # validate the model sizes now

    @classmethod
    def from_preset(cls, preset: str, cem_switches: dict | None = None, **overrides) -> "LMTrainConfig":
        """The preset's run with `overrides` (None: the preset's): training fields, ModelShape's and OptimConfig's;
        `cem_switches` (CEMOptions fields, T aside: the command line's CEM flags) change a CEM variant's own
        switches."""
        check_choice("preset", preset, tuple(TRAIN_PRESETS))
        given = {k: v for k, v in overrides.items() if v is not None}
        if cem_switches:
            variant = given.get("variant", "llama")
            if variant == "llama":
                fail("cem", cem_switches, "applies to CEM layers only; variant='llama' has none")
            given["cem"] = replace(VARIANT_OPTIONS[variant], **cem_switches)
        sizes = {k: given.pop(k) for k in SHAPE_FIELDS if k in given}
        rates = {k: given.pop(k) for k in OPTIM_FIELDS if k in given}
        train = TRAIN_PRESETS[preset]["train"]
        return cls(preset=preset, shape=replace(TRAIN_PRESETS[preset]["shape"], **sizes),
                   **{**train, **given, "optim": replace(train["optim"], **rates)})

    def cem_options(self) -> CEMOptions:
        """The CEM switches (`cem`, else the variant's own), with T overridden when set."""
        options = VARIANT_OPTIONS[self.variant] if self.cem is None else self.cem
        return options if self.T is None else replace(options, T=self.T)

    def model_config(self, vocab_size: int) -> ModelConfig:
        return ModelConfig.variant(self.variant, cem=self.cem_options(), shape=self.shape, vocab_size=vocab_size,
                                   max_seq_len=self.seq_len)

    def identity(self, data: DataConfig) -> dict:
        """What determines this run's numbers: the configuration and the data (see run_folder). The shape's and
        the optimizer's fields sit among the configuration's own (the form run hashes have always been computed
        from)."""
        cem = None if self.cem is None else self.cem.recorded()       # later switches only off their defaults
        own = {k: v for k, v in asdict(self).items() if k not in ("shape", "optim")
               and not (k == "data_order" and v is None)                  # later fields: only when set
               and not (k == "train_depth" and v == "fixed")}
        config = own | self.shape.recorded() | asdict(self.optim) | {"cem": cem}
        return run_folder.run_identity(config, data)

    def run_hash(self, data: DataConfig) -> str:
        return run_folder.identity_hash(self.identity(data))
