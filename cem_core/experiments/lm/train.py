"""Language-model training: the loop, atomic checkpoints with exact resume, and DDP.

One run trains one variant (llama, cem-attn, cem-mlp, cem-full) of an `LMTrainConfig` (`train_config`) into a
run folder (its files, identity, checkpoints and metrics: `run_folder`). The run holds the folder's lock for its
whole life; a folder made by a run with another configuration or other data is refused. Starting the
same run again resumes from its newest intact checkpoint and reproduces the uninterrupted run
exactly (the data stream is deterministic and fast-forwarded to the checkpointed step).
summary.json holds parameters, tokens/s, validation perplexity (also at other T), samples and
the data readers' counts of skipped records.

Scale-out: ``torchrun --nproc_per_node=N -m cem_core lm train ...`` runs DistributedDataParallel
(gloo on CPU, NCCL on GPU; `distributed`). The documents are split into ``data_shards`` shards (one per rank);
rank r draws its rows of every global batch from shard r, so a single process with
``data_shards=N`` sees exactly the same global batches as N ranks.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path

import torch
import torch.distributed as dist

from cem_core.experiments.integrity import FolderLock
from cem_core.experiments.records import atomic_write, atomic_write_text, provenance
from cem_core.experiments.schedule import set_lr
from cem_core.experiments.train_depths import TRAIN_DEPTHS
from cem_core.nn.model import LanguageModel, ModelConfig, recursion_depth
from cem_core.nn.validate import check_device

from . import run_folder
from .cost import chinchilla_tokens, train_flops_per_token
from .data_config import DataConfig, DataStats
from .distributed import Dist, init_distributed, on_rank0
from .packing import batches, validation_blocks
from .sources import content as data_content
from .sources import describe, iter_documents
from .step import evaluate, perplexity, train_step
from .tokenizer import ByteTokenizer, load_tokenizer, train_bpe
from .train_config import DTYPES, LMTrainConfig


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
                          run.autocast, TRAIN_DEPTHS[cfg.train_depth].depths(cfg.cem_options().T, cfg.seed, step))
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
