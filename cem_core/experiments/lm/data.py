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
  k % world_size. A .jsonl.zst is decompressed as it is read, its concatenated zstd frames in
  turn (windows up to 2^27 bytes, `zstd --long`'s default: a frame asking for more is refused with a message,
  since decoding it holds its window, a gigabyte or two for a file of a few kilobytes); one that is empty, ends
  mid-frame (a cut download) or does not decode raises ValueError naming the file, the compressed
  byte where it failed and the lines read before. A run checks every shard whole before it trains
  (`content`, `check_shards`; each file once, its checksum kept in `shard_cache_file()` while the file's
  size, modification and change times and inode stay; a progress bar after two seconds). A folder
  that cannot be read is an error naming it, never skipped; a run's or sweep's folder inside the data folder
  (its own metrics.jsonl) is not data and is left out.
- "demo": the source text and docstrings of the Python standard library installed here (PSF
  licence): sorted module files, test suites, site-packages and the codec tables of
  encodings/ left out, the first `demo_max_bytes` bytes. It is NOT SlimPajama; `DEMO_LABEL`
  says so wherever it is shown. Deterministic for a given Python installation.
- "prose": English prose from the same installation (`prose_corpus`): the Python documentation's topics
  and the standard library's docstrings, their interactive examples removed (PSF licence); about 2.2 MB,
  the trained language models' corpus (models/). Also NOT SlimPajama; `PROSE_LABEL` says so.

Splits are "train" and "validation". A source without a validation split (one shard file, a
folder without train/ and validation/, a Hub dataset with only "train") holds out the documents
whose stable hash (blake2b of the text) falls below `validation_fraction`; the demo corpus holds
out the ceil(fraction * n) documents with the smallest hashes, so its validation set is never
empty. Identical texts always land in the same split.

Optionally only records whose meta.redpajama_set_name is in `source_filter` are kept. Malformed
records (bad JSON or UTF-8, not an object, text missing or not a string, a lone surrogate) are skipped and counted
in a `DataStats` the iterator updates; blank lines are not records. So are oversized records,
longer than `max_document_bytes` (default 16 MiB): a local shard line of more bytes, whatever it
holds, or a text of more bytes of UTF-8. A long line is never held whole: its bytes are dropped
as they are read, so reading a shard holds at most max_document_bytes plus one decompressed piece
(at most 16 MiB). An oversized line still counts as a record for the rank assignment.

API:
    DataConfig(source=..., path=..., dataset_id=..., source_filter=..., validation_fraction=...,
               demo_max_bytes=..., max_document_bytes=...)
    DataStats(): documents, malformed, oversized, filtered; .summary() -> str, .as_dict()
    iter_documents(config, split, rank=0, world_size=1, stats=None) -> Iterator[str]
    describe(config) -> str
    content(config) -> dict       what the data holds (demo text sha256, or each shard's size and sha256)
    content_sha256(config) -> str | None
    shard_files(root) -> list[Path]   every shard a run on `root` reads, both splits
    pack_blocks(documents, tokenizer, block_len) -> Iterator[list[int]]
    batches(config, tokenizer, split, seq_len, batch_size, rank=0, world_size=1, stats=None, order=None)
        -> Iterator[LongTensor (batch_size, seq_len + 1)]
    shuffled(documents, seed, buffer=SHUFFLE_BUFFER) -> Iterator[str]
    validation_blocks(config, tokenizer, seq_len, n_blocks, rank=0, world_size=1, stats=None)
        -> LongTensor (n, seq_len + 1), n <= n_blocks

Packing: each document's ids followed by the end-of-text id form one stream, cut into
consecutive blocks of seq_len + 1 ids (inputs block[:-1], targets block[1:]); an incomplete
last block or batch is dropped. `batches` over "train" repeats the data forever (pass after
pass, the same order each time, or with `order` = k each pass's documents shuffled by a seeded
buffer of SHUFFLE_BUFFER documents, drawn anew per pass); over "validation" it makes one pass. Everything is
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
import random
import re
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import lru_cache, partial
from itertools import count, islice
from pathlib import Path

import torch

from cem_core.experiments.integrity import is_run_folder, json_hash
from cem_core.experiments.records import and_list, atomic_write_text
from cem_core.nn.validate import check_choice, check_float, check_int, fail

from .tokenizer import Tokenizer, first_bytes

SOURCES = ("demo", "prose", "slimpajama", "path")
INSTALLED = ("demo", "prose")   # the corpora built from the Python installation: no download, no files
SPLITS = ("train", "validation")
DEFAULT_DATASET_ID = "DKYoon/SlimPajama-6B"
DEFAULT_MAX_DOCUMENT_BYTES = 16 * 2 ** 20
SHARD_SUFFIXES = (".jsonl", ".jsonl.zst")
DEMO_LABEL = ("demo corpus: Python standard library source and docstrings (PSF licence), "
              "not SlimPajama")
PROSE_LABEL = ("English prose corpus: the Python documentation's topics and the standard library's docstrings, "
               "interactive examples removed (PSF licence), not SlimPajama")
DEMO_SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages",
                               "__pycache__", "encodings"})   # encodings/: generated codec tables
READ_BYTES = 2 ** 20            # shard bytes read from disk at a time
# Compressed bytes given to the zstd decompressor at a time. zstd expands at most 32,768-fold (a
# 4-byte RLE block gives 128 KiB), so one call yields at most 16 MiB, whatever the file holds.
ZSTD_FEED_BYTES = 512
# The largest window a frame may ask for: `zstd --long`'s default. Decoding a frame holds its window, so a frame
# written with --long=31 costs 2 GiB of memory however small the file; such a shard is refused with a message.
ZSTD_MAX_WINDOW = 2 ** 27
PROGRESS_DELAY = 2.0            # seconds of checking shards whole before a progress bar shows
BLANK_RUN = re.compile(rb"\n\s*\n")   # blank lines between two line ends: dropped before a piece is split
OVERSIZED = object()            # stands for a line or record longer than max_document_bytes
LOCAL_SHARDS_HINT = ("use local shards instead: --data PATH, where PATH is a folder of SlimPajama "
                     "*.jsonl or *.jsonl.zst shards (or one shard file), or --data demo for the "
                     "offline demo corpus (not SlimPajama)")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where the documents come from; validated at construction (ValueError names the field)."""

    source: str = "demo"                         # "demo" | "prose" | "slimpajama" | "path"
    path: str | None = None                      # source="path": a shard file or a folder of shards
    dataset_id: str = DEFAULT_DATASET_ID         # source="slimpajama": the Hub dataset
    source_filter: tuple[str, ...] | None = None  # keep only these redpajama_set_name; None = all
    validation_fraction: float = 0.01            # held out where a source has no validation split
    demo_max_bytes: int = 4_000_000              # source="demo" or "prose": size cap of the corpus
    # Longer records are skipped and counted, never held in memory. 16 MiB is far above ordinary
    # documents (a long novel is about 1 MB of UTF-8) while bounding what one record costs
    # downstream: its str, JSON parse and token list take some 10-30x its bytes, hundreds of MB.
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES

    def __post_init__(self) -> None:
        check_choice("source", self.source, SOURCES)
        if self.source == "path":
            _check_shard_path(self.path)
        elif self.path is not None:
            fail("path", self.path, f"is only used with source='path' (source={self.source!r})")
        if not isinstance(self.dataset_id, str) or not self.dataset_id.strip():
            fail("dataset_id", self.dataset_id, "must be a non-empty Hugging Face dataset id")
        if self.source_filter is not None:
            names = self.source_filter
            if (isinstance(names, str) or not isinstance(names, (tuple, list)) or not names
                    or not all(isinstance(n, str) and n for n in names)):
                fail("source_filter", names, "must be None or a non-empty tuple of redpajama set "
                      "names, e.g. ('RedPajamaWikipedia',)")
            object.__setattr__(self, "source_filter", tuple(names))
        check_float("validation_fraction", self.validation_fraction, 0.0, strict=True)
        if self.validation_fraction >= 1:
            fail("validation_fraction", self.validation_fraction, "must be in (0, 1)")
        check_int("demo_max_bytes", self.demo_max_bytes, 1, 1 << 30)
        check_int("max_document_bytes", self.max_document_bytes, 1, 1 << 31)


def _check_shard_path(path) -> None:
    if not isinstance(path, str) or not path:
        fail("path", path, "must name a shard file or a folder of shards with source='path'")
    p = Path(path)
    if not p.exists():
        fail("path", path, "no such file or folder")
    if p.is_file() and not p.name.endswith(SHARD_SUFFIXES):
        fail("path", path, "a shard file must end in .jsonl or .jsonl.zst")


@dataclass
class DataStats:
    """Counts kept by the document iterators over the records this rank reads; summing the
    ranks' stats gives the totals. `malformed`, `oversized` and `filtered` count records of
    either split (under a hash split every record is read before its split is known),
    `documents` only those yielded."""

    documents: int = 0   # documents yielded
    malformed: int = 0   # records skipped: bad JSON or UTF-8, not an object, text missing/not a string/not text
    oversized: int = 0   # records skipped for exceeding max_document_bytes
    filtered: int = 0    # well-formed records dropped by source_filter

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def summary(self) -> str:
        """E.g. "1,234 documents; 3 malformed, 1 oversized and 40 filtered records skipped"."""
        counts = {"malformed": self.malformed, "oversized": self.oversized, "filtered": self.filtered}
        skipped = [f"{n:,} {kind}" for kind, n in counts.items() if n]
        documents = f"{self.documents:,} document{'' if self.documents == 1 else 's'}"
        if not skipped:
            return f"{documents}; no records skipped"
        records = "record" if sum(counts.values()) == 1 else "records"
        return f"{documents}; {and_list(skipped)} {records} skipped"


def describe(config: DataConfig) -> str:
    """A one-line label of the data, for CLIs, logs and the app."""
    if config.source in INSTALLED:
        label = DEMO_LABEL if config.source == "demo" else PROSE_LABEL
        return f"{label} [{_stdlib_root()}, first {config.demo_max_bytes} bytes]"
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
    _check_rank(rank, world_size)
    stats = DataStats() if stats is None else stats
    if config.source in INSTALLED:
        return _installed_split(config, split, rank, world_size, stats)
    if config.source == "path":
        return _local_documents(config, split, rank, world_size, stats)
    return stream_hub_documents(config, split, rank, world_size, stats)


def _check_rank(rank: int, world_size: int) -> None:
    check_int("world_size", world_size, 1)
    check_int("rank", rank, 0, world_size - 1)


# --- records to documents (shared by every source) ------------------------------------------

def _hash_unit(text: str) -> float:
    """A stable number in [0, 1) from the text (same on every machine and Python run)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64


def _set_name(record: dict) -> str | None:
    meta = record.get("meta")
    return meta.get("redpajama_set_name") if isinstance(meta, dict) else None


def _too_long(text: str, max_bytes: int) -> bool:
    """Whether `text` takes more than `max_bytes` bytes of UTF-8, encoding it only when its length
    leaves a doubt (a code point takes 1 to 4 bytes; a lone surrogate, which JSON allows, 3)."""
    if 4 * len(text) <= max_bytes:
        return False
    if len(text) > max_bytes:
        return True
    return len(text.encode("utf-8", "surrogatepass")) > max_bytes


def _is_text(text: str) -> bool:
    """False for a string holding a lone surrogate (JSON's \\ud800 escape allows one): not text."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _select(records: Iterable[object], config: DataConfig, split: str, hash_split: bool,
            stats: DataStats) -> Iterator[str]:
    """The texts of well-formed records that pass the source filter and, with `hash_split`,
    fall in `split`; malformed, oversized (a record that is OVERSIZED or whose text is too long)
    and filtered records are counted."""
    for record in records:
        text = record.get("text") if isinstance(record, dict) else None
        if record is OVERSIZED or (isinstance(text, str) and _too_long(text, config.max_document_bytes)):
            stats.oversized += 1
            continue
        if not isinstance(text, str) or not _is_text(text):
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

    check_choice("split", split, SPLITS)
    _check_rank(rank, world_size)
    stats = DataStats() if stats is None else stats
    name = "json" if data_files is not None else config.dataset_id
    splits = _load_streaming(name, data_files)
    hash_split = "validation" not in splits
    if "train" not in splits:
        fail("dataset_id", name, f"has no 'train' split (splits: {', '.join(splits)})")
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
        fail("dataset_id", name, f"not found on the Hugging Face Hub ({err})")


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
    records = _shard_records(files, rank, world_size, config.max_document_bytes)
    return _select(records, config, split, hash_split, stats)


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
        for line in _shard_lines(file, max_bytes):
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


class _BadStream(Exception):
    """A compressed stream that is empty, ends mid-frame or does not decode (the message says
    where)."""


def _shard_lines(file: Path, max_bytes: int) -> Iterator[bytearray | object]:
    """The lines of one shard, decompressed on the fly for .zst; OVERSIZED for a line longer than
    `max_bytes`. A truncated or corrupt .zst raises ValueError naming the file and the place."""
    n_lines = 0
    with _open_shard(file) as raw:
        pieces = _zstd_pieces(raw) if file.name.endswith(".zst") else _pieces(raw, READ_BYTES)
        try:
            for line in _lines(pieces, max_bytes):
                yield line
                n_lines += 1
        except _BadStream as err:
            raise _damaged(file, err, f"{n_lines:,} lines read") from err.__cause__
        except _WindowTooLarge as err:
            raise _window_message(file, err) from None


def _open_shard(file: Path) -> io.BufferedReader:
    try:
        return open(file, "rb", buffering=READ_BYTES)
    except OSError as err:
        fail("path", str(file), f"cannot be read ({err.strerror or err})")


def _damaged(file: Path, err: _BadStream, where: str) -> ValueError:
    return ValueError(f"{file} is truncated or corrupt: {err} ({where}); download or write this shard again")


def _pieces(raw: io.BufferedIOBase, size: int) -> Iterator[bytes]:
    """The file's bytes, `size` at a time."""
    return iter(partial(raw.read, size), b"")


def _zstd_pieces(raw: io.BufferedIOBase) -> Iterator[bytes]:
    """The decompressed bytes of every zstd frame in the file, in turn, in pieces of at most 16 MiB
    (see ZSTD_FEED_BYTES). Raises _BadStream where the data does not decode, where it ends
    mid-frame, or for an empty file (no frame at all)."""
    import zstandard  # the lm extra: imported where a shard is decompressed

    decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    frame = None        # the decompressor of the frame being read; None between frames
    consumed = 0        # compressed bytes fed so far
    for feed in _pieces(raw, ZSTD_FEED_BYTES):
        consumed += len(feed)
        while feed:     # a feed may end one frame and begin the next
            if frame is None:
                frame = decompressor.decompressobj()
            try:
                piece = frame.decompress(feed)
            except zstandard.ZstdError as err:
                if "too much memory" in str(err):
                    raise _WindowTooLarge(_window_of(feed)) from None
                raise _BadStream(f"zstd finds it corrupt ({err}) on reading compressed bytes "
                                 f"{consumed - len(feed):,} to {consumed:,}") from err
            yield piece
            feed, frame = (frame.unused_data, None) if frame.eof else (b"", frame)
    if frame is not None:
        raise _BadStream(f"the zstd stream ends mid-frame after {consumed:,} compressed bytes")
    if consumed == 0:
        raise _BadStream("it is empty (0 bytes), not a zstd stream")


def _window_of(feed: bytes) -> int | None:
    """The window the frame starting in `feed` asks for (None when its header cannot be read there)."""
    import zstandard

    try:
        return zstandard.get_frame_parameters(feed).window_size
    except zstandard.ZstdError:
        return None


class _WindowTooLarge(Exception):
    """A zstd frame asks for a window larger than ZSTD_MAX_WINDOW (args: its size in bytes, or None)."""


def _window_message(file: Path, err: _WindowTooLarge) -> ValueError:
    asked = f"a window of {err.args[0] / 2 ** 20:,.0f} MiB" if err.args[0] else "a larger window"
    return ValueError(f"{file} is refused: its zstd frames ask for {asked} (written with `zstd --long=28` or more), "
                      f"and a shard may use at most {ZSTD_MAX_WINDOW // 2 ** 20} MiB (decoding holds the window in "
                      f"memory, whatever the file's size); recompress it: zstd -dc {file.name} | zstd --long=27 -o NEW")


def _lines(pieces: Iterable[bytes], max_bytes: int) -> Iterator[bytearray | object]:
    """The lines of a byte stream, newline removed; OVERSIZED stands for a line longer than
    `max_bytes`, whose bytes are dropped as they arrive, so no more than max_bytes of a line
    (besides the piece at hand) is ever held. Runs of blank lines are dropped with one C-speed pass over each
    piece (blank lines are not records), so a shard of a few hundred megabytes of newlines costs seconds, not
    minutes."""
    line = bytearray()      # the line being read
    oversized = False       # that line is already longer than max_bytes (its bytes are dropped)
    for piece in pieces:
        parts = BLANK_RUN.sub(b"\n", piece).split(b"\n")        # every part but the last ends a line
        for i, part in enumerate(parts):
            oversized = oversized or len(line) + len(part) > max_bytes
            if oversized:
                line.clear()
            else:
                line += part
            if i < len(parts) - 1:
                yield OVERSIZED if oversized else line
                line, oversized = bytearray(), False
    if line or oversized:
        yield OVERSIZED if oversized else line


# --- (c) the installed corpora: the demo corpus (code) and the prose corpus --------------------------

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


@lru_cache(maxsize=4)
def prose_corpus(max_bytes: int) -> tuple[str, ...]:
    """English prose from the Python installation, up to `max_bytes` bytes of UTF-8 (the last document cut to
    fit): the Python documentation's topics (``pydoc_data.topics``, the text ``help()`` shows: the language
    reference's chapters), one document each in sorted order, then one document per standard-library module
    (``_stdlib_modules``' order) holding its module, class and function docstrings, blank-line separated. The
    interactive examples (a ``>>>`` line and the lines up to the next blank one) are removed: what is left is
    the documentation's sentences, with its inline names and literal blocks."""
    import ast
    from pydoc_data.topics import topics

    def prose(text: str) -> str:
        kept, example = [], False
        for line in text.splitlines():
            example = line.lstrip().startswith(">>>") or (example and line.strip() != "")
            if not example:
                kept.append(line)
        return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()

    def docstrings(file: Path) -> str:
        try:
            tree = ast.parse(file.read_bytes())
        except (SyntaxError, ValueError):                              # not this Python's syntax: no prose taken
            return ""
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        found = (ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, kinds))
        return "\n\n".join(p for doc in found if doc and (p := prose(doc)))

    texts = [prose(topics[key]) for key in sorted(topics)]
    texts += [docstrings(file) for file in _stdlib_modules(_stdlib_root())]
    return tuple(first_bytes((text for text in texts if text.strip()), max_bytes))


def installed_corpus(config: DataConfig) -> tuple[str, ...]:
    """The documents of an installed source: the demo corpus (code) or the prose corpus."""
    return (demo_corpus if config.source == "demo" else prose_corpus)(config.demo_max_bytes)


def _installed_split(config: DataConfig, split: str, rank: int, world_size: int,
                     stats: DataStats) -> Iterator[str]:
    docs = installed_corpus(config)
    scores = [_hash_unit(doc) for doc in docs]
    n_validation = math.ceil(config.validation_fraction * len(docs))
    threshold = sorted(scores)[n_validation - 1]
    chosen = [doc for doc, score in zip(docs, scores) if (score <= threshold) == (split == "validation")]
    for doc in chosen[rank::world_size]:
        if _too_long(doc, config.max_document_bytes):
            stats.oversized += 1
            continue
        stats.documents += 1
        yield doc


# --- what the data holds: part of a run's identity ------------------------------------------

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


def check_shards(files: list[Path]) -> dict[Path, dict]:
    """{file: {"bytes": n, "sha256": hex}} of each shard, read to its end first: a .zst is decompressed whole
    (every frame to its end, its checksum verified where the frame has one), so a truncated or corrupt shard is
    a ValueError naming the file however few documents a run needs. Each file is read once: its result is kept
    in the shard cache (`shard_cache_file`) by resolved path while the file's stamp stays: its size, inode and
    modification and change times. The change time is the one a user cannot set (``touch -d`` sets the others),
    so a shard rewritten in place with its size and modification time put back is read again. Shards read
    take a progress bar on stderr once they take more than two seconds."""
    cache = _read_shard_cache()
    found, stamps, keys = {}, {}, {}
    for file in files:
        try:
            st = file.stat()
        except OSError as err:
            fail("path", str(file), f"cannot be read ({err.strerror or err})")
        stamps[file] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
                        "inode": [st.st_dev, st.st_ino]}
        keys[file] = str(file.resolve())
        entry = cache.get(keys[file])
        if (isinstance(entry, dict) and {k: entry.get(k) for k in stamps[file]} == stamps[file]
                and isinstance(entry.get("sha256"), str)):
            found[file] = {"bytes": entry["size"], "sha256": entry["sha256"]}
    if todo := [file for file in files if file not in found]:
        from tqdm import tqdm

        with tqdm(total=sum(stamps[f]["size"] for f in todo), unit="B", unit_scale=True, delay=PROGRESS_DELAY,
                  desc=f"checking {len(todo)} shard(s) whole", file=sys.stderr) as bar:
            for file in todo:
                cache[keys[file]] = stamps[file] | {"sha256": _sha256_read_whole(file, bar.update)}
                found[file] = {"bytes": stamps[file]["size"], "sha256": cache[keys[file]]["sha256"]}
        _write_shard_cache(cache)
    return {file: found[file] for file in files}


def shard_cache_file() -> Path:
    """Where the shards' checksums are kept between runs: $CEM_LAB_CACHE_DIR/shards.json, by default
    ~/.cache/cem-lab/shards.json (XDG_CACHE_HOME respected)."""
    base = os.environ.get("CEM_LAB_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                        "cem-lab")
    return Path(base) / "shards.json"


def _read_shard_cache() -> dict:
    try:
        cache = json.loads(shard_cache_file().read_text())
    except (OSError, ValueError):             # none yet, or damaged: every shard is read again
        return {}
    return cache if isinstance(cache, dict) else {}


def _write_shard_cache(cache: dict) -> None:
    try:
        shard_cache_file().parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(shard_cache_file(), json.dumps(cache))
    except OSError:                           # a read-only home: the next run reads the shards again
        pass


def _sha256_read_whole(file: Path, progress=lambda n: None) -> str:
    """The sha256 of the file's bytes, each zstd frame decoded to its end on the way; `progress(n)` after each
    n bytes read."""
    digest = hashlib.sha256()
    with _open_shard(file) as raw:
        hashing = _Hashing(raw, digest, progress)
        try:
            for _ in _zstd_pieces(hashing) if file.name.endswith(".zst") else _pieces(hashing, READ_BYTES):
                pass
        except _BadStream as err:
            raise _damaged(file, err, "found on checking the whole shard before training") from err.__cause__
        except _WindowTooLarge as err:
            raise _window_message(file, err) from None
    return digest.hexdigest()


class _Hashing:
    """A reader that feeds what it reads to a hash."""

    def __init__(self, raw: io.BufferedIOBase, digest, progress):
        self.raw, self.digest, self.progress, self.unreported = raw, digest, progress, 0

    def read(self, size: int) -> bytes:
        data = self.raw.read(size)
        self.digest.update(data)
        self.unreported += len(data)
        if self.unreported >= READ_BYTES or not data:          # progress a megabyte at a time, and at the end
            self.progress(self.unreported)
            self.unreported = 0
        return data


# --- packing into token blocks --------------------------------------------------------------

def pack_blocks(documents: Iterable[str], tokenizer: Tokenizer, block_len: int) -> Iterator[list[int]]:
    """Consecutive blocks of `block_len` ids from the documents joined by end-of-text (each
    document is followed by eot_id); the incomplete tail is dropped."""
    check_int("block_len", block_len, 2)
    buffer: list[int] = []
    for doc in documents:
        buffer.extend(tokenizer.encode(doc))
        buffer.append(tokenizer.eot_id)
        start = 0
        while len(buffer) - start >= block_len:
            yield buffer[start:start + block_len]
            start += block_len
        del buffer[:start]


SHUFFLE_BUFFER = 4096                    # documents held to shuffle a pass (the demo corpus: 609 in all)


def shuffled(documents: Iterable[str], seed: int, buffer: int = SHUFFLE_BUFFER) -> Iterator[str]:
    """The documents in a seeded random order: a buffer of `buffer` documents, each next one drawn
    from it at random and replaced by the next document read (a full permutation when the
    documents fit in the buffer). The same seed gives the same order, so a resumed run replays it."""
    check_int("buffer", buffer, 1)
    rng = random.Random(seed)
    held: list[str] = []
    for doc in documents:
        held.append(doc)
        if len(held) == buffer:
            k = rng.randrange(buffer)
            held[k], held[-1] = held[-1], held[k]
            yield held.pop()
    rng.shuffle(held)
    yield from held


def batches(config: DataConfig, tokenizer: Tokenizer, split: str, seq_len: int, batch_size: int,
            rank: int = 0, world_size: int = 1, stats: DataStats | None = None,
            order: int | None = None) -> Iterator[torch.Tensor]:
    """LongTensors (batch_size, seq_len + 1) of this rank's blocks: forever (pass after pass)
    for "train", one pass for "validation". `stats` counts the first pass only, so each record
    read is counted once however long a run trains. `order` (train only): None keeps the
    documents' own order; k shuffles each pass p's documents with the seed (k, p, rank)."""
    check_int("seq_len", seq_len, 1)
    check_int("batch_size", batch_size, 1)
    check_choice("split", split, SPLITS)
    _check_rank(rank, world_size)
    if order is not None:
        check_int("order", order, 0)
        if split == "validation":
            fail("order", order, "applies to the train split only (validation keeps one fixed order)")
    one_pass = partial(_batch_pass, config, tokenizer, split, seq_len, batch_size, rank, world_size, order)
    return one_pass(stats) if split == "validation" else _repeat(one_pass, stats, config, seq_len, batch_size)


def _batch_pass(config: DataConfig, tokenizer: Tokenizer, split: str, seq_len: int, batch_size: int,
                rank: int, world_size: int, order: int | None, stats: DataStats | None,
                pass_index: int = 0) -> Iterator[torch.Tensor]:
    docs = iter_documents(config, split, rank, world_size, stats)
    if order is not None:
        docs = shuffled(docs, seed=json_hash([order, pass_index, rank]))
    group: list[list[int]] = []
    for block in pack_blocks(docs, tokenizer, seq_len + 1):
        group.append(block)
        if len(group) == batch_size:
            yield torch.tensor(group, dtype=torch.long)
            group = []


def _repeat(one_pass, stats: DataStats | None, config: DataConfig, seq_len: int,
            batch_size: int) -> Iterator[torch.Tensor]:
    stats = DataStats() if stats is None else stats
    for pass_index in count():
        empty = True
        for batch in one_pass(stats, pass_index):
            empty = False
            yield batch
        if empty:
            raise ValueError(f"the train split of {describe(config)} holds less than one batch "
                             f"of {batch_size} x {seq_len + 1} tokens for this rank (read: {stats.summary()})")
        stats = None                     # later passes read the same records again


def validation_blocks(config: DataConfig, tokenizer: Tokenizer, seq_len: int, n_blocks: int,
                      rank: int = 0, world_size: int = 1, stats: DataStats | None = None) -> torch.Tensor:
    """A fixed validation set: the first `n_blocks` blocks (fewer if the split is smaller) of
    this rank's validation documents, LongTensor (n, seq_len + 1). `stats` counts the records
    read to make them."""
    check_int("seq_len", seq_len, 1)
    check_int("n_blocks", n_blocks, 1)
    stats = DataStats() if stats is None else stats
    docs = iter_documents(config, "validation", rank, world_size, stats)
    blocks = list(islice(pack_blocks(docs, tokenizer, seq_len + 1), n_blocks))
    if not blocks:
        raise ValueError(f"the validation split of {describe(config)} holds less than one block "
                         f"of {seq_len + 1} tokens for this rank (read: {stats.summary()})")
    return torch.tensor(blocks, dtype=torch.long)
