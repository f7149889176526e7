"""Language-model training: presets, the loop, atomic checkpoints with exact resume, and DDP.

One run trains one variant (llama, cem-attn, cem-mlp, cem-full) into a run folder (its files,
identity, checkpoints and metrics: `run_folder`). The run holds the folder's lock for its whole
life; a folder made by a run with another configuration or other data is refused. Starting the
same run again resumes from its newest intact checkpoint and reproduces the uninterrupted run
exactly (the data stream is deterministic and fast-forwarded to the checkpointed step).
summary.json holds parameters, tokens/s, validation perplexity (also at other T), samples and
the data readers' counts of skipped records.

Scale-out: ``torchrun --nproc_per_node=N -m cem_core lm train ...`` runs DistributedDataParallel
(gloo on CPU, NCCL on GPU). The documents are split into ``data_shards`` shards (one per rank);
rank r draws its rows of every global batch from shard r, so a single process with
``data_shards=N`` sees exactly the same global batches as N ranks.
"""
from __future__ import annotations

import json
import math
import os
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from cem_core.experiments.integrity import FolderLock
from cem_core.experiments.records import atomic_write, atomic_write_text, provenance
from cem_core.experiments.schedule import OPTIM_FIELDS, OptimConfig, as_optim, descend, set_lr
from cem_core.nn.config import SHAPE_FIELDS, CEMOptions, ModelShape, as_shape, check_eval_T
from cem_core.nn.flops import model_flops
from cem_core.nn.model import VARIANT_OPTIONS, VARIANTS, LanguageModel, ModelConfig, full_precision, recursion_depth
from cem_core.nn.validate import check_bool, check_choice, check_device, check_int, fail

from . import run_folder
from .data import DataConfig, DataStats, batches, describe, iter_documents, validation_blocks
from .data import content as data_content
from .tokenizer import ByteTokenizer, load_tokenizer, train_bpe

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
    data_order: int | None = None    # None: the documents' own order; k: each pass shuffled by seed k (data.batches)

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
               and not (k == "data_order" and v is None)}                 # a later field: only when set
        config = own | self.shape.recorded() | asdict(self.optim) | {"cem": cem}
        return run_folder.run_identity(config, data)

    def run_hash(self, data: DataConfig) -> str:
        return run_folder.identity_hash(self.identity(data))


def chinchilla_tokens(params: int) -> int:
    """The compute-optimal budget of about 20 training tokens per parameter (Hoffmann et al., 2022)."""
    return 20 * params


# -- distributed ---------------------------------------------------------------------------------


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def init_distributed() -> Dist:
    """Read torchrun's environment and start the process group (gloo on CPU, NCCL on GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    d = Dist(rank=int(os.environ["RANK"]), world_size=world, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return d


# -- data ----------------------------------------------------------------------------------------


class BatchStream:
    """Global batches from ``data_shards`` deterministic streams; this process's rows only.

    Shard s yields batches of batch_size / shards blocks from data shard s; a global batch is
    those of every shard, in shard order. A rank of a torchrun job reads its own shard only."""

    def __init__(self, data: DataConfig, tokenizer, cfg: LMTrainConfig, shards: list[int], stats: DataStats):
        per_shard = cfg.batch_size // cfg.data_shards
        self.streams = [batches(data, tokenizer, "train", cfg.seq_len, per_shard, rank=s, world_size=cfg.data_shards,
                                stats=stats, order=cfg.data_order) for s in shards]

    def skip(self, steps: int) -> None:
        """Fast-forward past the batches a checkpointed run has already consumed."""
        for stream in self.streams:
            next(islice(stream, steps, steps), None)

    def next(self) -> torch.Tensor:
        return torch.cat([next(stream) for stream in self.streams])


def build_tokenizer(cfg: LMTrainConfig, data: DataConfig, out: Path, d: Dist, device: torch.device,
                    record: dict):
    """The byte tokenizer, or the run's BPE tokenizer (trained once, saved atomically, its sha256
    recorded in run.json and checked on every resume)."""
    if cfg.tokenizer == "byte":
        return ByteTokenizer()
    path = out / run_folder.TOKENIZER

    def make_and_check():
        if not path.exists():
            bpe = train_bpe(iter_documents(data, "train"), vocab_size=int(cfg.tokenizer[4:]), max_bytes=8_000_000)
            atomic_write(path, bpe.save)
        run_folder.check_tokenizer(out, record)

    on_rank0(d, device, make_and_check)
    return load_tokenizer(path)


# -- the loop --------------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(model, val: torch.Tensor, batch_size: int, device, autocast) -> float:
    """Mean validation cross-entropy (nats per token)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(val), batch_size):
        batch = val[i:i + batch_size].to(device)
        with autocast():
            logits = model(batch[:, :-1])
        total += F.cross_entropy(full_precision(logits).flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
        count += batch[:, 1:].numel()
    model.train()
    return total / count


def train_step(net, model, optimizer, batch: torch.Tensor, grad_clip: float, autocast=nullcontext) -> torch.Tensor:
    """One optimizer step on token blocks (B, seq_len + 1): next-token cross-entropy of `net` (the model,
    or its DDP or compiled wrapper), backward, clipping of the model's gradient norm, the optimizer's
    step. Returns the loss; a loss that is not finite raises FloatingPointError before any update, and so do
    weights the step made not finite (a rate far too large), so that no checkpoint ever holds them."""
    with autocast():
        logits = net(batch[:, :-1])
    loss = F.cross_entropy(full_precision(logits).flatten(0, 1), batch[:, 1:].flatten())
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss became {loss.item()}")
    descend(optimizer, model, loss, grad_clip)
    if not torch.stack([p.isfinite().all() for p in model.parameters()]).all():
        raise FloatingPointError("the weights became non-finite")
    return loss


def perplexity(loss: float, where: str) -> float:
    """exp(loss) of a validation loss; a loss that is not finite is divergence (FloatingPointError), and a finite
    one too large for exp an infinite perplexity, never an OverflowError."""
    if not math.isfinite(loss):
        raise FloatingPointError(f"the validation loss became {loss} {where}")
    return math.exp(loss) if loss < 700 else math.inf


def seconds_per_step(cfg: LMTrainConfig, steps: int = 2, vocab_size: int = ByteTokenizer.vocab_size,
                     warmup: int = 1) -> float:
    """Seconds one optimizer step of `cfg` takes on this machine now, on the CPU: the median of `steps` timed
    steps on random tokens after `warmup` untimed ones (the app's time estimates). It is a measurement, so it
    reflects whatever else the machine is doing."""
    check_int("steps", steps, 1)
    check_int("warmup", warmup, 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = LanguageModel(cfg.model_config(vocab_size))
        batch = torch.randint(0, vocab_size, (cfg.batch_size, cfg.seq_len + 1))
        optimizer = cfg.optim.optimizer(model)
        times = []
        for _ in range(steps + warmup):
            start = time.perf_counter()
            train_step(model, model, optimizer, batch, cfg.optim.grad_clip)
            times.append(time.perf_counter() - start)
    timed = sorted(times[warmup:])
    return timed[len(timed) // 2]


def run_seconds(cfg: LMTrainConfig, step_seconds: float, steps: int | None = None) -> float:
    """The time the first `steps` steps of a run of `cfg` take (default: the whole run) at `step_seconds` a
    training step: the steps and the evaluations among them, every eval_every steps and at the last (each
    evaluation batch is a forward pass, about a third of a training step)."""
    steps = cfg.steps if steps is None else steps
    evaluations = steps // cfg.eval_every + (steps == cfg.steps and steps % cfg.eval_every != 0)
    return step_seconds * (steps + evaluations * cfg.eval_batches / 3)


def train_flops_per_token(model_cfg: ModelConfig, seq_len: int, batch: int) -> float:
    """Matmul FLOPs per trained token at `batch` sequences a step (forward + backward = 3 x forward), for MFU."""
    return 3 * model_flops(model_cfg, seq_len, batch)["total"] / seq_len


@dataclass
class RunResult:
    out_dir: Path
    summary: dict = field(default_factory=dict)


def train(cfg: LMTrainConfig, data: DataConfig, out_dir, progress: bool = True, device: str | None = None) -> RunResult:
    """Train one run into out_dir, or resume it there; the summary comes back when it finishes.

    Refused (ValueError) when another process holds the folder, when the folder holds another
    run (other configuration or data), or when no checkpoint in it is intact."""
    d = init_distributed()
    if d.active and cfg.data_shards != d.world_size:
        cfg = replace(cfg, data_shards=d.world_size)
    device = check_device(device or (f"cuda:{d.local_rank}" if torch.cuda.is_available() else "cpu"))
    out = Path(out_dir)
    lock = FolderLock(out, "LM run")

    def take_folder():                       # rank 0 holds the folder for the whole job
        lock.acquire()
        held = data_content(data)            # local shards are read whole here, before any work
        return run_folder.claim(out, cfg.identity(data), LMTrainConfig().identity(DataConfig()), held)

    try:
        record = on_rank0(d, device, take_folder)
        return _train(cfg, data, out, record, d, device, progress)
    finally:
        lock.release()


def on_rank0(d: Dist, device: torch.device, step):
    """Run `step` on rank 0 only; every rank returns its result or raises its ValueError, so a
    refusal ends all ranks with the same message instead of leaving them waiting at a barrier."""
    result, error = None, None
    if d.main:
        try:
            result = step()
        except ValueError as err:
            error = str(err)
    if d.active:
        shared = [error, result]
        dist.broadcast_object_list(shared, src=0, device=device if device.type == "cuda" else None)
        error, result = shared
    if error is not None:
        raise ValueError(error)
    return result


@dataclass
class _Run:
    """One LM run's live state, from its setup to its summary."""
    cfg: LMTrainConfig
    data: DataConfig
    out: Path
    d: Dist
    device: torch.device
    run_hash: str                 # as recorded when the run began (checkpoints carry it)
    tokenizer: object
    model_cfg: ModelConfig
    model: LanguageModel
    net: torch.nn.Module          # the model as trained: DDP-wrapped and compiled when asked
    optimizer: torch.optim.Optimizer
    stream: BatchStream
    val: object                   # the validation blocks (rank 0 only)
    metrics: run_folder.Metrics
    params: int
    start: int                    # the step it resumes from
    train_stats: DataStats
    val_stats: DataStats

    def autocast(self):
        """bf16 autocast for a bfloat16 run on a GPU, else nothing."""
        on = self.cfg.dtype == "bfloat16" and self.device.type == "cuda"
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=on)


def _train(cfg: LMTrainConfig, data: DataConfig, out: Path, record: dict, d: Dist, device: torch.device,
           progress: bool) -> RunResult:
    run = _setup(cfg, data, out, record, d, device)
    _loop(run, progress)
    data_stats = {"train": _all_ranks(run.train_stats, d).as_dict(), "validation": run.val_stats.as_dict()}
    result = RunResult(out_dir=out)
    if d.main:
        result.summary = finish(run, data_stats)
    if d.active:
        dist.barrier()
    return result


def _setup(cfg: LMTrainConfig, data: DataConfig, out: Path, record: dict, d: Dist, device: torch.device) -> _Run:
    """The tokenizer, the model (from its newest intact checkpoint), the optimizer and the data streams."""
    dtype = DTYPES[cfg.dtype]
    param_dtype = torch.float32 if dtype == torch.bfloat16 else dtype
    run_hash = record["identity_hash"]
    tokenizer = build_tokenizer(cfg, data, out, d, device, record)
    model_cfg = cfg.model_config(tokenizer.vocab_size)
    torch.manual_seed(cfg.seed)
    model = LanguageModel(model_cfg).to(device=device, dtype=param_dtype)
    model.check_token_ids = device.type == "cpu"   # ids come from the tokenizer; no per-step sync on a GPU
    optimizer = cfg.optim.optimizer(model)
    start = run_folder.load_latest_checkpoint(out, model, optimizer, run_hash, announce=d.main)
    shards = [d.rank] if d.active else list(range(cfg.data_shards))
    train_stats, val_stats = DataStats(), DataStats()
    stream = BatchStream(data, tokenizer, cfg, shards, train_stats)
    stream.skip(start)
    val = (validation_blocks(data, tokenizer, cfg.seq_len, cfg.eval_batches * cfg.batch_size, stats=val_stats)
           if d.main else None)
    params = sum(p.numel() for p in model.parameters())
    header = {"config": asdict(cfg), "identity_hash": run_hash, "data": describe(data), "params": params,
              "provenance": provenance(), "world_size": d.world_size, "device": str(device)}
    metrics = run_folder.Metrics(out / run_folder.METRICS, header, start, enabled=d.main)
    net = torch.nn.parallel.DistributedDataParallel(model) if d.active else model
    if cfg.compile:
        net = torch.compile(net)
    return _Run(cfg=cfg, data=data, out=out, d=d, device=device, run_hash=run_hash, tokenizer=tokenizer,
                model_cfg=model_cfg, model=model, net=net, optimizer=optimizer, stream=stream, val=val,
                metrics=metrics, params=params, start=start, train_stats=train_stats, val_stats=val_stats)


def _loop(run: _Run, progress: bool) -> None:
    """The training steps from `run.start`: each logged (loss averaged over the ranks), evaluated every
    eval_every steps and checkpointed every ckpt_every steps, and at the last."""
    cfg, d = run.cfg, run.d
    bar = None
    if progress and d.main:
        from tqdm import tqdm
        bar = tqdm(total=cfg.steps, initial=run.start, unit="step", desc=f"{cfg.variant}")
    tokens_per_step = cfg.batch_size * cfg.seq_len
    t0 = time.perf_counter()
    for step in range(run.start, cfg.steps):
        lr, loss = _step(run, step)
        record = {"step": step + 1, "loss": loss, "lr": lr, "tokens": (step + 1) * tokens_per_step,
                  "tokens_per_s": (step + 1 - run.start) * tokens_per_step / (time.perf_counter() - t0)}
        last = step + 1 == cfg.steps
        if ((step + 1) % cfg.eval_every == 0 or last) and d.main:
            val_loss = evaluate(run.model, run.val, cfg.batch_size, run.device, run.autocast)
            record.update(val_loss=val_loss, val_ppl=perplexity(val_loss, f"at step {step + 1}; lower "
                                                                           f"lr={cfg.optim.lr}"))
        run.metrics.write(record)
        if bar:
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.3f}", **({"val_ppl": f"{record['val_ppl']:.2f}"}
                                                            if "val_ppl" in record else {}))
        if (step + 1) % cfg.ckpt_every == 0 or last:
            if d.main:
                run_folder.save_checkpoint(run.out, run.model, run.optimizer, step + 1, run.run_hash)
            if d.active:
                dist.barrier()
    if bar:
        bar.close()


def _step(run: _Run, step: int) -> tuple[float, float]:
    """One optimizer step at the schedule's rate; returns the rate and the loss, averaged over the ranks."""
    cfg = run.cfg
    lr = cfg.optim.lr_at(step, cfg.steps)
    set_lr(run.optimizer, lr)
    try:
        loss = train_step(run.net, run.model, run.optimizer, run.stream.next().to(run.device), cfg.optim.grad_clip,
                          run.autocast)
    except FloatingPointError as e:
        raise FloatingPointError(f"{e} at step {step + 1}; lower lr={cfg.optim.lr}") from None
    logged = loss.detach().clone()
    if run.d.active:
        dist.all_reduce(logged)
        logged /= run.d.world_size
    return lr, logged.item()


def _all_ranks(stats: DataStats, d: Dist) -> DataStats:
    """The training readers' counts summed over the ranks (each rank reads its own records)."""
    if not d.active:
        return stats
    names = list(stats.as_dict())
    counts = torch.tensor([getattr(stats, name) for name in names], dtype=torch.float64)
    dist.all_reduce(counts)
    return DataStats(**{name: int(c) for name, c in zip(names, counts.tolist())})


def finish(run: _Run, data_stats: dict) -> dict:
    """Final evaluation (also at other T), samples, and summary.json."""
    cfg, model, val, device, autocast, tokenizer = run.cfg, run.model, run.val, run.device, run.autocast, run.tokenizer
    out, params, d = run.out, run.params, run.d
    records = run_folder.read_metrics(out)
    speeds = [r["tokens_per_s"] for r in records[len(records) // 2:]] or [0.0]
    val_loss = evaluate(model, val, cfg.batch_size, device, autocast)
    by_T = {}
    for T in cfg.eval_T:
        with recursion_depth(model, T):
            by_T[str(T)] = perplexity(evaluate(model, val, cfg.batch_size, device, autocast), f"at T={T}")
    prompt = torch.tensor([tokenizer.encode("The ")[:cfg.seq_len - 1]], dtype=torch.long, device=device)
    sample = ""
    if cfg.sample_tokens:
        model.eval()
        n = min(cfg.sample_tokens, cfg.seq_len - prompt.shape[1])          # prompt and sample fit one context
        gen = model.generate(prompt, n, temperature=0.8, top_k=50,
                             generator=torch.Generator(device=device).manual_seed(cfg.seed))
        sample = tokenizer.decode(gen.tokens[0].tolist())
    tokens_per_s = sorted(speeds)[len(speeds) // 2]
    summary = {"variant": cfg.variant, "preset": cfg.preset, "params": params, "data": describe(run.data),
               "data_stats": data_stats, "steps": cfg.steps, "tokens": cfg.steps * cfg.batch_size * cfg.seq_len,
               "chinchilla_tokens": chinchilla_tokens(params), "tokens_per_s": tokens_per_s,
               "val_loss": val_loss, "val_ppl": perplexity(val_loss, "at the end"), "val_ppl_by_T": by_T,
               "sample": sample,
               "world_size": d.world_size, "device": str(device), "identity_hash": run.run_hash}
    if device.type == "cuda":
        peak = float(os.environ.get("CEM_PEAK_TFLOPS", "989")) * 1e12     # H100/H200 dense bf16
        flops_per_token = train_flops_per_token(run.model_cfg, cfg.seq_len, cfg.batch_size)
        summary["mfu"] = tokens_per_s * flops_per_token / (peak * d.world_size)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1))
    return summary
