"""Language-model documents from any source (`DataConfig.source`): a split's texts for one rank, a label of
the data, and what the data holds (part of a run's identity).

    iter_documents(config, split, rank=0, world_size=1, stats=None) -> Iterator[str]
    describe(config) -> str
    content(config) -> dict       what the data holds (demo text sha256, or each shard's size and sha256)
    content_sha256(config) -> str | None

The sources themselves: `hub` (Hugging Face streaming), `shards` (local SlimPajama shards, read by
`shard_reader` and checked whole by `shard_cache`) and `stdlib_corpus` (the demo and prose corpora); the
packing into token blocks and batches: `packing`.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from cem_core.nn.validate import check_choice

from .data_config import DEFAULT_MAX_DOCUMENT_BYTES, INSTALLED, SPLITS, DataConfig, DataStats, check_rank
from .hub import stream_hub_documents
from .shard_cache import check_shards
from .shards import local_documents, shard_files
from .stdlib_corpus import DEMO_LABEL, PROSE_LABEL, installed_corpus, installed_split, stdlib_root


def describe(config: DataConfig) -> str:
    """A one-line label of the data, for CLIs, logs and the app."""
    if config.source in INSTALLED:
        label = DEMO_LABEL if config.source == "demo" else PROSE_LABEL
        return f"{label} [{stdlib_root()}, first {config.demo_max_bytes} bytes]"
    where = (f"SlimPajama via Hugging Face datasets streaming: {config.dataset_id}"
             if config.source == "slimpajama" else f"local SlimPajama-format shards: {config.path}")
    if config.source_filter is not None:
        where += f" (only {', '.join(config.source_filter)})"
    if config.max_document_bytes != DEFAULT_MAX_DOCUMENT_BYTES:
        where += f" (documents over {config.max_document_bytes:,} bytes skipped)"
    return where


def iter_documents(config: DataConfig, split: str, rank: int = 0, world_size: int = 1,
                   stats: DataStats | None = None) -> Iterator[str]:
    """The texts of `split` that belong to `rank`, in a deterministic order. Settings are
    checked (and the Hub is contacted) when called, not at the first `next`."""
    check_choice("split", split, SPLITS)
    check_rank(rank, world_size)
    stats = DataStats() if stats is None else stats
    if config.source in INSTALLED:
        return installed_split(config, split, rank, world_size, stats)
    if config.source == "path":
        return local_documents(config, split, rank, world_size, stats)
    return stream_hub_documents(config, split, rank, world_size, stats)


def content(config: DataConfig) -> dict:
    """What the data holds, recorded with a run and compared when it resumes: {"demo_sha256": hex} for the demo
    corpus (it is the standard library of the Python running the run, so another build may give another
    corpus); {"shards": {relative path: {"bytes": n, "sha256": hex}}} for local shards, each checked whole
    first (`check_shards`); {} for the Hub, whose data is named by its dataset id alone."""
    if config.source in INSTALLED:
        return {f"{config.source}_sha256": content_sha256(config)}
    if config.source == "path":
        root = Path(config.path)
        checked = check_shards(shard_files(root))
        return {"shards": {(file.name if root.is_file() else file.relative_to(root).as_posix()): checked[file]
                           for file in checked}}
    return {}


def content_sha256(config: DataConfig) -> str | None:
    """One sha256 of what the data holds: of the demo corpus's text, or of the shards' checksums; None for
    the Hub."""
    digest = hashlib.sha256()
    if config.source in INSTALLED:
        for doc in installed_corpus(config):
            digest.update(doc.encode("utf-8", errors="replace"))
            digest.update(b"\0")
    elif config.source == "path":
        digest.update(json.dumps(content(config), sort_keys=True).encode())
    else:
        return None
    return digest.hexdigest()
