"""Local SlimPajama shards (`DataConfig.source` "path"): which files a run reads, and their records.

Shards are `*.jsonl` and `*.jsonl.zst`, one record a line: {"text": ..., "meta": {"redpajama_set_name":
"RedPajamaC4"}}. `path` is one shard or a folder; files are read in sorted order. A folder with `train/` and
`validation/` subfolders (SlimPajama's layout) gives those splits; otherwise the split is by hash (`filters`).
Record k (k-th non-blank line over all files) goes to rank k % world_size; an oversized line still counts as
a record for the rank assignment. A folder that cannot be read is an error naming it, never skipped; a run's or
sweep's folder inside the data folder (its own metrics.jsonl) is not data and is left out.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from cem_core.experiments.integrity import is_run_folder
from cem_core.nn.validate import fail

from .data_config import SHARD_SUFFIXES, SPLITS, DataConfig, DataStats
from .filters import OVERSIZED, select_texts
from .shard_reader import shard_lines


def local_documents(config: DataConfig, split: str, rank: int, world_size: int,
                     stats: DataStats) -> Iterator[str]:
    files, hash_split = _shard_layout(Path(config.path), split)
    records = _shard_records(files, rank, world_size, config.max_document_bytes)
    return select_texts(records, config, split, hash_split, stats)


def _shard_layout(root: Path, split: str) -> tuple[list[Path], bool]:
    """The shard files of `split` and whether the split is by hash (no train/validation folders)."""
    if root.is_file():
        return [root], True
    if (root / "train").is_dir() and (root / "validation").is_dir():
        files, hash_split = find_shards(root / split), False
    else:
        files, hash_split = find_shards(root), True
    if not files:
        fail("path", str(root), f"holds no *.jsonl or *.jsonl.zst files"
              f"{'' if hash_split else f' under {split}/'}")
    return files, hash_split


def shard_files(root: Path) -> list[Path]:
    """Every shard file that a run on `root` reads, over both splits (ValueError if a split has none)."""
    return sorted({file for split in SPLITS for file in _shard_layout(root, split)[0]})


def find_shards(folder: Path) -> list[Path]:
    """The *.jsonl and *.jsonl.zst files under `folder` (a linked folder inside it is not entered, nor a run's or
    sweep's folder: a run written inside its data folder would otherwise read its own metrics.jsonl as a new
    shard, and never resume), sorted by their relative path. A folder that cannot be read is an error naming it,
    never skipped silently."""
    files = []

    def unreadable(err: OSError):
        fail("path", str(folder), f"cannot be read: {err.filename}: {err.strerror or err}")

    for parent, subfolders, names in os.walk(folder, onerror=unreadable):
        if is_run_folder(names):                     # a run's or sweep's own files (its metrics.jsonl) are not data
            subfolders.clear()
            continue
        files += [Path(parent, name) for name in names if name.endswith(SHARD_SUFFIXES)]
    files = [p for p in files if p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


def _shard_records(files: list[Path], rank: int, world_size: int, max_bytes: int) -> Iterator[object]:
    """Parsed records of this rank (record k goes to rank k % world_size); None where a line
    is not valid JSON in UTF-8, OVERSIZED where it is longer than `max_bytes`."""
    k = 0
    for file in files:
        for line in shard_lines(file, max_bytes):
            if line is not OVERSIZED and not line.strip():
                continue
            if k % world_size == rank:
                yield line if line is OVERSIZED else _parse(line)
            k += 1


def _parse(line: bytes) -> object:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):    # JSONDecodeError, UnicodeDecodeError; nested too deep to parse
        return None
