"""Language-model data: SlimPajama (Hugging Face streaming or local shards), an offline demo
corpus, and the packing of documents into fixed-length token blocks.

Sources (`DataConfig.source`):
- "slimpajama": `datasets.load_dataset(dataset_id, streaming=True)`, default
  "DKYoon/SlimPajama-6B" (any Hub id, e.g. "cerebras/SlimPajama-627B"), each rank reading its
  part through `datasets.distributed.split_dataset_by_node`. `stream_hub_documents` also takes
  local json/jsonl `data_files` through the very same code path, which is how it is tested
  offline. An unreachable Hub raises `ConnectionError` naming the local-shard option.
- "path": local SlimPajama shards, `*.jsonl` and `*.jsonl.zst`, one record a line:
  {"text": ..., "meta": {"redpajama_set_name": "RedPajamaC4"}}. `path` is one shard or a folder;
  files are read in sorted order. A folder with `train/` and `validation/` subfolders (SlimPajama's
  layout) gives those splits. Record k (k-th non-blank line over all files) goes to rank
  k % world_size.
- "demo": the source text and docstrings of the Python standard library installed here (PSF
  licence): sorted module files, test suites, site-packages and the codec tables of
  encodings/ left out, the first `demo_max_bytes` bytes. It is NOT SlimPajama; `DEMO_LABEL`
  says so wherever it is shown. Deterministic for a given Python installation.

Splits are "train" and "validation". A source without a validation split (one shard file, a
folder without train/ and validation/, a Hub dataset with only "train") holds out the documents
whose stable hash (blake2b of the text) falls below `validation_fraction`; the demo corpus holds
out the ceil(fraction * n) documents with the smallest hashes, so its validation set is never
empty. Identical texts always land in the same split.

Optionally only records whose meta.redpajama_set_name is in `source_filter` are kept. Malformed
records (bad JSON or UTF-8, not an object, text missing or not a string) are skipped and counted
in a `DataStats` the iterator updates; blank lines are not records.

API:
    DataConfig(source=..., path=..., dataset_id=..., source_filter=..., validation_fraction=...,
               demo_max_bytes=...)
    iter_documents(config, split, rank=0, world_size=1, stats=None) -> Iterator[str]
    describe(config) -> str
    pack_blocks(documents, tokenizer, block_len) -> Iterator[list[int]]
    batches(config, tokenizer, split, seq_len, batch_size, rank=0, world_size=1, stats=None)
        -> Iterator[LongTensor (batch_size, seq_len + 1)]
    validation_blocks(config, tokenizer, seq_len, n_blocks, rank=0, world_size=1)
        -> LongTensor (n, seq_len + 1), n <= n_blocks

Packing: each document's ids followed by the end-of-text id form one stream, cut into
consecutive blocks of seq_len + 1 ids (inputs block[:-1], targets block[1:]); an incomplete
last block or batch is dropped. `batches` over "train" repeats the data forever (pass after
pass, the same order each time); over "validation" it makes one pass. Everything is
deterministic, so a resumed run skips the batches it has consumed
(`itertools.islice(batches(...), step, None)`). Each rank gets different documents: to compare
a multi-process run with one process on the same global batch, build that batch with
world_size=1 and give rank r its rows r::world_size.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import islice
from pathlib import Path

import torch
import zstandard

from ..config import _check_choice, _check_float, _check_int, _fail
from .tokenizer import Tokenizer, first_bytes

SOURCES = ("demo", "slimpajama", "path")
SPLITS = ("train", "validation")
DEFAULT_DATASET_ID = "DKYoon/SlimPajama-6B"
SHARD_SUFFIXES = (".jsonl", ".jsonl.zst")
DEMO_LABEL = ("demo corpus: Python standard library source and docstrings (PSF licence), "
              "not SlimPajama")
DEMO_SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages",
                               "__pycache__", "encodings"})   # encodings/: generated codec tables
LOCAL_SHARDS_HINT = ("use local shards instead: --data PATH, where PATH is a folder of SlimPajama "
                     "*.jsonl or *.jsonl.zst shards (or one shard file), or --data demo for the "
                     "offline demo corpus (not SlimPajama)")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where the documents come from; validated at construction (ValueError names the field)."""

    source: str = "demo"                         # "demo" | "slimpajama" | "path"
    path: str | None = None                      # source="path": a shard file or a folder of shards
    dataset_id: str = DEFAULT_DATASET_ID         # source="slimpajama": the Hub dataset
    source_filter: tuple[str, ...] | None = None  # keep only these redpajama_set_name; None = all
    validation_fraction: float = 0.01            # held out where a source has no validation split
    demo_max_bytes: int = 4_000_000              # source="demo": size cap of the corpus

    def __post_init__(self) -> None:
        _check_choice("source", self.source, SOURCES)
        if self.source == "path":
            _check_shard_path(self.path)
        elif self.path is not None:
            _fail("path", self.path, f"is only used with source='path' (source={self.source!r})")
        if not isinstance(self.dataset_id, str) or not self.dataset_id.strip():
            _fail("dataset_id", self.dataset_id, "must be a non-empty Hugging Face dataset id")
        if self.source_filter is not None:
            names = self.source_filter
            if (isinstance(names, str) or not isinstance(names, (tuple, list)) or not names
                    or not all(isinstance(n, str) and n for n in names)):
                _fail("source_filter", names, "must be None or a non-empty tuple of redpajama set "
                      "names, e.g. ('RedPajamaWikipedia',)")
            object.__setattr__(self, "source_filter", tuple(names))
        _check_float("validation_fraction", self.validation_fraction, 0.0, strict=True)
        if self.validation_fraction >= 1:
            _fail("validation_fraction", self.validation_fraction, "must be in (0, 1)")
        _check_int("demo_max_bytes", self.demo_max_bytes, 1, 1 << 30)


def _check_shard_path(path) -> None:
    if not isinstance(path, str) or not path:
        _fail("path", path, "must name a shard file or a folder of shards with source='path'")
    p = Path(path)
    if not p.exists():
        _fail("path", path, "no such file or folder")
    if p.is_file() and not p.name.endswith(SHARD_SUFFIXES):
        _fail("path", path, "a shard file must end in .jsonl or .jsonl.zst")


@dataclass
class DataStats:
    """Counts kept by the document iterators over the records this rank reads; summing the
    ranks' stats gives the totals. `malformed` and `filtered` count records of either split
    (under a hash split every record is read before its split is known), `documents` only
    those yielded."""

    documents: int = 0   # documents yielded
    malformed: int = 0   # records skipped: bad JSON or UTF-8, not an object, text missing/not a string
    filtered: int = 0    # well-formed records dropped by source_filter


def describe(config: DataConfig) -> str:
    """A one-line label of the data, for CLIs, logs and the app."""
    if config.source == "demo":
        return f"{DEMO_LABEL} [{_stdlib_root()}, first {config.demo_max_bytes} bytes]"
    where = (f"SlimPajama via Hugging Face datasets streaming: {config.dataset_id}"
             if config.source == "slimpajama" else f"local SlimPajama-format shards: {config.path}")
    if config.source_filter is not None:
        where += f" (only {', '.join(config.source_filter)})"
    return where


def iter_documents(config: DataConfig, split: str, rank: int = 0, world_size: int = 1,
                   stats: DataStats | None = None) -> Iterator[str]:
    """The texts of `split` that belong to `rank`, in a deterministic order. Settings are
    checked (and the Hub is contacted) when called, not at the first `next`."""
    _check_choice("split", split, SPLITS)
    _check_rank(rank, world_size)
    stats = DataStats() if stats is None else stats
    if config.source == "demo":
        return _demo_split(config, split, rank, world_size, stats)
    if config.source == "path":
        return _local_documents(config, split, rank, world_size, stats)
    return stream_hub_documents(config, split, rank, world_size, stats)


def _check_rank(rank: int, world_size: int) -> None:
    _check_int("world_size", world_size, 1)
    _check_int("rank", rank, 0, world_size - 1)


# --- records to documents (shared by every source) ------------------------------------------

def _hash_unit(text: str) -> float:
    """A stable number in [0, 1) from the text (same on every machine and Python run)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64


def _set_name(record: dict) -> str | None:
    meta = record.get("meta")
    return meta.get("redpajama_set_name") if isinstance(meta, dict) else None


def _select(records: Iterable[object], config: DataConfig, split: str, hash_split: bool,
            stats: DataStats) -> Iterator[str]:
    """The texts of well-formed records that pass the source filter and, with `hash_split`,
    fall in `split`; malformed and filtered records are counted."""
    for record in records:
        text = record.get("text") if isinstance(record, dict) else None
        if not isinstance(text, str):
            stats.malformed += 1
            continue
        if config.source_filter is not None and _set_name(record) not in config.source_filter:
            stats.filtered += 1
            continue
        if hash_split and (_hash_unit(text) < config.validation_fraction) != (split == "validation"):
            continue
        stats.documents += 1
        yield text


# --- (a) Hugging Face datasets streaming ----------------------------------------------------

def stream_hub_documents(config: DataConfig, split: str, rank: int = 0, world_size: int = 1,
                         stats: DataStats | None = None, *,
                         data_files: dict[str, list[str]] | None = None) -> Iterator[str]:
    """SlimPajama (config.dataset_id) streamed with `datasets`, this rank's part of `split`.

    `data_files` ({"train": [...], "validation": [...]}, json/jsonl files) streams local files
    through the same path instead of the Hub. Without a "validation" split the hash split of
    "train" is used. Raises ConnectionError naming the local-shard option when the Hub cannot
    be reached."""
    from datasets.distributed import split_dataset_by_node

    _check_choice("split", split, SPLITS)
    _check_rank(rank, world_size)
    stats = DataStats() if stats is None else stats
    name = "json" if data_files is not None else config.dataset_id
    splits = _load_streaming(name, data_files)
    hash_split = "validation" not in splits
    if "train" not in splits:
        _fail("dataset_id", name, f"has no 'train' split (splits: {', '.join(splits)})")
    part = split_dataset_by_node(splits["train" if hash_split else split],
                                 rank=rank, world_size=world_size)
    return _select(_rows(part, name), config, split, hash_split, stats)


def _network_errors() -> tuple[type[Exception], ...]:
    """What `datasets`/`huggingface_hub` raise when the Hub is unreachable: ConnectionError
    (also HF_HUB_OFFLINE's OfflineModeIsEnabled), timeouts, and a cache miss in offline mode."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    return ConnectionError, TimeoutError, LocalEntryNotFoundError


def _offline_error(name: str, err: Exception) -> ConnectionError:
    return ConnectionError(f"cannot stream {name!r} from the Hugging Face Hub "
                           f"({type(err).__name__}: {err}); {LOCAL_SHARDS_HINT}")


def _load_streaming(name: str, data_files: dict[str, list[str]] | None):
    """All splits of the Hub dataset `name`, or of local json `data_files` (name "json")."""
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    try:
        return datasets.load_dataset(name, data_files=data_files, streaming=True)
    except _network_errors() as err:
        raise _offline_error(name, err) from err
    except DatasetNotFoundError as err:
        _fail("dataset_id", name, f"not found on the Hugging Face Hub ({err})")


def _rows(dataset, name: str) -> Iterator[dict]:
    """Iterate a streaming dataset, turning a lost connection into the clear message."""
    try:
        yield from dataset
    except _network_errors() as err:
        raise _offline_error(name, err) from err


# --- (b) local SlimPajama shards ------------------------------------------------------------

def _local_documents(config: DataConfig, split: str, rank: int, world_size: int,
                     stats: DataStats) -> Iterator[str]:
    files, hash_split = _shard_layout(Path(config.path), split)
    return _select(_shard_records(files, rank, world_size), config, split, hash_split, stats)


def _shard_layout(root: Path, split: str) -> tuple[list[Path], bool]:
    """The shard files of `split` and whether the split is by hash (no train/validation folders)."""
    if root.is_file():
        return [root], True
    if (root / "train").is_dir() and (root / "validation").is_dir():
        files, hash_split = find_shards(root / split), False
    else:
        files, hash_split = find_shards(root), True
    if not files:
        _fail("path", str(root), f"holds no *.jsonl or *.jsonl.zst files"
              f"{'' if hash_split else f' under {split}/'}")
    return files, hash_split


def find_shards(folder: Path) -> list[Path]:
    """The *.jsonl and *.jsonl.zst files under `folder`, sorted by their relative path."""
    files = [p for p in folder.rglob("*") if p.is_file() and p.name.endswith(SHARD_SUFFIXES)]
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


def _shard_records(files: list[Path], rank: int, world_size: int) -> Iterator[object]:
    """Parsed records of this rank (record k goes to rank k % world_size); None where a line
    is not valid JSON in UTF-8."""
    k = 0
    for file in files:
        with _open_binary(file) as lines:
            for line in lines:
                if not line.strip():
                    continue
                if k % world_size == rank:
                    yield _parse(line)
                k += 1


def _parse(line: bytes) -> object:
    try:
        return json.loads(line)
    except ValueError:          # JSONDecodeError and UnicodeDecodeError
        return None


def _open_binary(file: Path) -> io.BufferedIOBase:
    """The file's bytes, decompressed on the fly for .zst; iterating it gives lines."""
    raw = open(file, "rb")
    if not file.name.endswith(".zst"):
        return raw
    return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))


# --- (c) the demo corpus --------------------------------------------------------------------

def _stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


@lru_cache(maxsize=4)
def demo_corpus(max_bytes: int) -> tuple[str, ...]:
    """The standard library's module files (sorted by relative path, non-empty, DEMO_SKIPPED_DIRS
    left out) up to `max_bytes` bytes of UTF-8, the last one cut to fit."""
    root = _stdlib_root()
    texts = (file.read_bytes().decode("utf-8", errors="replace") for file in _stdlib_modules(root))
    return tuple(first_bytes((text for text in texts if text.strip()), max_bytes))


def _stdlib_modules(root: Path) -> list[Path]:
    """The *.py files under `root` sorted by relative path, skipped folders not entered."""
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in DEMO_SKIPPED_DIRS]
        files.extend(Path(folder, name) for name in names if name.endswith(".py"))
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _demo_split(config: DataConfig, split: str, rank: int, world_size: int,
                stats: DataStats) -> Iterator[str]:
    docs = demo_corpus(config.demo_max_bytes)
    scores = [_hash_unit(doc) for doc in docs]
    n_validation = math.ceil(config.validation_fraction * len(docs))
    threshold = sorted(scores)[n_validation - 1]
    chosen = [doc for doc, score in zip(docs, scores) if (score <= threshold) == (split == "validation")]
    for doc in chosen[rank::world_size]:
        stats.documents += 1
        yield doc


# --- packing into token blocks --------------------------------------------------------------

def pack_blocks(documents: Iterable[str], tokenizer: Tokenizer, block_len: int) -> Iterator[list[int]]:
    """Consecutive blocks of `block_len` ids from the documents joined by end-of-text (each
    document is followed by eot_id); the incomplete tail is dropped."""
    _check_int("block_len", block_len, 2)
    buffer: list[int] = []
    for doc in documents:
        buffer.extend(tokenizer.encode(doc))
        buffer.append(tokenizer.eot_id)
        start = 0
        while len(buffer) - start >= block_len:
            yield buffer[start:start + block_len]
            start += block_len
        del buffer[:start]


def batches(config: DataConfig, tokenizer: Tokenizer, split: str, seq_len: int, batch_size: int,
            rank: int = 0, world_size: int = 1, stats: DataStats | None = None) -> Iterator[torch.Tensor]:
    """LongTensors (batch_size, seq_len + 1) of this rank's blocks: forever (pass after pass)
    for "train", one pass for "validation". `stats` accumulates over passes."""
    _check_int("seq_len", seq_len, 1)
    _check_int("batch_size", batch_size, 1)
    _check_choice("split", split, SPLITS)
    _check_rank(rank, world_size)
    one_pass = partial(_batch_pass, config, tokenizer, split, seq_len, batch_size, rank, world_size, stats)
    return one_pass() if split == "validation" else _repeat(one_pass, config, seq_len, batch_size)


def _batch_pass(config: DataConfig, tokenizer: Tokenizer, split: str, seq_len: int, batch_size: int,
                rank: int, world_size: int, stats: DataStats | None) -> Iterator[torch.Tensor]:
    docs = iter_documents(config, split, rank, world_size, stats)
    group: list[list[int]] = []
    for block in pack_blocks(docs, tokenizer, seq_len + 1):
        group.append(block)
        if len(group) == batch_size:
            yield torch.tensor(group, dtype=torch.long)
            group = []


def _repeat(one_pass, config: DataConfig, seq_len: int, batch_size: int) -> Iterator[torch.Tensor]:
    while True:
        empty = True
        for batch in one_pass():
            empty = False
            yield batch
        if empty:
            raise ValueError(f"the train split of {describe(config)} holds less than one batch "
                             f"of {batch_size} x {seq_len + 1} tokens for this rank")


def validation_blocks(config: DataConfig, tokenizer: Tokenizer, seq_len: int, n_blocks: int,
                      rank: int = 0, world_size: int = 1) -> torch.Tensor:
    """A fixed validation set: the first `n_blocks` blocks (fewer if the split is smaller) of
    this rank's validation documents, LongTensor (n, seq_len + 1)."""
    _check_int("seq_len", seq_len, 1)
    _check_int("n_blocks", n_blocks, 1)
    docs = iter_documents(config, "validation", rank, world_size)
    blocks = list(islice(pack_blocks(docs, tokenizer, seq_len + 1), n_blocks))
    if not blocks:
        raise ValueError(f"the validation split of {describe(config)} holds less than one block "
                         f"of {seq_len + 1} tokens for this rank")
    return torch.tensor(blocks, dtype=torch.long)
