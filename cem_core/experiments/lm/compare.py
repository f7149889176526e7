"""``lm compare``: the variants on the same data, one table of parameters, speed and perplexity."""
from __future__ import annotations

import json
from pathlib import Path

from cem_core.experiments.integrity import FolderLock, foreign_files
from cem_core.experiments.records import atomic_write_text
from cem_core.nn.model import VARIANTS
from cem_core.nn.validate import check_device

from .cost import chinchilla_tokens
from .data_config import DataConfig, DataStats
from .sources import describe
from .train import train
from .train_config import LMTrainConfig


def compare(preset: str, data: DataConfig, out_root, variants=tuple(VARIANTS), progress: bool = True,
            device: str | None = None, cem_switches: dict | None = None, **overrides) -> list[dict]:
    """Train (or resume) each variant into out_root/<variant>; return one record per variant.
    The comparison holds out_root for its whole life (each run also holds its own folder). The CEM switches
    (`cem_switches`, and T and eval_T among `overrides`) apply to the CEM variants; Llama has none."""
    if len(set(variants)) != len(variants) or not variants:
        raise ValueError(f"variants={list(variants)!r} is invalid: name each variant once (they share one folder "
                         "each)")
    llama = {k: v for k, v in overrides.items() if k not in ("T", "eval_T")}
    configs = [LMTrainConfig.from_preset(preset, variant=variant, **llama) if variant == "llama" else
               LMTrainConfig.from_preset(preset, variant=variant, cem_switches=cem_switches, **overrides)
               for variant in variants]
    if device is not None:
        check_device(device)
    records = []
    with FolderLock(out_root, "LM comparison"):
        stray = foreign_files(Path(out_root), (*VARIANTS, "compare.json", "log.txt"))
        if stray:
            raise ValueError(f"{out_root} holds files that are not a comparison's ({', '.join(stray[:6])}): "
                             "choose a new or empty folder with --out")
        for cfg in configs:
            summary = train(cfg, data, Path(out_root) / cfg.variant, progress=progress, device=device).summary
            records.append({k: summary[k] for k in ("variant", "params", "tokens_per_s", "val_loss", "val_ppl",
                                                    "tokens", "chinchilla_tokens", "val_ppl_by_T", "sample",
                                                    "data_stats")}
                           | {"mfu": summary.get("mfu")})
    return records


def table(records: list[dict], data: DataConfig) -> str:
    base = next((r for r in records if r["variant"] == "llama"), records[0])
    lines = [f"data: {describe(data)}",
             f"{'variant':<10} {'params':>12} {'x llama':>8} {'tokens/s':>10} {'val ppl':>9} "
             f"{'tokens':>12} {'20 tok/param':>13}",
             "-" * 80]
    for r in records:
        lines.append(f"{r['variant']:<10} {r['params']:>12,} {r['params'] / base['params']:>8.3f} "
                     f"{r['tokens_per_s']:>10,.0f} {r['val_ppl']:>9.3f} {r['tokens']:>12,} "
                     f"{chinchilla_tokens(r['params']):>13,}")
    lines.append(data_line(records[0]["data_stats"]))
    for r in records:
        if r["val_ppl_by_T"]:
            lines.append(f"{r['variant']}: val ppl at other T: " +
                         ", ".join(f"T={t}: {p:.3f}" for t, p in r["val_ppl_by_T"].items()))
    return "\n".join(lines)


def data_line(data_stats: dict) -> str:
    """What the data readers read and skipped (every variant reads the same records)."""
    train, validation = (DataStats(**data_stats[split]) for split in ("train", "validation"))
    return f"data read: train {train.summary()}; validation {validation.summary()}"


def write_json(records: list[dict], path) -> None:
    atomic_write_text(Path(path), json.dumps(records, indent=1))
